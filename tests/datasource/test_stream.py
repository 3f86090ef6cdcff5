"""The change-log stream of ``format("leasekit")`` (D2, D3, D5) on a real local
Spark with real Structured Streaming queries and checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql.types import StructType

import leasekit as lk
import leasekit.spark
from leasekit.datasource.options import parse_options
from leasekit.datasource.stream import share_limit, stream_reader
from leasekit.datasource.stream_member import StreamMember
from leasekit.structs import TableBucket

SCRIPT = Path(__file__).resolve().parents[1] / "stream_query.py"


@pytest.fixture(scope="module")
def sspark(spark):
    leasekit.spark.register(spark)
    return spark


def stream(spark, zookeeper, warehouse, namespace, table, group, **options):
    reader = (
        spark.readStream.format("leasekit")
        .option("zookeeper", zookeeper)
        .option("warehouse", warehouse)
        .option("namespace", namespace)
        .option("group", group)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(table)


class Collected:
    """Every micro-batch of a query: (batch id, [(bucket, offset, id, op, timestamp)])."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple]]] = []
        self.lock = threading.Lock()

    def __call__(self, df, batch_id) -> None:
        rows = [(r._bucket, r._offset, r.id, r._op, r._timestamp) for r in df.collect()]
        with self.lock:
            self.batches.append((batch_id, rows))

    def rows(self) -> list[tuple]:
        with self.lock:
            return [row for _, rows in self.batches for row in rows]


def start(df, tmp_path, sink, name="q", **trigger):
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
        .trigger(**(trigger or {"processingTime": "0.5 seconds"}))
        .start()
    )


def wait_for(predicate, timeout=60.0, what="condition", query=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if query is not None and query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def append(table, ids):
    return table.append([{"id": i, "v": f"v{i}"} for i in ids])


def consumed(conn, table, n):
    """(bucket, offset) -> (id, _op, _timestamp) of the first ``n`` records a plain consumer
    reads: what the stream must deliver."""
    out = {}
    with conn.consumer(table, auto_offset_reset="earliest") as consumer:
        while len(out) < n:
            for tb, records in consumer.poll("5s").items():
                for r in records.to_pylist():
                    stamp = r["_timestamp"].replace(tzinfo=None)  # (Spark's: UTC, naive)
                    out[(tb.bucket, r["_offset"])] = (r["id"], r["_op"], stamp)
    return out


def by_bucket(rows):
    out: dict[int, list[int]] = {}
    for bucket, offset, *_ in rows:
        out.setdefault(bucket, []).append(offset)
    return out


def test_a_stream_delivers_every_record_once_in_order_and_is_the_groups_only_member(
    sspark, conn, zookeeper, warehouse, namespace, tmp_path
):
    # D2: every record exactly once, in offset order per bucket, batches capped by
    # maxRecordsPerTrigger; D3: the query is the group's live member and commits each batch
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=3)
    append(table, range(30))
    sink = Collected()
    df = stream(sspark, zookeeper, warehouse, namespace, "orders", "etl", maxRecordsPerTrigger=10)
    assert df.columns[:4] == ["_bucket", "_offset", "_timestamp", "_op"]
    query = start(df, tmp_path, sink)
    try:
        append(table, range(30, 45))
        wait_for(lambda: len(sink.rows()) >= 45, what="45 records", query=query)
        ends = {tb.bucket: o for tb, o in table.end_offsets().items()}

        # D3: committed == log end once idle, consumer id spark-..., its host, health OK
        def current():
            d = conn.describe_group("etl")
            return dict(zip(d["bucket"], d["current_offset"]))

        wait_for(lambda: current() == ends, what="the group committed to the log end")
        described = conn.describe_group("etl")
        assert described["consumer_id"].str.startswith("spark-").all()
        assert described["host"].notna().all() and described["host"].iloc[0]
        assert conn.group_status("etl").status == "OK"
        members = conn.group_members("etl")
        assert len(members) == 1 and len(members[0].buckets) == 3
        # D3: a second live member is refused while the stream runs
        other = conn.consumer("orders", group_id="etl")
        with pytest.raises(lk.GroupNotEmptyError):
            other.poll(0)
        other.close()
    finally:
        query.stop()
    rows = sink.rows()
    assert by_bucket(rows) == {b: list(range(ends[b])) for b in ends}  # once each, in order
    assert sorted(r[2] for r in rows) == list(range(45))
    assert all(len(batch) <= 10 for _, batch in sink.batches if batch)
    assert {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows} == consumed(conn, "orders", 45)
    # D3: a stopped query leaves its group: at once when its reader process gets to leave,
    # at the latest when the member's session (10 s) expires, if Spark kills the process first
    wait_for(lambda: not conn.group_members("etl"), timeout=20, what="the stream to leave")


