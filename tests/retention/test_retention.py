"""Retention: what is kept and why (R1, R6), pinned snapshots never lose files (R2), log
segments (R3), orphans (R4), leases first (R5), idempotent passes (R7)."""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pytest
from helpers import grow, namespace_tree, warehouse_files

import leasekit as lk
from leasekit import spark as lks
from leasekit import testing

TB = lk.TableBucket


def _history(table, spark, snapshots: int, rows: int = 30) -> None:
    for i in range(snapshots):
        table.append([{"id": k, "v": f"r{i}"} for k in range(rows)])
        table.snapshot(spark)


def _actions(plan, kind):
    return {
        (i.table_bucket.bucket if i.table_bucket else None, i.item_id): (i.action, i.reason)
        for i in plan.items
        if i.kind == kind
    }


def test_keeps_newest_and_pinned_snapshots_deletes_the_rest(conn, spark):
    # R1, R2, R6
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    _history(table, spark, 4)
    lease = conn.lease("q3-report", "1h")
    lease.acquire({TB("t", 0): 1})
    pinned_files = table.snapshots(0)[0].files
    plan = conn.retention_plan()
    snaps = _actions(plan, "snapshot")
    assert snaps[(0, 4)] == ("keep", "newest 2 of bucket")
    assert snaps[(0, 3)] == ("keep", "newest 2 of bucket")
    assert snaps[(0, 2)][0] == "delete"
    assert snaps[(0, 1)][0] == "keep" and snaps[(0, 1)][1].startswith(
        "pinned by lease q3-report until 20"
    )
    assert snaps[(1, 1)][0] == snaps[(1, 2)][0] == "delete"
    gone = [
        s for s in table.snapshots() if snaps[(s.table_bucket.bucket, s.snapshot_id)][0] == "delete"
    ]
    report = conn.run_retention()
    assert {(i.table_bucket.bucket, i.item_id) for i in report.deleted if i.kind == "snapshot"} == {
        (0, 2),
        (1, 1),
        (1, 2),
    }
    assert [s.snapshot_id for s in table.snapshots(0)] == [1, 3, 4]
    assert [s.snapshot_id for s in table.snapshots(1)] == [3, 4]
    assert all(os.path.exists(f) for f in pinned_files)  # R2
    assert not any(os.path.exists(f) for s in gone for f in s.files)  # files after metadata
    pinned_rows = lks.read_snapshots(spark, table, {0: 1}).count()
    assert lease.read(spark, "t", allow_partial=True).count() == pinned_rows > 0


def test_num_retained_property(conn, spark):
    # R1
    table = conn.create_table(
        "t", "id BIGINT, v STRING", "id", buckets=1, properties={"kv.snapshot.num-retained": 3}
    )
    _history(table, spark, 5)
    conn.run_retention()
    assert [s.snapshot_id for s in table.snapshots(0)] == [3, 4, 5]
    one = conn.create_table(
        "u", "id BIGINT, v STRING", "id", buckets=1, properties={"kv.snapshot.num-retained": 1}
    )
    _history(one, spark, 3)
    conn.run_retention("u")
    assert [s.snapshot_id for s in one.snapshots(0)] == [3]


def test_segments_wait_for_log_retention(conn, spark):
    # R3: below the oldest kept snapshot but younger than log.retention (7d): kept
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    _history(table, spark, 4)
    plan = conn.retention_plan("t")
    segs = _actions(plan, "segment")
    assert all(action == "keep" for action, _ in segs.values())
    assert any(reason.startswith("within log.retention 7d") for _, reason in segs.values())
    assert any(
        reason.startswith("needed: log tail of kept snapshot") for _, reason in segs.values()
    )


def test_segments_below_oldest_kept_snapshot_and_old_are_deleted(conn, spark):
    # R3: the beginning offset advances; reads at the end offsets are unchanged
    table = conn.create_table(
        "t", "id BIGINT, v STRING", "id", buckets=1, properties={"log.retention": "1s"}
    )
    _history(table, spark, 4)
    before = sorted(map(tuple, lks.read_at(spark, table).collect()))
    time.sleep(1.2)
    oldest_kept = min(s.log_offset for s in table.snapshots(0) if s.snapshot_id >= 3)
    plan = conn.retention_plan("t")
    segs = _actions(plan, "segment")
    for action, reason in segs.values():
        if action == "delete":
            assert reason.startswith("below log start of snapshot 3; older than log.retention 1s")
    report = conn.run_retention("t")
    deleted = [i for i in report.deleted if i.kind == "segment"]
    assert deleted
    assert table.beginning_offsets()[TB("t", 0)] == oldest_kept
    assert sorted(map(tuple, lks.read_at(spark, table).collect())) == before
    with pytest.raises(lk.OffsetOutOfRangeError):
        lks.read_at(spark, table, {0: 1})


