"""B12-peer: a streaming read of the change log (``readStream.format("leasekit")``) against
Spark's own Kafka source (``readStream.format("kafka")``) over the same records (reported:
ratio of Kafka's time to leasekit's, >= 1.0 means leasekit is ahead).

The records are B12's: a 4-bucket table gets 2,000,000 orders (``ORDERS_DDL``) in appends of
100,000 from the same seeded generator. The Kafka side is a fresh Kafka 4.4 broker on loopback
(``bench.peer``, Kafka's defaults) with a topic of 4 partitions; each bucket's rows, read back
from its segment files in offset order, go to the partition of the same number, so partition
``b`` offset ``o`` holds the row of bucket ``b`` offset ``o``. A record's key is the order id
as decimal text and its value the row as JSON: ``{"id":…,"customer":…,"status":…,"amount":…,
"ts":"2025-…T…Z"}`` (the timestamp as ISO 8601 text with microseconds, UTC). Seeding is untimed.

Both sides run the same streaming query: a new query with a fresh checkpoint directory,
starting at the earliest offsets, at most 200,000 records per micro-batch (leasekit's
``maxRecordsPerTrigger``, Kafka's ``maxOffsetsPerTrigger``), triggered ``availableNow``, whose
``foreachBatch`` runs one action per batch. A side's time is the sum of its batches'
``triggerExecution`` (Spark's own measure behind ``processedRowsPerSecond``: getting the
offsets, planning, reading, the action, the checkpoint, and for leasekit the commit of the
group's offsets to ZooKeeper), as in B12; the wall time from ``start()`` to the end, with the
query's start, is reported beside it (``wall_ratio``). Two actions, each its own ratio:

- ``count`` (the headline): ``df.count()`` of each batch. Kafka's rows are binary key and
  value, not decoded; leasekit's are the table's columns.
- ``columns``: what a user pays to get the columns. Kafka's value is decoded with
  ``from_json`` into the five order columns (run in the JVM, no Python); both sides then
  compute ``count`` and ``bit_xor(xxhash64(id, customer, status, amount, ts))``, and the
  checksums over all batches of every query of a run must be equal (``same_rows``).

Each run times each side twice in counterbalanced order (A B B A, then B A A B) per action and
takes the mean of a side's two timings; one untimed run warms both up. CPU is the Spark JVM
with every process under it (the Python workers that do leasekit's reading) and this process,
plus each side's own server: the broker's JVM for Kafka, the ZooKeeper server for leasekit
(``cpu_ratio``: Kafka's over leasekit's; the parts in ``*_spark_cpu_s`` and
``*_server_cpu_s``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .b12 import FULL, ORDER_COLUMNS, QUICK, _follow_on, _tree_cpu
from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    counterbalanced,
    load_average,
    log,
    median,
    orders_batch,
    process_cpu_seconds,
    settle,
    spread,
    temp_warehouse,
)
from .peer import broker_cpu_seconds, create_topic, end_offsets, kafka_broker, produce

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BENCHMARK", "run"]

ACTIONS = ("count", "columns")
SIDES = ("leasekit", "kafka")
TOPIC = "orders"
VALUE_DDL = ORDERS_DDL.replace(" NOT NULL", "")
"""The schema ``from_json`` decodes a Kafka value with: the table's columns."""


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    if spark is None:
        raise ValueError("B12-peer needs a SparkSession")
    _require_kafka_source(spark)
    import leasekit as lk

    lk.spark.register(spark)
    p = QUICK if quick else FULL
    checks = {"same_records": True, "same_rows": True, "batches_follow_on": True}
    results: list[dict[str, Any]] = []
    with temp_warehouse("B12-peer") as conn, kafka_broker("B12-peer") as broker:
        table = _seed_table(conn, p)
        sizes = _seed_topic(broker.bootstrap, table, p)
        checks["partitions_match_buckets"] = sizes == _bucket_sizes(table, p)
        sides = {
            "leasekit": _Side(_leasekit_reader(spark, conn, p), "buckets", _zk_cpu(conn)),
            "kafka": _Side(
                _kafka_reader(spark, broker.bootstrap, p), TOPIC, lambda: broker_cpu_seconds(broker)
            ),
        }
        for i in range(-1, runs):  # run -1 warms both sides up, untimed
            row: dict[str, Any] = {"load_average": load_average()}
            for action in ACTIONS:
                row[action] = _pair(spark, sides, p, i, action, checks)
            if i >= 0:
                results.append(row)
                log(
                    f"B12-peer: run {i + 1}/{runs}: "
                    + ", ".join(f"{a} ratio {row[a]['ratio']:.3f}" for a in ACTIONS)
                )
    figures = _summary(results)
    parameters = {**p, "runs": runs, "quick": quick, "kafka_value": "JSON"}
    return Outcome(figures["ratio"], figures, results, parameters, checks)


