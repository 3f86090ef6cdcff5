"""B6: ``conn.retention_plan()`` over 10,000 buckets x 4 snapshots (target <= 3 s, reads
pipelined).

The metadata is registered straight in ZooKeeper in the layout leasekit writes (a real
compaction of 40,000 snapshots would take hours): per bucket its state, four snapshots at
log offsets 100, 200, 300, 400 and four log segments [0, 100) ... [300, 400), all older
than log.retention 0s, plus a lease pinning the oldest snapshot of every tenth bucket. The
plan must give every one of the 80,000 snapshots and segments (and the lease) a reason;
the figure is its wall time, with the ZooKeeper round trips it took.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .common import ORDERS_DDL, Benchmark, Outcome, load_average, log, median, temp_warehouse, timed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


__all__ = ["BENCHMARK", "run"]

FULL = {"buckets": 10_000, "snapshots": 4, "segments": 4, "rows_per_segment": 100, "pinned_every": 10}
QUICK = {**FULL, "buckets": 1_000}
TABLE = "orders"


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    import leasekit as lk
    from leasekit.testing import seed_history

    p = QUICK if quick else FULL
    n = p["buckets"]
    results: list[dict[str, Any]] = []
    checks = {"every_item_has_a_reason": True, "pinned_snapshots_kept": True, "expected_items": True}
    with temp_warehouse("B6") as conn:
        table = conn.create_table(TABLE, ORDERS_DDL, "id", buckets=n, properties={"log.retention": "0s"})
        log(f"B6: registering {n:,} buckets x {p['snapshots']} snapshots + {p['segments']} segments")
        seed_s, _ = timed(lambda: seed_history(conn, table, p["snapshots"], p["segments"], p["rows_per_segment"]))
        pinned = {lk.TableBucket(TABLE, b): 1 for b in range(0, n, p["pinned_every"])}
        conn.acquire_kv_snapshot_lease("b6-report", pinned, "1h")
        log(f"B6: seeded in {seed_s:.1f}s; {len(pinned):,} oldest snapshots pinned")
        conn.retention_plan()  # warm-up, untimed
        for i in range(runs):
            trips = conn.store.round_trips
            plan_s, plan = timed(conn.retention_plan)
            trips = conn.store.round_trips - trips
            snaps = [x for x in plan.items if x.kind == "snapshot"]
            segs = [x for x in plan.items if x.kind == "segment"]
            checks["every_item_has_a_reason"] &= all(x.reason for x in plan.items)
            checks["expected_items"] &= len(snaps) == n * p["snapshots"] and len(segs) == n * p["segments"]
            checks["pinned_snapshots_kept"] &= all(
                x.action == "keep" and x.reason.startswith("pinned by lease b6-report")
                for x in snaps if x.item_id == 1 and x.table_bucket in pinned)
            deletes = sum(1 for x in plan.items if x.action == "delete")
            results.append({"plan_s": plan_s, "round_trips": trips, "items": len(plan.items),
                            "deletes": deletes, "reclaimable_bytes": plan.reclaimable_bytes,
                            "load_average": load_average()})
            log(f"B6: run {i + 1}/{runs}: {plan_s:.2f}s, {len(plan.items):,} items ({deletes:,} deletes), "
                f"{trips} round trips")
    figures = {
        "plan_s": round(median([r["plan_s"] for r in results]), 3),
        "round_trips": results[-1]["round_trips"],
        "items": results[-1]["items"],
        "deletes": results[-1]["deletes"],
        "reclaimable_bytes": results[-1]["reclaimable_bytes"],
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "seed_s": round(seed_s, 1),
    }
    figures["note"] = f"{figures['items']:,} items planned in {figures['round_trips']} round trips"
    return Outcome(figures["plan_s"], figures, results, {**p, "runs": runs, "quick": quick}, checks)


BENCHMARK = Benchmark(
    id="B6",
    what="retention_plan over 10,000 buckets x 4 snapshots (+ 4 segments each, 1,000 pins)",
    metric="value",
    target=3.0,
    op="<=",
    run=run,
    unit="s",
    spark=False,
)
