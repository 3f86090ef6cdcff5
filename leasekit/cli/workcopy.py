"""The working copy of the shipped notebooks that ``leasekit lab`` serves: copied in when
missing, brought up to date when untouched, never overwritten once edited.

The shipped notebooks are package data (``leasekit.notebooks``). JupyterLab autosaves what it
serves and writes outputs next to it, so it is given a copy in a directory of the user's
(``~/leasekit-notebooks`` unless ``--notebooks DIR``), never the package's own files. A file
``.leasekit-notebooks.json`` there records the shipped version each copy was made from: a
copy still equal to it is replaced by a newer shipped version; an edited copy is kept as it is
and the newer version is written beside it as ``<name>.new.ipynb``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from ..errors import InvalidArgumentError

__all__ = ["DEFAULT_DIR", "MANIFEST", "Copied", "shipped_dir", "prepare"]

DEFAULT_DIR = "~/leasekit-notebooks"
MANIFEST = ".leasekit-notebooks.json"


class Copied(NamedTuple):
    """What ``prepare`` did with one shipped notebook."""

    name: str
    """The notebook's file name, e.g. ``quickstart.ipynb``."""
    action: str
    """``copied`` (it was missing), ``updated`` (an untouched copy replaced by a newer shipped
    version), ``current`` (the copy is the shipped version), ``kept`` (an edited copy, the
    shipped version unchanged since), or ``beside`` (an edited copy kept; the newer shipped
    version written next to it)."""
    path: str
    """The file the shipped version is in now (the copy, or the ``.new.ipynb`` beside it)."""


def shipped_dir() -> Path:
    """The directory of the notebooks shipped with leasekit (package data)."""
    import importlib.resources

    return Path(str(importlib.resources.files("leasekit.notebooks")))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"copied": {}, "offered": {}}
    if not isinstance(data, dict):
        data = {}
    return {k: dict(data.get(k) or {}) for k in ("copied", "offered")}


def _check_apart(target: Path, source: Path) -> None:
    """Refuse a working copy that is, holds or lies inside the shipped notebooks."""
    t, s = target.resolve(), source.resolve()
    if t == s or s in t.parents or t in s.parents:
        raise InvalidArgumentError(
            f"--notebooks {target} would serve leasekit's own notebooks in {s}; "
            "pass a directory of your own"
        )


def _one(target: Path, name: str, data: bytes, manifest: dict[str, dict[str, str]]) -> Copied:
    shipped = _digest(data)
    dest = target / name
    copied, offered = manifest["copied"], manifest["offered"]
    if not dest.exists():
        dest.write_bytes(data)
        copied[name] = shipped
        return Copied(name, "copied", str(dest))
    current = _digest(dest.read_bytes())
    if current == shipped:
        copied[name] = shipped
        return Copied(name, "current", str(dest))
    if copied.get(name) == current:  # untouched since we copied an older version
        dest.write_bytes(data)
        copied[name] = shipped
        return Copied(name, "updated", str(dest))
    if copied.get(name) == shipped:  # edited; nothing newer was shipped since
        return Copied(name, "kept", str(dest))
    beside = target / f"{Path(name).stem}.new.ipynb"
    if offered.get(name) != shipped or not beside.exists():
        beside.write_bytes(data)
        offered[name] = shipped
    return Copied(name, "beside", str(beside))


def prepare(target: str | os.PathLike[str], source: Path | None = None) -> list[Copied]:
    """Make ``target`` a working copy of the shipped notebooks.

    Arguments:
        target: the working copy's directory (``~`` is expanded); created when missing.
        source: the shipped notebooks; ``None``: ``shipped_dir()``.

    Returns:
        What was done with each shipped notebook, by name.

    Raises:
        InvalidArgumentError: ``target`` is, holds or lies inside the shipped notebooks, is not
            a directory, or cannot be written.
    """
    source = shipped_dir() if source is None else source
    path = Path(os.path.expanduser(os.fspath(target))).absolute()
    _check_apart(path, source)
    try:
        path.mkdir(parents=True, exist_ok=True)
        manifest = _read_manifest(path / MANIFEST)
        done = [
            _one(path, nb.name, nb.read_bytes(), manifest) for nb in sorted(source.glob("*.ipynb"))
        ]
        (path / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot use {path} for the notebooks: {exc.strerror or exc}"
        ) from None
    return done
