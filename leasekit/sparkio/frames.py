"""DataFrames over leasekit's files: snapshot files, log records with offsets and timestamps,
and the KV state (last write per key wins) that compaction and union reads compute."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..log.segments import STAMP_COLUMN, log_schema
from ..structs import LogSegment
from ..tables import schema as schemas
from .session import is_connect, known_files

if TYPE_CHECKING:
    from ..tables.info import TableInfo
    from ..tables.layout import BucketLayout
    from ..warehouse import FileEntry, Warehouse

__all__ = [
    "table_ddl",
    "files_frame",
    "log_frame",
    "kv_state",
    "bucket_of_path",
    "data_files",
]


def table_ddl(table: TableInfo) -> str:
    return schemas.to_ddl(table.schema)


def _spark_path(table: TableInfo, location: str) -> str:
    return table.context.warehouse.to_spark(location)


def files_frame(spark: SparkSession, table: TableInfo, files: list[str]) -> DataFrame:
    """Rows of table-column Parquet files (snapshot files), with the table's schema."""
    ddl = table_ddl(table)
    if not files:
        return spark.createDataFrame([], ddl)
    with known_files(spark):
        return _resolved(
            spark, spark.read.schema(ddl).parquet(*[_spark_path(table, f) for f in files])
        )


def _resolved(spark: SparkSession, df: DataFrame) -> DataFrame:
    """``df``, analyzed now. Classic Spark resolves a file read when it is built; a Spark Connect
    server only when the plan reaches it, so a missing file would fail at the caller's first
    action, untranslated. Asking for the schema analyzes it inside leasekit's error scope."""
    if is_connect(spark):
        df.schema  # noqa: B018 (one AnalyzePlan request)
    return df


def log_frame(
    spark: SparkSession,
    table: TableInfo,
    segments: Mapping[int, list[LogSegment]],
    ranges: Mapping[int, tuple[int, int]],
) -> DataFrame:
    """Log records of ``segments`` with ``start <= _offset < limit`` for each bucket's range.

    Columns: ``_bucket``, ``_offset``, ``_timestamp``, ``_op`` and the table's columns. A
    record's timestamp is its file's ``_timestamp`` where it has one (a merged segment's, R8),
    else its segment's commit time (an appended segment's file has no such column: null).
    """
    ddl = schemas.to_ddl(log_schema(table))
    used = [
        (bucket, seg)
        for bucket, segs in segments.items()
        for seg in segs
        if seg.base_offset < ranges[bucket][1] and seg.end_offset > ranges[bucket][0]
    ]
    columns = [f.name for f in table.schema]
    if not used:
        empty = spark.createDataFrame(
            [], f"_bucket INT, _offset BIGINT, _timestamp TIMESTAMP, {ddl}"
        )
        return empty.select("_bucket", "_offset", "_timestamp", "_op", *columns)
    meta = spark.createDataFrame(
        [
            (_file_key(seg.file), b, seg.base_offset, seg.timestamp_ms, *ranges[b])
            for b, seg in used
        ],
        "_file STRING, _bucket INT, _base BIGINT, _ts BIGINT, _start BIGINT, _limit BIGINT",
    )
    with known_files(spark):
        files = _resolved(
            spark,
            spark.read.schema(f"{ddl}, {STAMP_COLUMN} BIGINT").parquet(
                *[_spark_path(table, seg.file) for _, seg in used]
            ),
        )
    records = (
        files.withColumn("_file", F.substring_index(F.col("_metadata.file_path"), "/", -2))
        .withColumn("_row", F.col("_metadata.row_index"))
        .join(F.broadcast(meta), "_file")
        .withColumn("_offset", F.col("_base") + F.col("_row"))
        .where((F.col("_offset") >= F.col("_start")) & (F.col("_offset") < F.col("_limit")))
    )
    stamps = F.timestamp_millis(F.coalesce(F.col(STAMP_COLUMN), F.col("_ts")))
    return records.select("_bucket", "_offset", stamps.alias("_timestamp"), "_op", *columns)


def _file_key(location: str) -> str:
    """A segment file's parent directory and name: unique across segments, as Spark's bulk
    writes reuse part-file names in each bucket directory."""
    return "/".join(location.rstrip("/").split("/")[-2:])


def kv_state(
    table: TableInfo,
    base: DataFrame,
    changes: DataFrame,
    *,
    by_bucket: BucketLayout | None = None,
) -> DataFrame:
    """Last write wins per key over ``base`` rows then ``changes`` in offset order, both with a
    ``_depth`` column (the lineage depth of the bucket they come from): a deeper bucket's rows
    come after its ancestors' (K2), so the order is (depth, offset), a snapshot row first.

    Deleted keys are dropped. With ``by_bucket`` (a layout) the result keeps a ``_bucket``
    column, the active bucket of each key, and is partitioned by it, so each bucket's rows are
    written by one task.
    """
    key = list(table.primary_key)
    values = [f.name for f in table.schema if f.name not in table.primary_key]
    columns = [f.name for f in table.schema]
    union = base.select(
        *columns,
        F.lit("upsert").alias("_op"),
        F.struct(F.col("_depth").cast("int").alias("d"), F.lit(-1).cast("long").alias("o")).alias(
            "_ord"
        ),
    ).unionByName(
        changes.select(
            *columns,
            "_op",
            F.struct(F.col("_depth").cast("int").alias("d"), F.col("_offset").alias("o")).alias(
                "_ord"
            ),
        )
    )
    group: list[Any] = list(key)
    if by_bucket is not None:
        union = union.withColumn("_bucket", by_bucket.spark_column(key))
        union = union.repartition(max(1, min(len(by_bucket.active), 256)), "_bucket")
        group = ["_bucket", *key]
    latest = union.groupBy(*group).agg(F.max_by(F.struct(*values, "_op"), "_ord").alias("_last"))
    out: list[Column | str] = [*group, *[F.col(f"_last.{v}").alias(v) for v in values]]
    return latest.where(F.col("_last._op") != "delete").select(*out)


def bucket_of_path(rel: str) -> int | None:
    """The bucket of a data file Spark wrote under ``_bucket=N/`` (None for side files)."""
    if not rel.endswith(".parquet") or posixpath.basename(rel).startswith((".", "_")):
        return None
    parent = posixpath.basename(posixpath.dirname(rel))
    if not parent.startswith("_bucket="):
        return None
    return int(parent.split("=", 1)[1])


def _is_side_file(rel: str) -> bool:
    """Hadoop's job marker (``_SUCCESS``) or a checksum file (``.<name>.crc``)."""
    name = posixpath.basename(rel)
    return name == "_SUCCESS" or (name.startswith(".") and name.endswith(".crc"))


def data_files(warehouse: Warehouse, rel: str) -> list[FileEntry]:
    """The files a Spark write left under ``rel``, after deleting its side files (``_SUCCESS``,
    ``.crc`` checksums): nothing references them, so left in place they would become retention's
    orphans. Spark reads the data files without them.

    Raises:
        IllegalStateError: listing or deleting failed.
    """
    entries = warehouse.list(rel)
    side = [e.path for e in entries if _is_side_file(e.path)]
    if side:
        warehouse.delete_files(side)
    return [e for e in entries if not _is_side_file(e.path)]
