"""leasekit's Spark calls on one session, as a script and as a function.

``python spark_leasekit_job.py SPEC.json`` builds a session on the master (``spark://...``) or
the Spark Connect URL (``sc://...``) that the spec names, runs ``run_calls`` and writes its
results as JSON to the spec's ``out`` path. The tests run the same function on the local
session and compare.

Spec keys: ``zookeeper``, ``warehouse``, ``namespace``, ``suffix`` (names this run's group and
write target ``dst_<suffix>``), ``snapshot_ids`` and ``offsets`` (bucket -> int, of table
``src``), ``lease_id`` (a lease pinning all of ``src``), ``master`` or ``remote``, ``out``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

SOURCE = "src"


def rows_of(df: Any) -> list[list[str | None]]:
    """Sorted rows with every value cast to a string by Spark (session time zone: UTC)."""
    from pyspark.sql import functions as F

    cols = [F.col("`" + c + "`").cast("string").alias(c) for c in df.columns]
    rows = [list(r) for r in df.select(*cols).collect()]
    return sorted(rows, key=lambda r: [("" if v is None else v) for v in r])


def run_calls(spark: Any, conn: Any, spec: dict) -> dict:
    """Every public Spark call of leasekit on ``spark``; JSON-ready results by call name."""
    from datasource_calls import datasource_calls

    from leasekit import spark as lks

    src = conn.table(SOURCE)
    out: dict[str, Any] = {}
    out["read_at"] = rows_of(lks.read_at(spark, src))
    offsets = {int(b): o for b, o in spec["offsets"].items()}
    out["read_at_offsets"] = rows_of(lks.read_at(spark, src, offsets))
    snapshot_ids = {int(b): s for b, s in spec["snapshot_ids"].items()}
    out["read_snapshots"] = rows_of(lks.read_snapshots(spark, src, snapshot_ids))
    lease = conn.lease(spec["lease_id"], drop_on_exit=False)
    out["lease_read"] = rows_of(lease.read(spark, SOURCE))

    batch = lks.read_changes(spark, src, f"g_{spec['suffix']}")
    out["read_changes"] = rows_of(batch.df)
    out["read_changes_offsets"] = {
        str(tb.bucket): [r.start, r.end] for tb, r in batch.offsets.items()
    }
    batch.commit()
    out["read_changes_after_commit"] = lks.read_changes(
        spark, src, f"g_{spec['suffix']}"
    ).df.count()

    dst = conn.table(f"dst_{spec['suffix']}")
    written = lks.write(lks.read_at(spark, src), dst)
    out["write"] = {str(tb.bucket): [r.start, r.end] for tb, r in written.items()}
    out["write_read_at"] = rows_of(lks.read_at(spark, dst))

    out.update(
        datasource_calls(
            spark,
            conn,
            {"zookeeper": conn.zookeeper, "warehouse": conn.warehouse, "namespace": conn.namespace},
            source=SOURCE,
            group=f"ds_{spec['suffix']}",
            sink=f"copy_{spec['suffix']}",
            checkpoints=spec["checkpoints"],
            lease_id=spec["lease_id"],
        )
    )

    snaps = dst.snapshot(spark)
    out["snapshot"] = {
        str(tb.bucket): [s.snapshot_id, s.log_offset, s.row_count] for tb, s in snaps.items()
    }
    taken = {tb: s.snapshot_id for tb, s in snaps.items()}
    out["snapshot_read"] = rows_of(lks.read_snapshots(spark, dst, taken))

    gone = next(
        s for s in snaps.values() if s.files
    )  # a snapshot file deleted behind leasekit's back
    os.remove(gone.files[0].removeprefix("file://"))
    try:
        lks.read_snapshots(spark, dst, taken).count()
        out["missing_file"] = None
    except Exception as exc:  # the type is the result: leasekit's error, raised by the call
        out["missing_file"] = [
            type(exc).__module__,
            type(exc).__name__,
            "PATH_NOT_FOUND" in str(exc),
        ]
    return out


def _cluster_session(spec: dict) -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(spec["master"])
        .appName(f"leasekit-{spec['suffix']}")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.pyspark.python", sys.executable)
        # executors start like this driver (the suite's quick JIT and class-data archive)
        .config("spark.executor.extraJavaOptions", os.environ.get("SPARK_SUBMIT_OPTS", ""))
        # schedule only once both executors are up, so that tasks run on both workers
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )


def _executors(spark: Any) -> list[list[str]]:
    """(working directory, Python) of the Python workers that ran 8 small tasks."""

    def where(_: Any) -> list[tuple[str, str]]:
        import os as _os
        import sys as _sys
        import time

        time.sleep(0.3)
        return [(_os.getcwd(), _sys.executable)]

    found = spark.sparkContext.parallelize(range(8), 8).mapPartitions(where).distinct().collect()
    return sorted([list(f) for f in found])


def main(path: str) -> None:
    import leasekit as lk

    with open(path) as f:
        spec = json.load(f)
    if "remote" in spec:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(spec["remote"]).getOrCreate()
        spark.conf.set("spark.sql.session.timeZone", "UTC")
        spark.conf.set("spark.sql.shuffle.partitions", "4")
    else:
        spark = _cluster_session(spec)
        spark.sparkContext.setLogLevel("ERROR")
    try:
        with lk.connect(spec["zookeeper"], spec["warehouse"], namespace=spec["namespace"]) as conn:
            results = run_calls(spark, conn, spec)
            results["active_session_is_this"] = lk.spark_session() is spark
        if "master" in spec:
            results["executors"] = _executors(spark)
    finally:
        spark.stop()
    tmp = spec["out"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(results, f)
    os.replace(tmp, spec["out"])


if __name__ == "__main__":
    main(sys.argv[1])
