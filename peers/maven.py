"""A peer's jars, fetched from Maven Central into a cache outside the repository.

Each peer is a Maven project here (``peers/<name>/pom.xml``); ``fetch(name)`` runs
``mvn dependency:copy-dependencies`` for it once and keeps the jars under
``<cache>/<name>-<hash of the pom>/jars``, with a ``complete`` stamp written last. A second
call finds the stamp and runs nothing, so a second run downloads nothing; a changed pom gets a
new directory. ``jars(name)`` only looks: it never downloads, and says how to fetch.

The cache is ``$LEASEKIT_PEERS_CACHE``, else ``$XDG_CACHE_HOME/leasekit/peers``, else
``~/.cache/leasekit/peers``; Maven's own repository for these downloads lives inside it
(``m2/``), so nothing is written to ``~/.m2`` or the repository.

``python -m peers.maven kafka spark-kafka`` fetches both (``make peers`` runs it).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["PEERS", "PeerMissingError", "cache_dir", "fetch", "jars", "classpath", "main"]

HERE = Path(__file__).resolve().parent
PEERS = ("kafka", "spark-kafka", "hadoop-aws")
"""The Maven projects under peers/: the Kafka broker, Spark's Kafka source for B12-peer, and
Spark's ``s3a`` file system (hadoop-aws and the AWS SDK modules it needs) for S3 warehouses."""


class PeerMissingError(RuntimeError):
    """A peer's jars are not in the cache (run ``make peers``), or Maven could not fetch them."""


def cache_dir() -> Path:
    explicit = os.environ.get("LEASEKIT_PEERS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leasekit" / "peers"


def _pom(name: str) -> Path:
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; the peers are {', '.join(PEERS)}")
    return HERE / name / "pom.xml"


def _target(name: str) -> Path:
    digest = hashlib.sha256(_pom(name).read_bytes()).hexdigest()[:12]
    return cache_dir() / f"{name}-{digest}"


def jars(name: str) -> Path:
    """The directory of ``name``'s jars, fetched before; never downloads.

    Raises:
        PeerMissingError: they are not in the cache.
    """
    target = _target(name)
    if not (target / "complete").is_file():
        raise PeerMissingError(
            f"the {name} peer's jars are not in {cache_dir()}: run `make peers` "
            f"(or `python -m peers.maven {name}`), which fetches them from Maven Central once"
        )
    return target / "jars"


def classpath(name: str) -> str:
    """``name``'s jars as a Java classpath (each file, sorted)."""
    return os.pathsep.join(str(path) for path in sorted(jars(name).glob("*.jar")))


def fetch(name: str, *, quiet: bool = True) -> Path:
    """``name``'s jar directory, copied from Maven Central the first time only.

    Raises:
        PeerMissingError: Maven is missing or failed (its output is in the message).
    """
    target = _target(name)
    if (target / "complete").is_file():
        return target / "jars"
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PeerMissingError(
            f"Maven (mvn) is not installed: it fetches the {name} peer's jars from Maven Central"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=target.parent))
    argv = [
        mvn, "-B", *(["-q"] if quiet else []), "-f", str(_pom(name)),
        f"-Dmaven.repo.local={cache_dir() / 'm2'}",
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={staging / 'jars'}",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        code = done.returncode
        raise PeerMissingError(f"mvn could not fetch the {name} peer (exit {code}):\n{tail}")
    (staging / "complete").write_text(" ".join(argv) + "\n")
    try:
        staging.rename(target)
    except OSError:  # another process finished the same fetch first
        shutil.rmtree(staging, ignore_errors=True)
    return jars(name)


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(PEERS)
    for name in names:
        try:
            already = (_target(name) / "complete").is_file()
            where = fetch(name)
        except (PeerMissingError, ValueError) as exc:
            print(f"peers: {exc}", file=sys.stderr)
            return 1
        count = len(list(where.glob("*.jar")))
        size = sum(path.stat().st_size for path in where.glob("*.jar")) / 2**20
        state = "cached" if already else "fetched"
        print(f"peers: {name}: {count} jars, {size:.0f} MiB, {state} in {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
