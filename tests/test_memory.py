"""Bulk work pauses Python's cycle collector and always gives it back (docs/benchmarks.md): the
collector runs again after a plan, a failed plan and overlapping plans, and stays off for
a program that turned it off itself."""

from __future__ import annotations

import gc
import threading

import pytest

from leasekit.errors import InvalidArgumentError
from leasekit.memory import collector_paused


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


def test_pause_ends_with_the_block_even_when_it_raises():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_overlapping_pauses_resume_when_the_last_one_ends():
    entered, release = threading.Barrier(2), threading.Event()

    def other() -> None:
        with collector_paused():
            entered.wait()
            release.wait()

    worker = threading.Thread(target=other)
    worker.start()
    with collector_paused():
        entered.wait()
    assert not gc.isenabled()  # the other thread's block is still running
    release.set()
    worker.join()
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_program_stays_off():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_retention_plan_gives_the_collector_back(conn):
    conn.create_table("t", "id BIGINT", "id", buckets=4).append([{"id": i} for i in range(10)])
    assert conn.retention_plan().items
    assert gc.isenabled()
    with pytest.raises(InvalidArgumentError):
        conn.retention_plan(table="no such/name")
    assert gc.isenabled()


def test_connection_reads_and_panel_loads_pause_the_collector(conn, monkeypatch):
    """A group read, the leases, the overview and a live view's load read ZooKeeper with the
    collector paused (half of a refresh at 10,000 buckets was collections walking the whole
    heap, B8) and give it back."""
    from leasekit.live import LiveView
    from leasekit.zk import ZkStore

    conn.create_table("t", "id BIGINT", "id", buckets=2)
    view = LiveView(conn, lambda: None)
    try:
        assert view.read(lambda: gc.isenabled()) is False
    finally:
        view.close()
    collecting: list[bool] = []
    pipelined = ZkStore._pipelined

    def noted(self, *args, **kwargs):
        collecting.append(gc.isenabled())
        return pipelined(self, *args, **kwargs)

    monkeypatch.setattr(ZkStore, "_pipelined", noted)
    conn.describe_group("g")
    conn.leases()
    conn.group_overview()
    assert collecting and not any(collecting)
    assert gc.isenabled()
