"""The Python executable a local Spark session gives its Python workers.

Spark puts ``<SPARK_HOME>/python/lib/pyspark.zip`` first on every Python worker's path. In a
pip-installed pyspark that archive is the installed package's own code, without bytecode, so
each worker process (data source planners, readers, writers: a session starts dozens) compiles
pyspark from source again: about one CPU-second a process, half the time of a session's first
``format("leasekit")`` read. The launcher written here runs this interpreter with that one entry
taken off ``PYTHONPATH``, so workers import the same package, compiled, from where it is
installed; every other entry, and everything else about the worker, is left as Spark set it.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

__all__ = ["worker_python", "bundled_archive"]

_LAUNCHER = """#!/bin/sh
# Spark's Python workers: this interpreter, importing pyspark compiled from its installed
# package rather than from source out of the package's own archive. Written by leasekit.
zip={zip}
case ":${{PYTHONPATH-}}:" in
  *":$zip:"*)
    path=":$PYTHONPATH:"
    path="${{path%%":$zip:"*}}:${{path#*":$zip:"}}"
    path="${{path#:}}"
    path="${{path%:}}"
    if [ -n "$path" ]; then export PYTHONPATH="$path"; else unset PYTHONPATH; fi
    ;;
esac
exec {python} "$@"
"""


def bundled_archive() -> Path | None:
    """The ``pyspark.zip`` inside the installed pyspark package (what Spark puts on its workers'
    path when it runs from this package), or ``None`` when there is none."""
    import pyspark

    archive = Path(pyspark.__file__).resolve().parent / "python" / "lib" / "pyspark.zip"
    return archive if archive.is_file() else None


def worker_python(cache: Path | None = None) -> str:
    """A launcher of this interpreter for Spark's Python workers (see the module), kept in
    ``cache`` (by default ``$XDG_CACHE_HOME/leasekit``) and written again whenever it is not
    exactly what this interpreter needs; ``sys.executable`` itself when pyspark has no bundled
    archive, on Windows, or when the launcher cannot be written or run from there (a
    ``noexec`` mount)."""
    archive = bundled_archive()
    if archive is None or os.name != "posix" or not sys.executable:
        return sys.executable
    text = _LAUNCHER.format(python=shlex.quote(sys.executable), zip=shlex.quote(str(archive)))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    launcher = (cache if cache is not None else _cache_dir()) / f"spark-python-{digest}"
    try:
        if not (_holds(launcher, text) and os.access(launcher, os.X_OK)):
            _write(launcher, text)
    except OSError:
        return sys.executable
    return str(launcher) if os.access(launcher, os.X_OK) else sys.executable


def _holds(path: Path, text: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == text
    except (OSError, UnicodeDecodeError):
        return False


def _write(launcher: Path, text: str) -> None:
    """``text`` into ``launcher``, executable, atomically: a concurrent session sees all of it
    or none."""
    launcher.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=launcher.parent, prefix=".spark-python-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, launcher)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cache_dir() -> Path:
    """``$XDG_CACHE_HOME/leasekit``; ``~/.cache/leasekit`` when it is unset or relative (which
    the XDG rules say to ignore: Spark starts workers from other working directories)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "leasekit"
