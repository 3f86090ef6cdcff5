"""Spark, the public functions: reads of snapshots, union reads at log offsets, bulk writes.

Only this package imports pyspark at import time. Library calls take ``spark=None`` and use
the active session; nothing here forces a master.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from ..consumers import offsets as stored_offsets
from ..consumers.admin import group_admin
from ..errors import (
    GroupNotEmptyError,
    InvalidArgumentError,
    InvalidTypeError,
    LeasekitError,
    OffsetOutOfRangeError,
)
from ..log.append import SegmentFile, commit_segments
from ..log.markers import in_flight
from ..log.segments import check_files, list_segments
from ..log.state import read_states
from ..snapshots.catalog import snapshot_map
from ..snapshots.cover import snapshot_sources
from ..snapshots.sources import check_no_ancestor, plan_read
from ..structs import OffsetRange, TableBucket
from ..tables.info import TableInfo
from ..validate import check_int
from .datasource import register
from .frames import bucket_of_path, data_files, kv_state, log_frame, table_ddl
from .session import micros_timestamps, session, spark_errors, struct_type
from .session import spark_session as _new_session
from .sources import snapshot_rows, source_frames

__all__ = [
    "spark_session",
    "register",
    "read_snapshots",
    "read_at",
    "read_changes",
    "ChangeBatch",
    "write",
]


def spark_session(app_name: str = "leasekit") -> SparkSession:
    """The active SparkSession, or a new one (``local[*]`` unless spark-submit says otherwise),
    with ``format("leasekit")`` registered (§6.11).

    Arguments:
        app_name: the application name of a new session.

    Raises:
        JavaNotFoundError: no Java was found to start Spark with.
        IllegalStateError: Spark failed to start.
    """
    spark = _new_session(app_name)
    with spark_errors("register format('leasekit')"):
        register(spark)
    return spark


# -- public reads -------------------------------------------------------------------------


def _check_table(table: object) -> TableInfo:
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
    table = _check_table(table).refresh()
    spark = session(spark)
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
    table = _check_table(table)
    spark = session(spark)
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
        if changed:  # §6.5: the check again, inside the transaction (a member may join meanwhile)
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
    none) to the end offsets now, read by Spark over the segment files (DESIGN §6.4).

    Arguments:
        spark: the SparkSession; ``None`` uses the active one.
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
    table = _check_table(table)
    group_id = stored_offsets.check_group_id(group_id)
    spark = session(spark)
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


# -- bulk writes --------------------------------------------------------------------------


def write(df: DataFrame, table: TableInfo) -> dict[TableBucket, OffsetRange]:
    """Bulk upsert from Spark: one task per bucket writes segment files, then offsets commit.

    Arguments:
        df: a Spark DataFrame with the primary-key columns and any of the table's others
            (matched by name, case-insensitive; missing ones are null).
        table: the Table (from ``conn.table``).

    Returns:
        The offsets assigned, per bucket written.

    Raises:
        InvalidTypeError: ``df`` is not a Spark DataFrame or ``table`` not a Table.
        InvalidArgumentError: a column not in the table, a missing key column, or a null in a
            key or NOT NULL column.
        PartialAppendError: only some buckets committed (it says how to retry the rest).
    """
    if not isinstance(df, DataFrame):
        raise InvalidTypeError(f"df must be a Spark DataFrame, not {type(df).__name__}")
    table = _check_table(table)
    spark = df.sparkSession
    with spark_errors(f"write to {table.name}"):
        given = df.columns  # over Spark Connect, this analyzes the input on the server
    names = {c.lower(): c for c in given}
    extra = [c for c in given if c.lower() not in {f.name.lower() for f in table.schema}]
    if extra:
        raise InvalidArgumentError(f"columns not in table {table.name!r}: {', '.join(extra)}")
    missing = [k for k in table.primary_key if k.lower() not in names]
    if missing:
        raise InvalidArgumentError(f"missing primary-key columns: {', '.join(missing)}")
    target = struct_type(spark, table_ddl(table))
    columns = [
        (F.col(names[f.name.lower()]) if f.name.lower() in names else F.lit(None))
        .cast(f.dataType)
        .alias(f.name)
        for f in target
    ]
    return _write_segments(df, table, columns)


def _write_segments(
    df: DataFrame, table: TableInfo, columns: list[Any]
) -> dict[TableBucket, OffsetRange]:
    """Write ``columns`` of ``df`` as segment files, one directory per bucket, and commit them
    to the buckets' logs."""
    spark = df.sparkSession
    warehouse = table.context.warehouse
    with in_flight(table.context) as token:
        rel = f"{table.data_dir}/log/bulk-{token}"
        with spark_errors(f"write to {table.name}"), micros_timestamps(spark):
            out = df.select(*columns, F.lit("upsert").alias("_op")).withColumn(
                "_bucket", table.layout.spark_column(list(table.primary_key))
            )
            (
                out.repartition(max(1, min(len(table.active), 256)), "_bucket")
                .write.partitionBy("_bucket")
                .option("maxRecordsPerFile", table.properties["log.segment.max-rows"])
                .parquet(warehouse.to_spark(warehouse.uri(rel)))
            )
        files = _segment_files(table, rel)

        def rest(buckets: list[int]) -> DataFrame:
            """The input rows of ``buckets`` (lazily), for a retry after a partial commit."""
            return df.where(table.layout.spark_column(list(table.primary_key)).isin(buckets))

        return commit_segments(table, [f for f in files if f.rows > 0], token, rest=rest)


def _segment_files(table: TableInfo, rel: str) -> list[SegmentFile]:
    """The segment files Spark wrote under ``rel``, checked, by bucket and path; on a bad file
    the directory is deleted and the error raised."""
    warehouse = table.context.warehouse
    files: list[SegmentFile] = []
    try:
        for entry in data_files(warehouse, rel):  # no _SUCCESS or .crc left behind
            bucket = bucket_of_path(entry.path)
            if bucket is None:
                continue
            meta = warehouse.parquet_metadata(entry.path)
            _check_not_null(table, meta, entry.path)
            files.append(SegmentFile(bucket, entry.path, meta.num_rows, entry.size))
    except LeasekitError:
        warehouse.delete_dir(rel)
        raise
    return sorted(files, key=lambda f: (f.bucket, f.rel))


def _check_not_null(table: TableInfo, meta: Any, rel: str) -> None:
    """Reject files with nulls in key or NOT NULL columns, using the Parquet statistics."""
    required = {f.name for f in table.schema if not f.nullable}
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for j in range(group.num_columns):
            col = group.column(j)
            stats = col.statistics
            if (
                col.path_in_schema in required
                and stats is not None
                and stats.has_null_count
                and stats.null_count
            ):
                raise InvalidArgumentError(
                    f"column {col.path_in_schema!r} must not be null "
                    f"(table {table.name!r}, file {rel})"
                )
