"""Retention of a compacted log (R8): the files a merge replaced stay for readers that listed
them until their record is older than orphan.min-age, then go, files first and the record after
(R4, R6, R7); a merged segment goes by the rules of every segment (R3); and a merge between a
plan and its deletions never loses a record."""

from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta

import pytest

import leasekit as lk
import leasekit.log.segments as segments
import leasekit.retention.apply as reclaim
from leasekit import testing
from leasekit.log.segments import list_segments
from leasekit.zk.formats import RetiredRecord, SnapshotRecord
from leasekit.zk.ops import Create, Delete, SetData

TB = lk.TableBucket
ROWS = 10
WHEN = r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC"


def _table(conn, appends: int = 4, buckets: int = 1, **properties):
    """A table whose buckets each hold ``appends`` segments (ids in order: bucket 0 of a
    one-bucket table holds ids 0, 1, ... at offsets 0, 1, ...)."""
    table = conn.create_table("t", "id BIGINT", "id", buckets=buckets, properties=properties)
    size = ROWS * buckets
    for k in range(appends):
        table.append([{"id": i} for i in range(k * size, (k + 1) * size)])
    return table


def _compacted(conn, appends: int = 4, **properties):
    """A one-bucket ``_table`` whose log was then merged: the table and the replaced segments."""
    table = _table(conn, appends, **properties)
    old = list_segments(table, [0])[0]
    result = table.compact_log()
    assert (result.merged, result.written) == (appends, 1)
    return table, old


def _records(conn, table, bucket: int = 0) -> list[str]:
    ctx = testing.context(conn)
    return ctx.store.children(ctx.paths.retired(table.table_id, bucket)) or []


def _replaced(plan) -> dict[str, tuple[str, str, int]]:
    return {
        i.item_id: (i.action, i.reason, i.size_bytes)
        for i in plan.items
        if i.kind == "orphan" and i.reason.startswith("replaced by merged segment")
    }


def _consume(conn, total: int, **poll) -> list[tuple[int, int]]:
    """(offset, id) of every record of bucket 0 of "t" a consumer reads from offset 0."""
    got: list[tuple[int, int]] = []
    with conn.consumer("t", auto_offset_reset="earliest") as reader:
        deadline = time.monotonic() + 20
        while len(got) < total and time.monotonic() < deadline:
            for data in reader.poll(timeout="1s", **poll).values():
                got += zip(data.column("_offset").to_pylist(), data.column("id").to_pylist())
    return got


def _snapshot_at(conn, table, snapshot_id: int, log_offset: int) -> None:
    """A snapshot of bucket 0 at ``log_offset`` (a record with no file: retention reads only
    its offset)."""
    ctx = testing.context(conn)
    path = ctx.paths.snapshot(table.table_id, 0, snapshot_id)
    ctx.store.commit([Create(path, SnapshotRecord(log_offset, 0, 0, ()).encode())])


def test_replaced_files_stay_until_orphan_min_age_then_go_with_their_record(conn, clock):
    # R4, R6, R8: one item per merge, named by its first replaced file and holding the bytes
    # of all of them, kept for readers while the merge is younger than orphan.min-age, then
    # deleted with its record; the log reads whole
    table, old = _compacted(conn)
    files = [s.file for s in old]  # by offset: the first names the merge's item
    plan = conn.retention_plan()
    replaced = _replaced(plan)
    assert list(replaced) == [files[0]]
    assert replaced[files[0]][2] == sum(s.size_bytes for s in old)
    kept = re.fullmatch(
        rf"replaced by merged segment \[0, 40\) at {WHEN}, with 3 other files of that merge; "
        rf"kept until {WHEN} for readers that listed them \(orphan.min-age 1h\)",
        replaced[files[0]][1],
    )
    assert kept and replaced[files[0]][0] == "keep"
    at, until = (datetime.fromisoformat(t) for t in kept.groups())
    assert until - at == timedelta(hours=1)
    assert all(i.table_bucket == TB("t", 0) for i in plan.items if i.item_id in replaced)
    assert not [i for i in conn.run_retention().deleted if i.item_id in replaced]
    assert all(os.path.exists(f) for f in files) and len(_records(conn, table)) == 1

    clock.advance(3_600 + 1)
    reason = _replaced(conn.retention_plan())[files[0]][:2]
    assert reason == (
        "delete",
        f"replaced by merged segment [0, 40) at {kept.group(1)} UTC, with 3 other files of that "
        "merge; orphan.min-age 1h has passed",
    )
    report = conn.run_retention()
    assert [i.item_id for i in report.deleted if i.kind == "orphan"] == [files[0]]
    assert not any(os.path.exists(f) for f in files)
    assert _records(conn, table) == [] and report.errors == []
    assert _consume(conn, 40) == [(i, i) for i in range(40)]
    assert _replaced(conn.retention_plan()) == {} and conn.run_retention().deleted == []


