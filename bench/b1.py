"""B1: a Spark aggregation over a leased snapshot read vs the same query on the floor:
``spark.read.schema(schema).parquet(*files)`` of the same snapshot files (target ratio <= 1.05).

The leasekit side is ``leasekit_frame``: ``lease.read(spark, table)`` over a lease that
``acquire_latest`` pinned once, untimed, before the runs (dropped after them); each timed
run includes the read's ZooKeeper work (lease validity, pins, snapshot lookup) and planning.
The floor is what a user with the same knowledge would write: the exact file list and the
schema leasekit reads with (nothing inferred from footers, nothing listed from directories),
and the same SQL setting leasekit scopes around its read (``LISTING_CONF``: never start a
distributed listing job for a known file list), set once for the session, untimed.
``READER`` names the reader in the results.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from leasekit import testing

from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    SideMeter,
    Timer,
    counterbalanced,
    cpu_figures,
    instrumented,
    load_average,
    log,
    median,
    orders_batch,
    ratio_or_none,
    settle,
    slow_runs,
    spread,
    temp_warehouse,
    timed,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from leasekit import Table
    from leasekit.leases.lease import KvSnapshotLease

__all__ = ["BENCHMARK", "run", "leasekit_frame", "floor_frame", "query"]

FULL = {"rows": 10_000_000, "buckets": 16, "batch_rows": 1_000_000, "seed": 1}
QUICK = {**FULL, "rows": 1_000_000, "batch_rows": 250_000}

READER = "lease.read"
BASELINE = "spark.read.schema(ddl).parquet(*files)"
LEASE_DURATION = "6h"  # outlives a full-size run with room to spare; dropped at the end

BENCH_TARGET = 1.05
CPU_TARGET = 1.02

ROUNDS = 4
"""Counterbalanced rounds per run (``counterbalanced``): each side is timed twice per round, so
a run's figure averages eight timings of each side. Within a run, the timings of one side vary
by about 12% (coefficient of variation, 6-17% run to run) on this shared machine, either side;
their mean by about 4%, a run's ratio by about 6%."""
WARM_UP = 3
"""Untimed queries per side before the runs: the JVM compiles the scan and aggregation's hot
code over the first few, which would make the early runs' sides slower than the later ones."""

LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"
"""Above this many paths Spark lists them with a distributed job (default 32). leasekit sets
it to the maximum around its reads of exact file lists; the floor gets the same setting."""
LISTING_OFF = str(2**31 - 1)
SPARK_DEFAULT_LISTING_THRESHOLD = 32

# Where the leasekit side spends its time before the query (exclusive seconds per label);
# the rest is the Spark query (scan, aggregation, collect) and glue.
PROFILE = {
    "load_table": "leasekit.tables.catalog:load_table",
    "zk_lease_validity": "leasekit.leases.acquire:validity",
    "zk_pins_of": "leasekit.leases.pins:pins_of",
    "zk_get_snapshots": "leasekit.snapshots.catalog:get_snapshots",
    "plan_files_frame": "leasekit.sparkio.snapshot_frames:files_frame",
}


def leasekit_frame(spark: SparkSession, lease: KvSnapshotLease, table: Table) -> DataFrame:
    """The leasekit read being measured: the lease's pinned snapshots of ``table``."""
    return lease.read(spark, table)


def floor_frame(spark: SparkSession, files: list[str], ddl: str) -> DataFrame:
    """The floor: plain Spark over the same snapshot files with the same schema, nothing
    inferred."""
    return spark.read.schema(ddl).parquet(*files)


def query(df: DataFrame) -> dict[str, tuple[int, float]]:
    """The measured aggregation: rows and total amount per status, collected."""
    from pyspark.sql import functions as F

    rows = (
        df.groupBy("status")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("amount"))
        .collect()
    )
    return {r["status"]: (int(r["n"]), float(r["amount"])) for r in rows}


