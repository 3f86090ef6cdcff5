"""Java options for the suite's ZooKeeper servers (through ``SERVER_JVMFLAGS``, which the
embedded server and the ensemble read).

Besides each worker's own server, a run starts some forty short-lived ones (a module's own
server, CLI and notebook runs on embedded defaults, the ensemble, restarts). Each paid for
loading and verifying ZooKeeper's classes and for C2 compiling code it ran a few hundred
times: measured, 1.6 CPU-seconds until it served and 2.9 after 600 requests; with a
class-data archive and C1 alone, 0.7 and 1.5. The workers' own servers keep C2 and take only
the archive: they carry the 100,000-pin lease tests, which C1 made 50 s slower.

The archive depends on the JVM build and ZooKeeper's jars: it is built once per machine (a
server started with ``-XX:ArchiveClassesAtExit``, given some requests and stopped, about 5 s)
into the cache of ``spark_jvm``, named by a digest of both. A JVM given no usable archive
warns in its log and runs as before.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest
import spark_jvm

QUICK_JIT = "-XX:TieredStopAtLevel=1"


def server_jvmflags(cache: Path | None = None) -> tuple[str, str]:
    """The flags of the short-lived servers and those of the workers' own servers; the
    archive is built first when this machine has none; C1 alone without Java or pyspark."""
    archive = _archive_path(cache or spark_jvm._cache_dir())
    if archive is None:
        return QUICK_JIT, ""
    if not archive.exists():
        _train(archive)
    if not archive.exists():  # the training failed: run without the archive
        return QUICK_JIT, ""
    share = f"-XX:SharedArchiveFile={archive}"
    return f"{share} {QUICK_JIT}", share


def _archive_path(cache: Path) -> Path | None:
    from leasekit.embedded.process import classpath
    from leasekit.errors import ZooKeeperUnavailableError

    version = spark_jvm.jvm_build()
    try:
        jars = classpath().split(os.pathsep)
    except ZooKeeperUnavailableError:  # no pyspark: the ZooKeeper tests say so themselves
        return None
    if version is None:
        return None
    digest = hashlib.sha256(version)
    for jar in jars:
        digest.update(f"{jar}:{os.path.getsize(jar)}".encode())
    return cache / f"zookeeper-{digest.hexdigest()[:16]}.jsa"


def _train(archive: Path) -> None:
    """Run one server that dumps the classes it loaded when stopped; rename the dump to
    ``archive`` (atomically: a JVM maps a whole archive or finds none)."""
    from kazoo.client import KazooClient

    from leasekit import embedded

    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    with tempfile.TemporaryDirectory() as data, pytest.MonkeyPatch.context() as env:
        env.setenv("SERVER_JVMFLAGS", f"-XX:ArchiveClassesAtExit={partial}")
        try:
            client = KazooClient(embedded.ensure_running(data))
            client.start(timeout=30)
            for i in range(200):
                client.create(f"/n{i}", b"x" * 100)
                client.get(f"/n{i}")
            transaction = client.transaction()
            transaction.delete("/n0")
            transaction.commit()
            client.stop()
            client.close()
        except Exception:
            pass  # no archive this time; the servers run without one
        finally:
            embedded.stop(data)
    if partial.exists() and partial.stat().st_size > 0:
        os.replace(partial, archive)
    else:
        partial.unlink(missing_ok=True)
