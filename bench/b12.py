"""B12: a streaming read of the change log (``readStream.format("leasekit")``, ``foreachBatch``)
against ``spark.read.parquet`` of the same segment files in the same batches (target: ratio of
records per second >= 0.8).

A 4-bucket table gets 2,000,000 orders in appends of 100,000 (about 80 segment files of 25,000
records). leasekit: a new query with its own group, ``startingOffsets`` earliest and
``maxRecordsPerTrigger`` 200,000, triggered ``availableNow``, whose ``foreachBatch`` runs the
batch's action. Its time is the sum of its batches' ``triggerExecution`` (Spark's own measure
behind ``processedRowsPerSecond``: getting offsets and committing the last batch's to the
group, planning, reading, the action, the checkpoint); the wall time from ``start()`` to the
end, with the query's start (Python processes, the group join), is reported beside it as
``wall_ratio``. The floor: with the
segment list in hand (the same knowledge) and each batch's offsets per bucket (read from the
query's progress), the same batches as plain Spark reads: ``spark.read.schema(...).parquet`` of
the files a batch overlaps, restricted to its rows by ``_metadata.row_index``, with the same
action. Two actions, each its own ratio: ``count`` (the figure the target names: Spark prunes every
column on the floor's side, while a Python data source has no column pruning and hands Spark
every column) and ``columns`` (a checksum over every column, what a pipeline that uses the
records pays). Both sides alternate within each run; CPU counts the Spark JVM and every process
under it (the Python workers do the data source's reading).
"""

from __future__ import annotations

import functools
import json
import os
from functools import reduce
from typing import TYPE_CHECKING, Any

import numpy as np

from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    alternate,
    load_average,
    log,
    median,
    orders_batch,
    settle,
    spread,
    temp_warehouse,
    timed,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["BENCHMARK", "run"]

FULL = {"records": 2_000_000, "buckets": 4, "append_rows": 100_000, "batch": 200_000}
QUICK = {**FULL, "records": 200_000, "append_rows": 20_000, "batch": 20_000}
ACTIONS = ("count", "columns")


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    from leasekit.log.segments import list_segments

    if spark is None:
        raise ValueError("B12 needs a SparkSession")
    import leasekit as lk

    lk.spark.register(spark)
    p = QUICK if quick else FULL
    checks = {"same_records": True, "batches_follow_on": True}
    results: list[dict[str, Any]] = []
    with temp_warehouse("B12") as conn:
        table = conn.create_table("orders", ORDERS_DDL, "id", buckets=p["buckets"])
        rng = np.random.default_rng(12)
        for start in range(0, p["records"], p["append_rows"]):
            table.append(orders_batch(rng, np.arange(start, start + p["append_rows"])))
        segments = list_segments(table, range(p["buckets"]))
        files = sum(len(s) for s in segments.values())
        log(f"B12: {p['records']:,} records in {files} segment files")
        options = {
            "zookeeper": conn.zookeeper,
            "warehouse": conn.warehouse,
            "namespace": conn.namespace,
        }
        for i in range(-1, runs):  # run -1 warms both sides up, untimed
            row: dict[str, Any] = {"load_average": load_average()}
            for action in ACTIONS:
                row[action] = _pair(spark, conn, options, segments, p, i, action, checks)
            if i >= 0:
                results.append(row)
                log(
                    f"B12: run {i + 1}/{runs}: "
                    + ", ".join(f"{a} ratio {row[a]['ratio']:.3f}" for a in ACTIONS)
                )
    figures = _summary(results, files)
    return Outcome(figures["ratio"], figures, results, {**p, "runs": runs, "quick": quick}, checks)


