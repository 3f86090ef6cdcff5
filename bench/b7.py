"""B7: ``table.snapshot()`` vs a hand-written Spark dedupe of the same log segments, writing
the same number of files (target ratio <= 1.2).

The hand-written side is the floor a user with the same knowledge would write: the segment
list from ZooKeeper, the segment files read with the log schema leasekit reads them with
(nothing inferred from footers) and leasekit's listing setting (no distributed listing job
for a known file list, set once for the session, untimed), offsets from each segment's base
offset + ``_metadata.row_index``, ``max_by`` per key, deletes dropped, and the rows
repartitioned by bucket before the aggregation so that, like leasekit (which partitions its
compaction by bucket), it writes one file per bucket. Both sides' file counts are recorded
and checked equal.

Each run builds a fresh table (untimed), then times both sides over its log, in
alternating order; the ratio is leasekit / hand-written.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from leasekit import testing

from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    Timer,
    alternate,
    cpu_delta,
    cpu_figures,
    cpu_seconds,
    instrumented,
    load_average,
    log,
    median,
    orders_batch,
    ratio_or_none,
    settle,
    spread,
    temp_warehouse,
    timed,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit import Table
    from leasekit.connection import Connection

__all__ = ["BENCHMARK", "run", "handwritten_dedupe", "Workload", "workload"]

FULL = {
    "records": 2_000_000,
    "keys": 1_000_000,
    "buckets": 16,
    "delete_fraction": 0.05,
    "batch_rows": 500_000,
    "seed": 7,
}
QUICK = {**FULL, "records": 200_000, "keys": 100_000, "batch_rows": 50_000}

# Where table.snapshot() spends its time (exclusive seconds per label); the rest is the
# Spark job (compaction and Parquet write) plus glue.
PROFILE = {
    "zk_read_states": "leasekit.sparkio.compact:read_states",
    "zk_plan_read": "leasekit.sparkio.compact:plan_read",
    "plan_source_frames": "leasekit.sparkio.compact:source_frames",
    "plan_kv_state": "leasekit.sparkio.compact:kv_state",
    "file_listing": "leasekit.warehouse:Warehouse.list",
    "footer_reads": "leasekit.warehouse:Warehouse.parquet_metadata",
    "zk_register": "leasekit.sparkio.compact:register",
}

LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"
"""Above this many paths Spark lists them with a distributed job (default 32); leasekit sets
it to the maximum around its reads of exact file lists, and so does the floor."""
LISTING_OFF = str(2**31 - 1)
BASELINE = (
    "read.schema(log ddl).parquet(segment files), repartition(buckets, bucket), "
    "groupBy(bucket, id).agg(max_by(struct, offset)), write.partitionBy(bucket)"
)


@dataclass(frozen=True)
class Workload:
    """A seeded log: upsert and delete batches in log order, and the state they leave."""

    batches: list[tuple[str, pa.Table]]
    """``("upsert", rows)`` or ``("delete", keys)`` in the order they are written."""
    live_rows: int
    """Keys alive at the end (last write an upsert)."""
    id_sum: int
    """Sum of the live keys."""
    amount_sum: float
    """Sum of ``amount`` over the live rows."""


def workload(
    records: int, keys: int, delete_fraction: float, batch_rows: int, seed: int
) -> Workload:
    """``keys`` distinct inserts, then upserts of repeated keys mixed with deletes."""
    rng = np.random.default_rng(seed)
    batches: list[tuple[str, pa.Table]] = []
    first = rng.permutation(keys).astype(np.int64)
    for start in range(0, keys, batch_rows):
        batches.append(("upsert", orders_batch(rng, first[start : start + batch_rows])))
    rest = records - keys
    deletes = int(records * delete_fraction)
    chunks = max(1, math.ceil(rest / batch_rows))
    for i in range(chunks):
        lo, hi = rest * i // chunks, rest * (i + 1) // chunks
        n_delete = deletes * (i + 1) // chunks - deletes * i // chunks
        upsert_ids = rng.integers(0, keys, (hi - lo) - n_delete, dtype=np.int64)
        batches.append(("upsert", orders_batch(rng, upsert_ids)))
        batches.append(
            ("delete", pa.table({"id": rng.integers(0, keys, n_delete, dtype=np.int64)}))
        )
    # Expected end state: the last write per key wins (a key always lives in one bucket,
    # and appends keep the input order within a bucket).
    ids = np.concatenate([b.column("id").to_numpy() for _, b in batches])
    deleted = np.concatenate([np.full(b.num_rows, op == "delete") for op, b in batches])
    amounts = np.concatenate(
        [
            b.column("amount").to_numpy() if op == "upsert" else np.zeros(b.num_rows)
            for op, b in batches
        ]
    )
    _, last = np.unique(ids[::-1], return_index=True)
    last = len(ids) - 1 - last
    live = last[~deleted[last]]
    return Workload(batches, int(live.size), int(ids[live].sum()), float(amounts[live].sum()))


def build(conn: Connection, name: str, work: Workload, buckets: int) -> Table:
    """A new table holding ``work``'s log (no snapshot yet)."""
    table = conn.create_table(name, ORDERS_DDL, "id", buckets=buckets)
    for op, rows in work.batches:
        if op == "upsert":
            table.append(rows)
        else:
            table.delete(rows)
    return table


