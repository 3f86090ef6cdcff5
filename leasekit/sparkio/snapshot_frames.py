"""DataFrames of read sources (``snapshots.sources``): snapshot rows and log records of each
bucket read, with its lineage depth for last-write-wins, and only the keys each source counts
for (a parent read for one of its children gives that child's share, K3)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from ..log.segments import list_segments
from ..snapshots.sources import Source
from .frames import files_frame, log_frame, table_ddl
from .session import is_connect, known_files

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["source_frames", "snapshot_rows"]


def source_frames(
    spark: SparkSession, table: TableInfo, sources: Sequence[Source]
) -> tuple[DataFrame, DataFrame]:
    """The snapshot rows and the log records of ``sources``, each with ``_depth``: the input of
    ``frames.kv_state``."""
    ranges = {s.bucket: (s.start, s.end) for s in sources if s.end > s.start}
    segments = list_segments(table, ranges)
    changes = log_frame(spark, table, segments, ranges)
    logged = [s for s in sources if s.bucket in ranges]
    changes = _restricted(table, _with_depth(spark, changes, logged), logged, "_bucket")
    return snapshot_rows(spark, table, sources), changes.drop("_bucket")


def snapshot_rows(
    spark: SparkSession, table: TableInfo, sources: Sequence[Source], *, depth: bool = True
) -> DataFrame:
    """The table's columns (and ``_depth`` unless ``depth`` is False) of the sources'
    snapshots, each restricted to the keys it counts for. Without ``depth``, sources all at one
    depth and unrestricted give the plain file read itself: no column added and dropped again,
    which would cost two more analyses of the plan."""
    snapped = [s for s in sources if s.snapshot is not None and s.snapshot.files]
    files = [f for s in snapped for f in s.snapshot.files]  # type: ignore[union-attr]
    if len({s.depth for s in snapped}) <= 1 and all(s.within is None for s in snapped):
        plain = files_frame(spark, table, files)
        return (
            plain.withColumn("_depth", F.lit(snapped[0].depth if snapped else 0))
            if depth
            else plain
        )
    meta = spark.createDataFrame(
        [(_file_key(f), s.bucket, s.depth) for s in snapped for f in s.snapshot.files],  # type: ignore[union-attr]
        "_file STRING, _src INT, _depth INT",
    )
    with known_files(spark):
        read = spark.read.schema(table_ddl(table)).parquet(
            *[table.context.warehouse.to_spark(f) for f in files]
        )
        if is_connect(spark):
            read.schema  # noqa: B018 (analyze now, inside the caller's error scope)
    rows = read.withColumn("_file", F.substring_index(F.col("_metadata.file_path"), "/", -3)).join(
        F.broadcast(meta), "_file"
    )
    columns = [f.name for f in table.schema]
    return _restricted(table, rows, snapped, "_src").select(
        *columns, *(["_depth"] if depth else [])
    )


def _file_key(location: str) -> str:
    """A snapshot file's last three path parts (write token, ``_bucket=N``, part file)."""
    return "/".join(location.rstrip("/").split("/")[-3:])


def _with_depth(spark: SparkSession, df: DataFrame, sources: Sequence[Source]) -> DataFrame:
    """``df`` (with ``_bucket``) with each source bucket's depth as ``_depth``."""
    depths = {s.bucket: s.depth for s in sources}
    if len(set(depths.values())) <= 1:
        return df.withColumn("_depth", F.lit(next(iter(depths.values()), 0)))
    meta = spark.createDataFrame(list(depths.items()), "_bucket INT, _depth INT")
    return df.join(F.broadcast(meta), "_bucket")


def _restricted(
    table: TableInfo, df: DataFrame, sources: Sequence[Source], column: str
) -> DataFrame:
    """Rows of ``df`` whose source (``column``) counts for every key, or whose key hashes into
    one of the classes its source counts for."""
    limited = {s.bucket: s.within for s in sources if s.within is not None}
    if not limited:
        return df
    hashed = F.hash(*[F.col(k) for k in table.primary_key])
    keep: Column = ~F.col(column).isin(list(limited))
    for bucket, classes in sorted(limited.items()):
        owned = [F.pmod(hashed, F.lit(c.modulus)) == F.lit(c.residue) for c in classes]
        keep = keep | ((F.col(column) == bucket) & reduce(Column.__or__, owned, F.lit(False)))
    return df.where(keep)