def test_a_merged_segment_goes_by_the_segment_rules_and_its_replaced_files_by_their_record(conn):
    # R3, R8: a merged segment's time is its last record's; it goes once wholly below the
    # oldest kept snapshot and older than log.retention, like any segment, and the files it
    # replaced go by their record, not as orphans
    table = _table(conn, 1, **{"log.retention": "2s"})
    time.sleep(2.2)  # the first segment is past log.retention, the merged one will not be
    for k in range(1, 4):
        table.append([{"id": i} for i in range(k * ROWS, (k + 1) * ROWS)])
    replaced = [s.file for s in list_segments(table, [0])[0]]
    assert table.compact_log().written == 1
    conn.update_settings({"orphan.min-age": "0s"})
    _snapshot_at(conn, table, 1, 20)
    segment = [i for i in conn.retention_plan().items if i.kind == "segment"]
    assert [(i.item_id, i.action, i.reason) for i in segment] == [
        (0, "keep", "needed: log tail of kept snapshot 1")
    ]
    ctx = testing.context(conn)
    ctx.store.commit([Delete(ctx.paths.snapshot(table.table_id, 0, 1))])
    _snapshot_at(conn, table, 2, 40)
    segment = [i for i in conn.retention_plan().items if i.kind == "segment"]
    assert [(i.action, i.reason) for i in segment] == [("keep", "within log.retention 2s (age 0s)")]
    time.sleep(2.2)
    report = conn.run_retention()
    segment = [i for i in report.deleted if i.kind == "segment"]
    assert [i.item_id for i in segment] == [0]
    assert re.fullmatch(
        r"below log start of snapshot 2; older than log.retention 2s \(age \ds\)", segment[0].reason
    )
    gone = [(i.item_id, i.reason) for i in report.deleted if i.kind == "orphan"]
    at = re.escape("replaced by merged segment [0, 40) at ") + WHEN
    assert [f for f, _ in gone] == replaced[:1]
    assert re.fullmatch(f"{at}, with 3 other files of that merge; orphan.min-age 0ms has passed",
                        gone[0][1])  # fmt: skip
    assert not any(os.path.exists(f) for f in replaced)
    assert _records(conn, table) == [] and list_segments(table, [0])[0] == []
    assert table.beginning_offsets()[TB("t", 0)] == 40


def test_a_consumer_that_listed_the_replaced_segments_reads_on_after_they_go(conn):
    # R8, C5: with orphan.min-age 0s a pass deletes the replaced files at once; a consumer
    # whose index still names them finds each missing, lists the log again and reads the
    # merged segment from its position: every record once, in order
    conn.update_settings({"orphan.min-age": "0s"})
    table = _table(conn, 6)
    old = [s.file for s in list_segments(table, [0])[0]]
    got: list[tuple[int, int]] = []
    with conn.consumer("t", auto_offset_reset="earliest") as reader:
        while len(got) < 5:
            for data in reader.poll(timeout="5s", max_records=5).values():
                got += zip(data.column("_offset").to_pylist(), data.column("id").to_pylist())
        assert table.compact_log().written == 1
        report = conn.run_retention()
        assert not any(os.path.exists(f) for f in old)
        deleted = [i for i in report.deleted if i.kind == "orphan"]
        assert [i.item_id for i in deleted] == old[:1]  # one item per merge
        assert all(i.reason.startswith("replaced by merged segment [0, 60) at") for i in deleted)
        deadline = time.monotonic() + 20
        while len(got) < 60 and time.monotonic() < deadline:
            for data in reader.poll(timeout="1s", max_records=7).values():
                got += zip(data.column("_offset").to_pylist(), data.column("id").to_pylist())
    assert got == [(i, i) for i in range(60)]


