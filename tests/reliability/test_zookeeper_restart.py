"""ZooKeeper killed with SIGKILL and restarted (docs/security.md): every acknowledged lease, offset
and snapshot is still there, and the same client carries on (kazoo reconnects)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from helpers import namespace_tree, read_log

import leasekit as lk
from leasekit import embedded

TB = lk.TableBucket


@pytest.fixture
def state(connect, spark):
    """A namespace with acknowledged appends, snapshots, leases and settings."""
    conn = connect()
    conn.update_settings({"lease.expiry-grace": "45s"})
    orders = conn.create_table("orders", "id BIGINT, status STRING", "id", buckets=4)
    first = orders.append([{"id": i, "status": "new"} for i in range(200)])
    snap1 = orders.snapshot(spark)
    second = orders.append([{"id": i, "status": "paid"} for i in range(0, 200, 3)])
    snap2 = orders.snapshot(spark)
    q3 = conn.lease("q3", "2h").acquire_latest("orders")
    old = conn.lease("old", "1h").acquire({TB("orders", 0): 1, TB("orders", 1): 1})
    conn.acquire_kv_snapshot_lease("empty", {}, "30m")
    return (
        conn,
        orders,
        {
            "appends": [first, second],
            "snapshots": [snap1, snap2],
            "acquired": {"q3": q3, "old": old},
        },
    )


def _restart(own_zk, conn) -> None:
    """kill -9 and restart the server; wait until ``conn`` has reconnected."""
    own_zk.kill()
    time.sleep(1.0)
    own_zk.restart(wait_for=[conn])


def test_acknowledged_metadata_survives_kill_and_restart(own_zk, connect, state):
    # W1, S2, L7, L10: leases with their pins and expiry, end and beginning offsets,
    # snapshots and settings read back identically after a kill -9 and restart
    conn, orders, acked = state
    leases_before = {i.lease_id: i for i in conn.leases()}
    ends, begins = orders.end_offsets(), orders.beginning_offsets()
    snapshots = orders.snapshots()
    latest = orders.latest_snapshots()
    tree = namespace_tree(conn)

    _restart(own_zk, conn)

    # the same Connection object: kazoo reconnects (its session may or may not survive)
    leases_after = {i.lease_id: i for i in conn.leases()}
    assert leases_after == leases_before
    assert set(leases_after) == {"q3", "old", "empty"}
    assert leases_after["q3"].pins == acked["acquired"]["q3"].acquired
    assert leases_after["q3"].expires_at == acked["acquired"]["q3"].expires_at
    assert leases_after["old"].pins == acked["acquired"]["old"].acquired
    assert orders.end_offsets() == ends
    assert orders.beginning_offsets() == begins
    assert {tb: r.end for tb, r in acked["appends"][1].items()} == {
        tb: ends[tb] for tb in acked["appends"][1]
    }
    assert orders.snapshots() == snapshots
    assert orders.latest_snapshots() == latest == {tb: 2 for tb in orders.buckets}
    for snap in (s for taken in acked["snapshots"] for s in taken.values()):
        assert snap in snapshots
        assert all(os.path.exists(f) for f in snap.files)
    assert conn.settings()["lease.expiry-grace"].total_seconds() == 45
    assert namespace_tree(conn) == tree

    # a second client sees the same
    with lk.connect(
        own_zk.address, conn.warehouse, namespace=conn.namespace, timeout="30s"
    ) as other:
        assert {i.lease_id: i for i in other.leases()} == leases_before
        assert other.table("orders").end_offsets() == ends


def test_client_carries_on_after_restart(own_zk, connect, state, spark):
    # W1, L7, L8, L10, R2: after the restart the same client appends densely,
    # renews, acquires, snapshots, reads through its lease and runs retention
    conn, orders, _ = state
    ends = orders.end_offsets()
    renewed_before = conn.lease("q3").info().renewed_at

    _restart(own_zk, conn)

    ranges = orders.append([{"id": i, "status": "shipped"} for i in range(1000, 1100)])
    assert {tb: r.start for tb, r in ranges.items()} == {tb: ends[tb] for tb in ranges}
    for bucket, rows in read_log(orders).items():
        assert [r["_offset"] for r in rows] == list(
            range(orders.end_offsets()[TB("orders", bucket)])
        )
    q3 = conn.lease("q3", "2h")
    assert q3.renew() >= conn.lease("q3").info().expires_at
    assert q3.info().renewed_at > renewed_before
    snaps = orders.snapshot(spark)
    assert {s.snapshot_id for s in snaps.values()} == {3}
    moved = q3.acquire({tb: 3 for tb in orders.buckets})
    assert moved.acquired == {tb: 3 for tb in orders.buckets} and not moved.unavailable
    assert q3.read(spark, "orders").count() == 300
    assert conn.drop_kv_snapshot_lease("old") is True
    report = conn.run_retention()
    assert not report.errors
    assert {(i.table_bucket.bucket, i.item_id) for i in report.deleted if i.kind == "snapshot"} == {
        (b, 1) for b in range(4)
    }  # snapshot 2 stays: newest 2 of bucket (R1)
    assert q3.read(spark, "orders").count() == 300


def test_writes_during_the_outage_complete_or_fail_cleanly(own_zk, connect):
    # W1, W2: an append and an acquire issued while ZooKeeper is down either succeed
    # once it is back or raise the retriable ZooKeeperUnavailableError (or SessionLostError,
    # also retriable, when the session expired before the client got back in: then none of
    # that write is there); whatever was acknowledged is there, no offset gap, no duplicate
    conn = connect()
    events = conn.create_table("events", "id BIGINT, n INT", "id", buckets=3)
    events.append([{"id": i, "n": 0} for i in range(30)])
    acked: list[tuple[int, dict]] = []
    failures: list[BaseException] = []
    unavailable = 0
    lost: list[int] = []
    stop = threading.Event()

    def writer() -> None:
        nonlocal unavailable
        n = 1
        while not stop.is_set():
            try:
                acked.append((n, events.append([{"id": 100 * n + i, "n": n} for i in range(9)])))
            except lk.ZooKeeperUnavailableError:
                unavailable += 1
                time.sleep(0.2)
            except lk.SessionLostError:
                lost.append(n)
            except BaseException as exc:  # reported below
                failures.append(exc)
                return
            n += 1

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    time.sleep(1.0)
    own_zk.kill()
    time.sleep(1.5)
    own_zk.restart()
    time.sleep(1.5)
    stop.set()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert not failures, failures
    assert len(acked) > 2

    log = read_log(events)
    ends = events.end_offsets()
    for bucket, rows in log.items():
        assert [r["_offset"] for r in rows] == list(range(ends[TB("events", bucket)]))
    seen: dict[TB, set[int]] = {tb: set() for tb in events.buckets}
    for _, ranges in acked:
        for tb, r in ranges.items():
            offsets = set(range(r.start, r.end))
            assert not offsets & seen[tb], f"offsets handed out twice in {tb}"
            assert r.end <= ends[tb]
            seen[tb] |= offsets
    stored = {r["id"] for rows in log.values() for r in rows}
    assert {100 * n + i for n, _ in acked for i in range(9)} <= stored
    assert not {100 * n + i for n in lost for i in range(9)} & stored
    status = embedded.status(own_zk.data_dir)
    assert status is not None and status.running


def test_committed_offsets_survive_kill_and_restart(own_zk, connect):
    # C4: offsets acknowledged by commit() are there after a kill -9 and restart, and a
    # new consumer of the group resumes from them; the same consumer commits again
    conn = connect()
    orders = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    orders.append([{"id": i} for i in range(100)])
    consumer = conn.consumer(
        "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
    )
    consumer.poll(max_records=30)
    consumer.commit()
    committed = {tb: consumer.position(tb) for tb in consumer.assignment()}
    assert sum(committed.values()) == 30

    _restart(own_zk, conn)

    assert {tb: consumer.committed(tb) for tb in committed} == committed
    with connect().consumer(group_id="g", enable_auto_commit=False) as again:
        again.assign(list(committed))  # the group's offsets, without joining it
        assert {tb: again.position(tb) for tb in committed} == committed
    # C16: the group member's own session may still be reconnecting (no records meanwhile),
    # or have expired (then it rejoins and resumes from the commits): either way 10 more
    batch = consumer.poll(timeout="60s", max_records=10)
    assert sum(t.num_rows for t in batch.values()) == 10
    consumer.commit()
    assert sum(consumer.committed(tb) for tb in committed) == 40
    consumer.close()
