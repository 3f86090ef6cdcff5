"""The change-log stream of ``format("leasekit")`` (DESIGN §6.11, D2, D3, D5) on a real local
Spark with real Structured Streaming queries and checkpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import leasekit as lk
import leasekit.spark
from leasekit.structs import TableBucket

SCRIPT = Path(__file__).with_name("stream_query.py")


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
    append(table, range(60))
    sink = Collected()
    df = stream(sspark, zookeeper, warehouse, namespace, "orders", "etl", maxRecordsPerTrigger=10)
    assert df.columns[:4] == ["_bucket", "_offset", "_timestamp", "_op"]
    query = start(df, tmp_path, sink)
    try:
        append(table, range(60, 90))
        wait_for(lambda: len(sink.rows()) >= 90, what="90 records", query=query)
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
    assert sorted(r[2] for r in rows) == list(range(90))
    assert all(len(batch) <= 10 for _, batch in sink.batches if batch)
    assert all(r[3] == "+U" or r[3] for r in rows) and all(r[4] is not None for r in rows)
    wait_for(lambda: not conn.group_members("etl"), timeout=5, what="the stream to leave")


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
    with pytest.raises(Exception, match="InvalidArgumentError"):
        stream(
            sspark, zookeeper, warehouse, namespace, "orders", "g4", startingOffsets="soon"
        ).writeStream.foreachBatch(Collected()).start().awaitTermination(30)


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
    append(table, range(100))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    args = [sys.executable, str(SCRIPT), zookeeper, warehouse, namespace, "orders", "etl"]
    args += [str(checkpoint), str(out)]
    first = subprocess.Popen(args, start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(conn.group_members("etl")) == 1, timeout=90, what="the query")
        stale = conn.group_members("etl")[0].member_id
        for n in range(100, 200, 20):  # appends while it runs
            append(table, range(n, n + 20))
            time.sleep(0.3)
        commits = checkpoint / "commits"
        wait_for(lambda: commits.exists() and len(list(commits.iterdir())) >= 3, what="3 batches")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # driver, JVM and Python workers at once
        first.wait()
    assert [m.member_id for m in conn.group_members("etl")] == [stale]  # still, until expiry
    total = 200
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
