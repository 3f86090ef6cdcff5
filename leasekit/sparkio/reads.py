"""Reads through Spark: rows of given snapshots, and the key-value state at log offsets (a
union of each bucket's newest snapshot at or below its offset and the log tail up to it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from ..errors import InvalidTypeError, OffsetOutOfRangeError
from ..log.state import read_states
from ..snapshots.catalog import snapshot_map
from ..snapshots.cover import snapshot_sources
from ..snapshots.sources import check_no_ancestor, plan_read
from ..tables.info import TableInfo
from ..validate import check_int
from .frames import kv_state
from .session import session, spark_errors
from .snapshot_frames import snapshot_rows, source_frames

__all__ = ["read_snapshots", "read_at", "check_table"]


def check_table(table: object) -> TableInfo:
    """``table`` if it is a Table: these functions need its connection, which a name lacks."""
    if not isinstance(table, TableInfo):
        hint = f"conn.table({table!r})" if isinstance(table, str) else "conn.table('orders')"
        raise InvalidTypeError(
            f"table must be a Table object, e.g. {hint}, not {type(table).__name__}"
        )
    return table


def read_snapshots(
    spark: SparkSession | None, table: TableInfo, snapshot_ids: Mapping[Any, int]
) -> DataFrame:
    """Rows of the given snapshots (table columns only).

    Arguments:
        spark: the SparkSession; ``None`` uses the active one.
        table: the Table (from ``conn.table``).
        snapshot_ids: snapshot id per ``TableBucket`` (or bucket number), e.g. a lease's pins.

    Returns:
        A DataFrame of the table's columns.

    Raises:
        InvalidTypeError: ``table`` is not a Table, or an id is not an int.
        InvalidArgumentError: a snapshot id below 1.
        BucketNotFoundError: the table has no such bucket.
        SnapshotNotFoundError: a snapshot is gone (retention deleted it: pin it with a lease).
    """
    table = check_table(table).refresh()
    spark = session(spark, table.context.warehouse)
    sources = snapshot_sources(table, snapshot_map(table, snapshot_ids))
    with spark_errors(f"read snapshots of {table.name}"):
        return snapshot_rows(spark, table, sources, depth=False)


def read_at(
    spark: SparkSession | None, table: TableInfo, offsets: Mapping[Any, int] | None = None
) -> DataFrame:
    """Union read: the key-value state at ``offsets``, from the newest snapshot at or below each
    offset plus the log tail up to it (S1). A bucket with no snapshot there that a rescale made
    starts from its parents' states at their seals, restricted to its keys (K3).

    Arguments:
        spark: the SparkSession; ``None`` uses the active one.
        table: the Table (from ``conn.table``).
        offsets: offset per ``TableBucket`` (or bucket number): exactly the buckets read. A
            sealed bucket's offset reads its keys as of then, in place of its descendants
            (``table.end_offsets()`` taken before a rescale reads the same rows after it).
            ``None``: every active bucket at its end offset now.

    Returns:
        A DataFrame of the table's columns, one row per live key.

    Raises:
        InvalidTypeError: ``table`` is not a Table, or an offset is not an int.
        InvalidArgumentError: ``offsets`` names a bucket and one of its ancestors.
        BucketNotFoundError: the table never had such a bucket.
        OffsetOutOfRangeError: an offset beyond the log end, or one no snapshot covers whose
            log retention already deleted.
    """
    table = check_table(table)
    spark = session(spark, table.context.warehouse)
    table.refresh()  # another client's rescale changes which buckets there are
    targets = _targets(table, offsets)
    sources = plan_read(table, targets)
    with spark_errors(f"read {table.name} at offsets"):
        base, changes = source_frames(spark, table, sources)
        return kv_state(table, base, changes)


def _targets(table: TableInfo, offsets: Any) -> dict[int, int]:
    """The offset to read each bucket at: ``offsets`` checked against the log ends, or the
    active buckets' ends."""
    if offsets is None:
        active = list(table.active)
        return {b: (s.end if s else 0) for b, s in zip(active, read_states(table, active))}
    if not isinstance(offsets, Mapping):
        raise InvalidTypeError(
            "offsets must be a mapping of TableBucket (or bucket number) to offset"
        )
    wanted: dict[int, int] = {}
    for tb, off in offsets.items():
        bucket = table.bucket_number(tb)
        wanted[bucket] = check_int(off, f"offset for bucket {bucket}")
    check_no_ancestor(table.layout, wanted)
    states = read_states(table, wanted)
    for (bucket, off), state in zip(wanted.items(), states):
        end = state.end if state else 0
        if not 0 <= off <= end:
            raise OffsetOutOfRangeError(f"offset {off} of bucket {bucket} is outside [0, {end}]")
    return wanted
