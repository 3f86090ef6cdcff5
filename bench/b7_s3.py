"""B7-S3: B7 (``bench/b7.py``) on an S3 warehouse, through Spark's own ``s3a`` file system:
``table.snapshot()`` vs the same hand-written Spark dedupe, both reading the log's segment
files and writing one file per bucket on S3 (reported; B7's target, ratio <= 1.2, beside it).

The S3 server is SeaweedFS on loopback and the session reads and writes it through ``s3a``
with the ``hadoop-aws`` jars of ``make peers``, set up as B1-S3 does (``b1_s3.s3_warehouse``).
Everything else is B7's: the same workload, runs, alternating order and checks, the
hand-written side's file count read from the warehouse's listing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import b7
from .b1_s3 import _jars, s3_warehouse
from .common import Benchmark, Outcome

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run"]


def run(spark: SparkSession, quick: bool, runs: int) -> Outcome:
    return b7.run(spark, quick, runs, warehouse=_warehouse)


def _warehouse(spark: SparkSession):
    return s3_warehouse(spark, "B7-S3")


BENCHMARK = Benchmark(
    id="B7-S3",
    what=(
        "B7 on an S3 warehouse (SeaweedFS on loopback) through Spark's s3a file system: "
        "table.snapshot() vs a hand-written Spark dedupe of the same log, same number of files"
    ),
    metric="ratio",
    target=1.2,
    op="<=",
    run=run,
    quick_runs=1,
    quick_note="200,000 of 2,000,000 records",
    spark_jars=_jars,
)
