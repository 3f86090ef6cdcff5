"""The change-log stream of ``format("leasekit")`` over a compacted log (D2, R8): a query reads a
merged segment's records with their own timestamps, the same records a query read before the
compaction and a plain consumer reads."""

from __future__ import annotations

import threading
import time

import pytest

import leasekit.spark
from leasekit.log.segments import list_segments

APPENDS = 32


@pytest.fixture(scope="module")
def sspark(spark):
    leasekit.spark.register(spark)
    return spark


def _read_all(spark, zookeeper, warehouse, namespace, group, checkpoint):
    """Every record of ``events`` from the beginning, by one query run to the log end now."""
    rows: list[tuple] = []
    lock = threading.Lock()

    def sink(df, _):
        got = [(r._bucket, r._offset, r._timestamp, r._op, r.id, r.v) for r in df.collect()]
        with lock:
            rows.extend(got)

    df = (
        spark.readStream.format("leasekit")
        .option("zookeeper", zookeeper)
        .option("warehouse", warehouse)
        .option("namespace", namespace)
        .option("group", group)
        .option("startingOffsets", "earliest")
        .load("events")
    )
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    return sorted(rows)


def test_a_stream_reads_the_same_records_after_a_compaction(
    sspark, conn, zookeeper, warehouse, namespace, tmp_path
):
    # D2: every record once, with its offset, timestamp and op; R8: a merged segment's records
    # keep their own timestamps
    table = conn.create_table("events", "id BIGINT, v STRING", "id", buckets=2)
    for i in range(APPENDS):
        table.append([{"id": 3 * i + j, "v": f"v{i}.{j}"} for j in range(3)])
        if i % 5 == 4:
            table.delete([{"id": 3 * i}])
        time.sleep(0.004)
    target = (sspark, zookeeper, warehouse, namespace)
    before = _read_all(*target, "before", tmp_path / "before")
    ends = table.end_offsets()
    assert len(before) == sum(ends.values())
    assert len({r[2] for r in before}) > APPENDS // 2  # the records span many timestamps
    assert table.compact_log().written >= 1
    merged = [s for segs in list_segments(table, range(2)).values() for s in segs]
    assert any(s.first_timestamp_ms is not None for s in merged)
    assert _read_all(*target, "after", tmp_path / "after") == before
    with conn.consumer(table, auto_offset_reset="earliest") as consumer:
        consumed = []
        while len(consumed) < len(before):
            for tb, records in consumer.poll("5s").items():
                for r in records.to_pylist():
                    stamp = r["_timestamp"].replace(tzinfo=None)  # (Spark's: UTC, naive)
                    consumed.append((tb.bucket, r["_offset"], stamp, r["_op"], r["id"], r["v"]))
    assert sorted(consumed) == before
