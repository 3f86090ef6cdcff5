"""B1: a Spark aggregation over a leased snapshot read vs the same query on
``spark.read.parquet`` of the same snapshot files (target ratio <= 1.10).

The leasekit side is ``leasekit_frame``: ``lease.read(spark, table)`` over a lease that
``acquire_latest`` pinned once, untimed, before the runs (dropped after them); each timed
run includes the read's ZooKeeper work (lease validity, pins, snapshot lookup) and planning.
``READER`` names the reader in the results.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    alternate,
    cpu_delta,
    cpu_figures,
    cpu_seconds,
    load_average,
    log,
    median,
    orders_batch,
    ratio_or_none,
    settle,
    temp_warehouse,
    timed,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from leasekit.leases.handle import KvSnapshotLease
    from leasekit.tables.catalog import Table

__all__ = ["BENCHMARK", "run", "leasekit_frame", "query"]

FULL = {"rows": 10_000_000, "buckets": 16, "batch_rows": 1_000_000, "seed": 1}
QUICK = {**FULL, "rows": 1_000_000, "batch_rows": 250_000}

READER = "lease.read"
LEASE_DURATION = "6h"  # outlives a full-size run with room to spare; dropped at the end


def leasekit_frame(spark: SparkSession, lease: KvSnapshotLease, table: Table) -> DataFrame:
    """The leasekit read being measured: the lease's pinned snapshots of ``table``."""
    return lease.read(spark, table)


def raw_frame(spark: SparkSession, files: list[str]) -> DataFrame:
    """The baseline: plain Spark over the same snapshot files."""
    return spark.read.parquet(*files)


def query(df: DataFrame) -> dict[str, tuple[int, float]]:
    """The measured aggregation: rows and total amount per status, collected."""
    from pyspark.sql import functions as F

    rows = df.groupBy("status").agg(F.count(F.lit(1)).alias("n"), F.sum("amount").alias("amount")).collect()
    return {r["status"]: (int(r["n"]), float(r["amount"])) for r in rows}


def _same(a: dict[str, tuple[int, float]], b: dict[str, tuple[int, float]]) -> bool:
    return a.keys() == b.keys() and all(
        a[k][0] == b[k][0] and math.isclose(a[k][1], b[k][1], rel_tol=1e-9) for k in a
    )


def _measure(spark: SparkSession, lease: KvSnapshotLease, table: Table, files: list[str],
             p: dict[str, Any], runs: int) -> tuple[list[dict[str, Any]], bool]:
    """Warm both sides up, then time them ``runs`` times in alternating order."""
    sides = {
        "leasekit": lambda: query(leasekit_frame(spark, lease, table)),
        "baseline": lambda: query(raw_frame(spark, files)),
    }
    log("B1: warm-up (untimed)")
    expected = sides["baseline"]()
    warm = sides["leasekit"]()
    results: list[dict[str, Any]] = []
    agree = _same(expected, warm) and sum(n for n, _ in expected.values()) == p["rows"]
    for i in range(runs):
        figures: dict[str, Any] = {"order": alternate(i, ("leasekit", "baseline")),
                                   "load_average": load_average()}
        for side in figures["order"]:
            settle(spark)
            cpu = cpu_seconds(spark)
            figures[f"{side}_s"], answer = timed(sides[side])
            figures[f"{side}_cpu_s"] = cpu_delta(spark, cpu)
            agree = agree and _same(expected, answer)
        figures["ratio"] = figures["leasekit_s"] / figures["baseline_s"]
        figures["cpu_ratio"] = ratio_or_none(figures["leasekit_cpu_s"], figures["baseline_cpu_s"])
        log(f"B1: run {i + 1}/{runs} ({' then '.join(figures['order'])}): "
            f"leasekit {figures['leasekit_s']:.3f}s, baseline {figures['baseline_s']:.3f}s, "
            f"ratio {figures['ratio']:.3f}")
        results.append(figures)
    return results, agree


def run(spark: SparkSession, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    rng = np.random.default_rng(p["seed"])
    ids = rng.permutation(p["rows"]).astype(np.int64)
    with temp_warehouse("B1") as conn:
        table = conn.create_table("orders", ORDERS_DDL, "id", buckets=p["buckets"])

        def load() -> None:
            for start in range(0, p["rows"], p["batch_rows"]):
                table.append(orders_batch(rng, ids[start:start + p["batch_rows"]]))

        log(f"B1: appending {p['rows']:,} rows in batches of {p['batch_rows']:,}")
        append_s, _ = timed(load)
        log(f"B1: appended in {append_s:.1f}s; taking the snapshot")
        snapshot_s, snaps = timed(lambda: table.snapshot(spark))
        files = [f for s in snaps.values() for f in s.files]
        rows = sum(s.row_count for s in snaps.values())
        log(f"B1: snapshot of {rows:,} rows in {len(files)} files took {snapshot_s:.1f}s")

        lease = conn.lease(duration=LEASE_DURATION)
        acquire_s, acquired = timed(lambda: lease.acquire_latest(table.name))
        pinned = {tb.bucket: sid for tb, sid in acquired.acquired.items()}
        log(f"B1: lease {lease.lease_id} pinned {len(pinned)} buckets in {acquire_s * 1000:.0f} ms (untimed)")
        try:
            results, agree = _measure(spark, lease, table, files, p, runs)
        finally:
            lease.drop()
    leasekit_s = median([r["leasekit_s"] for r in results])
    baseline_s = median([r["baseline_s"] for r in results])
    figures = {
        "leasekit_s": round(leasekit_s, 3),
        "baseline_s": round(baseline_s, 3),
        "ratio_of_medians": round(leasekit_s / baseline_s, 3),
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        **cpu_figures(results),
        "reader": READER,
        "lease_acquire_s": round(acquire_s, 3),
        "rows": rows,
        "snapshot_files": len(files),
        "append_s": round(append_s, 1),
        "snapshot_s": round(snapshot_s, 1),
    }
    parameters = {**p, "runs": runs, "quick": quick, "reader": READER,
                  "query": "groupBy(status).agg(count, sum(amount)).collect()"}
    checks = {
        "results_equal": agree,
        "lease_pins_the_snapshot": not acquired.unavailable
        and pinned == {tb.bucket: s.snapshot_id for tb, s in snaps.items()},
    }
    return Outcome(round(median([r["ratio"] for r in results]), 3), figures, results, parameters, checks)


BENCHMARK = Benchmark(
    id="B1",
    what="Spark aggregation over a leased snapshot (lease.read) vs spark.read.parquet of the same files",
    metric="ratio",
    target=1.10,
    op="<=",
    run=run,
)
