"""A group's change reads with Spark (docs/spark.md): the log records from its committed offsets to
the end offsets, read over the segment files, and the commit of those end offsets. Spark (with
``sparkio``) loads on the first read, so the consumers package never imports it at import time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import GroupNotEmptyError, OffsetOutOfRangeError
from ...log.segments import check_files, list_segments
from ...log.state import read_states
from ...structs import OffsetRange, TableBucket
from .. import offsets as stored_offsets
from . import group_admin

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ...tables.info import TableInfo

__all__ = ["read_changes", "ChangeBatch"]


class ChangeBatch:
    """Log records of a table from a group's committed offsets to the end offsets at the time
    of ``read_changes``; ``commit()`` commits those end offsets for the group."""

    def __init__(
        self, table: TableInfo, group_id: str, ranges: dict[TableBucket, OffsetRange], df: DataFrame
    ) -> None:
        self.df = df
        """``_bucket``, ``_offset``, ``_timestamp``, ``_op`` and the table's columns."""
        self.offsets = ranges
        """The offsets read per bucket: [committed (or beginning), end at the call)."""
        self._table = table
        self._group = group_id

    def commit(self) -> None:
        """Commit the end offsets of the batch for the group.

        Raises:
            GroupNotEmptyError: the group has live consumer members (checked again inside the
                commit's transaction); nothing was written.
            TableNotFoundError: the table was dropped meanwhile.
        """
        ctx = self._table.context
        _refuse_live_members(ctx, self._group)
        changed = {tb: r.end for tb, r in self.offsets.items() if len(r)}
        if changed:  # again in the transaction: a member may have joined since (docs/consumers.md)
            stored_offsets.commit(
                ctx, self._group, changed, {self._table.name: self._table}, outside=True
            )

    def __repr__(self) -> str:
        records = sum(len(r) for r in self.offsets.values())
        return f"ChangeBatch(table={self._table.name!r}, group={self._group!r}, records={records})"


def _refuse_live_members(ctx: Any, group_id: str) -> None:
    members = group_admin.live_members(ctx, group_id)
    if members:
        raise GroupNotEmptyError(
            f"group {group_id} has {len(members)} live consumer member(s): "
            "read_changes is the group's only reader"
        )


def read_changes(spark: SparkSession | None, table: TableInfo, group_id: str) -> ChangeBatch:
    """The table's log records from the group's committed offsets (the beginning offsets where
    none) to the end offsets now, read by Spark over the segment files (docs/spark.md).

    Arguments:
        spark: the SparkSession; ``None`` uses the active one, or starts one for the table's
            warehouse (with Spark's ``s3a`` for an S3 one).
        table: the Table (from ``conn.table``).
        group_id: the consumer group whose offsets it starts from; ``commit()`` moves them.

    Returns:
        The ``ChangeBatch``: its ``df``, the offsets it covers, and ``commit()``.

    Raises:
        InvalidTypeError: ``table`` is not a Table.
        InvalidArgumentError: a bad group id.
        GroupNotEmptyError: the group has live consumer members (they are its readers).
        OffsetOutOfRangeError: a committed offset below the log start: reset the group first.
        DataFileMissingError: a segment file of the range is missing while the metadata lists
            it (``file`` and ``bucket`` name it).
    """
    from ...sparkio.frames import log_frame
    from ...sparkio.reads import check_table
    from ...sparkio.session import session, spark_errors

    table = check_table(table)
    group_id = stored_offsets.check_group_id(group_id)
    spark = session(spark, table.context.warehouse)
    ctx = table.context
    _refuse_live_members(ctx, group_id)
    table.refresh()
    every = range(table.layout.count)  # sealed buckets too: their records up to the seal
    tbs = [TableBucket(table.name, b) for b in every]
    committed = stored_offsets.fetch(ctx, group_id, {table.name: table}, tbs)
    states = read_states(table, every)
    ranges: dict[TableBucket, OffsetRange] = {}
    for tb, state in zip(tbs, states):
        begin, end = (state.begin, state.end) if state else (0, 0)
        start = committed[tb].offset if tb in committed else begin
        if start < begin:
            raise OffsetOutOfRangeError(
                f"group {group_id} committed offset {start} of {tb}, but the log before "
                f"{begin} is deleted: reset the group's offsets first"
            )
        ranges[tb] = OffsetRange(start, max(start, end))
    reading = {tb.bucket: (r.start, r.end) for tb, r in ranges.items() if len(r)}
    segments = list_segments(table, reading)
    check_files(  # the segments the frame reads (as ``log_frame`` picks them)
        table,
        (
            s
            for b, segs in segments.items()
            for s in segs
            if s.base_offset < reading[b][1] and s.end_offset > reading[b][0]
        ),
    )
    with spark_errors(f"read changes of {table.name}"):
        df = log_frame(spark, table, segments, reading)
    return ChangeBatch(table, group_id, ranges, df)
