"""A streaming query of ``format("leasekit")`` in a process of its own, for the kill-and-restart
test (D2): it streams ``TABLE`` of group ``GROUP`` into a Parquet sink at ``OUT`` with the
checkpoint ``CHECKPOINT`` (a few records per batch), until the sink holds ``--until`` records,
then stops. Started again with the same checkpoint, it resumes where the last run committed.

    python tests/stream_query.py ZOOKEEPER WAREHOUSE NAMESPACE TABLE GROUP CHECKPOINT OUT
        [--until N] [--max-records N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("zookeeper", "warehouse", "namespace", "table", "group", "checkpoint", "out"):
        parser.add_argument(name)
    parser.add_argument("--until", type=int, default=0)
    parser.add_argument("--max-records", type=int, default=20)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    import leasekit.spark

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("leasekit-stream-query")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    leasekit.spark.register(spark)
    stream = (
        spark.readStream.format("leasekit")
        .option("zookeeper", args.zookeeper)
        .option("warehouse", args.warehouse)
        .option("namespace", args.namespace)
        .option("group", args.group)
        .option("maxRecordsPerTrigger", args.max_records)
        .load(args.table)
    )
    query = (
        stream.select("_bucket", "_offset", "id")
        .writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    print("STARTED", flush=True)
    while query.isActive:
        time.sleep(0.5)
        if args.until and written(spark, args.out) >= args.until:
            break
    error = query.exception()
    query.stop()
    spark.stop()
    if error is not None:
        print(f"FAILED {error}", flush=True)
        sys.exit(1)
    print("DONE", flush=True)


def written(spark, out: str) -> int:
    """Records the sink committed (none before its first batch)."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(out).count()
    except AnalysisException:
        return 0


if __name__ == "__main__":
    main()