def _pair(
    spark: Any,
    conn: Any,
    options: dict[str, str],
    segments: dict[int, list[Any]],
    p: dict[str, Any],
    i: int,
    action: str,
    checks: dict[str, bool],
) -> dict[str, Any]:
    """One leasekit run and one floor run of ``action``, in alternating order."""
    out: dict[str, Any] = {}
    batches: list[dict[int, tuple[int, int]]] = []
    order = alternate(max(i, 0), ["leasekit", "floor"])
    if order[0] == "floor":  # the floor needs the batches: a first stream, untimed
        batches = _stream(spark, options, p, f"plan-{action}-{i}", action)[1]
    for side in order:
        settle(spark)
        cpu = _tree_cpu(spark)
        if side == "leasekit":
            (wall, (seen, planned, seconds)) = timed(
                lambda: _stream(spark, options, p, f"run-{action}-{i}", action)
            )
            out["leasekit_wall_s"] = wall
            batches = batches or planned
            checks["same_records"] &= seen == p["records"]
        else:
            seconds, seen = timed(functools.partial(_floor, spark, segments, batches, action))
            checks["same_records"] &= seen == p["records"]
        out[f"{side}_s"] = seconds
        out[f"{side}_cpu_s"] = _delta(_tree_cpu(spark), cpu)
    checks["batches_follow_on"] &= _follow_on(batches, p["records"])
    out["batches"] = len(batches)
    out["ratio"] = out["floor_s"] / out["leasekit_s"]  # records per second, leasekit / floor
    out["wall_ratio"] = out["floor_s"] / out["leasekit_wall_s"]  # with the query's start
    lk_cpu, floor_cpu = out["leasekit_cpu_s"], out["floor_cpu_s"]
    out["cpu_ratio"] = None if not lk_cpu or floor_cpu is None else floor_cpu / lk_cpu
    return out


def _batch_action(action: str, df: DataFrame, columns: list[str]) -> int:
    """Run the batch's action; the number of records it saw."""
    from pyspark.sql import functions as F

    if action == "count":
        return df.count()
    row = df.agg(F.count(F.lit(1)), F.bit_xor(F.xxhash64(*[F.col(c) for c in columns]))).first()
    return int(row[0])