def test_starting_offsets_committed_earliest_latest(
    sspark, conn, zookeeper, warehouse, namespace, tmp_path
):
    # D2: a new query starts at startingOffsets (default: the group's committed offsets, the
    # beginning where none)
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    append(table, range(20))
    ends = {tb.bucket: o for tb, o in table.end_offsets().items()}
    with conn.consumer(group_id="g1") as manual:
        manual.assign([TableBucket("orders", 0)])
        manual.commit({TableBucket("orders", 0): 3})
    expected = {
        "committed": {0: list(range(3, ends[0])), 1: list(range(ends[1]))},
        "earliest": {b: list(range(e)) for b, e in ends.items()},
    }
    for mode, want in expected.items():
        sink = Collected()
        df = stream(
            sspark,
            zookeeper,
            warehouse,
            namespace,
            "orders",
            "g1" if mode == "committed" else "g2",
            startingOffsets=mode,
        )
        query = start(df, tmp_path, sink, name=mode, availableNow=True)
        query.awaitTermination(60)
        assert query.exception() is None
        assert by_bucket(sink.rows()) == want, mode
    sink = Collected()
    df = stream(sspark, zookeeper, warehouse, namespace, "orders", "g3", startingOffsets="latest")
    query = start(df, tmp_path, sink, name="latest")
    try:
        wait_for(lambda: query.recentProgress, what="the first trigger", query=query)
        append(table, range(100, 110))
        wait_for(lambda: len(sink.rows()) >= 10, what="the new records", query=query)
        time.sleep(1)
    finally:
        query.stop()
    assert sorted(r[2] for r in sink.rows()) == list(range(100, 110))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"startingOffsets": "soon"}, "startingOffsets must be one of"),
        ({"maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
        ({"maxRecordsPerTrigger": "many"}, "maxRecordsPerTrigger must be a positive integer"),
        ({"group": "no/slash"}, "group id"),
    ],
)
def test_bad_stream_options_are_refused_before_any_io(options, message):
    # D2: bad options are typed errors, checked on the driver (no ZooKeeper needed)
    opts = parse_options({"path": "orders", "group": "g", **options})
    with pytest.raises(lk.InvalidArgumentError, match=message):
        stream_reader(opts, StructType())


def test_a_stream_without_a_group_is_told_to_name_one():
    # D3: a stream reads as a member of its group, so the group is required
    with pytest.raises(lk.InvalidArgumentError, match=r"option\('group', 'etl'\)"):
        stream_reader(parse_options({"path": "orders"}), StructType())


def test_max_records_are_shared_by_backlog_at_least_one_per_bucket_with_records():
    # D2: maxRecordsPerTrigger caps a batch, shared in proportion to each bucket's backlog
    assert share_limit({0: 90, 1: 10, 2: 0}, 10) == {0: 9, 1: 1, 2: 0}
    assert share_limit({0: 1000, 1: 1, 2: 1}, 10) == {0: 8, 1: 1, 2: 1}
    assert share_limit({0: 5, 1: 5}, None) == {0: 5, 1: 5}
    assert share_limit({0: 3, 1: 4}, 100) == {0: 3, 1: 4}
    assert sum(share_limit({b: 7 * b + 1 for b in range(9)}, 50).values()) == 50