def _require_kafka_source(spark: SparkSession) -> None:
    """Fail early, and say why, when Spark's Kafka source is not on the session's classpath."""
    jvm = spark.sparkContext._jvm
    name = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception as exc:
        raise RuntimeError(
            "B12-peer needs Spark's Kafka source on the SparkSession's classpath from the start "
            "(Benchmark.spark_jars: `python -m peers.maven spark-kafka`, then bench.run builds "
            "the session with them)"
        ) from exc


def _seed_table(conn: Any, p: dict[str, Any]) -> Any:
    """B12's table, seeded as B12 seeds it."""
    table = conn.create_table("orders", ORDERS_DDL, "id", buckets=p["buckets"])
    rng = np.random.default_rng(12)
    for start in range(0, p["records"], p["append_rows"]):
        table.append(orders_batch(rng, np.arange(start, start + p["append_rows"])))
    return table


def _bucket_rows(table: Any, p: dict[str, Any]) -> Iterator[tuple[int, Any]]:
    """Each bucket's rows (the order columns), segment by segment in offset order."""
    import pyarrow.parquet as pq

    from leasekit.log.segments import list_segments

    for bucket, segments in list_segments(table, range(p["buckets"])).items():
        for seg in segments:
            path = seg.file.removeprefix("file://")
            yield bucket, pq.read_table(path, columns=ORDER_COLUMNS)


def _bucket_sizes(table: Any, p: dict[str, Any]) -> dict[int, int]:
    from leasekit.log.segments import list_segments

    segments = list_segments(table, range(p["buckets"]))
    return {b: sum(s.end_offset - s.base_offset for s in segs) for b, segs in segments.items()}


def _seed_topic(bootstrap: str, table: Any, p: dict[str, Any]) -> dict[int, int]:
    """The table's rows as JSON records of a topic with a partition per bucket; its end
    offsets."""
    import pyarrow.compute as pc

    def records() -> Iterator[tuple[int, bytes, bytes]]:
        for bucket, rows in _bucket_rows(table, p):
            ts = pc.strftime(rows["ts"], format="%Y-%m-%dT%H:%M:%S").to_pylist()
            columns = [rows[c].to_pylist() for c in ("id", "customer", "status", "amount")]
            for (i, customer, status, amount), t in zip(zip(*columns), ts):
                value = (
                    f'{{"id":{i},"customer":"{customer}","status":"{status}",'
                    f'"amount":{amount!r},"ts":"{t}Z"}}'
                )
                yield bucket, str(i).encode(), value.encode()

    create_topic(bootstrap, TOPIC, p["buckets"])
    started = time.perf_counter()
    count = produce(bootstrap, TOPIC, records())
    log(f"B12-peer: {count:,} records to Kafka in {time.perf_counter() - started:.1f} s")
    return end_offsets(bootstrap, TOPIC, p["buckets"])