def test_log_retention_bytes_deletes_oldest_first(conn, spark):
    # R3
    table = conn.create_table(
        "t",
        "id BIGINT, v STRING",
        "id",
        buckets=1,
        properties={"log.retention.bytes": 1, "kv.snapshot.num-retained": 1},
    )
    _history(table, spark, 3)
    segs = _actions(conn.retention_plan("t"), "segment")
    deletes = sorted(base for (_, base), (action, _) in segs.items() if action == "delete")
    assert deletes and deletes == sorted(deletes)
    assert all("log over log.retention.bytes 1" in segs[(0, b)][1] for b in deletes)
    conn.run_retention("t")
    assert table.beginning_offsets()[TB("t", 0)] == table.snapshots(0)[-1].log_offset


def test_respect_consumers_says_no_group_has_committed(conn, spark):
    # R3, R6: with log.retention.respect-consumers and no committed offsets, the reason says so
    table = conn.create_table(
        "t",
        "id BIGINT, v STRING",
        "id",
        buckets=1,
        properties={"log.retention": "0s", "log.retention.respect-consumers": True},
    )
    other = conn.create_table(
        "u", "id BIGINT, v STRING", "id", buckets=1, properties={"log.retention": "0s"}
    )
    _history(table, spark, 3)
    _history(other, spark, 3)
    plan = conn.retention_plan()
    deletes = [i for i in plan.items if i.kind == "segment" and i.action == "delete"]
    mine = [i for i in deletes if i.table_bucket.table == "t"]
    assert mine and all(
        i.reason.endswith(
            "; log.retention.respect-consumers: no consumer group has "
            "committed offsets for this table"
        )
        for i in mine
    )
    others = [i for i in deletes if i.table_bucket.table == "u"]
    assert others and not any("respect-consumers" in i.reason for i in others)


def test_orphans_respect_min_age_and_never_touch_referenced_files(conn, spark):
    # R4
    ctx = testing.context(conn)
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    _history(table, spark, 1)
    referenced = {f for s in table.snapshots() for f in s.files}
    ctx.warehouse.write_parquet(
        f"{table.data_dir}/log/0/dead-writer.parquet", pa.table({"id": [1]})
    )
    plan = conn.retention_plan()
    orphans = [i for i in plan.items if i.kind == "orphan"]
    assert [i.action for i in orphans] == ["keep"]
    assert "orphan.min-age 1h" in orphans[0].reason
    assert orphans[0].table_bucket == TB("t", 0)
    assert orphans[0].item_id == ctx.warehouse.uri(f"{table.data_dir}/log/0/dead-writer.parquet")
    conn.update_settings({"orphan.min-age": "0s"})
    report = conn.run_retention()
    assert [i.kind for i in report.deleted] == ["orphan"]
    assert not os.path.exists(orphans[0].item_id)
    assert all(os.path.exists(f) for f in referenced)
    assert conn.run_retention().deleted == []


def test_namespaces_sharing_a_warehouse_never_take_each_others_files_for_orphans(
    conn, zookeeper, warehouse
):
    # R4: a file is an orphan only among the files of its own namespace
    with lk.connect(zookeeper, warehouse, namespace=f"{conn.namespace}-other") as other:
        theirs = other.create_table("t", "id BIGINT", "id", buckets=2)
        theirs.append([{"id": i} for i in range(10)])
        files = {
            f
            for f in warehouse_files(other)
            if f.startswith(f"{testing.context(other).tables_dir}/")
        }
        assert files
        mine = conn.create_table("t", "id BIGINT", "id", buckets=2)
        mine.append([{"id": i} for i in range(10)])
        conn.update_settings({"orphan.min-age": "0s"})
        assert [i for i in conn.retention_plan().items if i.kind == "orphan"] == []
        conn.run_retention()
        assert files <= set(warehouse_files(other))
        with other.consumer("t", auto_offset_reset="earliest") as reader:
            assert (
                sum(b.num_rows for b in reader.poll(timeout="5s").values()) == 10
            )  # still readable


