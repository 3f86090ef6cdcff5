"""The sink of ``format("leasekit")`` (D4) and its batch appends: each micro-batch is appended
once, a batch Spark replays is skipped, rows go to the buckets Python appends choose (W4)."""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import PySparkException
from pyspark.sql.types import LongType, StringType, StructField, StructType

import leasekit as lk
import leasekit.log.append as lkappend
import leasekit.retention.apply as lkapply
from leasekit import testing
from leasekit.datasource.options import parse_options
from leasekit.datasource.sink import SinkFiles, stream_writer, write_files
from leasekit.log.segments import list_segments
from leasekit.zk import codec
from leasekit.zk.formats import SinkMarkRecord

SCHEMA = "id BIGINT, v STRING"
ROWS = StructType([StructField("id", LongType(), False), StructField("v", StringType())])


@pytest.fixture
def opts(spark, zookeeper, warehouse, namespace):
    lk.spark.register(spark)
    return {"zookeeper": zookeeper, "warehouse": warehouse, "namespace": namespace}


def _total(table) -> int:
    return sum(table.end_offsets().values())


def _state(spark, table) -> dict[int, str]:
    return {r.id: r.v for r in lk.spark.read_at(spark, table).collect()}


def _marker(conn, table, query_id) -> SinkMarkRecord:
    ctx = testing.context(conn)
    path = ctx.paths.sink(table.table_id, query_id)
    return SinkMarkRecord.decode(ctx.store.get(path).data, path)


def test_stream_lands_every_row_once_and_a_replayed_batch_is_not_appended_twice(
    conn, spark, opts, tmp_path
):
    # D4: each micro-batch is appended once; after a failure between our commit and Spark's
    # commit log (simulated: the checkpoint's last commits/<n> removed), Spark replays batch n
    # with the same query id and batch id, and nothing is appended twice.
    table = conn.create_table("orders", SCHEMA, "id", buckets=4)
    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    source.mkdir()

    def feed(n: int) -> None:
        ids = pa.array(range(n * 100, n * 100 + 10), pa.int64())
        pq.write_table(pa.table({"id": ids, "v": [f"v{n}"] * 10}), source / f"part-{n}.parquet")

    def run():
        query = (
            spark.readStream.schema(SCHEMA)
            .parquet(str(source))
            .writeStream.format("leasekit")
            .options(**opts)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start("orders")
        )
        query.awaitTermination(120)
        return query, [(p["batchId"], p["numInputRows"]) for p in query.recentProgress]

    feed(0)
    first, progress = run()
    assert progress == [(0, 10)] and _total(table) == 10
    feed(1)
    _, progress = run()
    assert progress == [(1, 10)] and _total(table) == 20
    ends = table.end_offsets()
    os.remove(checkpoint / "commits" / "1")
    os.remove(checkpoint / "commits" / ".1.crc")
    replay, progress = run()
    assert replay.id == first.id
    assert progress == [(1, 10)]  # Spark did run batch 1 again...
    assert table.end_offsets() == ends  # ...and it was not appended again
    expected = {i: "v0" for i in range(10)} | {i: "v1" for i in range(100, 110)}
    assert _state(spark, table) == expected
    assert _marker(conn, table, first.id) == SinkMarkRecord(1)


def _messages(plan, ids, query_id, value="x"):
    batch = pa.record_batch(
        {"id": pa.array(ids, pa.int64()), "v": pa.array([value] * len(ids), pa.string())}
    )
    return [SinkFiles(tuple(write_files(plan, [batch])), query_id)]


def test_commit_of_a_batch_twice_is_a_no_op_and_a_partial_batch_commits_the_rest(
    conn, spark, opts, monkeypatch
):
    # D4: the marker decides. The same batch id committed again (a replay) appends nothing and
    # deletes the replay's files; a batch whose append took several transactions records the
    # buckets it committed, and a replay commits only the others.
    table = conn.create_table("orders", SCHEMA, "id", buckets=4)
    sink = stream_writer(parse_options({**opts, "path": "orders"}), ROWS, False)
    query = "0b0e6a52-4d7e-4c55-8f0e-000000000001"
    ids = list(range(40))
    sink.commit(_messages(sink.plan, ids, query), 0)
    ends = table.end_offsets()
    assert _total(table) == 40 and _marker(conn, table, query) == SinkMarkRecord(0)

    again = _messages(sink.plan, ids, query, "again")
    sink.commit(again, 0)
    assert table.end_offsets() == ends
    warehouse = testing.context(conn).warehouse
    assert not any(warehouse.exists(f.rel) for f in again[0].files)  # the replay's files go

    monkeypatch.setattr(lkappend, "APPEND_TXN_BYTES", 1)  # every bucket its own transaction
    sink.commit(_messages(sink.plan, ids, query, "b1"), 1)
    assert _total(table) == 80 and _marker(conn, table, query) == SinkMarkRecord(1)

    # a failure after buckets 0 and 1 of batch 2 committed (as that marker records)
    ctx = testing.context(conn)
    ctx.store.set(ctx.paths.sink(table.table_id, query), SinkMarkRecord(1, 2, (0, 1)).encode())
    before = table.end_offsets()
    sink.commit(_messages(sink.plan, ids, query, "b2"), 2)
    after = table.end_offsets()
    grew = {tb.bucket for tb in after if after[tb] > before[tb]}
    assert grew == {2, 3}
    assert _marker(conn, table, query) == SinkMarkRecord(2)


