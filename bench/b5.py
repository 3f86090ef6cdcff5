"""B5: ``Consumer.poll`` throughput against ``pyarrow.parquet`` reading the same segment files
(target: ratio >= 0.9).

A 4-bucket table gets 2,000,000 records (``id`` BIGINT, ``v`` STRING) in appends of 100,000,
so each bucket's log is about 20 segment files of ~25,000 records. leasekit: a consumer with
``auto_offset_reset="earliest"`` (built untimed; it reads nothing until its first poll)
polls (``max_records`` 10,000, the default ``max_poll_records``) until it has every record;
the polls include setting up the watches, listing the segments and building ``_offset``,
``_timestamp`` and ``_op`` columns. The floor: with the
segment list already in hand (read untimed through ``list_segments``, the same knowledge),
``pyarrow.parquet.read_table`` of every segment file with the same columns, and an
``_offset`` column from each segment's base offset. Each run times each side twice in
counterbalanced order (A B B A, then B A A B) after a settle step; the figure is the ratio of
their records per second (leasekit over pyarrow), each side's the mean of its two timings, with
the CPU-time ratio (this process and the ZooKeeper server) beside it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .common import (
    Benchmark,
    Outcome,
    SideMeter,
    Timer,
    counterbalanced,
    instrumented,
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
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run"]

TARGET = 0.9

# Where a consumer's polls spend their time (exclusive seconds per label), from one extra,
# untimed pass, beside the polls' wall time (the rest of it is the poll loop's own bookkeeping:
# positions, round robin, limits). Decoding counts the reader's read-ahead thread too, which
# overlaps the polls; slicing and columns include waiting for a decode ahead not yet ended.
PROFILE = {
    "zk_watch_buckets": "leasekit.consumers.log_view:LogView.watch",
    "zk_list_segments": "leasekit.consumers.log_view:list_segments",
    "open_segment_files": "leasekit.log.reader:SegmentReader._file",
    "decode_row_groups": "leasekit.log.reader:SegmentReader._group",
    "slice_and_columns": "leasekit.log.reader:SegmentReader.read",
    "buffer": "leasekit.consumers.buffer:Buffered.table",
}

FULL = {"records": 2_000_000, "buckets": 4, "append_rows": 100_000, "max_records": 10_000}
QUICK = {**FULL, "records": 200_000, "append_rows": 20_000}


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    import numpy as np
    import pyarrow as pa

    from leasekit.log.segments import list_segments, log_schema

    p = QUICK if quick else FULL
    n = p["records"]
    results: list[dict[str, Any]] = []
    checks = {"same_record_count": True, "every_offset_once": True}
    with temp_warehouse("B5") as conn:
        table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=p["buckets"])
        for start in range(0, n, p["append_rows"]):
            ids = np.arange(start, min(n, start + p["append_rows"]), dtype=np.int64)
            table.append(pa.table({"id": ids, "v": pa.array([f"value-{i}" for i in ids.tolist()])}))
        segments = list_segments(table, range(table.num_buckets))
        files = sum(len(s) for s in segments.values())
        columns = [f.name for f in log_schema(table)]
        log(f"B5: {n:,} records in {files} segment files")
        for i in range(-1, runs):  # run -1: one untimed warm-up of each side
            record = _one_run(conn, p, segments, columns, max(i, 0), checks)
            if i < 0:
                continue
            results.append(record)
            log(
                f"B5: run {i + 1}/{runs} ({' '.join(n[0].upper() for n in record['order'])}): "
                f"leasekit {record['leasekit_records_per_s']:,.0f} records/s, pyarrow "
                f"{record['pyarrow_records_per_s']:,.0f} records/s, ratio {record['ratio']:.3f}, "
                f"CPU ratio {record['cpu_ratio'] or 0:.3f}, other processes "
                f"{record['other_cpu_s'] or 0:.2f} CPU s"
            )
        breakdown = _profile(conn, p, checks)
    figures = {**_summary(results, files), "leasekit_breakdown_s": breakdown}
    return Outcome(figures["ratio"], figures, results, {**p, "runs": runs, "quick": quick}, checks)


def _one_run(
    conn: Any,
    p: dict[str, Any],
    segments: dict[int, list[Any]],
    columns: list[str],
    i: int,
    checks: dict[str, bool],
) -> dict[str, Any]:
    """Run ``i``: each side twice in counterbalanced order (A B B A), each after a settle step;
    a side's figures are the means of its two timings. CPU counts this process and the
    ZooKeeper server (the consumer's reads cost the server too)."""
    n = p["records"]
    order = counterbalanced(i, ("leasekit", "pyarrow"))
    timings: dict[str, list[dict[str, Any]]] = {"leasekit": [], "pyarrow": []}
    for name in order:
        consumer = None
        if name == "leasekit":
            consumer = conn.consumer(
                "orders",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                max_poll_records=p["max_records"],
            )  # built untimed: polls are timed
            read = functools.partial(_read_with_consumer, consumer, n, checks)
        else:
            read = functools.partial(_read_with_pyarrow, segments, columns)
        settle(None)
        with SideMeter(None, own=lambda: zk_cpu_seconds(conn)) as meter:
            seconds, got = timed(read)
        if consumer is not None:
            consumer.close()
        checks["same_record_count"] &= got == n
        timings[name].append({"s": seconds, **meter.figures("side")})
    record: dict[str, Any] = {"order": order, "load_average": load_average()}
    for name, both in timings.items():
        record[f"{name}_s"] = sum(t["s"] for t in both) / 2
        record[f"{name}_timings_s"] = [round(t["s"], 4) for t in both]
        record[f"{name}_records_per_s"] = n / record[f"{name}_s"]
        for key in ("cpu_s", "other_cpu_s"):
            values = [t[f"side_{key}"] for t in both]
            record[f"{name}_{key}"] = None if None in values else sum(values) / 2
    record["ratio"] = record["pyarrow_s"] / record["leasekit_s"]  # records/s, leasekit over pyarrow
    record["cpu_ratio"] = ratio_or_none(record["pyarrow_cpu_s"], record["leasekit_cpu_s"])
    other = (record["leasekit_other_cpu_s"], record["pyarrow_other_cpu_s"])
    record["other_cpu_s"] = None if None in other else round(sum(other), 3)  # type: ignore[arg-type]
    return record


def _profile(conn: Any, p: dict[str, Any], checks: dict[str, bool]) -> dict[str, float]:
    """One untimed consumer pass with its library calls timed: seconds per ``PROFILE`` label
    and the polls' wall time (``polls_wall``)."""
    consumer = conn.consumer(
        "orders",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=p["max_records"],
    )
    timer = Timer()
    with instrumented(timer, PROFILE):
        total, _ = timed(functools.partial(_read_with_consumer, consumer, p["records"], checks))
    consumer.close()
    out = {k: round(timer.seconds.get(k, 0.0), 4) for k in PROFILE}
    out["polls_wall"] = round(total, 4)
    log(f"B5: profiled pass {total:.3f}s: {out}")
    return out


def _read_with_consumer(consumer: Any, n: int, checks: dict[str, bool]) -> int:
    """Poll until ``n`` records came back; checks that each bucket's offsets follow on."""
    got = 0
    following: dict[Any, int] = {}
    while got < n:
        for tb, data in consumer.poll(timeout="1s").items():
            offsets = data.column("_offset")
            checks["every_offset_once"] &= (
                offsets[0].as_py() == following.get(tb, 0)
                and offsets[-1].as_py() == following.get(tb, 0) + data.num_rows - 1
            )
            following[tb] = offsets[-1].as_py() + 1
            got += data.num_rows
    return got


def _read_with_pyarrow(segments: dict[int, list[Any]], columns: list[str]) -> int:
    """The floor: every segment file read with pyarrow, its offsets added as a column."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    got = 0
    for segs in segments.values():
        for seg in segs:
            data = pq.read_table(seg.file, columns=columns)
            offsets = pa.array(
                np.arange(seg.base_offset, seg.base_offset + data.num_rows, dtype=np.int64)
            )
            data = data.append_column("_offset", offsets)
            got += data.num_rows
    return got


def _summary(results: list[dict[str, Any]], files: int) -> dict[str, Any]:
    """The figures over every run: median rates and their ratio."""
    figures = {
        "ratio": round(median([r["ratio"] for r in results]), 3),
        "spread": spread([r["ratio"] for r in results]),
        "leasekit_records_per_s": round(median([r["leasekit_records_per_s"] for r in results])),
        "pyarrow_records_per_s": round(median([r["pyarrow_records_per_s"] for r in results])),
        "segment_files": files,
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
        "cpu_ratio": None
        if any(r["cpu_ratio"] is None for r in results)
        else round(median([r["cpu_ratio"] for r in results]), 3),
        "other_cpu_s": [r["other_cpu_s"] for r in results],
        "slow_runs": slow_runs(results, "ratio", TARGET, ">="),
    }
    figures["note"] = (
        f"leasekit {figures['leasekit_records_per_s']:,} records/s, pyarrow "
        f"{figures['pyarrow_records_per_s']:,} records/s over {files} segment files"
    )
    return figures


BENCHMARK = Benchmark(
    id="B5",
    what="Consumer.poll throughput vs pyarrow.parquet reading the same segment files",
    metric="ratio",
    target=TARGET,
    op=">=",
    run=run,
    target_note="records/s, leasekit over pyarrow",
    spark=False,
    quick_note="200,000 of 2,000,000 records",
)
