"""Compaction with Spark: each advanced active bucket's state (its previous snapshot plus its
log tail, or, for a bucket a rescale made, its share of its parents' states plus its own log)
becomes a new snapshot's files, which ``snapshots.register`` then registers (S1, S2, K3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import IllegalStateError
from ..log.markers import in_flight
from ..log.segments import list_segments
from ..log.state import read_states
from ..progress import progress
from ..snapshots.register import Written, register
from ..snapshots.sources import Source, has_history, plan_read
from ..structs import Snapshot, TableBucket
from .frames import bucket_of_path, data_files, kv_state
from .session import micros_timestamps, session, spark_errors
from .snapshot_frames import source_frames

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..tables.info import TableInfo
    from ..tables.layout import BucketLayout
    from ..zk.formats import BucketState

__all__ = ["take_snapshots", "advanced"]


def advanced(table: TableInfo, states: dict[int, BucketState | None]) -> dict[int, int]:
    """The end offset of each active bucket whose state moved past its newest snapshot: its log
    grew, or, with no snapshot yet, it has records or its ancestors had (K3: its first snapshot
    materialises its share of them)."""
    out = {}
    for b, s in states.items():
        end = s.end if s is not None else 0
        if s is not None and s.latest_snapshot is not None:
            if end > s.latest_offset:
                out[b] = end
        elif end > 0 or has_history(table.layout, b):
            out[b] = end
    return out


def take_snapshots(table: TableInfo, spark: Any = None) -> dict[TableBucket, Snapshot]:
    """Compact every advanced active bucket and register the results (sealed buckets are not
    snapshotted: their descendants' snapshots take over their keys).

    Arguments:
        table: the table.
        spark: the SparkSession; ``None`` uses the active one.

    Returns:
        The new snapshots, per bucket (empty when no bucket advanced).

    Raises:
        TableNotFoundError: the table was dropped meanwhile.
        IllegalStateError: Spark failed, or the files could not be registered.
    """
    spark = session(spark, table.context.warehouse)
    layout = table.refresh().layout
    active = list(layout.active)
    ends = advanced(table, dict(zip(active, read_states(table, active))))
    if not ends:
        return {}
    bar = progress(total=3, desc=f"snapshot {table.name}", unit="step", leave=False)
    try:
        with in_flight(table.context) as token:
            rel = f"{table.data_dir}/snapshots/{token}"
            for attempt in range(1, ATTEMPTS + 1):
                sources = plan_read(table, ends)
                bar.update(1 if attempt == 1 else 0)
                planned = _log_files(table, sources)
                try:
                    _compact(spark, table, layout, sources, f"{rel}/{attempt}")
                    break
                except IllegalStateError:
                    if not _replanned(table, planned, rel, attempt):
                        raise
            bar.update(1)
            result = register(table, _written(table, ends, f"{rel}/{attempt}"), token)
        bar.update(1)
    finally:
        bar.close()
    return result


ATTEMPTS = 3
"""Plans of one snapshot: a merge (R8) may replace log files the job planned on, and retention
delete them once ``orphan.min-age`` has passed; the job then plans again on the new files."""


def _log_files(table: TableInfo, sources: list[Source]) -> list[str]:
    """Warehouse-relative paths of the log files a snapshot of ``sources`` reads."""
    ranges = {s.bucket: (s.start, s.end) for s in sources if s.end > s.start}
    warehouse = table.context.warehouse
    return [
        warehouse.relative(seg.file)
        for b, segs in list_segments(table, ranges).items()
        for seg in segs
        if seg.base_offset < ranges[b][1] and seg.end_offset > ranges[b][0]
    ]


def _replanned(table: TableInfo, planned: list[str], rel: str, attempt: int) -> bool:
    """After a failed job: whether to plan again (a log file it planned on is gone, and
    attempts are left), its partial output deleted. Raises ``IllegalStateError`` naming the file
    when the attempts are used up."""
    warehouse = table.context.warehouse
    there = {e.path for e in warehouse.stat(planned)}
    gone = [f for f in planned if f not in there]
    if not gone:
        return False  # not a replaced file: the job's own error stands
    warehouse.delete_dir(f"{rel}/{attempt}")
    if attempt < ATTEMPTS:
        return True
    raise IllegalStateError(
        f"snapshot {table.name}: the log file {warehouse.uri(gone[0])} was deleted while the job "
        f"read it, in each of {ATTEMPTS} attempts: merges replace log files, and retention "
        "deletes the replaced ones once orphan.min-age has passed; set orphan.min-age longer "
        "than a snapshot job takes"
    )


def _compact(
    spark: SparkSession, table: TableInfo, layout: BucketLayout, sources: list[Source], rel: str
) -> None:
    """Write the key-value state of ``sources`` under ``rel``, one ``_bucket=<n>`` directory
    per active bucket of ``layout``."""
    warehouse = table.context.warehouse
    with spark_errors(f"snapshot {table.name}"), micros_timestamps(spark):
        base, changes = source_frames(spark, table, sources)
        state = kv_state(table, base, changes, by_bucket=layout)
        state.write.partitionBy("_bucket").parquet(warehouse.to_spark(warehouse.uri(rel)))


def _written(table: TableInfo, ends: dict[int, int], rel: str) -> dict[int, Written]:
    """The files Spark wrote under ``rel``, with their rows and bytes, per advanced bucket (its
    side files deleted)."""
    warehouse = table.context.warehouse
    written = {b: Written(end, [], 0, 0) for b, end in ends.items()}
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