def test_batch_append_routes_like_python_and_op_deletes_keys(conn, spark, opts):
    # W4: the Spark path puts a key in the bucket Python appends do; the change-log columns of a
    # leasekit stream (_bucket, _offset, _timestamp) are ignored and _op is honoured (D4).
    table = conn.create_table("orders", SCHEMA, "id", buckets=4)
    twin = conn.create_table("twin", SCHEMA, "id", buckets=4)
    rows = [(i, f"v{i}") for i in range(30)]
    twin.append([{"id": i, "v": v} for i, v in rows])
    stream_like = (
        "_bucket INT, _offset BIGINT, _timestamp TIMESTAMP, _op STRING, ID BIGINT, v STRING"
    )
    df = spark.createDataFrame([(9, 9, None, "upsert", i, v) for i, v in rows], stream_like)
    df.write.format("leasekit").options(**opts).mode("append").save("orders")
    assert {tb.bucket: n for tb, n in table.end_offsets().items()} == {
        tb.bucket: n for tb, n in twin.end_offsets().items()
    }
    keys = [(i, None, "delete") for i in range(10)]
    deletes = spark.createDataFrame(keys, f"{SCHEMA}, _op STRING")
    deletes.write.format("leasekit").options(**opts).mode("append").save("orders")
    assert _state(spark, table) == {i: f"v{i}" for i in range(10, 30)}
    assert _total(table) == 40


def test_bad_writes_are_refused_with_typed_errors(conn, spark, opts):
    # D4: overwrite, unknown columns, null keys and bad _op values are InvalidArgumentError,
    # reaching the user wrapped by Spark; nothing is appended.
    table = conn.create_table("orders", SCHEMA, "id", buckets=2)
    good = spark.createDataFrame([(1, "a")], SCHEMA)
    cases = [
        (good, "overwrite", "append-only"),
        (spark.createDataFrame([(1, "a", 2)], f"{SCHEMA}, extra INT"), "append", "extra"),
        (spark.createDataFrame([(None, "a")], "id BIGINT, v STRING"), "append", "null"),
        (spark.createDataFrame([(1, "a", "upsart")], f"{SCHEMA}, _op STRING"), "append", "upsart"),
    ]
    for df, mode, said in cases:
        with pytest.raises(PySparkException) as info:
            df.write.format("leasekit").options(**opts).mode(mode).save("orders")
        assert "InvalidArgumentError" in str(info.value) and said in str(info.value)
    assert _total(table) == 0


def test_files_of_a_bucket_sealed_before_the_commit_are_routed_again(conn, spark, opts):
    # K1, D4: executors route by the layout captured when the query started; a split committed
    # before the batch's commit seals the parent, and its rows go to the children instead.
    table = conn.create_table("orders", SCHEMA, "id", buckets=2)
    sink = stream_writer(parse_options({**opts, "path": "orders"}), ROWS, False)
    messages = _messages(sink.plan, list(range(40)), "0b0e6a52-4d7e-4c55-8f0e-000000000002")
    low, high = table.split_bucket(1)
    sink.commit(messages, 0)
    ends = {tb.bucket: n for tb, n in table.end_offsets().items()}
    assert ends[1] == 0 and ends[low.bucket] + ends[high.bucket] > 0
    assert sum(ends.values()) == 40
    assert _state(spark, table) == {i: "x" for i in range(40)}


