"""A streaming query of ``format("leasekit")`` in a process of its own, for the kill-and-restart
test (D2): it streams ``TABLE`` of group ``GROUP`` into a Parquet sink at ``OUT`` with the
checkpoint ``CHECKPOINT`` (a few records per batch), until a completed batch ends at
``--until`` records, then stops. Started again with the same checkpoint, it resumes where
the last run committed.

    python tests/stream_query.py ZOOKEEPER WAREHOUSE NAMESPACE TABLE GROUP CHECKPOINT OUT
        [--until N] [--max-records N]
"""

from __future__ import annotations

import argparse
import json
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
        if args.until and read_to(query) >= args.until:
            break
    error = query.exception()
    query.stop()
    spark.stop()
    if error is not None:
        print(f"FAILED {error}", flush=True)
        sys.exit(1)
    print("DONE", flush=True)


def read_to(query) -> int:
    """Records up to the end offsets of the last completed batch (offsets start at 0)."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return 0
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return sum(end["buckets"].values()) if end else 0


if __name__ == "__main__":
    main()