def test_a_stream_on_a_group_with_a_live_consumer_fails(
    sspark, conn, zookeeper, warehouse, namespace, tmp_path
):
    # D3: a second live member of the group is refused, the stream as well (C13)
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    append(table, range(5))
    with conn.consumer("orders", group_id="busy") as member:
        member.poll(0)
        assert member.member_id is not None
        query = start(
            stream(sspark, zookeeper, warehouse, namespace, "orders", "busy"), tmp_path, Collected()
        )
        with pytest.raises(Exception, match="GroupNotEmptyError") as failed:
            query.awaitTermination(60)
        assert "live member" in str(failed.value)
        assert [m.member_id for m in conn.group_members("busy")] == [member.member_id]


def test_a_killed_query_restarted_from_its_checkpoint_writes_every_record_once(
    sspark, conn, zookeeper, warehouse, namespace, tmp_path
):
    # D2: restarted from the checkpoint it loses and repeats nothing; D3: the restarted query
    # takes over its own stale member (the killed driver's session has not expired yet)
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=3)
    append(table, range(60))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    args = [sys.executable, str(SCRIPT), zookeeper, warehouse, namespace, "orders", "etl"]
    args += [str(checkpoint), str(out), "--max-records", "15"]
    first = subprocess.Popen(args, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(conn.group_members("etl")) == 1, timeout=90, what="the query")
        stale = conn.group_members("etl")[0].member_id
        for n in range(60, 120, 15):  # appends while it runs
            append(table, range(n, n + 15))
            time.sleep(0.3)
        commits = checkpoint / "commits"
        wait_for(lambda: commits.exists() and len(list(commits.iterdir())) >= 3, what="3 batches")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # driver, JVM and Python workers at once
        first.wait()
    offsets = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    planned = json.loads(offsets[-1].read_text().splitlines()[-1])["buckets"]
    assert sum(planned.values()) < 120  # killed mid-stream
    assert [m.member_id for m in conn.group_members("etl")] == [stale]  # still, until expiry
    total = 120
    second = subprocess.run(
        [*args, "--until", str(total)], capture_output=True, text=True, timeout=120
    )
    assert second.returncode == 0, second.stdout + second.stderr[-3000:]
    written = sspark.read.parquet(str(out)).collect()
    ends = {tb.bucket: o for tb, o in table.end_offsets().items()}
    assert sorted((r._bucket, r._offset) for r in written) == sorted(
        (b, o) for b, e in ends.items() for o in range(e)
    )
    assert sorted(r.id for r in written) == list(range(total))
    described = conn.describe_group("etl")
    assert dict(zip(described["bucket"], described["current_offset"])) == ends


def test_a_stream_follows_a_split_and_fails_when_its_table_is_dropped(
    sspark, conn, zookeeper, warehouse, namespace, tmp_path
):
    # D5 (K5): a bucket split mid-stream: its records to the seal first, then its children from
    # 0, none lost or repeated; a dropped table fails the query with TableNotFoundError
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    append(table, range(40))
    sink = Collected()
    df = stream(sspark, zookeeper, warehouse, namespace, "orders", "etl", maxRecordsPerTrigger=8)
    query = start(df, tmp_path, sink)
    try:
        wait_for(lambda: sink.rows(), what="a first batch", query=query)
        children = table.split_bucket(0)
        append(table, range(40, 80))
        wait_for(lambda: len(sink.rows()) >= 80, what="80 records", query=query)
        ends = {tb.bucket: o for tb, o in table.end_offsets().items()}
        assert {c.bucket for c in children} <= set(ends)
        rows = sink.rows()
        with conn.consumer() as plain:
            seal = plain.end_offsets([TableBucket("orders", 0)])[TableBucket("orders", 0)]
        got = by_bucket(rows)
        assert got == {b: list(range(e)) for b, e in {0: seal, **ends}.items() if e}
        assert sorted(r[2] for r in rows) == list(range(80))
        batch_of = {(b, o): i for i, rows in sink.batches for b, o, *_ in rows}
        last_parent = max(i for (b, _), i in batch_of.items() if b == 0)
        first_child = min(i for (b, _), i in batch_of.items() if b in {c.bucket for c in children})
        assert last_parent < first_child
        conn.drop_table("orders")
        with pytest.raises(Exception, match="TableNotFoundError"):
            query.awaitTermination(60)
    finally:
        query.stop()


