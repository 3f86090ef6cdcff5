"""Retention of a compacted log (R8): a merge between a plan and its deletions never loses a
record (R3)."""

from __future__ import annotations

import time

import leasekit as lk
import leasekit.retention.apply as reclaim
from leasekit import testing
from leasekit.log.segments import list_segments
from leasekit.zk.formats import SnapshotRecord
from leasekit.zk.ops import Create

TB = lk.TableBucket
ROWS = 10


def _table(conn, appends: int = 4, buckets: int = 1, **properties):
    """A table whose buckets each hold ``appends`` segments (ids in order: bucket 0 of a
    one-bucket table holds ids 0, 1, ... at offsets 0, 1, ...)."""
    table = conn.create_table("t", "id BIGINT", "id", buckets=buckets, properties=properties)
    size = ROWS * buckets
    for k in range(appends):
        table.append([{"id": i} for i in range(k * size, (k + 1) * size)])
    return table


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
