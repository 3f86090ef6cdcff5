"""B20: log compaction throughput, ``table.compact_log()``, against pyarrow reading the same
segment files and writing one file with the same content (target: ratio >= 0.8).

Each table is a 1-bucket orders table (``id``, ``customer``, ``status``, ``amount``, ``ts``)
holding 100,000 records in 1,000 appends of 100 rows: 1,000 segment files of about 5 KB (5 MB
in all), which the default ``log.segment.target-bytes`` and ``log.segment.min-merge`` merge as
one run.
A compaction consumes its segments, so every timed compaction gets a table of its own, all of
them written before the runs (untimed) with the same records. leasekit: ``compact_log()``, which
lists the segments, reads the files a few ahead on threads, adds a ``_timestamp`` int64
column, writes one Parquet file (row groups of 65,536 rows, snappy) and swaps it in with one
ZooKeeper transaction. The floor, handed the same segment list (read untimed through
``list_segments``: the same knowledge), reads the same files, adds the same ``_timestamp``
column (each segment's commit time over its rows) and writes one file of the same columns,
row-group size and compression with ``pyarrow.parquet.write_table``.

The floor is the fastest of four straightforward ways to read the files, chosen in the warm-up
(each timed three times, interleaved; all four reported in ``floor_candidates_s``):
``pq.read_table`` per file, ``pq.ParquetFile(f).read()`` per file, the same on a pool of four
threads (leasekit's read-ahead), and ``pyarrow.dataset.dataset(files).to_table()``; then
``pa.concat_tables``. Each run times each side twice, counterbalanced (A B B A, then B A A B),
each after a settle step, the floor reading the files of the table the compaction beside it
merges; the figure is the ratio of records per second (leasekit over the floor), each side's
the mean of its two timings, with the CPU ratio (this process and the ZooKeeper server) beside
it. Checked in every run: the merged file and the floor's hold the same rows and columns. The
results break one more compaction down by call (``leasekit_breakdown_s``, read-ahead threads
included) and keep its main thread's ``cProfile`` (``leasekit_profile``).
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    SideMeter,
    Timer,
    counterbalanced,
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
    zk_cpu_seconds,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from leasekit.connection import Connection
    from leasekit.structs import LogSegment

__all__ = ["BENCHMARK", "run"]

TARGET = 0.8
ROW_GROUP = 65_536
SIDES = ("leasekit", "pyarrow")

FULL = {"segments": 1_000, "rows_per_segment": 100, "seed": 20}
QUICK = {**FULL, "segments": 200}

# Where a compaction spends its time (exclusive seconds per label, threads included): the
# merged file's writing includes waiting for the read-ahead to hand it the next segment.
PROFILE = {
    "zk_list_segments": "leasekit.log.compaction:list_segments",
    "open_files": "leasekit.warehouse:Warehouse.open_parquet",
    "decode_files": "pyarrow.parquet:ParquetFile.read",
    "write_merged_file": "leasekit.warehouse:Warehouse.write_parquet_parts",
    "zk_swap": "leasekit.log.compaction:_swap",
}


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    n = p["segments"] * p["rows_per_segment"]
    results: list[dict[str, Any]] = []
    checks = {"every_record_merged": True, "same_content": True, "one_file_per_bucket": True}
    with temp_warehouse("B20") as conn:
        tables = _seed(conn, p, 2 * runs + 2)  # the warm-up, two per run, the profile
        out_dir = os.path.join(conn.warehouse, "floor-output")
        os.makedirs(out_dir)
        floor, candidates = _warm_up(conn, tables.pop(0), n, out_dir, checks)
        for i in range(runs):
            pair = [tables.pop(0), tables.pop(0)]
            record = _one_run(conn, pair, n, floor, out_dir, i, checks)
            results.append(record)
            log(
                f"B20: run {i + 1}/{runs} ({' '.join(x[0].upper() for x in record['order'])}): "
                f"leasekit {record['leasekit_records_per_s']:,.0f} records/s, floor "
                f"{record['pyarrow_records_per_s']:,.0f} records/s, ratio {record['ratio']:.3f}, "
                f"CPU ratio {record['cpu_ratio'] or 0:.3f}, other processes "
                f"{record['other_cpu_s'] or 0:.2f} CPU s"
            )
        breakdown, profile = _profile(tables.pop(0))
    figures = _summary(results, p, floor, candidates)
    figures["leasekit_breakdown_s"] = breakdown
    figures["leasekit_profile"] = profile
    parameters = {**p, "records": n, "row_group": ROW_GROUP, "runs": runs, "quick": quick}
    return Outcome(figures["ratio"], figures, results, parameters, checks)


def _seed(conn: Connection, p: dict[str, Any], count: int) -> list[Any]:
    """``count`` 1-bucket tables, each given the same ``segments`` appends of
    ``rows_per_segment`` orders."""
    import numpy as np

    rng = np.random.default_rng(p["seed"])
    step = p["rows_per_segment"]
    batches = [orders_batch(rng, np.arange(s * step, (s + 1) * step)) for s in range(p["segments"])]
    tables = []
    for t in range(count):
        table = conn.create_table(f"orders_{t}", ORDERS_DDL, "id", buckets=1)
        seconds, _ = timed(lambda table=table: [table.append(b) for b in batches])
        log(
            f"B20: table {t + 1}/{count}: {len(batches):,} appends of {step} rows in {seconds:.1f}s"
        )
        tables.append(table)
    return tables


def _warm_up(
    conn: Connection, table: Any, n: int, out_dir: str, checks: dict[str, bool]
) -> tuple[str, dict[str, float]]:
    """One untimed compaction, then each floor candidate three times, interleaved, on the same
    files: the fastest candidate's name and every candidate's median seconds."""
    segments = _segments(table)
    settle(None)
    table.compact_log()
    times: dict[str, list[float]] = {name: [] for name in FLOORS}
    for _ in range(3):
        for name in FLOORS:
            settle(None)
            seconds, got = timed(functools.partial(_floor, name, segments, out_dir, "warm"))
            checks["every_record_merged"] &= got == n
            times[name].append(seconds)
    candidates = {name: round(median(t), 4) for name, t in times.items()}
    floor = min(candidates, key=candidates.__getitem__)
    log(f"B20: floor candidates {candidates}: the floor is {floor}")
    return floor, candidates


def _segments(table: Any) -> list[LogSegment]:
    from leasekit.log.segments import list_segments

    return list_segments(table, [0])[0]


def _one_run(
    conn: Connection,
    pair: list[Any],
    n: int,
    floor: str,
    out_dir: str,
    i: int,
    checks: dict[str, bool],
) -> dict[str, Any]:
    """Run ``i``: each side twice in counterbalanced order, the k-th timing of each side on the
    files of ``pair[k]``; a side's figures are the means of its two timings."""
    order = counterbalanced(i, SIDES)
    segments = [_segments(t) for t in pair]
    timings: dict[str, list[dict[str, Any]]] = {name: [] for name in SIDES}
    for name in order:
        k = len(timings[name])
        if name == "leasekit":
            side = pair[k].compact_log
        else:
            side = functools.partial(_floor, floor, segments[k], out_dir, f"{i}-{k}")
        settle(None)
        with SideMeter(None, own=lambda: zk_cpu_seconds(conn)) as meter:
            seconds, got = timed(side)
        records = got.records if name == "leasekit" else got
        checks["every_record_merged"] &= records == n
        timings[name].append({"s": seconds, **meter.figures("side")})
    for k, table in enumerate(pair):
        _check(table, os.path.join(out_dir, f"{i}-{k}.parquet"), checks)
    return _record(order, timings, n)


