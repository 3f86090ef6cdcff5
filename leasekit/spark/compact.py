"""Compaction with Spark: each advanced bucket's previous snapshot plus its log tail becomes a
new snapshot's files, which ``snapshots.register`` then registers (S1, S2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..log.markers import in_flight
from ..log.segments import list_segments
from ..log.state import read_states
from ..progress import progress
from ..snapshots.catalog import get_snapshots
from ..snapshots.register import Written, register
from ..structs import Snapshot, TableBucket
from .frames import bucket_of_path, data_files, files_frame, kv_state, log_frame
from .session import micros_timestamps, session, spark_errors

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..tables.info import TableInfo
    from ..zk.formats import BucketState

__all__ = ["take_snapshots"]


def take_snapshots(table: TableInfo, spark: Any = None) -> dict[TableBucket, Snapshot]:
    """Compact every advanced bucket (previous snapshot + log tail) and register the results.

    Arguments:
        table: the table.
        spark: the SparkSession; ``None`` uses the active one.

    Returns:
        The new snapshots, per bucket (empty when no bucket advanced).

    Raises:
        TableNotFoundError: the table was dropped meanwhile.
        IllegalStateError: Spark failed, or the files could not be registered.
    """
    spark = session(spark)
    states = read_states(table, range(table.num_buckets))
    advanced = {
        b: s
        for b, s in enumerate(states)
        if s is not None and s.end > (s.latest_offset if s.latest_snapshot is not None else 0)
    }
    if not advanced:
        return {}
    bar = progress(total=3, desc=f"snapshot {table.name}", unit="step", leave=False)
    try:
        bases = get_snapshots(
            table, {b: s.latest_snapshot for b, s in advanced.items() if s.latest_snapshot}
        )
        starts = {b: s.latest_offset if s.latest_snapshot else 0 for b, s in advanced.items()}
        ranges = {b: (starts[b], s.end) for b, s in advanced.items()}
        segments = list_segments(table, ranges)
        bar.update(1)
        with in_flight(table.context) as token:
            rel = f"{table.data_dir}/snapshots/{token}"
            _compact(spark, table, [f for s in bases for f in s.files], segments, ranges, rel)
            bar.update(1)
            result = register(table, _written(table, advanced, rel), token)
        bar.update(1)
    finally:
        bar.close()
    return result


def _compact(
    spark: SparkSession,
    table: TableInfo,
    base_files: list[str],
    segments: Any,
    ranges: dict[int, tuple[int, int]],
    rel: str,
) -> None:
    """Write the key-value state of the base snapshots plus the log ranges under ``rel``, one
    ``_bucket=<n>`` directory per bucket."""
    warehouse = table.context.warehouse
    with spark_errors(f"snapshot {table.name}"), micros_timestamps(spark):
        state = kv_state(
            table,
            files_frame(spark, table, base_files),
            log_frame(spark, table, segments, ranges),
            by_bucket=True,
        )
        state.write.partitionBy("_bucket").parquet(warehouse.to_spark(warehouse.uri(rel)))


def _written(table: TableInfo, advanced: dict[int, BucketState], rel: str) -> dict[int, Written]:
    """The files Spark wrote under ``rel``, with their rows and bytes, per advanced bucket (its
    side files deleted)."""
    warehouse = table.context.warehouse
    written = {b: Written(s.end, [], 0, 0) for b, s in advanced.items()}
    for entry in data_files(warehouse, rel):
        bucket = bucket_of_path(entry.path)
        if bucket is None or bucket not in written:
            continue
        w = written[bucket]
        rows = warehouse.parquet_metadata(entry.path).num_rows
        written[bucket] = w._replace(
            files=[*w.files, entry.path], rows=w.rows + rows, size=w.size + entry.size
        )
    return written
