"""Empty buckets and a lease (L6, L15): a bucket with no snapshot and nothing in its log is
pinned as empty (snapshot id 0) and reads as no rows; one with records but no snapshot is
reported unavailable with the remedy; a lease that never existed is not found (L8)."""

from __future__ import annotations

import pytest

import leasekit as lk
from leasekit import testing

TB = lk.TableBucket


def _orders(conn):
    return conn.create_table(
        "orders", "order_id BIGINT, status STRING, amount DOUBLE", primary_key="order_id", buckets=8
    )


def _pin_nodes(conn, lease_id):
    """The pin znodes of ``lease_id`` under every snapshot (what retention honours)."""
    ctx = testing.context(conn)
    found = []
    for tb, sid in conn.lease(lease_id).info().pins.items():
        if sid > 0:
            table_id = conn.table(tb.table).table_id
            found.append(ctx.store.get(ctx.paths.pin(table_id, tb.bucket, sid, lease_id)))
    return found


def test_one_row_in_eight_buckets_reads_its_one_row(conn, spark):
    # L15, L6: the notebook example: one row, a snapshot, acquire_latest, read
    orders = _orders(conn)
    orders.append([{"order_id": 1, "status": "new", "amount": 9.5}])
    orders.snapshot(spark)
    with conn.lease("q3-report", duration="2h") as lease:
        result = lease.acquire_latest("orders")
        assert len(result.acquired) == 8 and not result.unavailable
        assert sorted(result.acquired.values()) == [0] * 7 + [1]
        rows = lease.read(spark, "orders").collect()
        assert [(r.order_id, r.status) for r in rows] == [(1, "new")]
        assert lease.info().pins == result.acquired


def test_an_empty_pin_reads_no_rows_whatever_is_appended_later(conn, spark):
    # L15: the empty state is what the lease pinned
    orders = _orders(conn)
    lease = conn.lease("empty", duration="1h")
    result = lease.acquire_latest("orders")
    assert set(result.acquired.values()) == {0} and len(result.acquired) == 8
    orders.append([{"order_id": i, "status": "late", "amount": 1.0} for i in range(50)])
    assert lease.read(spark, "orders").count() == 0
    orders.snapshot(spark)  # even once the buckets have snapshots of their own
    assert lease.read(spark, "orders").count() == 0
    # acquiring again moves every pin to the newest snapshot (L4)
    moved = lease.acquire_latest("orders")
    assert all(sid == 1 for tb, sid in moved.acquired.items() if orders.end_offsets()[tb] > 0)
    assert lease.read(spark, "orders").count() == 50
    assert all(node is not None for node in _pin_nodes(conn, "empty"))
    assert lease.drop()


def test_retention_has_nothing_to_keep_for_an_empty_pin(conn, spark):
    # L15, R6: no pin znode, no plan item, and release / drop work on empty pins
    orders = _orders(conn)
    orders.append([{"order_id": 1, "status": "new", "amount": 9.5}])
    orders.snapshot(spark)
    lease = conn.lease("q3", duration="1h")
    lease.acquire_latest("orders")
    plan = conn.retention_plan()
    assert not [i for i in plan.items if "q3" in i.reason and i.table_bucket.bucket != _hot(orders)]
    conn.run_retention()
    lease.release([TB("orders", b) for b in range(8) if b != _hot(orders)])
    assert list(lease.info().pins) == [TB("orders", _hot(orders))]
    lease.acquire_latest("orders")
    assert lease.drop()
    assert not conn.leases()


def _hot(orders):
    return next(tb.bucket for tb, end in orders.end_offsets().items() if end > 0)


def test_records_without_a_snapshot_are_unavailable_with_the_remedy(conn, spark):
    # L6: a bucket with records but no snapshot is not pinned (-1), and the read says what to do
    orders = _orders(conn)
    orders.append([{"order_id": 1, "status": "new", "amount": 9.5}])
    lease = conn.lease("q3", duration="1h")
    result = lease.acquire_latest("orders")
    hot = TB("orders", _hot(orders))
    assert result.unavailable == {hot: -1} and len(result.acquired) == 7
    with pytest.raises(lk.NotPinnedError, match=r"table\.snapshot\(spark\)"):
        lease.read(spark, "orders")
    assert lease.read(spark, "orders", allow_partial=True).count() == 0


def test_the_children_of_an_empty_bucket_are_empty_and_of_a_written_one_are_not(conn, spark):
    # L15, K4: a rescaled bucket is empty only when its ancestors' logs are empty too
    orders = _orders(conn)
    orders.append([{"order_id": 1, "status": "new", "amount": 9.5}])
    hot = _hot(orders)
    cold = (hot + 1) % 8
    empty_children = {tb.bucket for tb in orders.split_bucket(cold)}
    hot_children = {tb.bucket for tb in orders.split_bucket(hot)}
    result = conn.lease("q3", duration="1h").acquire_latest("orders")
    assert result.unavailable == {TB("orders", b): -1 for b in hot_children}
    assert all(result.acquired[TB("orders", b)] == 0 for b in empty_children)


def test_a_lease_that_never_existed_is_not_found(conn, spark):
    # L8: reading through an id nobody acquired is LeaseNotFoundError, not "expired"
    _orders(conn)
    with pytest.raises(lk.LeaseNotFoundError, match="never acquired"):
        conn.lease("never-made").read(spark, "orders")
    lease = conn.lease("gone", duration="1h")
    lease.acquire_latest("orders")
    assert conn.drop_kv_snapshot_lease("gone")
    with pytest.raises(lk.LeaseExpiredError):  # this handle had it: it is gone, not unknown
        lease.read(spark, "orders")