def member_of(conn, zookeeper, warehouse, namespace, group, stream_id):
    opts = parse_options(
        {
            "path": "orders",
            "group": group,
            "zookeeper": zookeeper,
            "warehouse": warehouse,
            "namespace": namespace,
        }
    )
    return StreamMember(conn, opts, stream_id)


def test_a_restarted_stream_takes_over_its_stale_member_and_no_other_stream_joins(
    conn, zookeeper, warehouse, namespace
):
    # D3: a restart (same stream id) replaces the member its killed driver left (session not
    # expired yet); a stream with another id is refused while it is a member
    conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    stale = member_of(conn, zookeeper, warehouse, namespace, "etl", "s1")
    assert stale.poll() == [0, 1]
    old = [m.member_id for m in conn.group_members("etl")]
    assert len(old) == 1 and old[0].startswith("spark-s1-")
    other = member_of(conn, zookeeper, warehouse, namespace, "etl", "s2")
    with pytest.raises(lk.GroupNotEmptyError, match="live member"):
        other.poll()
    other.close()
    restarted = member_of(conn, zookeeper, warehouse, namespace, "etl", "s1")
    try:
        assert restarted.poll() == [0, 1]
        now = [m.member_id for m in conn.group_members("etl")]
        assert len(now) == 1 and now[0].startswith("spark-s1-") and now != old
        restarted.commit({0: 0, 1: 0})  # it owns every bucket
    finally:
        restarted.close()
        stale.close()
    assert conn.group_members("etl") == []


def join_at_once(barrier, results, name, join):
    barrier.wait()
    try:
        join()
        results[name] = "joined"
    except lk.GroupNotEmptyError:
        results[name] = "refused"


def test_a_stream_and_a_consumer_joining_at_once_never_are_both_members(
    conn, zookeeper, warehouse, namespace
):
    # D3 race: whichever join commits first wins, the other gets GroupNotEmptyError
    conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    for i in range(25):
        group = f"race{i}"
        member = member_of(conn, zookeeper, warehouse, namespace, group, f"s{i}")
        consumer = conn.consumer("orders", group_id=group)
        results: dict[str, str] = {}
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(target=join_at_once, args=(barrier, results, "stream", member.poll)),
            threading.Thread(
                target=join_at_once, args=(barrier, results, "consumer", consumer.poll)
            ),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            assert sorted(results.values()) == ["joined", "refused"], results
            assert len(conn.group_members(group)) == 1
        finally:
            consumer.close()
            member.close()


def test_a_stopped_stream_leaves_its_group_promptly_every_time(
    sspark, conn, zookeeper, warehouse, namespace, tmp_path
):
    # D3, C13: the query is a live member only while it runs; once query.stop() returns the
    # member leaves at once, so reset_offsets is accepted within a second or two, not refused
    # with GroupNotEmptyError until the member's session (10 s) expires. Stop can come at any
    # point of the reader's life: while it joins, between batches, or during a batch.
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    append(table, range(20))
    slow: list[str] = []
    for cycle in range(12):
        df = stream(sspark, zookeeper, warehouse, namespace, "orders", "etl")
        query = start(df, tmp_path, Collected(), name=f"c{cycle}", processingTime="0.2 seconds")
        try:
            wait_for(lambda: conn.group_members("etl"), what="the stream to join", query=query)
            time.sleep(0.1 * (cycle % 4))  # stop at different points of its batches
            append(table, [100 + cycle])
        finally:
            query.stop()
        deadline = time.monotonic() + 2.0
        while True:
            try:
                conn.reset_offsets("etl", to="earliest", dry_run=False)
                break
            except lk.GroupNotEmptyError:
                if time.monotonic() > deadline:
                    slow.append(f"cycle {cycle}: {conn.group_members('etl')}")
                    wait_for(lambda: not conn.group_members("etl"), timeout=20)
                    break
                time.sleep(0.05)
    assert not slow, f"{len(slow)} of 12 stopped streams stayed in the group: {slow}"