def _stream(
    spark: Any, options: dict[str, str], p: dict[str, Any], name: str, action: str
) -> tuple[int, list[dict[int, tuple[int, int]]], float]:
    """A stream read of the whole log in batches of ``p["batch"]`` records: the records its
    batches saw, each batch's offsets per bucket, and the seconds its batches took (each
    trigger's ``triggerExecution``: planning, reading, the action and the checkpoint, as
    Spark's ``processedRowsPerSecond`` counts; the query's start is not a batch), all from the
    query's progress."""
    import tempfile

    from pyspark.sql.streaming import StreamingQuery

    seen = []
    columns = ["_bucket", "_offset", "_timestamp", "_op", *ORDER_COLUMNS]

    def each(df: Any, batch_id: int) -> None:
        seen.append(_batch_action(action, df, columns))

    with tempfile.TemporaryDirectory(prefix="b12-") as checkpoint:
        query: StreamingQuery = (
            spark.readStream.format("leasekit")
            .options(**options)
            .option("group", f"b12-{name}-{os.getpid()}")
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", p["batch"])
            .load("orders")
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = [json.loads(e.json) for e in query.recentProgress]
    batches = []
    seconds = 0.0
    for event in progress:
        if not event.get("numInputRows"):
            continue
        seconds += event["durationMs"]["triggerExecution"] / 1000
        (source,) = event["sources"]
        start = _offset(source["startOffset"]).get("buckets", {})
        end = _offset(source["endOffset"])["buckets"]
        batches.append({int(b): (int(start.get(b, 0)), int(e)) for b, e in end.items()})
    return sum(seen), batches, seconds


def _offset(value: Any) -> dict[str, Any]:
    """A source offset of a progress event (a JSON string or already an object; none: {})."""
    if not value:
        return {}
    return json.loads(value) if isinstance(value, str) else value


ORDER_COLUMNS = [c.split()[0] for c in ORDERS_DDL.split(", ")]


def _floor(
    spark: Any,
    segments: dict[int, list[Any]],
    batches: list[dict[int, tuple[int, int]]],
    action: str,
) -> int:
    """The same batches as plain Spark reads of the segment files they overlap: files a batch
    reads whole as they are, the others restricted to its rows by row index; the records the
    actions saw."""
    from pyspark.sql import functions as F

    ddl = ORDERS_DDL.replace(" NOT NULL", "") + ", _op STRING"
    seen = 0
    for batch in batches:
        whole, parts, keep = [], [], []
        for bucket, (lo, hi) in batch.items():
            for seg in segments[bucket]:
                first, last = seg.base_offset, seg.end_offset
                if last <= lo or first >= hi:
                    continue
                path = seg.file if "://" in seg.file else f"file://{seg.file}"
                if lo <= first and last <= hi:
                    whole.append(path)
                    continue
                parts.append(path)
                keep.append(
                    (F.col("_metadata.file_name") == path.rsplit("/", 1)[1])
                    & F.col("_metadata.row_index").between(
                        max(lo, first) - first, min(hi, last) - first - 1
                    )
                )
        frames = [spark.read.schema(ddl).parquet(*whole)] if whole else []
        if parts:
            read = spark.read.schema(ddl).parquet(*parts)
            frames.append(read.where(reduce(lambda a, b: a | b, keep)))
        if frames:
            df = reduce(lambda a, b: a.unionByName(b), frames)
            seen += _batch_action(action, df, [*ORDER_COLUMNS, "_op"])
    return seen


def _follow_on(batches: list[dict[int, tuple[int, int]]], records: int) -> bool:
    """Whether the batches cover each bucket's offsets from 0 without gap or overlap."""
    reached: dict[int, int] = {}
    for batch in batches:
        for bucket, (lo, hi) in batch.items():
            if lo != reached.get(bucket, 0) or hi < lo:
                return False
            reached[bucket] = hi
    return sum(reached.values()) == records


def _tree_cpu(spark: Any) -> float | None:
    """CPU seconds of the Spark driver JVM and every process under it (Python workers, the
    stream reader's process) plus this process."""
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return None
    root = int(jvm.java.lang.ProcessHandle.current().pid())
    tick = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = cpu.get(os.getpid(), 0.0), [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 3)


def _summary(results: list[dict[str, Any]], files: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"segment_files": files}
    for action in ACTIONS:
        ratios = [r[action]["ratio"] for r in results]
        cpu = [r[action]["cpu_ratio"] for r in results if r[action]["cpu_ratio"] is not None]
        figures[action] = {
            "ratio": round(median(ratios), 3),
            "spread": spread(ratios),
            "cpu_ratio": round(median(cpu), 3) if cpu else None,
            "leasekit_s": round(median([r[action]["leasekit_s"] for r in results]), 3),
            "wall_ratio": round(median([r[action]["wall_ratio"] for r in results]), 3),
            "leasekit_wall_s": round(median([r[action]["leasekit_wall_s"] for r in results]), 3),
            "floor_s": round(median([r[action]["floor_s"] for r in results]), 3),
            "batches": results[0][action]["batches"] if results else 0,
        }
    figures["ratio"] = figures["count"]["ratio"]
    figures["spread"] = figures["count"]["spread"]
    figures["cpu_ratio"] = figures["count"]["cpu_ratio"]
    figures["load_average"] = median([r["load_average"] or 0.0 for r in results])
    figures["note"] = (
        f"count {figures['count']['ratio']:.3f}, every column {figures['columns']['ratio']:.3f} "
        f"(records/s vs spark.read.parquet of the same files in the same batches)"
    )
    return figures


BENCHMARK = Benchmark(
    id="B12",
    what=(
        "streaming read (readStream.format('leasekit'), foreachBatch count) of 2,000,000 "
        "records vs spark.read.parquet of the same segment files in the same batches"
    ),
    metric="ratio",
    target=0.8,
    op=">=",
    run=run,
    target_note="every-column checksum ratio reported beside it",
    quick_runs=1,
    quick_note="200,000 of 2,000,000 records",
)