def handwritten_dedupe(spark: SparkSession, table: Table, out_dir: str, log_ddl: str) -> float:
    """What an engineer with leasekit's knowledge would write: latest record per key over the
    segment files (read with the log schema ``log_ddl``), deletes dropped, one Parquet file per
    bucket. Returns the metadata-listing seconds."""
    from pyspark.sql import functions as F

    from leasekit.log.segments import list_segments

    listing, by_bucket = timed(lambda: list_segments(table, range(table.num_buckets)))
    segments = [seg for segs in by_bucket.values() for seg in segs]
    to_spark = table.context.warehouse.to_spark
    manifest = spark.createDataFrame(
        [(os.path.basename(s.file), s.table_bucket.bucket, s.base_offset) for s in segments],
        "file_name STRING, bucket INT, base_offset BIGINT",
    )
    values = [c for c in table.schema.names if c != "id"]
    records = (
        spark.read.schema(log_ddl)
        .parquet(*[to_spark(s.file) for s in segments])
        .withColumn("file_name", F.col("_metadata.file_name"))
        .withColumn("offset", F.col("_metadata.row_index"))
        .join(F.broadcast(manifest), "file_name")
        .withColumn("offset", F.col("base_offset") + F.col("offset"))
        .repartition(table.num_buckets, "bucket")  # one task, hence one file, per bucket
    )
    latest = records.groupBy("bucket", "id").agg(
        F.max_by(F.struct(*values, "_op"), "offset").alias("last")
    )
    live = latest.where(F.col("last._op") != "delete").select(
        "bucket", "id", *[F.col(f"last.{v}").alias(v) for v in values]
    )
    live.write.partitionBy("bucket").parquet(out_dir)
    return listing


def _totals(df: Any) -> tuple[int, int, float]:
    from pyspark.sql import functions as F

    row = df.agg(F.count(F.lit(1)), F.sum("id"), F.sum("amount")).first()
    return int(row[0]), int(row[1] or 0), float(row[2] or 0.0)


def _agrees(totals: tuple[int, int, float], work: Workload) -> bool:
    rows, id_sum, amount_sum = totals
    return (rows, id_sum) == (work.live_rows, work.id_sum) and math.isclose(
        amount_sum, work.amount_sum, rel_tol=1e-9
    )


def _one_run(
    spark: SparkSession, conn: Connection, work: Workload, p: dict[str, Any], index: int, label: str
) -> dict[str, Any]:
    ctx = testing.context(conn)
    from leasekit.log.segments import list_segments, log_schema
    from leasekit.spark import read_snapshots
    from leasekit.sparkio.session import session_conf
    from leasekit.tables.schema import to_ddl

    build_s, table = timed(lambda: build(conn, f"orders_{label}", work, p["buckets"]))
    log_ddl = to_ddl(log_schema(table))  # the schema leasekit reads segments with
    out_dir = ctx.warehouse.to_spark(ctx.warehouse.uri(f"bench/{label}/handwritten"))
    figures: dict[str, Any] = {
        "build_s": build_s,
        "order": alternate(index, ("leasekit", "baseline")),
        "load_average": load_average(),
    }
    timer = Timer()
    snaps: dict[Any, Any] = {}
    for side in figures["order"]:
        settle(spark)
        cpu = cpu_seconds(spark)
        if side == "leasekit":
            with instrumented(timer, PROFILE):
                figures["leasekit_s"], snaps = timed(lambda: table.snapshot(spark))
        else:
            with session_conf(spark, {LISTING_CONF: LISTING_OFF}):  # the floor's session setting
                figures["baseline_s"], figures["baseline_listing_s"] = timed(
                    lambda: handwritten_dedupe(spark, table, out_dir, log_ddl)
                )
        figures[f"{side}_cpu_s"] = cpu_delta(spark, cpu)
    breakdown = {k: timer.seconds.get(k, 0.0) for k in PROFILE}
    breakdown["spark_job_and_glue"] = figures["leasekit_s"] - sum(breakdown.values())
    figures["leasekit_breakdown_s"] = breakdown
    figures["ratio"] = figures["leasekit_s"] / figures["baseline_s"]
    figures["cpu_ratio"] = ratio_or_none(figures["leasekit_cpu_s"], figures["baseline_cpu_s"])
    ids = {tb: s.snapshot_id for tb, s in snaps.items()}
    figures["leasekit_rows"] = sum(s.row_count for s in snaps.values())
    figures["leasekit_files"] = sum(len(s.files) for s in snaps.values())
    figures["baseline_files"] = sum(
        1 for e in ctx.warehouse.list(f"bench/{label}/handwritten") if e.path.endswith(".parquet")
    )
    figures["segment_files"] = sum(
        len(segs) for segs in list_segments(table, range(table.num_buckets)).values()
    )
    lk_totals = _totals(read_snapshots(spark, table, ids))
    base_totals = _totals(spark.read.parquet(out_dir))
    figures["baseline_rows"] = base_totals[0]
    figures["leasekit_correct"] = (
        _agrees(lk_totals, work) and figures["leasekit_rows"] == work.live_rows
    )
    figures["baseline_correct"] = _agrees(base_totals, work)
    conn.drop_table(table.name)
    ctx.warehouse.delete_dir(f"bench/{label}")
    return figures