class _Side(NamedTuple):
    """How one side builds its stream, where its progress keeps the offsets, and the CPU
    seconds of its own server."""

    reader: Callable[[str], DataFrame]
    key: str
    """The key of the offsets per bucket or partition in a progress event's source offset."""
    server_cpu: Callable[[], float | None]


def _leasekit_reader(spark: Any, conn: Any, p: dict[str, Any]) -> Callable[[str], DataFrame]:
    def reader(name: str) -> DataFrame:
        return (
            spark.readStream.format("leasekit")
            .option("zookeeper", conn.zookeeper)
            .option("warehouse", conn.warehouse)
            .option("namespace", conn.namespace)
            .option("group", f"b12-peer-{name}-{os.getpid()}")
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", p["batch"])
            .load("orders")
        )

    return reader


def _kafka_reader(spark: Any, bootstrap: str, p: dict[str, Any]) -> Callable[[str], DataFrame]:
    def reader(_name: str) -> DataFrame:
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", p["batch"])
            .load()
        )

    return reader


def _zk_cpu(conn: Any) -> Callable[[], float | None]:
    """The CPU seconds of the warehouse's ZooKeeper server, read as needed."""
    from leasekit import embedded

    server = embedded.status(os.path.join(conn.warehouse, "_zookeeper"))
    pid = None if server is None else server.pid
    return lambda: None if pid is None else process_cpu_seconds(pid)


def _pair(
    spark: Any,
    sides: dict[str, _Side],
    p: dict[str, Any],
    i: int,
    action: str,
    checks: dict[str, bool],
) -> dict[str, Any]:
    """Each side's stream twice, in counterbalanced order; each side's mean figures."""
    timings: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    sums: set[int] = set()
    for n, side in enumerate(counterbalanced(max(i, 0), SIDES)):
        settle(spark)
        spark_cpu, server_cpu = _tree_cpu(spark), sides[side].server_cpu()
        got = _stream(spark, sides[side], action, f"{action}-{i}-{n}")
        got["spark_cpu_s"] = _delta(_tree_cpu(spark), spark_cpu)
        got["server_cpu_s"] = _delta(sides[side].server_cpu(), server_cpu)
        checks["same_records"] &= got.pop("records") == p["records"]
        checks["batches_follow_on"] &= _follow_on(got.pop("offsets"), p["records"])
        sums.add(got.pop("checksum"))
        timings[side].append(got)
    if action == "columns":
        checks["same_rows"] &= len(sums) == 1
    out: dict[str, Any] = {}
    for side, runs in timings.items():
        for key in runs[0]:
            values = [r[key] for r in runs]
            out[f"{side}_{key}"] = None if None in values else sum(values) / len(values)
    out["ratio"] = out["kafka_s"] / out["leasekit_s"]  # > 1: leasekit ahead
    out["wall_ratio"] = out["kafka_wall_s"] / out["leasekit_wall_s"]
    for side in SIDES:
        parts = (out[f"{side}_spark_cpu_s"], out[f"{side}_server_cpu_s"])
        out[f"{side}_cpu_s"] = None if None in parts else sum(parts)
    lk_cpu, kafka_cpu = out["leasekit_cpu_s"], out["kafka_cpu_s"]
    out["cpu_ratio"] = None if not lk_cpu or kafka_cpu is None else kafka_cpu / lk_cpu
    return out


def _batch_action(action: str, df: DataFrame, kafka: bool) -> tuple[int, int]:
    """Run the batch's action: the records it saw and the xor of their row hashes (0 for
    ``count``)."""
    from pyspark.sql import functions as F

    if action == "count":
        return df.count(), 0
    if kafka:
        value = F.from_json(F.col("value").cast("string"), VALUE_DDL)
        df = df.select(value.alias("row")).select("row.*")
    columns = [F.col(c) for c in ORDER_COLUMNS]
    row = df.agg(F.count(F.lit(1)), F.bit_xor(F.xxhash64(*columns))).first()
    return int(row[0]), int(row[1] or 0)