def compare_plans(
    spark: SparkSession, lease: KvSnapshotLease, table: Table, files: list[str], ddl: str
) -> dict[str, Any]:
    """Both sides' query plans side by side: the formatted physical plan (expression and plan
    ids normalised), the scan's partition count and its input files in order."""
    import contextlib
    import io
    import re

    from leasekit.sparkio.session import session_conf

    def normalised(df: DataFrame) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            df.groupBy("status").agg({"amount": "sum", "*": "count"}).explain("formatted")
        text = re.sub(r"#\d+L?", "#_", out.getvalue())
        return re.sub(r"plan_id=\d+", "plan_id=_", text)

    with session_conf(spark, {LISTING_CONF: LISTING_OFF}):
        floor = floor_frame(spark, files, ddl)
    sides = {"leasekit": leasekit_frame(spark, lease, table), "baseline": floor}
    out = {
        name: {
            "plan": normalised(df),
            "partitions": df.rdd.getNumPartitions(),
            "input_files": df.inputFiles(),
        }
        for name, df in sides.items()
    }
    same = {
        "same_plan": out["leasekit"]["plan"] == out["baseline"]["plan"],
        "same_partitions": out["leasekit"]["partitions"] == out["baseline"]["partitions"],
        "same_files_in_order": out["leasekit"]["input_files"] == out["baseline"]["input_files"],
    }
    log(
        f"B1: same physical plan {same['same_plan']}, partitions {out['leasekit']['partitions']}"
        f" / {out['baseline']['partitions']}, same files in order {same['same_files_in_order']}"
    )
    return {
        "physical_plan": out["leasekit"]["plan"],
        "partitions": out["leasekit"]["partitions"],
        **same,
    }


def _same(a: dict[str, tuple[int, float]], b: dict[str, tuple[int, float]]) -> bool:
    return a.keys() == b.keys() and all(
        a[k][0] == b[k][0] and math.isclose(a[k][1], b[k][1], rel_tol=1e-9) for k in a
    )


def _measure(
    spark: SparkSession,
    lease: KvSnapshotLease,
    table: Table,
    files: list[str],
    ddl: str,
    p: dict[str, Any],
    runs: int,
) -> tuple[list[dict[str, Any]], bool]:
    """Warm both sides up, then time them ``runs`` times in alternating order.

    Each side is timed as a whole and split into building the DataFrame (for leasekit: its
    ZooKeeper reads and planning) and running the query.
    """
    from leasekit.sparkio.session import session_conf

    frames = {
        "leasekit": lambda: leasekit_frame(spark, lease, table),
        "baseline": lambda: floor_frame(spark, files, ddl),
    }

    def side(name: str, figures: dict[str, Any]) -> dict[str, tuple[int, float]]:
        # The floor's session setting, untimed; leasekit sets (and restores) it itself.
        settings = {LISTING_CONF: LISTING_OFF} if name == "baseline" else {}
        with session_conf(spark, settings):
            start = time.perf_counter()
            df = frames[name]()
            built = time.perf_counter()
            answer = query(df)
            end = time.perf_counter()
        figures[f"{name}_s"] = end - start
        figures[f"{name}_frame_s"] = built - start
        figures[f"{name}_query_s"] = end - built
        return answer

    log(f"B1: warm-up, {WARM_UP} queries per side (untimed)")
    expected = side("baseline", {})
    agree = sum(n for n, _ in expected.values()) == p["rows"]
    for _ in range(WARM_UP):
        agree = agree and _same(expected, side("leasekit", {}))
        agree = agree and _same(expected, side("baseline", {}))
    results: list[dict[str, Any]] = []
    for i in range(runs):
        figures, same = _one_pair(spark, side, expected, i, runs)
        agree = agree and same
        results.append(figures)
    return results, agree


