"""``format("leasekit")`` calls on one session, results ready for JSON: batch reads (plain, through
a lease, of the latest snapshots), a stream of the change log read to its end, and a stream from
one table into another through the sink. The scale tests run them on a standalone cluster, over
Spark Connect and on an S3 warehouse, and compare with the local session or a local warehouse.
"""

from __future__ import annotations

import time
from typing import Any

STREAM_COLUMNS = ["_bucket", "_offset", "_op"]
"""Columns of a stream compared across runs (``_timestamp`` is each run's own commit time)."""


def rows_of(df: Any) -> list[list[str | None]]:
    """Sorted rows with every value cast to a string by Spark (session time zone: UTC)."""
    from pyspark.sql import functions as F

    cols = [F.col("`" + c + "`").cast("string").alias(c) for c in df.columns]
    rows = [list(r) for r in df.select(*cols).collect()]
    return sorted(rows, key=lambda r: [("" if v is None else v) for v in r])


def _offsets(frame: Any) -> dict[int, int]:
    """Committed offset by bucket of a ``describe_group`` frame (buckets never committed left
    out)."""
    import pandas as pd

    return {
        int(b): int(o) for b, o in zip(frame["bucket"], frame["current_offset"]) if not pd.isna(o)
    }


def _until_done(query: Any, done: Any, timeout: float = 120) -> None:
    """Wait until ``done()`` holds (the stream has read to the end), then stop ``query``."""
    deadline = time.monotonic() + timeout
    try:
        while not done():
            if query.exception() is not None:
                raise AssertionError(f"stream failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"stream not done after {timeout} s: {query.lastProgress}")
            time.sleep(0.3)
    finally:
        query.stop()


def datasource_calls(
    spark: Any,
    conn: Any,
    options: dict[str, str],
    *,
    source: str,
    group: str,
    sink: str,
    checkpoints: str,
    lease_id: str | None = None,
) -> dict[str, Any]:
    """Every ``format("leasekit")`` call on ``spark`` over table ``source`` (connection
    ``options``); the stream reads with ``group`` and writes into table ``sink``, with
    checkpoints under ``checkpoints``."""

    import leasekit as lk

    assert lk.spark_session() is spark  # the active session, with format("leasekit") registered

    def read() -> Any:
        return spark.read.format("leasekit").options(**options)

    out: dict[str, Any] = {"ds_read": rows_of(read().load(source))}
    if lease_id is not None:
        out["ds_lease"] = rows_of(read().option("lease", lease_id).load(source))
    out["ds_snapshots"] = rows_of(read().option("snapshots", "latest").load(source))

    table = conn.table(source)
    ends = {tb.bucket: end for tb, end in table.end_offsets().items()}
    name = f"stream_{group}".replace("-", "_")
    stream = (
        spark.readStream.format("leasekit")
        .options(**options)
        .option("group", group)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", 25)
        .load(source)
    )
    query = (
        stream.select(*STREAM_COLUMNS, *[f.name for f in table.schema])
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", f"{checkpoints}/read")
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def committed() -> dict[int, int]:
        return _offsets(conn.describe_group(group))

    _until_done(query, lambda: all(committed().get(b, 0) >= e for b, e in ends.items()))
    out["ds_stream"] = rows_of(spark.table(name))
    out["ds_stream_batches"] = len(query.recentProgress) > 1
    out["ds_stream_committed"] = {str(b): o for b, o in sorted(committed().items())}

    target = conn.table(sink)
    copy = (
        spark.readStream.format("leasekit")
        .options(**options)
        .option("group", f"{group}-sink")
        .option("startingOffsets", "earliest")
        .load(source)
        .writeStream.format("leasekit")
        .options(**options)
        .option("checkpointLocation", f"{checkpoints}/sink")
        .trigger(processingTime="500 milliseconds")
        .start(sink)
    )

    def copied() -> bool:
        done = _offsets(conn.describe_group(f"{group}-sink"))
        return all(done.get(b, 0) >= e for b, e in ends.items())

    _until_done(copy, copied)
    out["ds_sink"] = rows_of(read().load(target.name))
    return out
