"""Bulk writes through Spark: a DataFrame's rows become segment files, one task per bucket,
whose offsets then commit to the buckets' logs."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import InvalidArgumentError, InvalidTypeError, LeasekitError
from ..log.append import SegmentFile, commit_segments
from ..log.markers import in_flight
from ..structs import OffsetRange, TableBucket
from ..tables.info import TableInfo
from .frames import bucket_of_path, data_files, table_ddl
from .reads import check_table
from .session import micros_timestamps, spark_errors, struct_type

__all__ = ["write"]


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
    table = check_table(table)
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