def _one_pair(
    spark: SparkSession,
    side: Callable[[str, dict[str, Any]], dict[str, tuple[int, float]]],
    expected: dict[str, tuple[int, float]],
    i: int,
    runs: int,
) -> tuple[dict[str, Any], bool]:
    """Run ``i``: each side timed ``2 * ROUNDS`` times in counterbalanced order (A B B A B A A B),
    leasekit's profiled, each after a settle step; a side's figures are the means of its
    timings. (The run's figures, whether every answer is the expected one.)"""
    agree = True
    order = counterbalanced(i, ("leasekit", "baseline"), ROUNDS)
    figures: dict[str, Any] = {"order": order, "load_average": load_average()}
    timer = Timer()
    timings: dict[str, list[dict[str, Any]]] = {"leasekit": [], "baseline": []}
    for name in order:
        settle(spark)
        one: dict[str, Any] = {}
        with SideMeter(spark) as meter:
            if name == "leasekit":
                with instrumented(timer, PROFILE):
                    answer = side(name, one)
            else:
                answer = side(name, one)
        one.update(meter.figures(name))
        timings[name].append(one)
        agree = agree and _same(expected, answer)
    for name, both in timings.items():
        for key in both[0]:
            values = [t[key] for t in both]
            figures[key] = None if None in values else sum(values) / len(values)
        figures[f"{name}_timings_s"] = [round(t[f"{name}_s"], 4) for t in both]
    breakdown = {k: timer.seconds.get(k, 0.0) / len(timings["leasekit"]) for k in PROFILE}
    breakdown["frame_other"] = figures["leasekit_frame_s"] - sum(breakdown.values())
    breakdown["query"] = figures["leasekit_query_s"]
    figures["leasekit_breakdown_s"] = breakdown
    figures["ratio"] = figures["leasekit_s"] / figures["baseline_s"]
    figures["query_ratio"] = figures["leasekit_query_s"] / figures["baseline_query_s"]
    figures["cpu_ratio"] = ratio_or_none(figures["leasekit_cpu_s"], figures["baseline_cpu_s"])
    figures["other_cpu_s"] = _total(
        figures["leasekit_other_cpu_s"], figures["baseline_other_cpu_s"]
    )
    log(
        f"B1: run {i + 1}/{runs} ({' '.join(n[0].upper() for n in order)}): "
        f"leasekit {figures['leasekit_s']:.3f}s (frame "
        f"{figures['leasekit_frame_s'] * 1000:.0f} ms), "
        f"baseline {figures['baseline_s']:.3f}s (frame "
        f"{figures['baseline_frame_s'] * 1000:.0f} ms), "
        f"ratio {figures['ratio']:.3f}, CPU ratio {figures['cpu_ratio'] or 0:.3f}, "
        f"other processes {figures['other_cpu_s'] or 0:.2f} CPU s"
    )
    return figures, agree


def _total(*values: float | None) -> float | None:
    return None if None in values else round(sum(v for v in values if v is not None), 3)