def test_one_pass_expires_leases_first(conn, clock, spark):
    # R5: the expired lease's snapshots are reclaimed in the same pass
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    _history(table, spark, 3)
    conn.acquire_kv_snapshot_lease("old", {TB("t", 0): 1}, "1h")
    clock.advance(3_600 + 31)
    plan = conn.retention_plan()
    assert _actions(plan, "lease")[(None, "old")][0] == "delete"
    assert "lease expired at" in _actions(plan, "lease")[(None, "old")][1]
    assert _actions(plan, "snapshot")[(0, 1)][0] == "delete"
    assert "its lease(s) old expire in this pass" in _actions(plan, "snapshot")[(0, 1)][1]
    report = conn.run_retention()
    assert {(i.kind, i.item_id) for i in report.deleted} >= {("lease", "old"), ("snapshot", 1)}
    assert conn.leases() == []
    assert [s.snapshot_id for s in table.snapshots(0)] == [2, 3]


def test_lease_within_grace_is_kept_with_reason(conn, clock):
    # R6, L11
    conn.acquire_kv_snapshot_lease("q3", {}, "1h")
    clock.advance(3_600 + 10)
    item = _actions(conn.retention_plan(), "lease")[(None, "q3")]
    assert item[0] == "keep" and "reclaimed after the 30s grace" in item[1]
    clock.advance(-(3_600 + 10))  # back to the ZooKeeper clock
    assert _actions(conn.retention_plan(), "lease")[(None, "q3")][1].startswith("valid until")


def test_plan_changes_nothing_and_explains_every_item(conn, spark):
    # R6
    table = conn.create_table(
        "t", "id BIGINT, v STRING", "id", buckets=2, properties={"log.retention": "0s"}
    )
    _history(table, spark, 3)
    conn.acquire_kv_snapshot_lease("q3", {TB("t", 1): 1}, "1h")
    tree, files = namespace_tree(conn), warehouse_files(conn)
    plan = conn.retention_plan()
    assert namespace_tree(conn) == tree and warehouse_files(conn) == files
    assert all(i.reason and i.action in ("keep", "delete") for i in plan.items)
    assert (
        plan.reclaimable_bytes == sum(i.size_bytes for i in plan.items if i.action == "delete") > 0
    )
    frame = plan.to_pandas()
    assert list(frame.columns) == [
        "kind",
        "table",
        "bucket",
        "item_id",
        "action",
        "reason",
        "size_bytes",
    ]
    assert len(frame) == len(plan.items)
    assert {i.kind for i in plan.items} == {"lease", "snapshot", "segment"}


def test_dry_run_reports_without_changing(conn, spark):
    # R6
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    _history(table, spark, 3)
    tree = namespace_tree(conn)
    report = conn.run_retention(dry_run=True)
    assert report.dry_run and [(i.kind, i.item_id) for i in report.deleted] == [("snapshot", 1)]
    assert namespace_tree(conn) == tree
    assert report.freed_bytes == table.snapshots(0)[0].size_bytes


def test_passes_are_idempotent_and_scoped(conn, spark):
    # R7: a second pass finds nothing; a table-scoped pass leaves other tables alone
    a = conn.create_table("a", "id BIGINT, v STRING", "id", buckets=1)
    b = conn.create_table("b", "id BIGINT, v STRING", "id", buckets=1)
    _history(a, spark, 3)
    _history(b, spark, 3)
    first = conn.run_retention("a")
    assert [(i.table_bucket.table, i.item_id) for i in first.deleted] == [("a", 1)]
    assert len(b.snapshots(0)) == 3
    assert conn.run_retention("a").deleted == []
    assert conn.run_retention().deleted[0].table_bucket.table == "b"
    assert conn.run_retention().deleted == []