@pytest.mark.parametrize(
    "value",
    [
        b"\x00garbage",
        codec.encode({"b": "7"}, SinkMarkRecord.VERSION),
        codec.encode({"b": True}, SinkMarkRecord.VERSION),
        codec.encode({"b": 2**63}, SinkMarkRecord.VERSION),
        codec.encode({"b": -2}, SinkMarkRecord.VERSION),
        codec.encode({"b": 3, "p": 4, "k": [1, "x"]}, SinkMarkRecord.VERSION),
        codec.encode({"b": 3, "p": 4, "k": {"1": 2}}, SinkMarkRecord.VERSION),
        codec.encode({"p": 4}, SinkMarkRecord.VERSION),
    ],
)
def test_a_hostile_batch_marker_is_corrupt_metadata(value):
    # D4: a marker that decoded into a huge or odd batch id would make every later batch
    # look like a replay and be dropped; it is refused, naming the znode
    with pytest.raises(lk.CorruptMetadataError, match="sinks/q"):
        SinkMarkRecord.decode(value, "/ns/data/t/sinks/q")
    assert SinkMarkRecord.decode(SinkMarkRecord(5, 6, (1, 2)).encode(), "p") == (5, 6, (1, 2))


def _gone(table) -> list[str]:
    """Files that the table's committed log segments name but that do not exist."""
    segments = list_segments(table, range(table.num_buckets)).values()
    return [s.file for segs in segments for s in segs if not os.path.exists(s.file)]


def test_orphan_cleanup_never_deletes_a_sink_file_committed_after_its_recheck(
    conn, spark, opts, monkeypatch
):
    # R4, W2 (orphan cleanup with orphan.min-age 0 never deletes a file that committed
    # metadata names): a sink task's files wait for the driver's commit. A retention pass that
    # took them for orphans and re-checked them, then paused (as a janitor may) while the batch
    # committed, must not delete a file the commit named: the commit fails cleanly instead,
    # and Spark's replay of the batch (new task files) lands whole.
    conn.update_settings({"orphan.min-age": "0s"})
    table = conn.create_table("orders", SCHEMA, "id", buckets=2)
    sink = stream_writer(parse_options({**opts, "path": "orders"}), ROWS, False)
    query = "0b0e6a52-4d7e-4c55-8f0e-000000000004"
    ids = list(range(40))
    messages = _messages(sink.plan, ids, query)  # the executor tasks' step
    written = {f.rel for f in messages[0].files}
    real = lkapply.still_orphans
    outcome: dict[str, object] = {}

    def recheck_then_commit(ctx, paths):
        current = real(ctx, paths)
        if written & current and not outcome:
            try:  # the driver's commit of the batch lands between the re-check and the delete
                outcome["offsets"] = sink.commit(messages, 0)
            except lk.LeasekitError as exc:
                outcome["error"] = exc
        return current

    monkeypatch.setattr(lkapply, "still_orphans", recheck_then_commit)
    conn.run_retention()
    monkeypatch.setattr(lkapply, "still_orphans", real)
    assert outcome, "the pass never re-checked the task's files as orphans"
    assert _gone(table) == []  # no committed metadata names a deleted file
    if "error" in outcome:  # the commit lost cleanly: nothing of the batch is visible
        assert "orphan cleanup" in str(outcome["error"]), outcome["error"]
        assert _total(table) == 0
        sink.commit(_messages(sink.plan, ids, query), 0)  # Spark's replay of batch 0
    assert _total(table) == 40 and _gone(table) == []
    assert _state(spark, table) == {i: "x" for i in ids}


def test_a_held_task_marker_keeps_its_files_until_orphan_min_age_then_is_claimed(
    conn, spark, opts, clock
):
    # R4: a task's files are a write in progress until orphan.min-age (default 1h); after that
    # the pass claims the task's marker before deleting them, and a commit coming later fails
    # cleanly (W2), appending nothing.
    table = conn.create_table("orders", SCHEMA, "id", buckets=2)
    sink = stream_writer(parse_options({**opts, "path": "orders"}), ROWS, False)
    query = "0b0e6a52-4d7e-4c55-8f0e-000000000003"
    messages = _messages(sink.plan, list(range(20)), query)
    files = [f.rel for f in messages[0].files]
    warehouse = testing.context(conn).warehouse
    reasons = {i.reason for i in conn.retention_plan().items if i.kind == "orphan"}
    assert reasons and all("still in progress" in r for r in reasons), reasons
    conn.run_retention()
    assert all(warehouse.exists(f) for f in files)
    clock.advance(timedelta(hours=2))
    report = conn.run_retention()
    assert sum(1 for i in report.deleted if i.kind == "orphan") == len(files)
    assert not any(warehouse.exists(f) for f in files)
    with pytest.raises(lk.LeasekitError, match="orphan cleanup"):
        sink.commit(messages, 0)
    assert _total(table) == 0 and _gone(table) == []
    sink.commit(_messages(sink.plan, list(range(20)), query), 0)  # Spark's replay lands
    assert _total(table) == 20
    ctx = testing.context(conn)
    assert ctx.store.children(ctx.paths.writes) == []  # the commit released its task markers
