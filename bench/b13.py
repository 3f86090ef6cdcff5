"""B13: ``conn.group_overview()`` over 100 groups x 100 buckets (target: <= 1 s); beside it
the read of ``conn.lag_history`` over 6 h and 24 h of samples of the same groups.

Ten 100-bucket tables get two real appends each (every bucket has log segments); group i
commits 50 records behind the end in every bucket of table i % 10, so every one of the
10,000 (group, bucket) pairs has lag and a time lag (the segment holding its first record
not consumed is read). The lag history is then seeded: 2,880 samples 30 s apart (24 h at
the default ``monitor.interval``), each one segment of 10,000 rows in the layout ``sample``
writes (rows sorted by group, row groups of 1,024), registered straight in ZooKeeper.
ZooKeeper records a segment's creation time, which cannot lie in the past, so the seeded
samples run from 5 minutes ago into the next 24 hours, with commit times just after their
samples: the overview's rate window (the last 5 minutes) holds 10 of them, and the history
reads ask for the last 6 h and the whole 24 h of that range by datetime.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from leasekit import testing

from .common import Benchmark, Outcome, load_average, log, median, spread, temp_warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run"]

FULL = {"groups": 100, "tables": 10, "buckets": 100, "samples": 2880}
QUICK = {"groups": 20, "tables": 4, "buckets": 20, "samples": 240}
INTERVAL_MS = 30_000


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    results: list[dict[str, Any]] = []
    checks: dict[str, bool] = {}
    with temp_warehouse("B13") as conn:
        ctx = testing.context(conn)
        _seed_groups(conn, p)
        start_ms = ctx.server_clock.fresh_ms() - 5 * 60_000
        _seed_history(ctx, p, start_ms)
        frame = conn.group_overview()  # warm-up, untimed
        checks["every_group"] = len(frame) == p["groups"]
        checks["rates_from_history"] = bool((frame["consume_rate"] > 0).all())
        checks["every_bucket_lags"] = bool((frame["total_lag"] == 50 * p["buckets"]).all())
        for i in range(1, runs + 1):
            results.append(_timed_run(conn, ctx, p, start_ms, i, runs, checks))
    figures = _summary(results, p)
    return Outcome(figures["overview_s"], figures, results, {**p, "quick": quick}, checks)


def _seed_groups(conn: Any, p: dict[str, int]) -> None:
    """Tables with two appends each; group i commits 50 behind in every bucket of one."""
    n = p["buckets"]
    tables = []
    for t in range(p["tables"]):
        table = conn.create_table(f"t{t}", "id BIGINT", "id", buckets=n)
        for part in range(2):
            table.append(pa.table({"id": pa.array(range(part * 50 * n, (part + 1) * 50 * n))}))
        tables.append(table)
    log(f"B13: {p['tables']} tables of {n} buckets written")
    for g in range(p["groups"]):
        table = tables[g % len(tables)]
        ends = table.end_offsets()
        with conn.consumer(group_id=f"group-{g:03d}", enable_auto_commit=False) as c:
            c.assign(list(ends))
            c.commit({tb: max(0, end - 50) for tb, end in ends.items()})
    log(f"B13: {p['groups']} groups committed")


def _seed_history(ctx: Any, p: dict[str, int], start_ms: int) -> None:
    """``samples`` history segments from ``start_ms``, 30 s apart, each committed 1 s after its
    sample (straight in ZooKeeper and the warehouse)."""
    from leasekit.monitor.lag import history
    from leasekit.monitor.lag.readings import read_all_groups
    from leasekit.zk import Create, SetData
    from leasekit.zk.formats import BucketState, SegmentRecord

    base = history.rows_of(read_all_groups(ctx))
    table = history._created_table(ctx)  # noqa: SLF001 (the bench seeds its layout)
    tid, paths = table.table_id, ctx.paths
    data = history._arrow(table, sorted(base, key=lambda r: (r.group, r.table, r.bucket)))
    committed = data.column("committed").to_numpy(zero_copy_only=False)
    ends = data.column("end").to_numpy(zero_copy_only=False)
    ops: list[Any] = []
    rows = data.num_rows
    for k in range(p["samples"]):
        at = start_ms + k * INTERVAL_MS
        sample = data.set_column(
            0, "time", pa.array([at * 1000] * rows, pa.int64()).cast(data.schema[0].type)
        )
        idx = {name: i for i, name in enumerate(sample.column_names)}
        sample = sample.set_column(idx["committed"], "committed", pa.array(committed + 3 * k))
        sample = sample.set_column(idx["end"], "end", pa.array(ends + 4 * k))
        sample = sample.set_column(idx["lag"], "lag", pa.array(ends - committed + k))
        rel = f"{table.data_dir}/log/0/seed-{k}-{uuid.uuid4().hex[:8]}.parquet"
        size = ctx.warehouse.write_parquet(rel, sample, history.ROWS_PER_GROUP)
        record = SegmentRecord(rel, rows, size, at + 1000).encode()
        ops.append(Create(paths.segment(tid, 0, k * rows), record))
    node = ctx.store.get(paths.bucket(tid, 0))
    state = BucketState.new(p["samples"] * rows, start_ms + p["samples"] * INTERVAL_MS)
    if node is None:
        ops = [
            Create(paths.bucket(tid, 0), state.encode()),
            Create(paths.log(tid, 0)),
            Create(paths.snapshots(tid, 0)),
            *ops,
        ]
    else:
        ops.append(SetData(paths.bucket(tid, 0), state.encode()))
    ctx.store.commit_chunked(ops)
    log(f"B13: {p['samples']} history samples of {rows} rows seeded")


def _timed_run(
    conn: Any,
    ctx: Any,
    p: dict[str, int],
    start_ms: int,
    i: int,
    runs: int,
    checks: dict[str, bool],
) -> dict[str, Any]:
    from leasekit.monitor.lag.history_files import clear_cache
    from leasekit.zk import to_datetime

    trips = ctx.store.round_trips
    begin = time.perf_counter()
    frame = conn.group_overview()
    overview_s = time.perf_counter() - begin
    overview_trips = ctx.store.round_trips - trips
    checks["every_group"] &= len(frame) == p["groups"]
    last = to_datetime(start_ms + (p["samples"] - 1) * INTERVAL_MS)
    hours = 6 if p["samples"] >= 720 else 1
    since = {"6h": last - timedelta(hours=hours), "24h": to_datetime(start_ms)}
    reads: dict[str, Any] = {}
    for span in ("6h", "24h"):
        clear_cache()  # cold: every file read
        begin = time.perf_counter()
        frame = conn.lag_history("group-000", since=since[span], until=last)
        reads[f"history_{span}_s"] = time.perf_counter() - begin
        reads[f"history_{span}_samples"] = len(frame)
    begin = time.perf_counter()  # warm: the same 24 h again, every file's rows cached
    frame = conn.lag_history("group-000", since=since["24h"], until=last)
    reads["history_24h_warm_s"] = time.perf_counter() - begin
    checks["history_lengths"] = checks.get("history_lengths", True) and (
        reads["history_24h_samples"] == p["samples"] == len(frame)
        and reads["history_6h_samples"] == hours * 120 + 1
    )
    result = {
        "overview_s": overview_s,
        "overview_round_trips": overview_trips,
        **reads,
        "load_average": load_average(),
    }
    log(
        f"B13: run {i}/{runs}: overview {overview_s * 1000:.0f} ms ({overview_trips} round "
        f"trips); lag_history cold {reads['history_6h_samples']} samples "
        f"{reads['history_6h_s'] * 1000:.0f} ms, {reads['history_24h_samples']} samples "
        f"{reads['history_24h_s'] * 1000:.0f} ms; warm {reads['history_24h_warm_s'] * 1000:.0f} ms"
    )
    return result


def _summary(results: list[dict[str, Any]], p: dict[str, int]) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "overview_s": round(median([r["overview_s"] for r in results]), 3),
        "overview_spread_s": spread([r["overview_s"] for r in results]),
        "overview_round_trips": max(r["overview_round_trips"] for r in results),
        "history_6h_s": round(median([r["history_6h_s"] for r in results]), 3),
        "history_6h_spread_s": spread([r["history_6h_s"] for r in results]),
        "history_24h_s": round(median([r["history_24h_s"] for r in results]), 3),
        "history_24h_spread_s": spread([r["history_24h_s"] for r in results]),
        "history_24h_warm_s": round(median([r["history_24h_warm_s"] for r in results]), 3),
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
    }
    pairs = p["groups"] * p["buckets"]
    figures["note"] = (
        f"group_overview of {p['groups']} groups x {p['buckets']} buckets ({pairs:,} pairs): "
        f"{figures['overview_s']} s in {figures['overview_round_trips']} round trips; "
        f"lag_history of one group, cold: {figures['history_6h_s']} s for the last "
        f"{results[0]['history_6h_samples']} samples, {figures['history_24h_s']} s for "
        f"{results[0]['history_24h_samples']}; warm (rows cached): "
        f"{figures['history_24h_warm_s']} s for {results[0]['history_24h_samples']}"
    )
    return figures


BENCHMARK = Benchmark(
    id="B13",
    what="group_overview over 100 groups x 100 buckets; lag_history read over 6 h and 24 h",
    metric="value",
    target=1.0,
    op="<=",
    run=run,
    unit="s",
    target_note="lag_history read times reported",
    spark=False,
    quick_note="20 groups x 20 buckets of 100 x 100, 240 samples of 2,880",
    quick_less_work=True,
)
