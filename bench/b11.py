"""B11: a split of a bucket holding 1,000,000 keys while 4 writers append (targets: appends wait
<= 200 ms, 0 bytes copied, the children's first snapshot within 1.2x a snapshot of the unsplit
bucket).

Each run builds two equal one-bucket tables, ``unsplit`` and ``split``: 1,000,000 order keys
appended and snapshotted (untimed). Four writer threads then append the same batches of 200
rows (updates of existing keys and new keys) to both tables, and after a second of that the
bucket of ``split`` is split. Measured:

- **appends wait**: how much longer than usual the appends to ``split`` that overlapped the
  split call took: the slowest overlapping append minus the median of the others (the writers'
  own pace on this machine). An append that races the seal fails its version check, finds its
  bucket sealed and writes its rows again for the children (K1): that is the wait.
- **bytes copied**: the files in the ``split`` table's directory after the run that neither a
  log segment nor a snapshot references and that were not there before the split: the split
  copies no data file (K3); 0 expected.
- **children's snapshot ratio**: with the writers stopped, ``split.snapshot(spark)`` (the two
  children's first snapshots, each built from the parent's snapshot and log restricted to its
  keys, plus its own log) vs ``unsplit.snapshot(spark)`` (the same records into one snapshot),
  in alternating order; the headline is the median per-run ratio. Both tables must then read
  the same rows.
"""

from __future__ import annotations

import threading
import time
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
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run"]

FULL = {"keys": 1_000_000, "writers": 4, "batch": 200, "write_s": 1.0, "after_s": 1.0}
QUICK = {**FULL, "keys": 100_000}
SEED_CHUNK = 250_000


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    results: list[dict[str, Any]] = []
    checks = {"no_bytes_copied": True, "same_rows": True, "appends_acknowledged": True}
    with temp_warehouse("B11") as conn:
        for i in range(runs):
            results.append(_run_once(conn, spark, p, i, checks))
    figures = _summary(results)
    checks["appends_wait_le_200ms"] = figures["append_wait_ms"] <= 200
    return Outcome(
        figures["snapshot_ratio"], figures, results, {**p, "runs": runs, "quick": quick}, checks
    )


def _seed(conn: Any, spark: Any, name: str, p: dict[str, Any]) -> Any:
    """A one-bucket table of ``p["keys"]`` orders, snapshotted."""
    table = conn.create_table(name, ORDERS_DDL, "id", buckets=1)
    rng = np.random.default_rng(11)
    for start in range(0, p["keys"], SEED_CHUNK):
        table.append(orders_batch(rng, np.arange(start, min(start + SEED_CHUNK, p["keys"]))))
    table.snapshot(spark)
    return table


def _run_once(conn: Any, spark: Any, p: dict[str, Any], i: int, checks: dict[str, bool]) -> dict:
    unsplit = _seed(conn, spark, f"unsplit_{i}", p)
    split = _seed(conn, spark, f"split_{i}", p)
    warehouse = conn.table(split.name).context.warehouse
    before = {e.path for e in warehouse.list(split.data_dir)}
    appends, (split_start, split_end), children = _split_under_writers(
        conn, split, unsplit, p, i, checks
    )
    overlapping = [e - s for s, e in appends if s < split_end and e > split_start]
    others = [e - s for s, e in appends if not (s < split_end and e > split_start)]
    usual = median(others)
    copied = _copied_bytes(split, warehouse, before)
    checks["no_bytes_copied"] &= copied == 0
    times: dict[str, float] = {}
    for side in alternate(i, ["unsplit", "split"]):
        settle(spark)
        table = unsplit if side == "unsplit" else split
        times[side], _ = timed(lambda table=table: table.snapshot(spark))
    import leasekit.spark as lks

    rows = [
        lks.read_at(spark, t).selectExpr("count(*)", "sum(id)").first() for t in (unsplit, split)
    ]
    checks["same_rows"] &= tuple(rows[0]) == tuple(rows[1])
    result = {
        "split_call_ms": round((split_end - split_start) * 1000, 1),
        "appends": len(appends),
        "overlapping_appends": len(overlapping),
        "slowest_overlapping_ms": round(max(overlapping, default=0.0) * 1000, 1),
        "usual_append_ms": round(usual * 1000, 1),
        "append_wait_ms": round(max(0.0, max(overlapping, default=usual) - usual) * 1000, 1),
        "copied_bytes": copied,
        "children": [tb.bucket for tb in children],
        "unsplit_snapshot_s": round(times["unsplit"], 3),
        "children_snapshot_s": round(times["split"], 3),
        "snapshot_ratio": round(times["split"] / times["unsplit"], 3),
        "load_average": load_average(),
    }
    log(
        f"B11: run {i + 1}: split call {result['split_call_ms']} ms, {len(overlapping)} appends "
        f"overlapped it, slowest {result['slowest_overlapping_ms']} ms vs usual "
        f"{result['usual_append_ms']} ms; {copied} bytes copied; snapshots: children "
        f"{times['split']:.2f} s vs unsplit {times['unsplit']:.2f} s"
    )
    conn.drop_table(unsplit.name)
    conn.drop_table(split.name)
    return result