def _stream(spark: Any, side: _Side, action: str, name: str) -> dict[str, Any]:
    """One availableNow query of the whole log or topic: the records and checksum its batches
    saw, each batch's offsets, the sum of its batches' ``triggerExecution`` and its wall
    time."""
    seen: list[tuple[int, int]] = []
    kafka = side.key == TOPIC

    def each(df: Any, _batch_id: int) -> None:
        seen.append(_batch_action(action, df, kafka))

    with tempfile.TemporaryDirectory(prefix="b12-peer-") as checkpoint:
        started = time.perf_counter()
        query = (
            side.reader(name)
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        wall = time.perf_counter() - started
        progress = [json.loads(e.json) for e in query.recentProgress]
    offsets, seconds = [], 0.0
    for event in progress:
        if not event.get("numInputRows"):
            continue
        seconds += event["durationMs"]["triggerExecution"] / 1000
        (source,) = event["sources"]
        start = _ends(source["startOffset"], side.key)
        end = _ends(source["endOffset"], side.key)
        offsets.append({b: (start.get(b, 0), e) for b, e in end.items()})
    checksum = 0
    for _count, xor in seen:
        checksum ^= xor
    return {
        "records": sum(c for c, _ in seen),
        "checksum": checksum,
        "offsets": offsets,
        "s": seconds,
        "wall_s": wall,
        "batches": len(offsets),
    }


def _ends(value: Any, key: str) -> dict[int, int]:
    """The offset per bucket or partition of a progress event's source offset (none: {})."""
    if not value:
        return {}
    parsed = json.loads(value) if isinstance(value, str) else value
    return {int(b): int(o) for b, o in parsed[key].items()}


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 3)


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for action in ACTIONS:
        rows = [r[action] for r in results]
        cpu = [r["cpu_ratio"] for r in rows if r["cpu_ratio"] is not None]
        figures[action] = {
            "ratio": round(median([r["ratio"] for r in rows]), 3),
            "spread": spread([r["ratio"] for r in rows]),
            "wall_ratio": round(median([r["wall_ratio"] for r in rows]), 3),
            "cpu_ratio": round(median(cpu), 3) if cpu else None,
            **{
                f"{side}_{key}": _median_of(rows, f"{side}_{key}")
                for side in SIDES
                for key in ("s", "wall_s", "cpu_s", "spark_cpu_s", "server_cpu_s", "batches")
            },
        }
    count, columns = figures["count"], figures["columns"]
    figures.update(
        ratio=count["ratio"],
        spread=count["spread"],
        cpu_ratio=count["cpu_ratio"],
        leasekit_s=count["leasekit_s"],
        load_average=median([r["load_average"] or 0.0 for r in results]),
        note=(
            f"count {count['ratio']:.3f}, decoded columns {columns['ratio']:.3f} (Kafka time / "
            f"leasekit time; Spark's Kafka source, JSON values decoded by from_json; Kafka "
            f"{count['kafka_s']:.2f} s and {columns['kafka_s']:.2f} s)"
        ),
    )
    return figures


def _median_of(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(median(values), 3) if values else None


def _spark_kafka_jars() -> list[str]:
    """Spark's Kafka source and the jars it needs beyond pyspark's (``make peers``)."""
    from peers.maven import jars

    return [str(path) for path in sorted(jars("spark-kafka").glob("*.jar"))]


BENCHMARK = Benchmark(
    id="B12-peer",
    what=(
        "streaming read (readStream.format('leasekit'), foreachBatch count) of 2,000,000 "
        "records vs Spark's Kafka source over the same rows (JSON values) in a 4-partition topic"
    ),
    metric="ratio",
    target=1.0,
    op=">=",
    run=run,
    target_note="reported (Kafka time / leasekit time); decoded-columns ratio beside it",
    quick_runs=1,
    quick_note="200,000 of 2,000,000 records",
    spark_jars=_spark_kafka_jars,
)
