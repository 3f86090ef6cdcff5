"""B4: ``consumer.commit`` of 1,000 bucket offsets (target: <= 2 ZooKeeper round trips;
unchanged offsets cost 0 writes).

A group consumer is assigned every bucket of a 1,000-bucket table. Each run commits a new
offset for every bucket (one pipelined read of the stored offsets, the log ends and the
clock, then one transaction), then commits the same offsets again, which must write
nothing. Round trips and written ops are counted on the connection; times are reported
with, side by side, one bare transaction of 1,000 setData ops on the same znodes (the floor
of any commit that stores 1,000 offsets).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from leasekit import testing

from .common import Benchmark, Outcome, load_average, log, median, spread, temp_warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run"]

FULL = {"buckets": 1000}
QUICK = {"buckets": 100}


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    import leasekit as lk

    p = QUICK if quick else FULL
    n = p["buckets"]
    results: list[dict[str, Any]] = []
    checks = {"every_offset_stored": True, "unchanged_commit_writes_nothing": True}
    with temp_warehouse("B4") as conn:
        ctx = testing.context(conn)
        table = conn.create_table("orders", "id BIGINT", "id", buckets=n)
        buckets = [lk.TableBucket("orders", b) for b in range(n)]
        written: list[int] = []
        original = ctx.store.commit

        def counted(ops: Any) -> Any:
            written.append(len(ops))
            return original(ops)

        ctx.store.commit = counted  # type: ignore[method-assign]
        with conn.consumer(group_id="b4", enable_auto_commit=False) as consumer:
            consumer.assign(buckets)
            consumer.commit({tb: 0 for tb in buckets})  # creates the znodes, untimed
            paths = [ctx.paths.offset("b4", table.table_id, b) for b in range(n)]
            for i in range(1, runs + 1):
                results.append(
                    _commit_once(consumer, ctx, original, written, buckets, paths, i, runs, checks)
                )
    figures = _summary(results)
    trips = figures["round_trips"]
    return Outcome(float(trips), figures, results, {**p, "runs": runs, "quick": quick}, checks)


def _commit_once(
    consumer: Any,
    ctx: Any,
    commit: Any,
    written: list[int],
    buckets: list[Any],
    paths: list[str],
    i: int,
    runs: int,
    checks: dict[str, bool],
) -> dict[str, Any]:
    """Run ``i``: commit offset ``i`` to every bucket, then the same again (nothing to write),
    then the same znodes written by one bare transaction (the floor); ``commit`` is the store's
    own commit, ``written`` counts the ops of each transaction since."""
    from leasekit.zk import SetData

    trips, written[:] = ctx.store.round_trips, []
    start = time.perf_counter()
    consumer.commit({tb: i for tb in buckets})
    commit_s = time.perf_counter() - start
    commit_trips, commit_ops = (
        ctx.store.round_trips - trips,
        sum(written),
    )
    trips, written[:] = ctx.store.round_trips, []
    consumer.commit({tb: i for tb in buckets})
    same_trips, same_ops = ctx.store.round_trips - trips, sum(written)
    checks["unchanged_commit_writes_nothing"] &= same_ops == 0
    stored = ctx.store.get_many(paths)
    start = time.perf_counter()
    commit([SetData(path, node.data, node.stat.version) for path, node in zip(paths, stored)])
    floor_s = time.perf_counter() - start
    check = consumer.committed(buckets[-1])
    checks["every_offset_stored"] &= check == i
    result = {
        "round_trips": commit_trips,
        "ops_written": commit_ops,
        "commit_s": commit_s,
        "floor_s": floor_s,
        "unchanged_round_trips": same_trips,
        "unchanged_ops_written": same_ops,
        "load_average": load_average(),
    }
    log(
        f"B4: run {i}/{runs}: {commit_trips} round trips, {commit_ops} ops, "
        f"{commit_s * 1000:.1f} ms "
        f"(bare transaction {floor_s * 1000:.1f} ms); unchanged: {same_trips} round "
        "trips, "
        f"{same_ops} ops"
    )
    return result


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures over every run: the worst round trips, median times."""
    trips = max(r["round_trips"] for r in results)
    figures = {
        "round_trips": trips,
        "ops_written": results[-1]["ops_written"],
        "unchanged_ops_written": max(r["unchanged_ops_written"] for r in results),
        "unchanged_round_trips": max(r["unchanged_round_trips"] for r in results),
        "commit_ms": round(median([r["commit_s"] for r in results]) * 1000, 1),
        "commit_spread_ms": spread([r["commit_s"] * 1000 for r in results], 1),
        "floor_ms": round(median([r["floor_s"] for r in results]) * 1000, 1),
        "load_average": median([r["load_average"] or 0.0 for r in results]),
    }
    figures["note"] = (
        f"{figures['ops_written']:,} ops in {trips} round trips, {figures['commit_ms']} ms "
        f"(bare transaction {figures['floor_ms']} ms); unchanged: "
        f"{figures['unchanged_ops_written']} writes, {figures['unchanged_round_trips']} round trips"
    )
    return figures


BENCHMARK = Benchmark(
    id="B4",
    what="commit of 1,000 bucket offsets (round trips counted); the same commit again",
    metric="value",
    target=2.0,
    op="<=",
    run=run,
    unit="round trips",
    target_note="unchanged offsets cost 0 writes",
    spark=False,
    quick_note="100 of 1,000 buckets (a commit's round trips do not depend on them)",
)