def _split_under_writers(
    conn: Any, split: Any, unsplit: Any, p: dict[str, Any], i: int, checks: dict[str, bool]
) -> tuple[list[tuple[float, float]], tuple[float, float], Any]:
    """Writers append the same batches to both tables; ``split``'s bucket splits meanwhile.
    Returns each append's (start, end) to ``split``, the split call's, and the new buckets."""
    appends: list[tuple[float, float]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        rng = np.random.default_rng(100 * i + w)
        a, b = conn.table(split.name), conn.table(unsplit.name)  # each writer its own handles
        try:
            while not stop.is_set():
                batch = orders_batch(rng, rng.integers(0, int(p["keys"] * 1.2), p["batch"]))
                start = time.perf_counter()
                acked = a.append(batch)
                appends.append((start, time.perf_counter()))
                written = sum(len(r) for r in acked.values())
                checks["appends_acknowledged"] &= written == len(batch)
                b.append(batch)
        except BaseException as exc:  # noqa: BLE001 - reported after the run
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(p["writers"])]
    for t in threads:
        t.start()
    time.sleep(p["write_s"])
    split_start = time.perf_counter()
    children = split.split_bucket(0)
    split_end = time.perf_counter()
    time.sleep(p["after_s"])
    stop.set()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return appends, (split_start, split_end), children


def _copied_bytes(table: Any, warehouse: Any, before: set[str]) -> int:
    """Bytes of files new since the split that no segment or snapshot of ``table`` references."""
    from leasekit.log.segments import list_segments

    table.refresh()
    known = range(table.layout.count)
    referenced = {
        warehouse.relative(s.file) for segs in list_segments(table, known).values() for s in segs
    }
    referenced |= {warehouse.relative(f) for s in table.snapshots() for f in s.files}
    return sum(
        e.size
        for e in warehouse.list(table.data_dir)
        if e.path not in before and e.path not in referenced
    )


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["snapshot_ratio"] for r in results]
    waits = [r["append_wait_ms"] for r in results]
    figures = {
        "snapshot_ratio": round(median(ratios), 3),
        "spread": spread(ratios),
        "append_wait_ms": max(waits),
        "append_wait_spread": spread(waits, 1),
        "usual_append_ms": median([r["usual_append_ms"] for r in results]),
        "split_call_ms": median([r["split_call_ms"] for r in results]),
        "copied_bytes": max(r["copied_bytes"] for r in results),
        "children_snapshot_s": median([r["children_snapshot_s"] for r in results]),
        "unsplit_snapshot_s": median([r["unsplit_snapshot_s"] for r in results]),
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
    }
    figures["note"] = (
        f"appends wait at most {figures['append_wait_ms']} ms over their usual "
        f"{figures['usual_append_ms']} ms (split call {figures['split_call_ms']} ms); "
        f"{figures['copied_bytes']} bytes copied; children's snapshot "
        f"{figures['children_snapshot_s']} s vs unsplit {figures['unsplit_snapshot_s']} s"
    )
    return figures


BENCHMARK = Benchmark(
    id="B11",
    what=(
        "split of a 1,000,000-key bucket under 4 appending writers: the children's first "
        "snapshot vs a snapshot of the unsplit bucket"
    ),
    metric="ratio",
    target=1.2,
    op="<=",
    run=run,
    target_note="appends wait <= 200 ms, 0 bytes copied",
    quick_runs=1,
    quick_note="100,000 of 1,000,000 keys",
)
