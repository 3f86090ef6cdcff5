"""Spark: the session, reads of snapshots and of the log, union reads, compaction, bulk writes.

The only module that imports pyspark at import time. Library calls take ``spark=None``
and use the active session; nothing here forces a master.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ..errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    LeasekitError,
    OffsetOutOfRangeError,
)
from ..log.markers import in_flight
from ..records import LogSegment, OffsetRange, Snapshot, TableBucket
from ..tables import schema as schemas
from ..tables.bucketing import spark_bucket_column

if TYPE_CHECKING:
    from ..tables.catalog import Table

__all__ = ["spark_session", "read_snapshots", "read_at", "write"]

_TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"
_LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def spark_session(app_name: str = "leasekit") -> SparkSession:
    """The active SparkSession, or a new one (``local[*]`` unless spark-submit says otherwise)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if not os.environ.get("JAVA_HOME"):
        from ..embedded.java import java_home

        os.environ["JAVA_HOME"] = java_home()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with spark_errors("start Spark"):
        # Spark's console progress bar would draw over leasekit's own progress bars.
        return SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false").getOrCreate()


def session(spark: SparkSession | None) -> SparkSession:
    if spark is None:
        return spark_session()
    if not isinstance(spark, SparkSession):
        raise InvalidTypeError(f"spark must be a SparkSession, not {type(spark).__name__}")
    return spark


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Translate Spark and Py4J errors into ``IllegalStateError``."""
    from py4j.protocol import Py4JError

    try:
        yield
    except LeasekitError:
        raise
    except (PySparkException, Py4JError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IllegalStateError(f"{what}: Spark failed: {first}") from None


_conf_lock = threading.Lock()
_conf_users: dict[tuple[int, str], tuple[int, str | None]] = {}


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL confs for this block; concurrent blocks share them and the last one restores."""
    with _conf_lock:
        for key, value in settings.items():
            users, previous = _conf_users.get((id(spark), key), (0, None))
            if users == 0:
                previous = spark.conf.get(key, None)
                spark.conf.set(key, value)
            _conf_users[(id(spark), key)] = (users + 1, previous)
    try:
        yield
    finally:
        with _conf_lock:
            for key in settings:
                users, previous = _conf_users.pop((id(spark), key))
                if users > 1:
                    _conf_users[(id(spark), key)] = (users - 1, previous)
                elif previous is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, previous)


