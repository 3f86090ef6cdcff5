"""Log compaction (R8): which runs merge, what a merge keeps, what it reports, its errors and the
metadata it writes."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from helpers import read_log, run_cli, run_cli_json

import leasekit as lk
from leasekit import janitor, testing
from leasekit.errors import (
    BucketNotFoundError,
    CorruptMetadataError,
    InvalidArgumentError,
    InvalidTypeError,
)
from leasekit.log.compaction import plan_runs
from leasekit.log.segments import list_segments
from leasekit.structs import LogSegment, TableBucket
from leasekit.zk.formats import RetiredRecord, SegmentRecord

TB = TableBucket("t", 0)


def _segs(*sizes: int, rows: int = 10) -> list[LogSegment]:
    """Adjacent segments of ``sizes`` bytes, ``rows`` records each."""
    return [
        LogSegment(TB, i * rows, (i + 1) * rows, 1000 + i, size, f"/w/{i}.parquet")
        for i, size in enumerate(sizes)
    ]


def _sizes(runs: list[list[LogSegment]]) -> list[list[int]]:
    return [[s.size_bytes for s in run] for run in runs]


def test_plan_merges_small_adjacent_segments_within_the_target():
    # R8: adjacent, each below the target, together at most the target, at least min-merge
    assert _sizes(plan_runs(_segs(*[10] * 10), 1000, 4)) == [[10] * 10]
    assert _sizes(plan_runs(_segs(*[10] * 10), 45, 4)) == [[10] * 4, [10] * 4]
    assert plan_runs(_segs(10, 10, 10), 1000, 4) == []  # fewer than min-merge
    assert plan_runs(_segs(*[10] * 10), 1000, 4, max_run=3) == []


def test_plan_never_rewrites_a_large_segment_for_a_few_small_ones():
    # R8: the largest segment of a run is at most the others together, so a record is
    # rewritten only into a segment at least twice as large (log2 rewrites in all)
    assert _sizes(plan_runs(_segs(100, 10, 10, 10, 10), 1000, 4)) == [[10] * 4]
    assert _sizes(plan_runs(_segs(40, 10, 10, 10, 10), 1000, 4)) == [[40, 10, 10, 10, 10]]
    assert _sizes(plan_runs(_segs(1000, 10, 10, 10), 1000, 2)) == [[10, 10, 10]]
    # a segment at the target splits the runs around it
    assert _sizes(plan_runs(_segs(10, 10, 2000, 10, 10), 1000, 2)) == [[10, 10], [10, 10]]


def test_plan_bounds_rewrites_under_steady_appends():
    # R8: appends of one small segment at a time, a merge after each: every record is
    # rewritten at most log2(target / size) + 1 times, and few segments stay
    target, size = 1 << 16, 16
    segs: list[tuple[int, int]] = []  # (size, times its records were rewritten)
    worst = 0
    for _ in range(3000):
        segs.append((size, 0))
        ls = _segs(*[s for s, _ in segs])
        for run in reversed(plan_runs(ls, target, 2)):
            first = run[0].base_offset // 10
            merged = segs[first : first + len(run)]
            rewrites = max(r for _, r in merged) + 1
            worst = max(worst, rewrites)
            segs[first : first + len(run)] = [(sum(s for s, _ in merged), rewrites)]
    assert worst <= 12 + 1  # log2(65536 / 16) = 12
    assert len(segs) <= 2 * 12 + 2


def _small_appends(table, n: int, rows: int = 5) -> list[dict]:
    written = []
    for i in range(n):
        batch = [{"id": i * rows + j, "v": f"r{i}"} for j in range(rows)]
        table.append(batch)
        written += batch
    return written


def test_compact_keeps_every_record_offset_timestamp_and_op(conn):
    # R8
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    _small_appends(table, 12)
    table.delete([{"id": 3}, {"id": 7}])
    _small_appends(table, 3)
    before = read_log(table)
    count = sum(len(s) for s in list_segments(table, [0, 1]).values())
    done = table.compact_log()
    assert isinstance(done, lk.LogCompaction) and done.table == "t"
    assert done.written == 2 and done.lost == 0 and done.merged == count
    assert done.records == sum(len(rows) for rows in before.values())
    assert done.segments == {TableBucket("t", 0): 1, TableBucket("t", 1): 1}
    assert done.bytes_written < done.bytes_read
    assert read_log(table) == before  # offsets, timestamps, ops and values, in order
    assert {r["_op"] for rows in read_log(table).values() for r in rows} == {"upsert", "delete"}
    # every later append goes on after the merged segment
    _small_appends(table, 1)
    assert sum(table.end_offsets().values()) == done.records + 5


def test_compact_again_finds_nothing_and_a_bucket_can_be_chosen(conn):
    # R8
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    _small_appends(table, 8)
    one = table.compact_log(1)
    assert set(one.segments) == {TableBucket("t", 1)} and one.written == 1
    assert len(list_segments(table, [0])[0]) == 8  # bucket 0 untouched
    assert table.compact_log(TableBucket("t", 0)).written == 1
    again = table.compact_log()
    assert (again.merged, again.written, again.lost) == (0, 0, 0)
    assert again.segments == {TableBucket("t", 0): 1, TableBucket("t", 1): 1}


def test_compact_rejects_bad_buckets(conn):
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    with pytest.raises(BucketNotFoundError):
        table.compact_log(5)
    with pytest.raises(InvalidTypeError):
        table.compact_log("0")
    with pytest.raises(InvalidArgumentError):
        table.compact_log(TableBucket("other", 0))


def test_properties_are_checked(conn):
    for bad in ({"log.segment.min-merge": 1}, {"log.segment.target-bytes": 0},
                {"log.segment.min-merge": "x"}):  # fmt: skip
        with pytest.raises(InvalidArgumentError):
            conn.create_table("t", "id BIGINT", "id", properties=bad)
    table = conn.create_table("t", "id BIGINT", "id", buckets=1,
                              properties={"log.segment.min-merge": 10})  # fmt: skip
    assert table.properties["log.segment.target-bytes"] == 16 * 1024 * 1024
    for i in range(9):
        table.append([{"id": i}])
    assert table.compact_log().written == 0  # 9 segments: fewer than min-merge
    table.append([{"id": 9}])
    assert table.compact_log().written == 1


def test_a_sealed_bucket_is_merged_and_keeps_its_seal(conn):
    # R8, K1: a sealed log is merged like any other; its seal offset does not move
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    _small_appends(table, 6)
    table.split_bucket(0)
    _small_appends(table, 2)
    before = read_log(table)
    done = table.compact_log(0)
    assert done.written == 1 and done.segments == {TableBucket("t", 0): 1}
    assert read_log(table) == before
    lineage = {b.table_bucket.bucket: b for b in table.lineage()}
    assert lineage[0].state == "sealed" and lineage[0].sealed_at == 30


def test_the_swap_records_the_replaced_files_for_readers(conn):
    # R8: one merge, one record of the files it replaced, created in the same transaction
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    _small_appends(table, 5)
    old = list_segments(table, [0])[0]
    table.compact_log()
    ctx = testing.context(conn)
    retired_dir = ctx.paths.retired(table.table_id, 0)
    names = ctx.store.children(retired_dir)
    assert len(names) == 1 and names[0].startswith("0" * 20 + "-")
    node = ctx.store.get(f"{retired_dir}/{names[0]}")
    rec = RetiredRecord.decode(node.data, names[0])
    assert rec.files == tuple(ctx.warehouse.relative(s.file) for s in old)
    assert (rec.base, rec.end) == (0, 25) and rec.size == sum(s.size_bytes for s in old)
    merged = list_segments(table, [0])[0][0]
    assert ctx.warehouse.relative(merged.file) == rec.merged
    assert merged.first_timestamp_ms == old[0].timestamp_ms
    assert merged.timestamp_ms == old[-1].timestamp_ms
    for s in old:  # still there for readers that listed them
        assert ctx.warehouse.exists(ctx.warehouse.relative(s.file))


@pytest.mark.parametrize(
    "value",
    [
        {"v": 2, "f": "a.parquet", "n": 3, "s": 10, "t": 5, "m": [9, 4]},
        {"v": 2, "f": "a.parquet", "n": 3, "s": 10, "t": 5, "m": [-1, 4]},
        {"v": 2, "f": "a.parquet", "n": 3, "s": 10, "t": 5},
        {"v": 2, "f": "a.parquet", "n": -3, "s": 10, "t": 5, "m": [1, 4]},
        {"v": 3, "f": "a.parquet", "n": 3, "s": 10, "t": 5, "m": [1, 4]},
        {"v": True, "f": "a.parquet", "n": 3, "s": 10, "t": 5},
    ],
)
def test_hostile_segment_records_are_corrupt_metadata(value):
    import msgpack

    with pytest.raises(CorruptMetadataError) as err:
        SegmentRecord.decode(msgpack.packb(value), "/ns/data/x/0/log/0")
    assert err.value.path == "/ns/data/x/0/log/0"


def test_segment_records_round_trip():
    plain = SegmentRecord("a.parquet", 3, 10, 5)
    merged = SegmentRecord("b.parquet", 30, 100, 9, (5, 9))
    for rec in (plain, merged):
        assert SegmentRecord.decode(rec.encode(), "p") == rec
    assert plain.last_stamp(7) == 7 and merged.last_stamp(100) == 9


def test_janitor_pass_merges_and_reports(conn, caplog):
    # R8: the janitor merges every table's small segments each pass, before retention
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    _small_appends(table, 6)
    before = read_log(table)
    count = sum(len(s) for s in list_segments(table, [0, 1]).values())
    with caplog.at_level("INFO", logger="leasekit.janitor"):
        report = janitor.run_once(conn)
    assert [(c.table, c.written) for c in report.compacted] == [("t", 2)]
    assert read_log(table) == before
    assert any(f"merged {count} segments into 2" in r.getMessage() for r in caplog.records)
    assert janitor.run_once(conn).compacted == []


def test_cli_table_compact(conn, target, capsys):
    # R8
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    _small_appends(table, 8)
    counts = {b: len(s) for b, s in list_segments(table, [0, 1]).items()}
    code, out, _ = run_cli(capsys, *target, "table", "compact", "t", "--bucket", "0")
    assert code == 0
    assert out.startswith(f"merged {counts[0]} segments of t into 1 (")
    assert "its buckets now hold 1 segment(s) each" in out and "orphan.min-age (1h)" in out
    shown = run_cli_json(capsys, *target, "table", "compact", "t")
    assert (shown["merged"], shown["written"]) == (counts[1], 1)
    assert shown["segments"] == [{"bucket": 0, "segments": 1}, {"bucket": 1, "segments": 1}]
    code, out, _ = run_cli(capsys, *target, "table", "compact", "t")
    assert (
        out.strip() == "no run of small segments to merge in t (its buckets hold 1 segment(s) each)"
    )
    code, _, err = run_cli(capsys, *target, "table", "compact", "t", "--bucket", "9")
    assert code == 2 and "not 9" in err


def test_cli_janitor_once(conn, target, capsys):
    # R7, R8: one pass as the elected janitor, then exit
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    _small_appends(table, 5)
    code, out, _ = run_cli(capsys, *target, "janitor", "--once", "--interval", "1s")
    assert code == 0
    assert out.startswith("one janitor pass: merged 5 log segments into 1; retention deleted")
    assert len(list_segments(table, [0])[0]) == 1
    shown = run_cli_json(capsys, *target, "janitor", "--once")
    assert shown["segments_merged"] == 0 and shown["errors"] == []


def test_merged_file_has_each_records_timestamp(conn):
    # R8, W3: the merged file's _timestamp column holds the records' commit times in order
    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    for i in range(6):
        table.append([{"id": i}])
    stamps = [s.timestamp_ms for s in list_segments(table, [0])[0]]
    table.compact_log()
    merged = list_segments(table, [0])[0][0]
    data = pq.read_table(merged.file)
    assert data.column("_timestamp").to_pylist() == stamps
    assert data.column("_op").to_pylist() == ["upsert"] * 6
