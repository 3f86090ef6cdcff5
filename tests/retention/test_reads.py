"""Retention's reads between plans: a bucket directory whose children are unchanged is not read
again, and every change — a new, deleted or re-created snapshot or segment, a new pin — shows in
the next plan as it would in a first one (R1, R2, R3, R6)."""

from __future__ import annotations

import leasekit as lk
from leasekit import testing
from leasekit.testing import seed_history
from leasekit.zk.formats import SegmentRecord, SnapshotRecord
from leasekit.zk.ops import Create, Delete, SetData

TB = lk.TableBucket
ROWS = 100


def _seeded(conn):
    """A table of two buckets, each with snapshots 1-4 at log offsets 100-400 and segments
    [0, 100) ... [300, 400), all older than its log.retention."""
    table = conn.create_table(
        "t", "id BIGINT, v STRING", "id", buckets=2, properties={"log.retention": "0s"}
    )
    ctx = testing.context(conn)
    seed_history(ctx, table, 4, 4, ROWS)
    return ctx, table


def _items(plan, kind, bucket):
    return {
        i.item_id: (i.action, i.reason, i.size_bytes)
        for i in plan.items
        if i.kind == kind and i.table_bucket == TB("t", bucket)
    }


def _fresh(conn, zookeeper, warehouse, namespace):
    """The same plan from a new connection: nothing read before."""
    with lk.connect(zookeeper, warehouse, namespace=namespace) as other:
        return other.retention_plan("t")


def _same(plan, fresh):
    assert [i[:4] for i in plan.items] == [i[:4] for i in fresh.items]


def test_a_new_pin_on_an_old_snapshot_keeps_it_in_the_next_plan(
    conn, zookeeper, warehouse, namespace
):
    # R2, L5: pins are read again for every snapshot retention may delete
    _seeded(conn)
    first = conn.retention_plan("t")
    assert _items(first, "snapshot", 0)[1][0] == "delete"
    conn.acquire_kv_snapshot_lease("q3", {TB("t", 0): 1}, "1h")
    plan = conn.retention_plan("t")
    action, reason, _ = _items(plan, "snapshot", 0)[1]
    assert action == "keep" and reason.startswith("pinned by lease q3 until ")
    assert _items(plan, "snapshot", 1)[1][0] == "delete"
    _same(plan, _fresh(conn, zookeeper, warehouse, namespace))
    conn.drop_kv_snapshot_lease("q3")
    assert _items(conn.retention_plan("t"), "snapshot", 0)[1][0] == "delete"


def test_a_pin_of_no_lease_shows_in_the_next_plan_and_goes_with_its_snapshot(conn):
    # L5: a pin znode whose lease does not exist (a pin and its lease are written in one
    # transaction, so one was left behind) protects nothing: the next plan reclaims it, and the
    # snapshot it alone pinned goes in the same pass; an unreadable lease's pin still protects
    ctx, table = _seeded(conn)
    assert _items(conn.retention_plan("t"), "snapshot", 1)[2][0] == "delete"
    ctx.store.commit([Create(ctx.paths.pin(table.table_id, 1, 2, "left-behind"))])
    plan = conn.retention_plan("t")
    (item,) = [i for i in plan.items if i.kind == "lease"]
    assert (item.item_id, item.action) == ("left-behind", "delete")
    assert item.reason == "pins of lease left-behind, which no longer exists: t/1 snapshot 2"
    assert _items(plan, "snapshot", 1)[2][0] == "delete"
    ctx.store.commit([Create(ctx.paths.lease("left-behind"), b"\xc1garbage")])
    plan = conn.retention_plan("t")
    assert _items(plan, "snapshot", 1)[2][:2] == ("keep", "pinned by 1 pin(s) of no known lease")
    assert _items(plan, "snapshot", 1)[1][0] == "delete"


def test_new_and_deleted_snapshots_and_segments_show_in_the_next_plan(
    conn, zookeeper, warehouse, namespace
):
    # R1, R3
    ctx, table = _seeded(conn)
    conn.retention_plan("t")
    paths, tid = ctx.paths, table.table_id
    rel = f"{table.data_dir}/snapshots/seed-5/_bucket=0/part-0.parquet"
    ctx.store.commit(
        [
            Create(paths.snapshot(tid, 0, 5), SnapshotRecord(400, ROWS, 0, (rel,)).encode()),
            Delete(paths.segment(tid, 1, 0)),
        ]
    )
    plan = conn.retention_plan("t")
    snaps = _items(plan, "snapshot", 0)
    assert {k: v[:2] for k, v in snaps.items() if v[0] == "keep"} == {
        5: ("keep", "newest 2 of bucket"),
        4: ("keep", "newest 2 of bucket"),
    }
    assert snaps[3][0] == "delete"
    assert sorted(_items(plan, "segment", 1)) == [100, 200, 300]
    _same(plan, _fresh(conn, zookeeper, warehouse, namespace))


def test_a_snapshot_or_segment_created_anew_under_its_old_path_is_read_again(
    conn, zookeeper, warehouse, namespace
):
    # R3, R6: the plan follows what the znodes hold now, not what they held before
    ctx, table = _seeded(conn)
    before = conn.retention_plan("t")
    assert _items(before, "segment", 1)[0][0] == "delete"
    paths, tid = ctx.paths, table.table_id
    snap_rel = f"{table.data_dir}/snapshots/seed-4/_bucket=1/part-0.parquet"
    seg_rel = f"{table.data_dir}/log/0/seed-0.parquet"
    ctx.store.commit(
        [
            Delete(paths.snapshot(tid, 1, 4)),
            Delete(paths.segment(tid, 0, 0)),
        ]
    )
    ctx.store.commit(
        [  # snapshot 4 of bucket 1 now starts its log at 100; segment 0 of bucket 0 grew
            Create(paths.snapshot(tid, 1, 4), SnapshotRecord(ROWS, ROWS, 0, (snap_rel,)).encode()),
            Create(paths.segment(tid, 0, 0), SegmentRecord(seg_rel, ROWS, 4096, 0).encode()),
        ]
    )
    plan = conn.retention_plan("t")
    segs = _items(plan, "segment", 1)
    assert segs[0][0] == "delete"
    assert segs[100][:2] == ("keep", "needed: log tail of kept snapshot 4")
    assert _items(plan, "segment", 0)[0][2] == 4096
    _same(plan, _fresh(conn, zookeeper, warehouse, namespace))


def test_an_old_snapshot_whose_record_was_rewritten_is_read_anew(conn):
    # R6: the plan gives what the znode holds now, even a record written over in place
    ctx, table = _seeded(conn)
    assert _items(conn.retention_plan("t"), "snapshot", 0)[1][2] == 0
    rel = f"{table.data_dir}/snapshots/seed-1/_bucket=0/part-0.parquet"
    path = ctx.paths.snapshot(table.table_id, 0, 1)
    ctx.store.commit([SetData(path, SnapshotRecord(ROWS, ROWS, 777, (rel,)).encode())])
    assert _items(conn.retention_plan("t"), "snapshot", 0)[1] == (
        "delete",
        "older than the newest 2 of bucket, not pinned",
        777,
    )
