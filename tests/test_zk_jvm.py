"""The suite's ZooKeeper options (``zk_jvm``): the class-data archive is built once per machine
and mapped by the servers; the workers' own servers keep C2."""

from __future__ import annotations

import pytest
import zk_jvm

from leasekit import embedded


def test_the_archive_is_built_once_and_the_servers_map_it(tmp_path, monkeypatch):
    short_lived, own = zk_jvm.server_jvmflags(tmp_path / "cache")
    (archive,) = (tmp_path / "cache").glob("zookeeper-*.jsa")
    assert short_lived == f"-XX:SharedArchiveFile={archive} {zk_jvm.QUICK_JIT}"
    assert own == f"-XX:SharedArchiveFile={archive}"  # C2 kept
    built = archive.stat().st_mtime_ns
    assert zk_jvm.server_jvmflags(tmp_path / "cache") == (short_lived, own)
    assert archive.stat().st_mtime_ns == built and not list(archive.parent.glob("*.partial"))

    monkeypatch.setenv("SERVER_JVMFLAGS", f"{short_lived} -Xlog:cds=info")
    data = tmp_path / "zk"
    try:
        embedded.ensure_running(data)
    finally:
        embedded.stop(data)
    log = (data / "server.log").read_text()
    assert f"Opened archive {archive}." in log


def test_without_java_the_servers_run_as_before(tmp_path, monkeypatch):
    monkeypatch.setattr(zk_jvm, "_archive_path", lambda cache: None)
    assert zk_jvm.server_jvmflags(tmp_path) == (zk_jvm.QUICK_JIT, "")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("failure", ["java fails", "no dump"])
def test_a_failed_training_leaves_no_archive(tmp_path, monkeypatch, failure):
    archive = tmp_path / "zookeeper-x.jsa"
    monkeypatch.setattr(zk_jvm, "_archive_path", lambda cache: archive)
    if failure == "java fails":
        monkeypatch.setattr(zk_jvm, "_train", lambda path: None)
    else:
        monkeypatch.setattr(
            embedded, "ensure_running", lambda data: (_ for _ in ()).throw(OSError("no server"))
        )
    assert zk_jvm.server_jvmflags(tmp_path) == (zk_jvm.QUICK_JIT, "")
    assert not archive.exists() and not list(tmp_path.glob("*.partial"))
