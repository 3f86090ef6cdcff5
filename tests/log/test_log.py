"""The log: dense offsets under concurrency (W1), files before metadata (W2), commit
timestamps on the ZooKeeper clock (W3)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import read_log, warehouse_files

import leasekit as lk
from leasekit import testing
from leasekit.log.segments import list_segments


def _check_dense(table, expected_ids: set[int]) -> None:
    """Offsets dense from 0 per bucket, contiguous segments, every id exactly once."""
    segments = list_segments(table, range(table.num_buckets))
    ends = table.end_offsets()
    for bucket, segs in segments.items():
        position = 0
        for seg in segs:
            assert seg.base_offset == position, f"gap or overlap in bucket {bucket}"
            position = seg.end_offset
        assert position == ends[lk.TableBucket(table.name, bucket)]
    ids = [r["id"] for rows in read_log(table).values() for r in rows]
    assert len(ids) == len(set(ids)), "a record was committed twice"
    assert set(ids) == expected_ids


def test_concurrent_appenders_threads_dense_offsets(conn):
    # W1
    table = conn.create_table("events", "id BIGINT, worker INT", "id", buckets=3)
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for batch in range(15):
                base = (w * 1000 + batch) * 10
                table.append([{"id": base + i, "worker": w} for i in range(10)])
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    expected = {(w * 1000 + b) * 10 + i for w in range(4) for b in range(15) for i in range(10)}
    _check_dense(table, expected)
    assert sum(table.end_offsets().values()) == len(expected)


def test_concurrent_appenders_two_processes_dense_offsets(conn, zookeeper, warehouse, namespace):
    # W1
    table = conn.create_table("events", "id BIGINT, worker INT", "id", buckets=2)
    script = textwrap.dedent(f"""
        import sys, leasekit as lk
        w = int(sys.argv[1])
        with lk.connect({zookeeper!r}, {warehouse!r}, namespace={namespace!r}) as conn:
            t = conn.table("events")
            for batch in range(20):
                base = (w * 1000 + batch) * 5
                t.append([{{"id": base + i, "worker": w}} for i in range(5)])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, str(w)]) for w in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    expected = {(w * 1000 + b) * 5 + i for w in range(2) for b in range(20) for i in range(5)}
    _check_dense(table, expected)


def test_append_returns_offset_ranges_per_bucket(conn):
    # W1
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=4)
    first = table.append([{"id": i, "v": "a"} for i in range(100)])
    second = table.append([{"id": i, "v": "b"} for i in range(100)])
    assert sum(len(r) for r in first.values()) == 100
    for tb, rng in second.items():
        assert rng.start == first[tb].end
    assert table.end_offsets() == {tb: r.end for tb, r in second.items()}
    assert table.beginning_offsets() == {tb: 0 for tb in table.buckets}


def test_segment_max_rows_splits_large_appends(conn):
    # W1 (segments are split by log.segment.max-rows and stay dense)
    table = conn.create_table(
        "t", "id BIGINT", "id", buckets=1, properties={"log.segment.max-rows": 30}
    )
    table.append(pa.table({"id": pa.array(range(100), pa.int64())}))
    segs = list_segments(table, [0])[0]
    assert [(s.base_offset, s.end_offset) for s in segs] == [(0, 30), (30, 60), (60, 90), (90, 100)]


