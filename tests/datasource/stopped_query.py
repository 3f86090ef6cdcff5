"""A streaming query of ``format("leasekit")`` stopped while a batch runs, in a process of its
own, for the quiet-stop test: a session as ``leasekit.spark_session()`` starts it, a stream of
``SOURCE`` as group ``GROUP`` into the leasekit sink ``TARGET`` (or ``--sink foreach``: a
``foreachBatch`` that counts), ``query.stop()`` as soon as a stage of its first batch runs (or
``--when idle``: once it has caught up, between two triggers), and ``spark.stop()`` once the
batch's tasks ended. Spark and PySpark log to this process's stderr, which the test reads;
"STOPPING" goes to stdout and stderr, "STOPPED" to stdout.

    python tests/datasource/stopped_query.py ZOOKEEPER WAREHOUSE NAMESPACE SOURCE TARGET GROUP
        CHECKPOINT [--sink leasekit|foreach] [--when running|idle]
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("zookeeper", "warehouse", "namespace", "source", "target", "group", "checkpoint"):
        parser.add_argument(name)
    parser.add_argument("--sink", choices=("leasekit", "foreach"), default="leasekit")
    parser.add_argument("--when", choices=("running", "idle"), default="running")
    args = parser.parse_args()

    import leasekit as lk

    spark = lk.spark_session("leasekit-stopped-query")
    options = {"zookeeper": args.zookeeper, "warehouse": args.warehouse}
    options["namespace"] = args.namespace
    stream = (
        spark.readStream.format("leasekit").options(**options).option("group", args.group)
    ).load(args.source)
    writer = stream.writeStream.option("checkpointLocation", args.checkpoint)
    writer = writer.trigger(processingTime="1 second")
    if args.sink == "leasekit":
        query = writer.format("leasekit").options(**options).start(args.target)
    else:
        query = writer.foreachBatch(lambda df, batch_id: df.count()).start()
    tracker = spark.sparkContext.statusTracker()
    if args.when == "running":
        wait(query, lambda: bool(tracker.getActiveStageIds()))
    else:
        query.processAllAvailable()
        wait(query, lambda: not query.status["isTriggerActive"])
    print("STOPPING", flush=True)
    print("STOPPING", file=sys.stderr, flush=True)
    query.stop()
    # stop() returns before the cancelled batch's tasks have ended; a session stopped under
    # them reports each one's failure
    deadline = time.monotonic() + 60
    while tracker.getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    spark.stop()
    print("STOPPED", flush=True)


def wait(query, done) -> None:
    deadline = time.monotonic() + 300
    while not done() and time.monotonic() < deadline:
        if query.exception() is not None:
            raise SystemExit(f"FAILED {query.exception()}")
        time.sleep(0.01)


if __name__ == "__main__":
    main()
