"""Every reader of record timestamps gives the same answers after a log compaction as before
(R8, W3): the Spark log frames (``read_changes``, ``read_at``), ``offsets_for_times``, resets
by time, the time lag of ``describe_group`` and of the readings of every group, and the lag
history. A merged segment's records keep their own timestamps in its file; these readers find
them there, reading only the row groups that hold them."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone

import pandas as pd
import pytest

import leasekit as lk
import leasekit.spark as lks
from leasekit import testing
from leasekit.log import compaction, stamps
from leasekit.log.reader import SegmentGone
from leasekit.log.segments import list_segments
from leasekit.monitor.lag import history
from leasekit.monitor.lag.readings import read_all_groups

TB = lk.TableBucket
APPENDS = 32


@pytest.fixture
def events(conn):
    """A table of two buckets whose log is 32 appends of a few rows (some deletes), each
    committed at a later time than the one before."""
    table = conn.create_table("events", "id BIGINT, v STRING", "id", buckets=2)
    for i in range(APPENDS):
        table.append([{"id": 3 * i + j, "v": f"v{i}.{j}"} for j in range(3)])
        if i % 5 == 4:
            table.delete([{"id": 3 * i}])
        time.sleep(0.004)
    return table


@pytest.fixture(autouse=True)
def _cold_cache():
    stamps.clear_cache()
    yield
    stamps.clear_cache()


def _compact(table):
    before = list_segments(table, range(2))
    result = table.compact_log()
    assert result.written >= 1
    after = list_segments(table, range(2))
    merged = [s for b in range(2) for s in after[b] if s.first_timestamp_ms is not None]
    assert merged and all(s.first_timestamp_ms < s.timestamp_ms for s in merged)
    return before, after


def _stamp_points(segments):
    """Times to look offsets up by: each appended segment's commit time, a millisecond either
    side of it, and times before and after the whole log."""
    times = {0, 2**62}
    for segs in segments.values():
        for s in segs:
            times |= {s.timestamp_ms - 1, s.timestamp_ms, s.timestamp_ms + 1}
    return sorted(times)


def test_read_changes_and_read_at_give_the_same_records_after_a_compaction(spark, events):
    # R8: every record keeps its offset, timestamp and op; W3: timestamps never go down
    def changes():
        df = lks.read_changes(spark, events, "etl").df
        rows = df.orderBy("_bucket", "_offset").collect()
        return [(r._bucket, r._offset, r._timestamp, r._op, r.id, r.v) for r in rows]

    middle = {TB("events", b): e // 2 for b, e in enumerate(events.end_offsets().values())}

    def state():
        return sorted(tuple(r) for r in lks.read_at(spark, events, middle).collect())

    records, rows = changes(), state()
    assert len({r[2] for r in records}) > APPENDS // 2  # the records span many timestamps
    _compact(events)
    assert changes() == records
    assert state() == rows
    for bucket in range(2):  # W3
        stamped = [r[2] for r in records if r[0] == bucket]
        assert stamped == sorted(stamped)


def test_offsets_for_times_are_the_same_after_a_compaction(conn, events):
    # C7: the earliest offset whose timestamp is at or after the time, also inside a merged
    # segment (found in its file's timestamps)
    tbs = [TB("events", b) for b in range(2)]
    times = _stamp_points(list_segments(events, range(2)))

    def lookups():
        with conn.consumer(events) as consumer:
            return [consumer.offsets_for_times(dict.fromkeys(tbs, t)) for t in times]

    found = lookups()
    assert len({tuple(f.values()) for f in found}) > APPENDS // 2
    _, after = _compact(events)
    inside = [
        t
        for t in times
        for s in after[0]
        if s.first_timestamp_ms is not None and s.first_timestamp_ms < t <= s.timestamp_ms
    ]
    assert inside  # some times fall inside a merged segment
    assert lookups() == found


def test_offsets_for_times_of_a_consumer_that_indexed_the_log_before_appends_and_a_compaction(
    conn, events
):
    # C7: the segments a consumer indexed while reading predate the records appended since
    # and the merge; its lookups of their times still find them
    tb = TB("events", 0)
    with conn.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([tb])
        assert consumer.poll("5s")  # the bucket's segments are indexed now
        for i in range(4):
            events.append([{"id": 1000 + 10 * i + j, "v": "late"} for j in range(10)])
            time.sleep(0.004)
        late = list_segments(events, [0])[0][-4:]
        _compact(events)
        got = [consumer.offsets_for_times({tb: s.timestamp_ms}) for s in late]
    assert got == [{tb: s.base_offset} for s in late]


def test_a_merged_segment_is_searched_only_in_the_row_groups_it_needs(conn, events, monkeypatch):
    # R8: a merged file of many row groups (8 records each here) answers a record's timestamp
    # and a search by time from the groups holding them, the same as before the merge
    import pyarrow.parquet as pq

    monkeypatch.setattr(compaction, "ROW_GROUP_RECORDS", 8)
    appended = list_segments(events, [0])[0]
    want = [s.timestamp_ms for s in appended for _ in range(s.base_offset, s.end_offset)]
    _, after = _compact(events)
    seg = next(s for s in after[0] if s.first_timestamp_ms is not None)
    warehouse = testing.context(conn).warehouse
    rel = warehouse.relative(seg.file)
    assert pq.ParquetFile(seg.file).metadata.num_row_groups > 2
    rows = range(seg.end_offset - seg.base_offset)
    assert stamps.record_stamps(warehouse, rel, rows) == want[seg.base_offset : seg.end_offset]
    decoded = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, i, **kw: decoded.append(i) or real(self, i, **kw),
    )
    stamps.clear_cache()
    t = want[seg.base_offset + 20]
    row = stamps.first_at_or_after(warehouse, rel, t)
    assert want[seg.base_offset + row] >= t and (row == 0 or want[seg.base_offset + row - 1] < t)
    assert decoded == [row // 8]  # the row group holding it alone, chosen by its statistics
    assert stamps.first_at_or_after(warehouse, rel, want[seg.end_offset - 1] + 1) is None
    assert stamps.first_at_or_after(warehouse, rel, 0, start=rows[-1]) == rows[-1]


def test_a_reset_by_time_plans_the_same_offsets_after_a_compaction(conn, events):
    # C13: a reset to a datetime moves to the earliest offset whose timestamp is at or after it
    _commit(conn, {TB("events", b): 1 for b in range(2)})
    times = _stamp_points(list_segments(events, range(2)))[1:-1:3]

    def plans():
        return [
            conn.reset_offsets("g", to=datetime.fromtimestamp(t / 1000, timezone.utc))[
                "new_offset"
            ].tolist()
            for t in times
        ]

    planned = plans()
    _compact(events)
    assert plans() == planned


def _commit(conn, offsets, group="g"):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


def test_describe_and_the_readings_give_the_same_time_lag_after_a_compaction(
    conn, events, monkeypatch
):
    # R8: the time lag is measured from the timestamp of the record at the committed offset,
    # here in the middle of a merged run (and at its first and last records)
    ctx = testing.context(conn)
    tb = TB("events", 0)
    end = events.end_offsets()[tb]
    groups = {f"g{o}": o for o in (0, 1, end // 3, end // 2, end - 2, end - 1)}
    for group, offset in groups.items():
        _commit(conn, {tb: offset}, group)
    now = ctx.now_ms()
    monkeypatch.setattr(ctx, "clock", lambda _: now)  # the same "now" before and after

    def lags():
        described = {
            g: conn.describe_group(g).set_index("bucket").loc[0, "time_lag"] for g in groups
        }
        read = {
            r.group: next(b.time_lag_ms for b in r.buckets if b.table_bucket == tb)
            for r in read_all_groups(ctx)
        }
        return described, read

    described, read = lags()
    assert len(set(read.values())) > 3
    _compact(events)
    assert lags() == (described, read)
    assert all(pd.Timedelta(milliseconds=read[g]) == described[g] for g in groups)


def test_a_merged_file_missing_is_reported_as_the_appended_ones_are(conn, events):
    # docs/consumers.md: a segment file missing while the metadata lists it raises
    # DataFileMissingError naming it (an offset lookup that needs it), and describe shows the
    # bucket MISSING; a file retention took is read again from a fresh listing
    tb = TB("events", 0)
    end = events.end_offsets()[tb]
    _commit(conn, {tb: end // 2})
    _, after = _compact(events)
    seg = next(s for s in after[0] if s.first_timestamp_ms is not None)
    middle = (seg.first_timestamp_ms + seg.timestamp_ms) // 2 + 1
    os.remove(seg.file)
    with conn.consumer(events) as consumer, pytest.raises(lk.DataFileMissingError) as caught:
        consumer.offsets_for_times({tb: middle})
    assert caught.value.bucket == tb and caught.value.file == seg.file
    with pytest.raises(lk.DataFileMissingError):
        conn.reset_offsets("g", to=datetime.fromtimestamp(middle / 1000, timezone.utc))
    described = conn.describe_group("g").set_index("bucket")
    assert described.loc[0, "status"] == "MISSING"
    warehouse = testing.context(conn).warehouse
    with pytest.raises(SegmentGone):
        stamps.first_at_or_after(warehouse, warehouse.relative(seg.file), middle)
    gone = [seg]
    later = stamps.offset_for_time(warehouse, gone, middle, 0, lambda: [])
    assert later is None  # no longer listed: retention's doing, the fresh listing answers


def test_the_lag_history_reads_the_same_samples_after_a_compaction(conn, monkeypatch):
    # M1: history segments are picked by commit time; a merged one holds the appends committed
    # from its first record's timestamp to its last's, and the samples are filtered by time
    monkeypatch.setattr(history, "COMMIT_SLACK_MS", 0)  # windows ending inside a merged run
    ctx = testing.context(conn)
    taken = []
    for i in range(12):
        at = ctx.now_ms()  # a sample's time: before its commit, after the one before it
        taken.append(at)
        history.append_rows(ctx, [history.HistoryRow(at, "g", "t", 0, i, 20, 20 - i, 5 * i)])
        time.sleep(0.005)
    table = history.history_table(ctx)
    spans = [(0, 11), (2, 5), (3, 9), (6, 6), (0, 4), (10, 11)]
    windows = [(taken[a], taken[b + 1] - 1 if b < 11 else taken[b] + 10**6) for a, b in spans]
    windows.append((taken[-1] + 10**6, taken[-1] + 2 * 10**6))

    def reads():
        out = []
        for since, until in windows:
            for groups in (None, ["g"]):
                got = history.read_rows(ctx, since, until, groups).to_pylist()
                out.append(sorted(r["committed"] for r in got))
        return out

    before = reads()
    assert before == [x for a, b in spans for x in 2 * [list(range(a, b + 1))]] + [[], []]
    result = compaction.compact_log(table)
    assert result.written >= 1
    assert reads() == before