def test_writer_dying_before_commit_leaves_only_orphan_files(conn, zookeeper, warehouse, namespace):
    # W2: the process dies between writing its files and committing them
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append([{"id": 1}])
    before_ends = table.end_offsets()
    before_files = warehouse_files(conn)
    script = textwrap.dedent(f"""
        import os, leasekit as lk, leasekit.log.append as log
        def die(*args, **kwargs):
            os._exit(9)
        log.commit_segments = die
        with lk.connect({zookeeper!r}, {warehouse!r}, namespace={namespace!r}) as conn:
            conn.table("t").append([{{"id": i}} for i in range(50)])
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    assert table.end_offsets() == before_ends
    orphans = warehouse_files(conn) - before_files
    assert orphans, "the dead writer's files should be on disk"
    referenced = {s.file for segs in list_segments(table, range(2)).values() for s in segs}
    assert not {testing.context(conn).warehouse.uri(o) for o in orphans} & referenced
    # the next append carries on with no gap
    table.append([{"id": 2}])
    assert sum(table.end_offsets().values()) == 2


def test_every_committed_segment_file_is_complete(conn):
    # W2: metadata names only complete files, with the row count it claims
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=3)
    for b in range(5):
        table.append([{"id": b * 100 + i, "v": "x" * i} for i in range(40)])
    for segs in list_segments(table, range(3)).values():
        for seg in segs:
            assert pq.ParquetFile(seg.file).metadata.num_rows == seg.end_offset - seg.base_offset


def test_timestamp_is_zookeeper_commit_time_and_never_decreases(conn):
    # W3
    ctx = testing.context(conn)
    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    windows = []
    for b in range(6):
        # bracketed by real ZooKeeper commit times (a write's mtime), not the display
        # estimate of server_time_ms, which may be a millisecond off either way
        before = ctx.server_clock.fresh_ms()
        table.append([{"id": b}])
        after = ctx.server_clock.fresh_ms()
        windows.append((before, after))
        time.sleep(0.01)
    segs = list_segments(table, [0])[0]
    assert len(segs) == 6
    # the commit time is the segment znode's creation time (ZooKeeper's clock), raised to the
    # stamp before it where that clock stepped back: never lower than the previous one
    nodes = ctx.store.get_many([ctx.paths.segment(table.table_id, 0, s.base_offset) for s in segs])
    floor = 0
    for seg, node in zip(segs, nodes):
        floor = max(node.stat.ctime_ms, floor)
        assert seg.timestamp_ms == floor
    # ... and it is now: within the probes around the append, give or take the steps back
    # ZooKeeper's wall clock may take between two transactions (a stamp 1 ms above the
    # probe after it was seen under load; a transaction's time is its leader's wall clock)
    for seg, (before, after) in zip(segs, windows):
        assert before - CLOCK_STEP_MS <= seg.timestamp_ms <= after + CLOCK_STEP_MS
    stamps = [r["_timestamp_ms"] for r in read_log(table)[0]]
    assert stamps == sorted(stamps)


CLOCK_STEP_MS = 50
"""How far back ZooKeeper's wall clock may step between two transactions in these tests."""


def test_timestamp_floor_survives_a_backwards_clock(conn):
    # W3: a state written "later" with an older mtime cannot pull timestamps back
    ctx = testing.context(conn)
    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    table.append([{"id": 1}])
    from leasekit.log.state import read_states
    from leasekit.zk import SetData

    state = read_states(table, [0])[0]
    future = state.stat.mtime_ms + 3_600_000
    ctx.store.commit(
        [
            SetData(
                ctx.paths.bucket(table.table_id, 0),
                state.encode(ts_floor=future),
                state.stat.version,
            )
        ]
    )
    table.append([{"id": 2}])
    segs = list_segments(table, [0])[0]
    assert segs[1].timestamp_ms >= future >= segs[0].timestamp_ms


def test_deletes_are_logged_with_key_columns_only(conn):
    # W1: deletes take offsets like upserts
    table = conn.create_table("t", "id BIGINT, v STRING NOT NULL", "id", buckets=1)
    table.append([{"id": 1, "v": "a"}, {"id": 2, "v": "b"}])
    result = table.delete([{"id": 1}])
    assert result == {lk.TableBucket("t", 0): lk.OffsetRange(2, 3)}
    last = read_log(table)[0][-1]
    assert (last["id"], last["v"], last["_op"], last["_offset"]) == (1, None, "delete", 2)


@pytest.mark.parametrize("rows", [[], pa.table({"id": pa.array([], pa.int64())})])
def test_empty_append_writes_nothing(conn, rows):
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    assert table.append(rows) == {}
    assert warehouse_files(conn) == set()
