"""Reading the log by offset range (C1): exactly the records asked for, with
``_offset``, ``_timestamp`` (ms, UTC) and ``_op`` before the table's columns, decoding only
the row groups that hold them; a segment deleted by retention is reported, not a crash."""

from __future__ import annotations

import pyarrow as pa
import pytest

import leasekit as lk
from leasekit import testing
from leasekit.log import reader as lkreader
from leasekit.log.segments import ROW_GROUP_RECORDS, list_segments


@pytest.fixture
def table(conn):
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    table.append(
        pa.table(
            {"id": pa.array(range(150_000), pa.int64()), "v": [f"a{i}" for i in range(150_000)]}
        )
    )
    table.delete([{"id": 7}])
    return table


def test_reads_exactly_the_range_asked_for(table):
    # C1: offsets are dense and each read returns [start, start + n) of the bucket
    segments = list_segments(table, [0])[0]
    assert [(s.base_offset, s.end_offset) for s in segments] == [(0, 150_000), (150_000, 150_001)]
    reader = lkreader.SegmentReader(table)
    try:
        for start, n in [(0, 10), (65_530, 20), (ROW_GROUP_RECORDS * 2 - 1, 5), (149_990, 100)]:
            seg = lkreader.find_segment(segments, start)
            got = reader.read(seg, start, n)
            want = list(range(start, min(start + n, seg.end_offset)))
            assert got.column("_offset").to_pylist() == want
            assert got.column("id").to_pylist() == want
            assert got.column("v").to_pylist() == [f"a{i}" for i in want]
            assert set(got.column("_op").to_pylist()) == {"upsert"}
        assert got.schema.names == ["_offset", "_timestamp", "_op", "id", "v"]
        assert got.schema.field("_timestamp").type == pa.timestamp("ms", tz="UTC")
        assert got.column("_timestamp").cast(pa.int64()).to_pylist()[0] == segments[0].timestamp_ms
        last = reader.read(segments[1], 150_000, 10)
        assert last.to_pylist()[0]["_op"] == "delete" and last.to_pylist()[0]["id"] == 7
        assert lkreader.find_segment(segments, 150_001) is None
    finally:
        reader.close()


def test_segment_files_have_row_groups_a_read_can_skip(table):
    import pyarrow.parquet as pq

    seg = list_segments(table, [0])[0][0]
    assert (
        pq.ParquetFile(seg.file).metadata.num_row_groups == 3
    )  # 150,000 records in groups of 65,536


def test_a_segment_deleted_under_the_reader_is_reported(conn, table):
    # docs/consumers.md: a segment deleted by retention gives
    # SegmentGone (the consumer applies its reset policy)
    ctx = testing.context(conn)
    segments = list_segments(table, [0])[0]
    reader = lkreader.SegmentReader(table)
    ctx.warehouse.delete_files([ctx.warehouse.relative(segments[0].file)])
    with pytest.raises(lkreader.SegmentGone, match="deleted"):
        reader.read(segments[0], 0, 10)
    assert isinstance(lkreader.SegmentGone("x"), lk.IllegalStateError)


def test_a_sequential_read_decodes_each_row_group_once_and_keeps_none_it_finished(
    table, monkeypatch
):
    # bounded caching (docs/consumers.md): a reader going through a segment in small steps decodes
    # each row group once, and drops a group as soon as a read reached its end
    import pyarrow.parquet as pq

    decoded = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, i, **kw: decoded.append(i) or real(self, i, **kw),
    )
    seg = list_segments(table, [0])[0][0]
    reader = lkreader.SegmentReader(table)
    try:
        got = []
        for start in range(0, 150_000, 10_000):
            got.extend(reader.read(seg, start, 10_000).column("_offset").to_pylist())
        assert got == list(range(150_000))
        assert decoded == [0, 1, 2]
        assert reader._cached_bytes == 0  # every group was read to its end
    finally:
        reader.close()


def test_a_read_ahead_decodes_the_next_segment_once_on_its_own_thread(conn, table, monkeypatch):
    # docs/consumers.md: a consumer catching up has the next segment's row group decoded meanwhile;
    # the read that comes to it uses that decode (never decodes it twice), and a segment deleted
    # under a read ahead is still reported by the read itself
    import threading

    import pyarrow.parquet as pq

    decoded: list[tuple[int, str]] = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, i, **kw: (
            decoded.append((self.metadata.num_rows, threading.current_thread().name))
            or real(self, i, **kw)
        ),
    )
    first, second = list_segments(table, [0])[0]
    reader = lkreader.SegmentReader(table)
    try:
        reader.ahead(second, second.base_offset)
        reader.ahead(second, second.base_offset)  # asked again while under way: nothing more
        got = reader.read(second, second.base_offset, 10)
        assert got.column("id").to_pylist() == [7]
        assert [(n, name.startswith("leasekit-read-ahead")) for n, name in decoded] == [(1, True)]
    finally:
        reader.close()
    ctx = testing.context(conn)
    gone = lkreader.SegmentReader(table)
    try:
        ctx.warehouse.delete_files([ctx.warehouse.relative(first.file)])
        gone.ahead(first, 0)  # fails on its thread, quietly
        with pytest.raises(lkreader.SegmentGone, match="deleted"):
            gone.read(first, 0, 10)
        gone.ahead(second, second.base_offset)
    finally:
        gone.close()  # with a read ahead possibly under way
    gone.ahead(second, second.base_offset)  # closed: nothing starts
    assert gone._ahead is None and not gone._pending