def run(spark: SparkSession, quick: bool, runs: int) -> Outcome:
    from leasekit.sparkio.frames import table_ddl

    p = QUICK if quick else FULL
    rng = np.random.default_rng(p["seed"])
    ids = rng.permutation(p["rows"]).astype(np.int64)
    with temp_warehouse("B1") as conn:
        table = conn.create_table("orders", ORDERS_DDL, "id", buckets=p["buckets"])

        def load() -> None:
            for start in range(0, p["rows"], p["batch_rows"]):
                table.append(orders_batch(rng, ids[start : start + p["batch_rows"]]))

        log(f"B1: appending {p['rows']:,} rows in batches of {p['batch_rows']:,}")
        append_s, _ = timed(load)
        log(f"B1: appended in {append_s:.1f}s; taking the snapshot")
        snapshot_s, snaps = timed(lambda: table.snapshot(spark))
        files = [
            testing.context(conn).warehouse.to_spark(f) for s in snaps.values() for f in s.files
        ]
        rows = sum(s.row_count for s in snaps.values())
        ddl = table_ddl(table)  # the schema leasekit reads with, given to the floor
        log(f"B1: snapshot of {rows:,} rows in {len(files)} files took {snapshot_s:.1f}s")

        lease = conn.lease(duration=LEASE_DURATION)
        acquire_s, acquired = timed(lambda: lease.acquire_latest(table.name))
        pinned = {tb.bucket: sid for tb, sid in acquired.acquired.items()}
        log(
            f"B1: lease {lease.lease_id} pinned {len(pinned)} buckets in {acquire_s * 1000:.0f} ms "
            "(untimed)"
        )
        try:
            plans = compare_plans(spark, lease, table, files, ddl)
            results, agree = _measure(spark, lease, table, files, ddl, p, runs)
        finally:
            lease.drop()
    figures = {**_summary(results, files, rows, acquire_s, append_s, snapshot_s), "plans": plans}
    parameters = {
        **p,
        "runs": runs,
        "rounds_per_run": ROUNDS,
        "warm_up_queries_per_side": WARM_UP,
        "quick": quick,
        "reader": READER,
        "query": "groupBy(status).agg(count, sum(amount)).collect()",
        "baseline": BASELINE,
    }
    checks = {
        "results_equal": agree,
        "same_plan_partitions_and_files": plans["same_plan"]
        and plans["same_partitions"]
        and plans["same_files_in_order"],
        "lease_pins_the_snapshot": not acquired.unavailable
        and pinned == {tb.bucket: s.snapshot_id for tb, s in snaps.items()},
        f"cpu_ratio_at_most_{CPU_TARGET}": figures["cpu_ratio"] is not None
        and figures["cpu_ratio"] <= CPU_TARGET,
    }
    return Outcome(
        round(median([r["ratio"] for r in results]), 3), figures, results, parameters, checks
    )


def _summary(
    results: list[dict[str, Any]],
    files: list[str],
    rows: int,
    acquire_s: float,
    append_s: float,
    snapshot_s: float,
) -> dict[str, Any]:
    """The figures over every run (medians) with the setup's sizes and times."""
    leasekit_s = median([r["leasekit_s"] for r in results])
    baseline_s = median([r["baseline_s"] for r in results])
    ratios = [r["ratio"] for r in results]
    figures = {
        "leasekit_s": round(leasekit_s, 3),
        "baseline_s": round(baseline_s, 3),
        "spread": spread(ratios),
        "ratio_of_medians": round(leasekit_s / baseline_s, 3),
        "query_ratio": round(median([r["query_ratio"] for r in results]), 3),
        "leasekit_frame_s": round(median([r["leasekit_frame_s"] for r in results]), 4),
        "baseline_frame_s": round(median([r["baseline_frame_s"] for r in results]), 4),
        "leasekit_breakdown_s": {
            k: round(median([r["leasekit_breakdown_s"][k] for r in results]), 4)
            for k in results[0]["leasekit_breakdown_s"]
        },
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
        **cpu_figures(results),
        "other_cpu_s": [r["other_cpu_s"] for r in results],
        "leasekit_gc_s": round(median([r["leasekit_gc_s"] or 0.0 for r in results]), 3),
        "baseline_gc_s": round(median([r["baseline_gc_s"] or 0.0 for r in results]), 3),
        "slow_runs": slow_runs(results, "ratio", BENCH_TARGET, "<="),
        "reader": READER,
        "baseline": BASELINE,
        "baseline_listing_conf": f"{LISTING_CONF}={LISTING_OFF} (as leasekit sets around its read)",
        "listing_conf_matters": len(files) > SPARK_DEFAULT_LISTING_THRESHOLD,
        "lease_acquire_s": round(acquire_s, 3),
        "rows": rows,
        "snapshot_files": len(files),
        "append_s": round(append_s, 1),
        "snapshot_s": round(snapshot_s, 1),
    }
    return figures


BENCHMARK = Benchmark(
    id="B1",
    what=(
        "Spark aggregation over a leased snapshot (lease.read) vs "
        "spark.read.schema(schema).parquet(files), the floor"
    ),
    metric="ratio",
    target=BENCH_TARGET,
    op="<=",
    target_note=f"CPU ratio <= {CPU_TARGET}",
    run=run,
    quick_runs=1,  # a run times each side eight times
    quick_note="1,000,000 of 10,000,000 rows",
)