def micros_timestamps(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Write timestamps as INT64 microseconds (readable by every Parquet reader) for this block."""
    return session_conf(spark, {_TIMESTAMP_CONF: "TIMESTAMP_MICROS"})


def known_files(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """leasekit passes exact file lists: no distributed listing job is needed to index them."""
    return session_conf(spark, {_LISTING_CONF: str(2**31 - 1)})


def struct_type(spark: SparkSession, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema


def _table_ddl(table: Table) -> str:
    return schemas.to_ddl(table.schema)


def _spark_path(table: Table, location: str) -> str:
    return table.connection.warehouse.to_spark(location)


def files_frame(spark: SparkSession, table: Table, files: list[str]) -> DataFrame:
    """Rows of table-column Parquet files (snapshot files), with the table's schema."""
    ddl = _table_ddl(table)
    if not files:
        return spark.createDataFrame([], ddl)
    with known_files(spark):
        return spark.read.schema(ddl).parquet(*[_spark_path(table, f) for f in files])


def log_frame(spark: SparkSession, table: Table, segments: Mapping[int, list[LogSegment]],
              ranges: Mapping[int, tuple[int, int]]) -> DataFrame:
    """Log records of ``segments`` with ``start <= _offset < limit`` for each bucket's range.

    Columns: ``_bucket``, ``_offset``, ``_timestamp``, ``_op`` and the table's columns.
    """
    from ..log.append import log_schema

    ddl = schemas.to_ddl(log_schema(table))
    used = [
        (bucket, seg)
        for bucket, segs in segments.items()
        for seg in segs
        if seg.base_offset < ranges[bucket][1] and seg.end_offset > ranges[bucket][0]
    ]
    columns = [f.name for f in table.schema]
    if not used:
        empty = spark.createDataFrame([], f"_bucket INT, _offset BIGINT, _timestamp TIMESTAMP, {ddl}")
        return empty.select("_bucket", "_offset", "_timestamp", "_op", *columns)
    meta = spark.createDataFrame(
        [(_file_key(seg.file), b, seg.base_offset, seg.timestamp_ms, *ranges[b]) for b, seg in used],
        "_file STRING, _bucket INT, _base BIGINT, _ts BIGINT, _start BIGINT, _limit BIGINT",
    )
    with known_files(spark):
        files = spark.read.schema(ddl).parquet(*[_spark_path(table, seg.file) for _, seg in used])
    records = (
        files.withColumn("_file", F.substring_index(F.col("_metadata.file_path"), "/", -2))
        .withColumn("_row", F.col("_metadata.row_index"))
        .join(F.broadcast(meta), "_file")
        .withColumn("_offset", F.col("_base") + F.col("_row"))
        .where((F.col("_offset") >= F.col("_start")) & (F.col("_offset") < F.col("_limit")))
    )
    return records.select(
        "_bucket", "_offset", F.timestamp_millis(F.col("_ts")).alias("_timestamp"), "_op", *columns
    )


def _file_key(location: str) -> str:
    """A segment file's parent directory and name: unique across segments, as Spark's bulk
    writes reuse part-file names in each bucket directory."""
    return "/".join(location.rstrip("/").split("/")[-2:])


def kv_state(table: Table, base: DataFrame, changes: DataFrame, *, by_bucket: bool = False) -> DataFrame:
    """Last write wins per key over ``base`` rows (oldest) then ``changes`` in offset order.

    Deleted keys are dropped. With ``by_bucket`` the result keeps a ``_bucket`` column and is
    partitioned by it, so each bucket's rows are written by one task.
    """
    key = list(table.primary_key)
    values = [f.name for f in table.schema if f.name not in table.primary_key]
    columns = [f.name for f in table.schema]
    union = base.select(*columns, F.lit("upsert").alias("_op"), F.lit(-1).cast("long").alias("_ord")).unionByName(
        changes.select(*columns, "_op", F.col("_offset").alias("_ord"))
    )
    group: list[Any] = list(key)
    if by_bucket:
        union = union.withColumn("_bucket", spark_bucket_column(key, table.num_buckets))
        union = union.repartition(max(1, min(table.num_buckets, 256)), "_bucket")
        group = ["_bucket", *key]
    latest = union.groupBy(*group).agg(F.max_by(F.struct(*values, "_op"), "_ord").alias("_last"))
    out: list[Column | str] = [*group, *[F.col(f"_last.{v}").alias(v) for v in values]]
    return latest.where(F.col("_last._op") != "delete").select(*out)


# -- public reads -------------------------------------------------------------------------


def _snapshot_map(table: Table, snapshot_ids: Any) -> dict[int, int]:
    if not isinstance(snapshot_ids, Mapping):
        raise InvalidTypeError("snapshot_ids must be a mapping of TableBucket (or bucket number) to snapshot id")
    out: dict[int, int] = {}
    for tb, sid in snapshot_ids.items():
        bucket = table.bucket_number(tb)
        if isinstance(sid, bool) or not isinstance(sid, int):
            raise InvalidTypeError(f"snapshot id for bucket {bucket} must be an int, not {type(sid).__name__}")
        if sid < 1:
            raise InvalidArgumentError(f"snapshot ids start at 1, got {sid} for bucket {bucket}")
        out[bucket] = sid
    return out


def read_snapshots(spark: SparkSession | None, table: Table, snapshot_ids: Mapping[Any, int]) -> DataFrame:
    """Rows of the given snapshots (table columns only); ``SnapshotNotFoundError`` if one is gone."""
    from ..snapshots.catalog import get_snapshots

    spark = session(spark)
    wanted = _snapshot_map(table, snapshot_ids)
    snaps = get_snapshots(table, wanted)
    with spark_errors(f"read snapshots of {table.name}"):
        return files_frame(spark, table, [f for s in snaps for f in s.files])


def read_at(spark: SparkSession | None, table: Table, offsets: Mapping[Any, int] | None = None) -> DataFrame:
    """Union read: the KV state at ``offsets`` (default: end offsets) from snapshot + log tail (S1)."""
    from ..log.append import list_segments, read_states
    from ..snapshots.catalog import list_snapshots

    spark = session(spark)
    states = read_states(table, range(table.num_buckets))
    if offsets is None:
        targets = {b: (s.end if s else 0) for b, s in enumerate(states)}
    else:
        if not isinstance(offsets, Mapping):
            raise InvalidTypeError("offsets must be a mapping of TableBucket (or bucket number) to offset")
        targets = {}
        for tb, off in offsets.items():
            bucket = table.bucket_number(tb)
            if isinstance(off, bool) or not isinstance(off, int):
                raise InvalidTypeError(f"offset for bucket {bucket} must be an int")
            end = states[bucket].end if states[bucket] else 0
            if not 0 <= off <= end:
                raise OffsetOutOfRangeError(f"offset {off} of bucket {bucket} is outside [0, {end}]")
            targets[bucket] = off
    base_files: list[str] = []
    starts: dict[int, int] = {}
    snaps_by_bucket: dict[int, list[Snapshot]] = {}
    for snap in list_snapshots(table, [b for b, o in targets.items() if o > 0]):
        snaps_by_bucket.setdefault(snap.table_bucket.bucket, []).append(snap)
    for bucket, target in targets.items():
        usable = [s for s in snaps_by_bucket.get(bucket, []) if s.log_offset <= target]
        base = max(usable, key=lambda s: s.log_offset, default=None)
        start = base.log_offset if base else 0
        begin = states[bucket].begin if states[bucket] else 0
        if start < begin and start < target:
            raise OffsetOutOfRangeError(
                f"bucket {bucket}: the log before offset {begin} is deleted and no snapshot covers offset {target}"
            )
        if base:
            base_files.extend(base.files)
        starts[bucket] = start
    ranges = {b: (starts[b], t) for b, t in targets.items() if t > starts[b]}
    segments = list_segments(table, ranges)
    with spark_errors(f"read {table.name} at offsets"):
        changes = log_frame(spark, table, segments, ranges)
        return kv_state(table, files_frame(spark, table, base_files), changes)


def write(df: DataFrame, table: Table) -> dict[TableBucket, OffsetRange]:
    """Bulk upsert from Spark: one task per bucket writes segment files, then offsets commit."""
    from ..log.append import SegmentFile, commit_segments

    if not isinstance(df, DataFrame):
        raise InvalidTypeError(f"df must be a Spark DataFrame, not {type(df).__name__}")
    spark = df.sparkSession
    names = {c.lower(): c for c in df.columns}
    extra = [c for c in df.columns if c.lower() not in {f.name.lower() for f in table.schema}]
    if extra:
        raise InvalidArgumentError(f"columns not in table {table.name!r}: {', '.join(extra)}")
    missing = [k for k in table.primary_key if k.lower() not in names]
    if missing:
        raise InvalidArgumentError(f"missing primary-key columns: {', '.join(missing)}")
    target = struct_type(spark, _table_ddl(table))
    columns = [
        (F.col(names[f.name.lower()]) if f.name.lower() in names else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in target
    ]
    warehouse = table.connection.warehouse
    with in_flight(table.connection) as token:
        rel = f"{table.data_dir}/log/bulk-{token}"
        with spark_errors(f"write to {table.name}"), micros_timestamps(spark):
            out = df.select(*columns, F.lit("upsert").alias("_op")).withColumn(
                "_bucket", spark_bucket_column(list(table.primary_key), table.num_buckets)
            )
            (out.repartition(max(1, min(table.num_buckets, 256)), "_bucket").write
             .partitionBy("_bucket")
             .option("maxRecordsPerFile", table.properties["log.segment.max-rows"])
             .parquet(warehouse.to_spark(warehouse.uri(rel))))
        files: list[SegmentFile] = []
        try:
            for entry in warehouse.list(rel):
                bucket = bucket_of_path(entry.path)
                if bucket is None:
                    continue
                meta = warehouse.parquet_metadata(entry.path)
                _check_not_null(table, meta, entry.path)
                files.append(SegmentFile(bucket, entry.path, meta.num_rows, entry.size))
        except LeasekitError:
            warehouse.delete_dir(rel)
            raise
        files.sort(key=lambda f: (f.bucket, f.rel))
        return commit_segments(table, [f for f in files if f.rows > 0], token)


def bucket_of_path(rel: str) -> int | None:
    """The bucket of a data file Spark wrote under ``_bucket=N/`` (None for side files)."""
    if not rel.endswith(".parquet") or posixpath.basename(rel).startswith((".", "_")):
        return None
    parent = posixpath.basename(posixpath.dirname(rel))
    if not parent.startswith("_bucket="):
        return None
    return int(parent.split("=", 1)[1])


def _check_not_null(table: Table, meta: Any, rel: str) -> None:
    """Reject files with nulls in key or NOT NULL columns, using the Parquet statistics."""
    required = {f.name for f in table.schema if not f.nullable}
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        for j in range(group.num_columns):
            col = group.column(j)
            stats = col.statistics
            if col.path_in_schema in required and stats is not None and stats.has_null_count and stats.null_count:
                raise InvalidArgumentError(
                    f"column {col.path_in_schema!r} must not be null (table {table.name!r}, file {rel})"
                )