def run(spark: SparkSession, quick: bool, runs: int, warehouse: Any = None) -> Outcome:
    """B7 on a temporary local warehouse, or on the connection ``warehouse(spark)`` gives
    (B7-S3: an S3 warehouse)."""
    p = QUICK if quick else FULL
    log(f"B7: generating {p['records']:,} log records over {p['keys']:,} keys")
    work = workload(p["records"], p["keys"], p["delete_fraction"], p["batch_rows"], p["seed"])
    log(f"B7: {len(work.batches)} write batches; {work.live_rows:,} live keys expected")
    results: list[dict[str, Any]] = []
    with temp_warehouse("B7") if warehouse is None else warehouse(spark) as conn:
        log("B7: warm-up run (untimed)")
        warm = _one_run(spark, conn, work, p, 0, "warmup")
        log(f"B7: warm-up leasekit {warm['leasekit_s']:.2f}s, baseline {warm['baseline_s']:.2f}s")
        for i in range(runs):
            figures = _one_run(spark, conn, work, p, i, f"run{i}")
            log(
                f"B7: run {i + 1}/{runs} ({' then '.join(figures['order'])}): "
                f"build {figures['build_s']:.1f}s, leasekit {figures['leasekit_s']:.2f}s "
                f"({figures['leasekit_files']} files), baseline {figures['baseline_s']:.2f}s "
                f"({figures['baseline_files']} files), ratio {figures['ratio']:.3f}"
            )
            results.append(figures)
    figures, checks = _summary(results)
    parameters = {
        **p,
        "runs": runs,
        "quick": quick,
        "segments_per_bucket": len(work.batches),
        "baseline": BASELINE,
    }
    return Outcome(
        round(median([r["ratio"] for r in results]), 3), figures, results, parameters, checks
    )


def _summary(results: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, bool]]:
    """The figures over every run (medians, the first run's counts) and the checks."""
    breakdown = {
        k: round(median([r["leasekit_breakdown_s"][k] for r in results]), 4)
        for k in results[0]["leasekit_breakdown_s"]
    }
    leasekit_s = median([r["leasekit_s"] for r in results])
    baseline_s = median([r["baseline_s"] for r in results])
    figures = {
        "leasekit_s": round(leasekit_s, 3),
        "baseline_s": round(baseline_s, 3),
        "spread": spread([r["ratio"] for r in results]),
        "ratio_of_medians": round(leasekit_s / baseline_s, 3),
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
        **cpu_figures(results),
        "baseline_listing_s": round(median([r["baseline_listing_s"] for r in results]), 4),
        "rows": results[0]["leasekit_rows"],
        "segment_files": results[0]["segment_files"],
        "leasekit_files": results[0]["leasekit_files"],
        "baseline_files": results[0]["baseline_files"],
        "leasekit_breakdown_s": breakdown,
        "baseline": BASELINE,
        "note": (
            f"{results[0]['leasekit_files']} files written by leasekit, "
            f"{results[0]['baseline_files']} by the baseline"
        ),
    }
    checks = {
        "row_counts_equal": all(r["leasekit_rows"] == r["baseline_rows"] for r in results),
        "file_counts_equal": all(r["leasekit_files"] == r["baseline_files"] for r in results),
        "leasekit_matches_expected": all(r["leasekit_correct"] for r in results),
        "baseline_matches_expected": all(r["baseline_correct"] for r in results),
    }
    return figures, checks


BENCHMARK = Benchmark(
    id="B7",
    what=(
        "table.snapshot() vs a hand-written Spark dedupe of the same log, writing the same number "
        "of files"
    ),
    metric="ratio",
    target=1.2,
    op="<=",
    run=run,
    quick_runs=1,
    quick_note="200,000 of 2,000,000 records",
)