def test_refused_deletion_keeps_the_segments_it_needs(conn, spark):
    # R2, R3: a snapshot pinned between planning and deleting stays, and so does its log
    import leasekit.retention.apply as reclaim
    from leasekit.retention import planner as retention
    from leasekit.retention.apply import run_retention

    table = conn.create_table(
        "t", "id BIGINT, v STRING", "id", buckets=1, properties={"log.retention": "0s"}
    )
    _history(table, spark, 3)
    real_plan = retention.plan

    def plan_then_pin(meta):
        result = real_plan(meta)
        conn.acquire_kv_snapshot_lease("late", {TB("t", 0): 1}, "1h")  # pinned after the plan
        return result

    original = reclaim.plan
    reclaim.plan = plan_then_pin
    try:
        report = run_retention(testing.context(conn))
    finally:
        reclaim.plan = original
    assert any("snapshot 1" in e and "pinned by lease" in e for e in report.errors)
    assert [s.snapshot_id for s in table.snapshots(0)] == [1, 2, 3]
    assert table.beginning_offsets()[TB("t", 0)] <= table.snapshots(0)[0].log_offset


def test_retention_bad_input(conn):
    with pytest.raises(lk.TableNotFoundError):
        conn.retention_plan("nope")
    with pytest.raises(lk.InvalidArgumentError):
        conn.run_retention("bad/name")
    with pytest.raises(TypeError):
        conn.run_retention(dry_run="yes")


def test_respect_consumers_keeps_segments_a_group_has_not_committed_past(conn, spark):
    # R3, R6: with log.retention.respect-consumers, a segment goes only once every group with
    # offsets for the table has committed past it; the reason names the group that holds it
    table = conn.create_table(
        "t",
        "id BIGINT, v STRING",
        "id",
        buckets=1,
        properties={
            "log.retention": "0s",
            "log.retention.respect-consumers": True,
            "kv.snapshot.num-retained": 1,
        },
    )
    _history(table, spark, 3, rows=10)  # segments [0, 10), [10, 20), [20, 30); snapshot at 30 kept
    with conn.consumer(group_id="slow", enable_auto_commit=False) as c:
        c.assign([TB("t", 0)])
        c.commit({TB("t", 0): 15})
    with conn.consumer(group_id="fast", enable_auto_commit=False) as c:
        c.assign([TB("t", 0)])
        c.commit({TB("t", 0): 30})
    segments = _actions(conn.retention_plan(), "segment")
    assert segments[(0, 0)][0] == "delete"
    assert segments[(0, 10)] == (
        "keep",
        "consumer group slow has not committed past it (at offset 15)",
    )
    assert segments[(0, 20)][0] == "keep"
    conn.run_retention("t")
    assert table.beginning_offsets()[TB("t", 0)] == 10
    conn.reset_offsets("slow", to="latest", dry_run=False)
    conn.run_retention("t")
    assert table.beginning_offsets()[TB("t", 0)] == 30


def test_respect_consumers_keeps_the_log_of_a_live_group_that_has_not_committed(conn):
    # R3, R6: a member of group "reader" reads from offset 0, its first auto-commit pending: the
    # group has committed nothing, so none of the log may go; once it commits, the log goes
    props = {
        "log.retention": "0s",
        "log.retention.respect-consumers": True,
        "kv.snapshot.num-retained": 1,
    }
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1, properties=props)
    grow(table, 3)  # segments [0, 8), [8, 16), [16, 24); snapshot 3 at 24 kept
    tb = TB("t", 0)
    with conn.consumer(
        "t",
        group_id="reader",
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval="1h",
    ) as member:
        got, deadline = 0, time.monotonic() + 30
        while got < 24 and time.monotonic() < deadline:
            got += sum(t.num_rows for t in member.poll("200ms").values())
        assert got == 24 and member.committed(tb) is None
        segments = _actions(conn.retention_plan("t"), "segment")
        assert set(segments) == {(0, 0), (0, 8), (0, 16)}
        assert segments[(0, 0)] == (
            "keep",
            "consumer group reader (live members) has committed no offset for this bucket",
        )
        assert all(action == "keep" for action, _ in segments.values())
        report = conn.run_retention("t")
        assert not [i for i in report.deleted if i.kind == "segment"]
        assert table.beginning_offsets()[tb] == 0
        member.commit()
        report = conn.run_retention("t")
        assert sorted(i.item_id for i in report.deleted if i.kind == "segment") == [0, 8, 16]
        assert table.beginning_offsets()[tb] == 24