def _record(order: list[str], timings: dict[str, list[dict[str, Any]]], n: int) -> dict[str, Any]:
    record: dict[str, Any] = {"order": order, "load_average": load_average()}
    for name, both in timings.items():
        record[f"{name}_s"] = sum(t["s"] for t in both) / len(both)
        record[f"{name}_timings_s"] = [round(t["s"], 4) for t in both]
        record[f"{name}_records_per_s"] = n / record[f"{name}_s"]
        for key in ("cpu_s", "other_cpu_s"):
            values = [t[f"side_{key}"] for t in both]
            record[f"{name}_{key}"] = None if None in values else sum(values) / len(values)
    record["ratio"] = record["pyarrow_s"] / record["leasekit_s"]  # records/s, leasekit over floor
    record["cpu_ratio"] = ratio_or_none(record["pyarrow_cpu_s"], record["leasekit_cpu_s"])
    other = (record["leasekit_other_cpu_s"], record["pyarrow_other_cpu_s"])
    record["other_cpu_s"] = None if None in other else round(sum(other), 3)  # type: ignore[arg-type]
    return record


def _check(table: Any, floor_file: str, checks: dict[str, bool]) -> None:
    """The table's one merged segment file holds what the floor wrote (untimed); the floor's
    file is removed."""
    import pyarrow.parquet as pq

    segments = _segments(table)
    checks["one_file_per_bucket"] &= len(segments) == 1
    merged = pq.read_table(segments[0].file)
    written = pq.read_table(floor_file)
    checks["same_content"] &= (
        merged.num_rows == written.num_rows
        and all(merged.column(c).equals(written.column(c)) for c in merged.column_names)
        and merged.column_names == written.column_names
    )
    os.remove(floor_file)