def test_the_orphan_sweep_leaves_replaced_files_alone_during_their_grace(conn):
    # R4, R8: the files a merge replaced are named by its record: however old the files are,
    # the sweep never takes them for orphans while the record keeps them
    table, old = _compacted(conn)
    files = [s.file for s in old]
    hours_ago = time.time() - 2 * 3_600
    for f in files:
        os.utime(f, (hours_ago, hours_ago))
    plan = conn.retention_plan()
    assert {i.item_id: i.action for i in plan.items if i.kind == "orphan"} == {files[0]: "keep"}
    assert all("no metadata references it" not in i.reason for i in plan.items)
    conn.run_retention()
    assert all(os.path.exists(f) for f in files) and len(_records(conn, table)) == 1
    assert _consume(conn, 40) == [(i, i) for i in range(40)]


@pytest.mark.parametrize("corruption", ["garbage", "outside the table"])
def test_a_corrupt_retired_record_is_skipped_and_reported_and_the_pass_goes_on(conn, corruption):
    # R4, R6, R8: the unreadable record is said, its table's files are kept (it may name any
    # of them), and the other tables' replaced files go as planned; a record naming a file
    # outside its table's directory (here the other table's live segment) never deletes it
    table, old = _compacted(conn)
    ctx = testing.context(conn)
    other = conn.create_table("u", "id BIGINT", "id", buckets=1)
    for k in range(4):
        other.append([{"id": i} for i in range(k * ROWS, (k + 1) * ROWS)])
    theirs = [s.file for s in list_segments(other, [0])[0]]
    assert other.compact_log().written == 1
    live = list_segments(other, [0])[0][0].file
    path = f"{ctx.paths.retired(table.table_id, 0)}/{_records(conn, table)[0]}"
    rec = RetiredRecord.decode(ctx.store.get(path).data, path)
    bad = (
        b"\x93not a record"
        if corruption == "garbage"
        else rec._replace(files=(*rec.files, ctx.warehouse.relative(live))).encode()
    )
    ctx.store.commit([SetData(path, bad)])
    conn.update_settings({"orphan.min-age": "0s"})
    plan = conn.retention_plan()
    assert any(path in s for s in plan.skipped)
    report = conn.run_retention()
    assert any(path in e for e in report.errors)
    assert [i.item_id for i in report.deleted if i.kind == "orphan"] == theirs[:1]
    assert not any(os.path.exists(f) for f in theirs) and _records(conn, other) == []
    assert all(os.path.exists(s.file) for s in old) and len(_records(conn, table)) == 1
    assert os.path.exists(live)


def test_a_merge_between_the_plan_and_the_deletion_keeps_the_merged_segment(conn, monkeypatch):
    # R3, R8: the plan deletes segments [0, 10) and [10, 20), below snapshot 1 at offset 20; a
    # merge then replaces all four segments by [0, 40) at base 0; deleting "the segment at
    # base 0" would lose records 20-39, above the snapshot: it stays, and so does the log
    table = _table(conn, 4, **{"log.retention": "0s"})
    _snapshot_at(conn, table, 1, 20)
    real_plan = reclaim.plan

    def plan_then_merge(meta):
        result = real_plan(meta)
        assert sorted(i.item_id for i in result.deletes if i.kind == "segment") == [0, 10]
        assert table.compact_log().written == 1
        return result

    monkeypatch.setattr(reclaim, "plan", plan_then_merge)
    report = conn.run_retention()
    monkeypatch.undo()
    assert [(s.base_offset, s.end_offset) for s in list_segments(table, [0])[0]] == [(0, 40)]
    assert table.beginning_offsets()[TB("t", 0)] == 0
    assert _consume(conn, 40) == [(i, i) for i in range(40)]
    assert not [i for i in report.deleted if i.kind == "segment"]
    assert sum("replaced by a merge" in e for e in report.errors) == 2
    report = conn.run_retention()  # the next plan sees the merged segment: it needs it
    assert not [i for i in report.deleted if i.kind == "segment"]


