"""Bulk reads pause the cyclic collector and always give it back as they found it
(``leasekit.gcpause``): nested, across threads, after an error, and never turning on a
collector the user turned off."""

from __future__ import annotations

import gc
import threading

import pytest

from leasekit.gcpause import bulk_read, paused_gc


@pytest.fixture(autouse=True)
def collector_back_on():
    yield
    gc.enable()


def test_nested_pauses_resume_when_the_last_ends():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer read is still running
    assert gc.isenabled()


def test_a_read_that_raises_gives_the_collector_back():
    @bulk_read
    def failing():
        assert not gc.isenabled()
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        failing()
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_user_stays_off():
    gc.disable()
    with paused_gc():
        pass
    assert not gc.isenabled()


def test_overlapping_reads_on_threads_resume_once_both_end():
    inside, release = threading.Barrier(3), threading.Event()

    def read():
        with paused_gc():
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert not gc.isenabled()
    release.set()
    for t in threads:
        t.join()
    assert gc.isenabled()


def test_connection_reads_leave_the_collector_running(conn):
    conn.create_table("orders", "id BIGINT", "id", buckets=2)
    conn.describe_group("g")
    conn.retention_plan()
    conn.leases()
    assert gc.isenabled()