def _floor(name: str, segments: list[LogSegment], out_dir: str, label: str) -> int:
    """The floor ``name``: the segment files read, the ``_timestamp`` column added, one file
    written; the records written."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [s.file for s in segments]
    data = FLOORS[name](files)
    rows = [s.end_offset - s.base_offset for s in segments]
    stamps = np.repeat(np.array([s.timestamp_ms for s in segments], dtype=np.int64), rows)
    data = data.append_column("_timestamp", pa.array(stamps))
    path = os.path.join(out_dir, f"{label}.parquet")
    pq.write_table(data, path, row_group_size=ROW_GROUP, compression="snappy")
    return data.num_rows


def _read_table_each(files: list[str]) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa.concat_tables([pq.read_table(f) for f in files])


def _parquet_file_each(files: list[str]) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa.concat_tables([pq.ParquetFile(f).read() for f in files])


def _parquet_file_threads(files: list[str]) -> pa.Table:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with ThreadPoolExecutor(max_workers=4) as pool:
        return pa.concat_tables(list(pool.map(lambda f: pq.ParquetFile(f).read(), files)))


def _dataset(files: list[str]) -> pa.Table:
    import pyarrow.dataset as ds

    return ds.dataset(files, format="parquet").to_table()


FLOORS = {
    "pq.read_table each": _read_table_each,
    "ParquetFile.read each": _parquet_file_each,
    "ParquetFile.read on 4 threads": _parquet_file_threads,
    "dataset.to_table": _dataset,
}


def _profile(table: Any) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """One more compaction, untimed, with its library calls timed (every thread) and its main
    thread under ``cProfile``: seconds per ``PROFILE`` label with the wall time, and the
    profile's 20 costliest functions by cumulative time."""
    import cProfile
    import pstats

    timer = Timer()
    profiler = cProfile.Profile()
    settle(None)
    with instrumented(timer, PROFILE):
        profiler.enable()
        total, _ = timed(table.compact_log)
        profiler.disable()
    breakdown = {k: round(timer.seconds.get(k, 0.0), 4) for k in PROFILE}
    breakdown["compact_log_wall"] = round(total, 4)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda kv: kv[1][3], reverse=True)[:20]
    profile = [
        {
            "function": f"{os.path.basename(file)}:{line}({func})",
            "calls": calls,
            "tottime_s": round(tottime, 4),
            "cumtime_s": round(cumtime, 4),
        }
        for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in rows
    ]
    log(f"B20: profiled compaction {total:.3f}s: {breakdown}")
    return breakdown, profile


def _summary(
    results: list[dict[str, Any]], p: dict[str, Any], floor: str, candidates: dict[str, float]
) -> dict[str, Any]:
    """The figures over every run: median rates and their ratio."""
    figures = {
        "ratio": round(median([r["ratio"] for r in results]), 3),
        "spread": spread([r["ratio"] for r in results]),
        "leasekit_records_per_s": round(median([r["leasekit_records_per_s"] for r in results])),
        "pyarrow_records_per_s": round(median([r["pyarrow_records_per_s"] for r in results])),
        "leasekit_median_s": round(median([r["leasekit_s"] for r in results]), 4),
        "floor_median_s": round(median([r["pyarrow_s"] for r in results]), 4),
        "floor": floor,
        "floor_candidates_s": candidates,
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
        "cpu_ratio": None
        if any(r["cpu_ratio"] is None for r in results)
        else round(median([r["cpu_ratio"] for r in results]), 3),
        "other_cpu_s": [r["other_cpu_s"] for r in results],
        "slow_runs": slow_runs(results, "ratio", TARGET, ">="),
    }
    figures["note"] = (
        f"leasekit {figures['leasekit_records_per_s']:,} records/s, floor "
        f"{figures['pyarrow_records_per_s']:,} records/s ({floor}, then write_table), "
        f"{p['segments']:,} segment files of {p['rows_per_segment']} records into one"
    )
    return figures


BENCHMARK = Benchmark(
    id="B20",
    what=(
        "compact_log throughput (1,000 segments of 100 records into one) vs pyarrow reading the "
        "same files and writing one file with the same content"
    ),
    metric="ratio",
    target=TARGET,
    op=">=",
    run=run,
    target_note="records/s, leasekit over pyarrow",
    spark=False,
    # ZooKeeper's share is fixed per merge, so the ratio depends on the size: the smoke runs the
    # full size with fewer runs (8 tables of 1,000 appends, about 2 minutes)
    quick_full_size=True,
)
