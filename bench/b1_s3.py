"""B1-S3: B1 (``bench/b1.py``) on an S3 warehouse, through Spark's own ``s3a`` reader: a Spark
aggregation over a leased snapshot read (``lease.read``) vs the floor,
``spark.read.schema(schema).parquet(*files)`` of the same ``s3a://`` files (target ratio
<= 1.05).

The S3 server is SeaweedFS on loopback (``peers.seaweedfs``), its bucket reached by
leasekit through pyarrow (appends) and by Spark through ``s3a``: the session is built with the
``hadoop-aws`` jars of ``make peers`` (``spark_jars``), and once the server is up its
endpoint, path-style access and credentials go into the session's Hadoop configuration
(``leasekit.sparkio.s3a.s3a_settings``, the settings ``lk.spark_session`` gives a new session),
before anything opens an ``s3a://`` path. ZooKeeper is the embedded server of a local directory
(an S3 warehouse cannot hold its data). Everything else is B1's: the same data, lease, floor,
settings, warm-up, counterbalanced rounds, profile and checks, plus one: both sides scan
``s3a://`` files through ``S3AFileSystem``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from leasekit import testing

from . import b1
from .common import ORDERS_DDL, Benchmark, Outcome, log, median, orders_batch, timed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit.connection import Connection

__all__ = ["BENCHMARK", "run"]

FULL = b1.FULL
QUICK = b1.QUICK
READER = b1.READER
BASELINE = "spark.read.schema(ddl).parquet(*files) of the same s3a:// files"
S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
PROFILE = b1.PROFILE
"""B1's breakdown of the leasekit side."""


def _jars() -> list[str]:
    """The jars of Spark's s3a file system (``make peers``), for the session's classpath."""
    from leasekit.sparkio.s3a import s3a_jars

    return s3a_jars()


@contextlib.contextmanager
def s3_warehouse(spark: SparkSession, label: str) -> Iterator[Connection]:
    """A connection on a fresh namespace of an S3 warehouse on SeaweedFS, with an embedded
    ZooKeeper; ``spark`` reads the bucket through s3a. Everything is stopped and removed on
    exit."""
    import leasekit
    from leasekit import embedded
    from leasekit.sparkio.s3a import s3a_settings
    from leasekit.warehouse import Warehouse
    from peers.seaweedfs import BUCKET, aws_environment, seaweed_s3

    root = Path(tempfile.mkdtemp(prefix=f"leasekit-bench-{label.lower()}-"))
    saved: dict[str, str | None] = {}
    try:
        log(f"{label}: SeaweedFS S3 server and ZooKeeper under {root}")
        with seaweed_s3(root / "seaweedfs") as endpoint:
            for key, value in aws_environment(endpoint).items():
                saved[key] = os.environ.get(key)
                os.environ[key] = value
            uri = f"s3://{BUCKET}/{label.lower()}"
            hadoop = spark.sparkContext._jsc.hadoopConfiguration()
            for key, value in s3a_settings(Warehouse(uri)).items():
                hadoop.set(key.removeprefix("spark.hadoop."), value)
            zookeeper = embedded.ensure_running(root / "zookeeper")
            namespace = f"bench-{label.lower()}-{uuid.uuid4().hex[:8]}"
            with leasekit.connect(zookeeper, uri, namespace=namespace) as conn:
                yield conn
    finally:
        embedded.stop(root / "zookeeper")
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)


def _file_system(spark: SparkSession, files: list[str]) -> str:
    """The Hadoop file system class Spark opens the first of ``files`` with."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(files[0])
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).getClass().getName()


def run(spark: SparkSession, quick: bool, runs: int) -> Outcome:
    from leasekit.sparkio.frames import table_ddl

    p = QUICK if quick else FULL
    rng = np.random.default_rng(p["seed"])
    ids = rng.permutation(p["rows"]).astype(np.int64)
    with s3_warehouse(spark, "B1-S3") as conn:
        table = conn.create_table("orders", ORDERS_DDL, "id", buckets=p["buckets"])

        def load() -> None:
            for start in range(0, p["rows"], p["batch_rows"]):
                table.append(orders_batch(rng, ids[start : start + p["batch_rows"]]))

        log(f"B1-S3: appending {p['rows']:,} rows in batches of {p['batch_rows']:,} to S3")
        append_s, _ = timed(load)
        log(f"B1-S3: appended in {append_s:.1f}s; taking the snapshot through s3a")
        snapshot_s, snaps = timed(lambda: table.snapshot(spark))
        files = [
            testing.context(conn).warehouse.to_spark(f) for s in snaps.values() for f in s.files
        ]
        rows = sum(s.row_count for s in snaps.values())
        ddl = table_ddl(table)
        file_system = _file_system(spark, files)
        log(f"B1-S3: {rows:,} rows in {len(files)} files ({file_system}), {snapshot_s:.1f}s")
        lease = conn.lease(duration=b1.LEASE_DURATION)
        acquire_s, acquired = timed(lambda: lease.acquire_latest(table.name))
        pinned = {tb.bucket: sid for tb, sid in acquired.acquired.items()}
        try:
            plans = b1.compare_plans(spark, lease, table, files, ddl)
            results, agree = b1._measure(spark, lease, table, files, ddl, p, runs)
        finally:
            lease.drop()
    figures = {
        **b1._summary(results, files, rows, acquire_s, append_s, snapshot_s),
        "plans": plans,
        "baseline": BASELINE,
        "file_system": file_system,
    }
    checks = _checks(figures, plans, agree, acquired, pinned, snaps, files)
    parameters = {**p, "runs": runs, "rounds_per_run": b1.ROUNDS, "quick": quick}
    parameters.update(reader=READER, baseline=BASELINE, warehouse="s3:// on SeaweedFS")
    return Outcome(
        round(median([r["ratio"] for r in results]), 3), figures, results, parameters, checks
    )


def _checks(
    figures: dict[str, Any],
    plans: dict[str, Any],
    agree: bool,
    acquired: Any,
    pinned: dict[int, int],
    snaps: dict[Any, Any],
    files: list[str],
) -> dict[str, bool]:
    """B1's checks, and that both sides scan ``s3a://`` files through ``S3AFileSystem``."""
    return {
        "results_equal": agree,
        "same_plan_partitions_and_files": plans["same_plan"]
        and plans["same_partitions"]
        and plans["same_files_in_order"],
        "lease_pins_the_snapshot": not acquired.unavailable
        and pinned == {tb.bucket: s.snapshot_id for tb, s in snaps.items()},
        "s3a_scans": figures["file_system"] == S3A and all(f.startswith("s3a://") for f in files),
        f"cpu_ratio_at_most_{b1.CPU_TARGET}": figures["cpu_ratio"] is not None
        and figures["cpu_ratio"] <= b1.CPU_TARGET,
    }


BENCHMARK = Benchmark(
    id="B1-S3",
    what=(
        "B1 on an S3 warehouse (SeaweedFS on loopback) through Spark's s3a reader: lease.read "
        "vs spark.read.schema(schema).parquet(files) of the same s3a:// files"
    ),
    metric="ratio",
    target=b1.BENCH_TARGET,
    op="<=",
    target_note=f"CPU ratio <= {b1.CPU_TARGET}",
    run=run,
    quick_runs=1,
    quick_note="1,000,000 of 10,000,000 rows",
    spark_jars=_jars,
)