def test_a_merge_between_the_read_and_the_commit_of_the_deletion_keeps_the_merged_segment(
    conn, monkeypatch
):
    # R3, R8: the merge comes after the deletion read the segments, before its transaction:
    # the transaction finds segment 10 gone, the deletion reads again and keeps the merged one
    table = _table(conn, 4, **{"log.retention": "0s"})
    _snapshot_at(conn, table, 1, 20)
    real_plan, real_decode = reclaim.plan, segments.decode_segment
    merged: list[int] = []

    def decode_then_merge(*args):
        record = real_decode(*args)
        if not merged:
            merged.append(0)  # once: the merge lists the segments through here too
            merged[0] = table.compact_log().written
        return record

    def plan_then_hook(meta):
        monkeypatch.setattr(segments, "decode_segment", decode_then_merge)
        return real_plan(meta)

    monkeypatch.setattr(reclaim, "plan", plan_then_hook)
    report = conn.run_retention()
    monkeypatch.undo()
    assert merged == [1]
    assert [(s.base_offset, s.end_offset) for s in list_segments(table, [0])[0]] == [(0, 40)]
    assert _consume(conn, 40) == [(i, i) for i in range(40)]
    assert [e for e in report.errors if "replaced by a merge" not in e] == []
    assert sum("replaced by a merge" in e for e in report.errors) == 2


class _Killed(BaseException):
    """The process dying at that point."""


def test_a_pass_killed_between_the_files_and_the_record_is_finished_by_the_next(conn, monkeypatch):
    # R7, R8: files first, then the record; killed in between, the record still names the
    # (now missing) files, the next plan deletes them again and the next pass drops the record
    table, old = _compacted(conn)
    files = [s.file for s in old]
    conn.update_settings({"orphan.min-age": "0s"})

    def killed(*args):
        raise _Killed

    monkeypatch.setattr(reclaim, "_forget_retired", killed)
    with pytest.raises(_Killed):
        conn.run_retention()
    monkeypatch.undo()
    assert not any(os.path.exists(f) for f in files) and len(_records(conn, table)) == 1
    assert {a for a, _, _ in _replaced(conn.retention_plan()).values()} == {"delete"}
    report = conn.run_retention()
    assert [i.item_id for i in report.deleted if i.kind == "orphan"] == files[:1]
    assert report.errors == [] and _records(conn, table) == []
    assert _consume(conn, 40) == [(i, i) for i in range(40)]


def test_only_buckets_a_merge_touched_are_read_and_unchanged_records_are_not_read_again(conn):
    # R8, B6: a bucket never compacted costs no read of retired files; a compacted one's
    # records are read once, then only its directory's stat while it is unchanged
    table = _table(conn, 4, buckets=2)
    assert table.compact_log(0).written == 1
    store, paths = testing.context(conn).store, testing.context(conn).paths
    with store.recording() as first:
        conn.retention_plan()
    with store.recording() as second:
        conn.retention_plan()
    retired = [paths.retired(table.table_id, b) for b in (0, 1)]
    record = f"{retired[0]}/{_records(conn, table)[0]}"
    assert {retired[0], record} <= first.data and retired[0] in first.children
    assert not any(p.startswith(retired[1]) for p in first.data | first.children)
    assert retired[0] in second.data
    assert record not in second.data and retired[0] not in second.children
