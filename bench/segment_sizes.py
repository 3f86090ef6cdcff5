"""Consumer throughput by segment size: the measurement behind ``log.segment.target-bytes``.

2,000,000 records (``id`` BIGINT, ``a`` DOUBLE, ``b`` STRING) in one bucket, stored as segments
of 2,000, 20,000, 200,000 and 500,000 records (``log.segment.max-rows``); a consumer polls them
all from offset 0 (``max_records`` 100,000), 5 times per size in rotating order, after one
untimed poll of each. The figure is the median records per second per size, with the spread
and the load average. A merged segment is read exactly as an appended one of the same size
(plus its ``_timestamp`` column), so the size at which throughput stops growing is the largest
target worth rewriting records for.

    .venv/bin/python -m bench.segment_sizes     # writes bench/results/sizes/segment_sizes.json
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .common import load_average, log, median, spread, temp_warehouse

RECORDS = 2_000_000
SIZES = (2_000, 20_000, 200_000, 500_000)
RUNS = 5
RESULT = Path(__file__).parent / "results" / "sizes" / "segment_sizes.json"
"""Beside the benchmark results, not among them: the results table lists only benchmarks."""


def _table(conn: Any, rows: int) -> tuple[str, float, int]:
    """A table of RECORDS records in segments of ``rows``; its name, mean segment MiB, count."""
    from leasekit.log.segments import list_segments

    name = f"seg_{rows}"
    table = conn.create_table(name, "id BIGINT, a DOUBLE, b STRING", "id", buckets=1,
                              properties={"log.segment.max-rows": rows})  # fmt: skip
    rng = np.random.default_rng(rows)
    ids = np.arange(RECORDS, dtype=np.int64)
    data = pa.table({"id": ids, "a": rng.random(RECORDS), "b": pa.array((ids % 1000).astype(str))})
    for start in range(0, RECORDS, 500_000):
        table.append(data.slice(start, 500_000))
    segments = list_segments(table, [0])[0]
    mib = sum(s.size_bytes for s in segments) / len(segments) / 2**20
    return name, mib, len(segments)


def _poll_all(conn: Any, name: str) -> float:
    """Seconds to poll every record of ``name`` from offset 0."""
    with conn.consumer(name, auto_offset_reset="earliest") as consumer:
        got = 0
        started = time.perf_counter()
        while got < RECORDS:
            got += sum(d.num_rows for d in consumer.poll("1s", max_records=100_000).values())
        return time.perf_counter() - started


def main() -> None:
    loads = [load_average()]
    with temp_warehouse("segment-sizes") as conn:
        tables = {rows: _table(conn, rows) for rows in SIZES}
        for name, _, _ in tables.values():
            _poll_all(conn, name)  # warm-up
        times: dict[int, list[float]] = {rows: [] for rows in SIZES}
        for run in range(RUNS):
            for rows in SIZES[run % len(SIZES) :] + SIZES[: run % len(SIZES)]:
                times[rows].append(_poll_all(conn, tables[rows][0]))
            loads.append(load_average())
    result: dict[str, Any] = {"records": RECORDS, "runs": RUNS, "load": loads, "sizes": []}
    for rows in SIZES:
        _, mib, count = tables[rows]
        rates = [RECORDS / t for t in times[rows]]
        row = {"segment_records": rows, "segment_mib": round(mib, 3), "segments": count,
               "records_per_s": round(median(rates)), "spread": spread(rates, 0)}  # fmt: skip
        result["sizes"].append(row)
        log(f"segments of {rows:>7,} records ({mib:6.2f} MiB, {count:4} files): "
            f"{median(rates) / 1e6:5.2f} M records/s")  # fmt: skip
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    log(f"load average {loads}; written {RESULT}")


if __name__ == "__main__":
    main()
