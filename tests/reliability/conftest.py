"""Fixtures for the reliability tests (docs/security.md): a ZooKeeper of their own, which they
kill -9 and restart, the ``--stress-seconds`` option of the stress run, and the table the
fuzzed calls (test_fuzz*.py) work on."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import leasekit as lk
from leasekit import embedded, testing

CLIENT_TIMEOUT = "30s"
"""Session timeout of every client here: long enough to ride out a ZooKeeper restart."""
RECONNECT_WITHIN = 75.0
"""Seconds a client may take to reconnect after a restart (a stuck connect costs 30 s)."""


def pytest_addoption(parser):
    parser.addoption(
        "--churn-seconds",
        type=float,
        default=float(os.environ.get("LEASEKIT_CHURN_SECONDS", "30")),
        help="how long members join and leave a group in the churn test (docs/security.md: 30)",
    )
    parser.addoption(
        "--stress-seconds",
        type=float,
        default=float(os.environ.get("LEASEKIT_STRESS_SECONDS", "12")),
        help="how long the reliability stress test runs (target: 60; default 12 for CI)",
    )


@pytest.fixture(scope="session")
def churn_seconds(pytestconfig) -> float:
    return float(pytestconfig.getoption("churn_seconds"))


@pytest.fixture(scope="session")
def stress_seconds(pytestconfig) -> float:
    return float(pytestconfig.getoption("stress_seconds"))


class OwnZooKeeper:
    """An embedded ZooKeeper server that only these tests use, so they may kill it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.address = ""
        self.kills = 0

    def start(self) -> str:
        self.address = embedded.ensure_running(self.data_dir)
        return self.address

    def kill(self) -> None:
        """kill -9 the server; its data dir and server.json stay."""
        assert embedded.kill(self.data_dir), "the test's own ZooKeeper was not running"
        self.kills += 1
        status = embedded.status(self.data_dir)
        assert status is not None and not status.running

    def restart(self, wait_for: Iterable[lk.Connection] = ()) -> str:
        """Start it again on the same data dir (clients reconnect only if the port is the same),
        then wait until the ``wait_for`` connections are connected again.

        ZooKeeper 3.9.5 (the jar pyspark ships) can leave a client that connects during
        server startup without an answer (ZOOKEEPER-5051: NPE in removeCnxn while zkDb is
        null); kazoo then waits up to the session timeout before it reconnects."""
        address = embedded.ensure_running(self.data_dir)
        assert address == self.address, f"restarted on {address}, clients know {self.address}"
        deadline = time.monotonic() + RECONNECT_WITHIN
        for connection in wait_for:
            while not testing.context(connection).store.connected:
                assert time.monotonic() < deadline, f"{connection} did not reconnect"
                time.sleep(0.05)
        return address

    def ensure_up(self) -> None:
        status = embedded.status(self.data_dir)
        if status is None or not status.running:
            self.restart()


@pytest.fixture(scope="module")
def own_zookeeper(tmp_path_factory) -> Iterator[OwnZooKeeper]:
    """A ZooKeeper server for this module alone (never the shared ``zookeeper`` fixture's)."""
    server = OwnZooKeeper(tmp_path_factory.mktemp("own-zookeeper"))
    server.start()
    try:
        yield server
    finally:
        embedded.stop(server.data_dir)


@pytest.fixture
def own_zk(own_zookeeper) -> OwnZooKeeper:
    """The module's own ZooKeeper, running (a test that failed mid-restart leaves it down)."""
    own_zookeeper.ensure_up()
    return own_zookeeper


@pytest.fixture
def connect(own_zk, warehouse):
    """Open connections to the own ZooKeeper on a fresh namespace; all closed at teardown."""
    namespace = f"r{uuid.uuid4().hex[:12]}"
    opened = []

    def open_connection(**kwargs):
        kwargs.setdefault("namespace", namespace)
        kwargs.setdefault("timeout", CLIENT_TIMEOUT)
        connection = lk.connect(own_zk.address, warehouse, **kwargs)
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        connection.close()


@pytest.fixture
def table(conn):
    t = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    t.append([{"id": 1, "v": "a"}])
    return t
