"""leasekit on a 3-server ZooKeeper ensemble (docs/scale.md): leases, consumer groups
and retention through a comma-separated connect string. The leader killed mid-stress is in
test_ensemble_failover.py.
"""

from __future__ import annotations

import os
import time

import pytest

import leasekit as lk
from leasekit import testing
from leasekit.testing import seed_empty_snapshots, seed_history

pytestmark = pytest.mark.slow

TB = lk.TableBucket


def _eventually(check, seconds: float = 10.0):
    """``check()`` once it is truthy (a follower may answer a moment behind the leader)."""
    deadline = time.monotonic() + seconds
    while (value := check()) is None or value is False:
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.05)
    return value


def test_connect_string_names_every_server(ensemble, ensemble_connect):
    conn = ensemble_connect()
    assert conn.zookeeper == ensemble.connect_string
    assert len(ensemble.connect_string.split(",")) == 3
    modes = sorted(ensemble.mode(i) for i in range(3))
    assert modes == ["follower", "follower", "leader"]


def test_leases_on_the_ensemble(ensemble, ensemble_connect):
    conn = ensemble_connect()
    table = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    seed_empty_snapshots(testing.context(conn), table)
    lease = conn.lease("q3", "1h")
    acquired = lease.acquire_latest("orders")
    assert acquired.acquired == {tb: 1 for tb in table.buckets} and not acquired.unavailable
    expires = lease.renew()
    assert expires == lease.info().expires_at
    lease.release([TB("orders", 0)])
    assert lease.info().pins == {tb: 1 for tb in table.buckets if tb.bucket != 0}
    # every server holds the lease: a client of one server alone reads it
    for address in ensemble.addresses:
        with lk.connect(address, conn.warehouse, namespace=conn.namespace, timeout="10s") as one:
            _eventually(lambda one=one: [i.lease_id for i in one.leases()] == ["q3"])
            assert one.lease("q3").info().pins == lease.info().pins
    assert lease.drop() is True
    assert conn.leases() == []


def test_consumer_group_on_the_ensemble(ensemble_connect):
    conn = ensemble_connect()
    orders = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    orders.append([{"id": i} for i in range(80)])
    members = [
        ensemble_connect().consumer(
            "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
        )
        for _ in range(2)
    ]
    try:
        seen: set[tuple[TB, int]] = set()
        deadline = time.monotonic() + 30
        ends = orders.end_offsets()

        def settled() -> bool:
            return len(seen) == 80 and all(
                len(m.assignment()) == 2
                and all(m.position(tb) == ends[tb] for tb in m.assignment())
                for m in members
            )

        while not settled():
            assert time.monotonic() < deadline, "the group did not split the buckets"
            for m in members:
                for tb, data in m.poll(timeout="0.05s").items():
                    seen.update((tb, o) for o in data.column("_offset").to_pylist())
        # at least once: a bucket that moved is read again from the group's (no) commit
        assert seen == {(tb, o) for tb, end in ends.items() for o in range(end)}
        assert not members[0].assignment() & members[1].assignment()
        assert {tb for m in members for tb in m.assignment()} == set(orders.buckets)
        assert {(m.member_id, frozenset(m.assignment())) for m in members} == {
            (i.member_id, frozenset(i.buckets)) for i in conn.group_members("g")
        }
        for m in members:
            m.commit()

        # another client may be served by a follower a moment behind the members' servers
        # (ZooKeeper orders each client's view, not all clients'): it sees the commits soon
        def described():
            frame = conn.describe_group("g").set_index("bucket")
            return frame if frame["current_offset"].notna().all() else None

        frame = _eventually(described)
        assert {TB("orders", b): int(frame.loc[b, "current_offset"]) for b in range(4)} == ends
        assert (frame["lag"] == 0).all()
    finally:
        for m in members:
            m.close()
    _eventually(lambda: conn.group_members("g") == [])


def test_retention_on_the_ensemble(ensemble_connect):
    conn = ensemble_connect()
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    seed_history(
        testing.context(conn), table, snapshots=4, segments=4, rows_per_segment=10, file_bytes=16
    )
    conn.lease("report", "1h").acquire({TB("t", 0): 1})
    plan = conn.retention_plan("t")
    snaps = {(i.table_bucket.bucket, i.item_id): i for i in plan.items if i.kind == "snapshot"}
    assert snaps[(0, 1)].action == "keep" and snaps[(0, 1)].reason.startswith(
        "pinned by lease report"
    )
    deletes = {key for key, i in snaps.items() if i.action == "delete"}
    assert deletes == {(0, 2), (1, 1), (1, 2)}
    pinned_files = [s for s in table.snapshots(0) if s.snapshot_id == 1][0].files
    report = conn.run_retention("t")
    assert not report.errors
    assert {
        (i.table_bucket.bucket, i.item_id) for i in report.deleted if i.kind == "snapshot"
    } == deletes
    assert {(s.table_bucket.bucket, s.snapshot_id) for s in table.snapshots()} == {
        (0, 1),
        (0, 3),
        (0, 4),
        (1, 3),
        (1, 4),
    }
    assert all(os.path.exists(f) for f in pinned_files)
    assert not [
        i for i in conn.retention_plan("t").items if i.kind == "snapshot" and i.action == "delete"
    ]
