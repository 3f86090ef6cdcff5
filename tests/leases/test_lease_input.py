"""Bad input to the lease calls: a typed error, and nothing written (L3)."""

from __future__ import annotations

import pytest
from helpers import namespace_tree

import leasekit as lk

TB = lk.TableBucket


BAD_ACQUIRE = [
    pytest.param({TB("nope", 0): 1}, lk.TableNotFoundError, id="unknown-table"),
    pytest.param({TB("orders", 9): 1}, lk.BucketNotFoundError, id="unknown-bucket"),
    pytest.param({TB("orders", -1): 1}, lk.BucketNotFoundError, id="negative-bucket"),
    pytest.param({TB("orders", 0): -1}, lk.InvalidArgumentError, id="negative-snapshot"),
    pytest.param({TB("orders", 0): 0}, lk.InvalidArgumentError, id="zero-snapshot"),
    pytest.param({TB("orders", 0): "1"}, TypeError, id="str-snapshot"),
    pytest.param({("orders", 0): 1}, TypeError, id="tuple-key"),
    pytest.param({"orders": 1}, TypeError, id="str-key"),
    pytest.param([TB("orders", 0)], TypeError, id="not-a-mapping"),
]


@pytest.mark.parametrize("snapshot_ids, error", BAD_ACQUIRE)
def test_bad_acquire_input_writes_nothing(conn, orders, snapshot_ids, error):
    before = namespace_tree(conn)
    with pytest.raises(error) as info:
        conn.acquire_kv_snapshot_lease("q3", snapshot_ids, "1h")
    assert isinstance(info.value, lk.LeasekitError)
    with pytest.raises(error):
        conn.lease("q3").acquire(snapshot_ids)
    assert namespace_tree(conn) == before


@pytest.mark.parametrize(
    "buckets, error",
    [
        ([("orders", 0)], TypeError),
        (TB("orders", 0), TypeError),
        ("orders", TypeError),
        ([TB("nope", 0)], lk.TableNotFoundError),
        ([TB("orders", "0")], TypeError),
        ([TB("orders", 1.0)], TypeError),
    ],
)
def test_bad_release_input_writes_nothing(conn, orders, buckets, error):
    conn.acquire_kv_snapshot_lease("q3", {TB("orders", 0): 1}, "1h")
    before = namespace_tree(conn)
    with pytest.raises(error):
        conn.release_kv_snapshot_lease("q3", buckets)
    assert namespace_tree(conn) == before


def test_acquire_latest_bad_tables(conn, orders):
    before = namespace_tree(conn)
    with pytest.raises(lk.TableNotFoundError):
        conn.lease("q3").acquire_latest(["orders", "nope"])
    with pytest.raises(TypeError):
        conn.lease("q3").acquire_latest(5)
    with pytest.raises(lk.InvalidArgumentError):
        conn.lease("q3").acquire_latest("bad/name")
    assert namespace_tree(conn) == before


def test_release_of_unknown_lease(conn, orders):
    with pytest.raises(lk.LeaseNotFoundError):
        conn.release_kv_snapshot_lease("ghost", [TB("orders", 0)])


def test_force_drop_of_pinned_table(conn, orders):
    lease = conn.lease("q3", "1h")
    lease.acquire_latest("orders")
    with pytest.raises(lk.IllegalStateError, match="q3"):
        conn.drop_table("orders")
    conn.drop_table("orders", force=True)
    assert conn.tables() == []
    assert lease.info().pins == {}
    assert lease.drop() is True
