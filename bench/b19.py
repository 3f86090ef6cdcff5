"""B19: ``Consumer.poll`` of a compacted log against the same records written as one segment
(target: ratio <= 1.2).

Two 1-bucket tables (``id`` BIGINT, ``v`` STRING) get the same 10,000 records: ``log`` in 1,000
appends of 10 rows (1,000 segment files of 10 records), ``whole`` in one append (one segment).
A consumer (built untimed, ``auto_offset_reset="earliest"``, no group) polls each from offset 0
to the end; only the polls are timed. First the uncompacted log against the one segment (the
"before" figure), then ``table.compact_log()`` of ``log`` (timed once, on its own), then the
headline: the compacted log against the one segment. The segment files per bucket before and
after the compaction are counted (``list_segments``) and checked (1,000 and 1).

A compacted poll of 10,000 records takes about 10 ms, and on a shared machine one timing in
fifteen takes five times as long or more, so each timed run times each side twelve times, in six
counterbalanced rounds (A B B A B A A B ..., mirrored on odd runs), each after a settle step; a
run's ratio is the median of the compacted side's timings over the one segment's median (the
ratio of their means is recorded beside it, ``mean_ratio``). Beside it, the CPU ratio of this
process (every thread of it): the ZooKeeper server's CPU, which ``/proc`` counts in ticks of
10 ms, the size of a side, would only add noise, and both sides make the same ZooKeeper reads
(one bucket, one segment). Checked: every poll pass returns every offset once, in order, and
the compacted log returns the very records the uncompacted one did (offsets, timestamps, ops
and values), with the values of ``whole``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .common import (
    Benchmark,
    Outcome,
    SideMeter,
    counterbalanced,
    load_average,
    log,
    median,
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

__all__ = ["BENCHMARK", "run"]

TARGET = 1.2

FULL = {"records": 10_000, "appends": 1_000, "rounds": 6, "before_runs": 5}
QUICK = {**FULL, "records": 2_000, "appends": 200, "before_runs": 2}
LOG, WHOLE = "log", "whole"


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    from leasekit.log.segments import list_segments

    p = QUICK if quick else FULL
    checks = {"every_offset_once": True, "same_records_after_compaction": True}
    with temp_warehouse("B19") as conn:
        log_table, whole = _seed(conn, p)
        files_before = len(list_segments(log_table, [0])[0])
        log(f"B19: {p['records']:,} records in {files_before} segment files against 1")
        seen_before = _consume(conn, LOG, p["records"], checks)
        before = _timed_runs(conn, p, p["before_runs"], 1, checks, "uncompacted")
        compaction = _compact(conn, log_table)
        files_after = len(list_segments(log_table, [0])[0])
        checks["one_file_after_compaction"] = files_after == 1 == compaction["segments_after"]
        after = _timed_runs(conn, p, runs, p["rounds"], checks, "compacted")
        seen_after = _consume(conn, LOG, p["records"], checks)
        seen_whole = _consume(conn, WHOLE, p["records"], checks)
        checks["same_records_after_compaction"] &= _same(seen_before, seen_after, seen_whole)
    figures = _summary(after, before, compaction, files_before, files_after)
    parameters = {**p, "runs": runs, "quick": quick}
    return Outcome(figures["ratio"], figures, after + before, parameters, checks)


def _seed(conn: Connection, p: dict[str, Any]) -> tuple[Any, Any]:
    """The two tables: ``log`` in ``appends`` appends, ``whole`` in one."""
    import numpy as np
    import pyarrow as pa

    def rows(start: int, stop: int) -> pa.Table:
        ids = np.arange(start, stop, dtype=np.int64)
        return pa.table({"id": ids, "v": pa.array([f"value-{i}" for i in ids.tolist()])})

    n, step = p["records"], p["records"] // p["appends"]
    log_table = conn.create_table(LOG, "id BIGINT, v STRING", "id", buckets=1)
    whole = conn.create_table(WHOLE, "id BIGINT, v STRING", "id", buckets=1)
    seconds, _ = timed(lambda: [log_table.append(rows(s, s + step)) for s in range(0, n, step)])
    whole.append(rows(0, n))
    log(f"B19: {p['appends']:,} appends of {step} rows in {seconds:.1f}s, and one of {n:,}")
    return log_table, whole


def _compact(conn: Connection, table: Any) -> dict[str, Any]:
    """``table.compact_log()`` once, after a settle step: its time, CPU and result."""
    settle(None)
    with SideMeter(None, own=lambda: zk_cpu_seconds(conn)) as meter:
        seconds, result = timed(table.compact_log)
    bucket_after = next(iter(result.segments.values()))
    out = {
        "compaction_s": round(seconds, 4),
        "compaction_cpu_s": meter.cpu_s,
        "compaction_other_cpu_s": meter.other_cpu_s,
        "merged": result.merged,
        "written": result.written,
        "records_merged": result.records,
        "bytes_read": result.bytes_read,
        "bytes_written": result.bytes_written,
        "lost": result.lost,
        "segments_after": bucket_after,
        "load_average": load_average(),
    }
    log(f"B19: compact_log in {seconds:.3f}s: {result.merged} segments into {result.written}")
    return out


def _timed_runs(
    conn: Connection,
    p: dict[str, Any],
    runs: int,
    rounds: int,
    checks: dict[str, bool],
    label: str,
) -> list[dict[str, Any]]:
    """One untimed pass of each side, then ``runs`` runs of ``rounds`` counterbalanced rounds:
    ``log`` (as it stands) against ``whole``."""
    out: list[dict[str, Any]] = []
    for i in range(-1, runs):
        order = [LOG, WHOLE] if i < 0 else counterbalanced(i, (LOG, WHOLE), rounds)
        record = _one_run(conn, p["records"], order, checks)
        if i < 0:
            continue
        out.append({"phase": label, **record})
        log(
            f"B19: {label} run {i + 1}/{runs}: log {record['log_s'] * 1e3:.1f} ms, whole "
            f"{record['whole_s'] * 1e3:.1f} ms, ratio {record['ratio']:.3f}, CPU ratio "
            f"{record['cpu_ratio'] or 0:.3f}, other processes "
            f"{record['other_cpu_s'] or 0:.2f} CPU s"
        )
    return out


def _one_run(conn: Connection, n: int, order: list[str], checks: dict[str, bool]) -> dict[str, Any]:
    """Each side in ``order``, each timing after a settle step; a side's time is the median of
    its timings, its CPU seconds their mean (this process's, every thread)."""
    timings: dict[str, list[dict[str, Any]]] = {LOG: [], WHOLE: []}
    for name in order:
        consumer = _consumer(conn, name)  # built untimed: the polls are timed
        settle(None)
        with SideMeter(None) as meter:
            seconds, _ = timed(functools.partial(_poll_to_end, consumer, n, checks, None))
        consumer.close()
        timings[name].append({"s": seconds, **meter.figures("side")})
    record: dict[str, Any] = {"order": order, "load_average": load_average()}
    for name, all_of in timings.items():
        record[f"{name}_s"] = median([t["s"] for t in all_of])
        record[f"{name}_mean_s"] = sum(t["s"] for t in all_of) / len(all_of)
        record[f"{name}_timings_s"] = [round(t["s"], 5) for t in all_of]
        for key in ("cpu_s", "other_cpu_s"):
            values = [t[f"side_{key}"] for t in all_of]
            record[f"{name}_{key}"] = None if None in values else sum(values) / len(values)
    record["ratio"] = record["log_s"] / record["whole_s"]
    record["mean_ratio"] = record["log_mean_s"] / record["whole_mean_s"]
    record["cpu_ratio"] = ratio_or_none(record["log_cpu_s"], record["whole_cpu_s"])
    other = (record["log_other_cpu_s"], record["whole_other_cpu_s"])
    record["other_cpu_s"] = None if None in other else round(sum(other), 3)  # type: ignore[arg-type]
    return record


def _consumer(conn: Connection, name: str) -> Any:
    return conn.consumer(name, auto_offset_reset="earliest", enable_auto_commit=False)


def _consume(conn: Connection, name: str, n: int, checks: dict[str, bool]) -> pa.Table:
    """One untimed pass over ``name``: its records as one table."""
    import pyarrow as pa

    consumer = _consumer(conn, name)
    kept: list[pa.Table] = []
    _poll_to_end(consumer, n, checks, kept)
    consumer.close()
    return pa.concat_tables(kept)


def _poll_to_end(
    consumer: Any, n: int, checks: dict[str, bool], kept: list[pa.Table] | None
) -> int:
    """Poll until ``n`` records came back; checks that the offsets follow on."""
    got = following = 0
    while got < n:
        for _tb, data in consumer.poll(timeout="1s").items():
            offsets = data.column("_offset")
            checks["every_offset_once"] &= (
                offsets[0].as_py() == following
                and offsets[-1].as_py() == following + data.num_rows - 1
            )
            following = offsets[-1].as_py() + 1
            got += data.num_rows
            if kept is not None:
                kept.append(data)
    return got


def _same(before: pa.Table, after: pa.Table, whole: pa.Table) -> bool:
    """The compacted log returns what the uncompacted one did, and the values of ``whole``."""
    values = ["_offset", "_op", "id", "v"]
    return before.equals(after) and before.select(values).equals(whole.select(values))


def _summary(
    after: list[dict[str, Any]],
    before: list[dict[str, Any]],
    compaction: dict[str, Any],
    files_before: int,
    files_after: int,
) -> dict[str, Any]:
    """The figures over every run: the compacted ratio, the uncompacted one, the compaction."""
    figures = {
        "ratio": round(median([r["ratio"] for r in after]), 3),
        "spread": spread([r["ratio"] for r in after]),
        "mean_ratio": round(median([r["mean_ratio"] for r in after]), 3),
        "compacted_s": round(median([r["log_s"] for r in after]), 5),
        "one_segment_s": round(median([r["whole_s"] for r in after]), 5),
        "uncompacted_s": round(median([r["log_s"] for r in before]), 4),
        "uncompacted_ratio": round(median([r["ratio"] for r in before]), 1),
        "uncompacted_spread": spread([r["log_s"] for r in before], 4),
        "files_per_bucket_before": files_before,
        "files_per_bucket_after": files_after,
        **compaction,
        "load_average": median([r["load_average"] or 0.0 for r in after]),
        "load_averages": [r["load_average"] for r in after],
        "before_load_averages": [r["load_average"] for r in before],
        "cpu_ratio": None
        if any(r["cpu_ratio"] is None for r in after)
        else round(median([r["cpu_ratio"] for r in after]), 3),
        "other_cpu_s": [r["other_cpu_s"] for r in after],
        "slow_runs": slow_runs(after, "ratio", TARGET, "<="),
    }
    figures["note"] = (
        f"compacted {figures['compacted_s'] * 1e3:.1f} ms, one segment "
        f"{figures['one_segment_s'] * 1e3:.1f} ms; before compaction {files_before:,} files per "
        f"bucket, {figures['uncompacted_s']:.3f} s (ratio {figures['uncompacted_ratio']:g}); "
        f"after {files_after}; compact_log {compaction['compaction_s']:.3f} s"
    )
    return figures


BENCHMARK = Benchmark(
    id="B19",
    what=(
        "Consumer.poll of a log of 1,000 appends after compact_log vs the same records "
        "appended as one segment"
    ),
    metric="ratio",
    target=TARGET,
    op="<=",
    run=run,
    target_note="compacted over one segment, poll time; before compaction and compact_log reported",
    spark=False,
    default_runs=9,
    quick_note="2,000 records in 200 appends of 10,000 in 1,000",
)
