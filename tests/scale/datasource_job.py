"""``python datasource_job.py SPEC.json``: the ``format("leasekit")`` calls of
``datasource_calls`` on a ``local[2]`` session of this process, for each warehouse the spec
names (``targets``: zookeeper, warehouse, namespace, lease_id), results as JSON to ``out``.

A process of its own, so that Spark's Python workers inherit this process's environment (the
AWS variables an S3 warehouse is reached with): the data source reads and writes files through
pyarrow in those workers, without Hadoop's s3a.
"""

from __future__ import annotations

import json
import os
import sys


def main(path: str) -> None:
    from datasource_calls import datasource_calls
    from pyspark.sql import SparkSession

    import leasekit as lk

    with open(path) as f:
        spec = json.load(f)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("leasekit-datasource")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    results = {}
    try:
        for name, target in spec["targets"].items():
            options = {k: target[k] for k in ("zookeeper", "warehouse", "namespace")}
            with lk.connect(**options) as conn:
                results[name] = datasource_calls(
                    spark,
                    conn,
                    options,
                    source="src",
                    group="ds",
                    sink="copy",
                    checkpoints=os.path.join(spec["checkpoints"], name),
                    lease_id=target["lease_id"],
                )
    finally:
        spark.stop()
    tmp = spec["out"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, spec["out"])


if __name__ == "__main__":
    main(sys.argv[1])
