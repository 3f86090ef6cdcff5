"""What a Spark driver with Spark's ``s3a`` file system runs for tests/scale/test_s3_spark.py:
functions called in the driver's own process (``s3a_driver.Driver``), each returning results
ready for JSON. The session is made by ``lk.spark_session`` itself, with the warehouse it is
for, so the jars and settings it carries are the library's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

_spark: Any = None
ONE_FILE_PER_TASK = "spark.sql.files.maxPartitionBytes"


def start(env: dict[str, str], warehouse: str) -> dict[str, Any]:
    """Start this driver's session with ``lk.spark_session(warehouse=...)``, after putting
    ``env`` (the AWS variables, PYSPARK_SUBMIT_ARGS for a master) in the environment; what
    the session is made of."""
    global _spark
    os.environ.update(env)
    import leasekit as lk

    _spark = lk.spark_session("leasekit-s3a-tests", warehouse=warehouse)
    _spark.sparkContext.setLogLevel("ERROR")
    _spark.conf.set("spark.sql.session.timeZone", "UTC")
    _spark.conf.set("spark.sql.shuffle.partitions", "4")
    return facts(warehouse)


def facts(warehouse: str) -> dict[str, Any]:
    """The session's jars and s3a settings, and the Hadoop file system class of
    ``warehouse`` as Spark paths name it."""
    from leasekit.warehouse import Warehouse

    conf = dict(_spark.sparkContext.getConf().getAll())
    jvm = _spark.sparkContext._jvm
    hadoop = _spark.sparkContext._jsc.hadoopConfiguration()
    where = Warehouse(warehouse)
    path = jvm.org.apache.hadoop.fs.Path(where.to_spark(where.uri("x")).rsplit("/", 1)[0])
    return {
        "master": _spark.sparkContext.master,
        "jars": [j for j in conf.get("spark.jars", "").split(",") if j],
        "s3a": {k: v for k, v in conf.items() if k.startswith("spark.hadoop.fs.s3a.")},
        "file_system": path.getFileSystem(hadoop).getClass().getName(),
    }


def stop() -> None:
    if _spark is not None:
        _spark.stop()


def scan(df: Any) -> dict[str, Any]:
    """How Spark reads ``df``: the URI schemes of its input files, and whether its physical plan
    scans them with Spark's own Parquet reader."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    schemes = sorted({f.split("://", 1)[0] for f in df.inputFiles()})
    return {"schemes": schemes, "native_parquet_scan": "FileScan parquet" in plan}


def _connect(target: dict[str, str]) -> Any:
    import leasekit as lk

    return lk.connect(target["zookeeper"], target["warehouse"], namespace=target["namespace"])


def _ranges(ranges: dict) -> dict[str, list[int]]:
    return {str(tb.bucket): [r.start, r.end] for tb, r in ranges.items()}


def _reads(conn: Any, spec: dict[str, Any]) -> tuple[dict, dict]:
    """The reads of ``src`` (rows, and each read's scan), its changes read and committed, and
    its state written into ``dst_<suffix>``."""
    from datasource_calls import rows_of

    from leasekit import spark as lks

    spark, src, suffix = _spark, conn.table("src"), spec["suffix"]
    offsets = {int(b): o for b, o in spec["offsets"].items()}
    frames = {
        "read_at": lks.read_at(spark, src),
        "read_at_offsets": lks.read_at(spark, src, offsets),
        "read_snapshots": lks.read_snapshots(
            spark, src, {int(b): s for b, s in spec["snapshot_ids"].items()}
        ),
        "lease_read": conn.lease(spec["lease_id"], drop_on_exit=False).read(spark, "src"),
    }
    out: dict[str, Any] = {name: rows_of(df) for name, df in frames.items()}
    scans = {name: scan(df) for name, df in frames.items()}
    batch = lks.read_changes(spark, src, f"g_{suffix}")
    # each run's own commit times left out: the runs append at different times
    out["read_changes"] = rows_of(batch.df.drop("_timestamp"))
    out["read_changes_columns"], scans["read_changes"] = batch.df.columns, scan(batch.df)
    out["read_changes_offsets"] = _ranges(batch.offsets)
    batch.commit()
    out["read_changes_after_commit"] = lks.read_changes(spark, src, f"g_{suffix}").df.count()
    dst = conn.table(f"dst_{suffix}")
    out["write"] = _ranges(lks.write(lks.read_at(spark, src), dst))
    out["write_read_at"] = rows_of(lks.read_at(spark, dst))
    return out, scans


def _snapshots(conn: Any, suffix: str) -> tuple[dict, dict, list[str]]:
    """A snapshot of ``dst_<suffix>`` taken and read back, then read again with one of its
    files deleted behind leasekit's back: results, the read's scan, the snapshot's files."""
    from datasource_calls import rows_of

    from leasekit import spark as lks
    from leasekit import testing

    dst = conn.table(f"dst_{suffix}")
    snaps = dst.snapshot(_spark)
    ids = {tb: s.snapshot_id for tb, s in snaps.items()}
    out: dict[str, Any] = {
        "snapshot": {
            str(tb.bucket): [s.snapshot_id, s.log_offset, s.row_count] for tb, s in snaps.items()
        }
    }
    taken = lks.read_snapshots(_spark, dst, ids)
    out["snapshot_read"] = rows_of(taken)
    files = sorted(f for s in snaps.values() for f in s.files)
    warehouse = testing.context(conn).warehouse
    warehouse.delete_files([warehouse.relative(files[0])])
    try:
        lks.read_snapshots(_spark, dst, ids).count()
        out["missing_file"] = None
    except Exception as exc:  # the type is the result: leasekit's error, raised by the call
        out["missing_file"] = [type(exc).__name__, "PATH_NOT_FOUND" in str(exc)]
    return out, {"snapshot_read": scan(taken)}, files


def calls_on(target: dict[str, str], suffix: str, checkpoints: str, datasource: bool) -> dict:
    """leasekit's Spark calls, as ``spark_leasekit_job.run_calls`` makes them, over a new
    source (``spark_servers.make_source``) in ``target``'s warehouse and namespace, with
    ``format("leasekit")``'s calls if ``datasource``: results by call, each read's scan, and
    the snapshot files of ``src`` and of the snapshot taken."""
    from datasource_calls import datasource_calls
    from spark_servers import make_source

    with _connect(target) as conn:
        spec = dict(make_source(conn, _spark, (suffix,)), suffix=suffix)
        out, scans = _reads(conn, spec)
        if datasource:
            options = {k: target[k] for k in ("zookeeper", "warehouse", "namespace")}
            out.update(
                datasource_calls(
                    _spark,
                    conn,
                    options,
                    source="src",
                    group=f"ds_{suffix}",
                    sink=f"copy_{suffix}",
                    checkpoints=checkpoints,
                    lease_id=spec["lease_id"],
                )
            )
        taken, taken_scan, dst_files = _snapshots(conn, suffix)
        src_files = sorted(f for s in conn.table("src").snapshots() for f in s.files)
    files = {"src_snapshots": src_files, "dst_snapshot": dst_files}
    return {"results": {**out, **taken}, "scans": {**scans, **taken_scan}, "files": files}


def read_through_retention(target: dict[str, str], gate: str) -> dict[str, Any]:
    """A lease's snapshot read by a Spark job that a retention pass runs in the middle of.

    Table ``t`` (4 buckets, one snapshot kept besides pinned ones, no log retention) gets three
    snapshots; a lease pins the first. The job reads the lease with one task per snapshot file
    on 2 cores: the first tasks hold until the retention pass is over (a file at ``gate``),
    so the later ones open their files after it. Returns the rows, what retention deleted,
    each task's start relative to the end of the pass, and the snapshots' files."""
    import leasekit as lk

    with lk.connect(
        target["zookeeper"], target["warehouse"], namespace=target["namespace"]
    ) as conn:
        props = {"kv.snapshot.num-retained": 1, "log.retention": "0s"}
        table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=4, properties=props)
        snaps = []
        lease = conn.lease("reader", "1h", drop_on_exit=False)
        for tag in "abc":
            table.append([{"id": i, "v": f"{tag}{i}"} for i in range(200)])
            snaps.append(table.snapshot(_spark))
            if tag == "a":
                lease.acquire_latest("t")
        df = lease.read(_spark, "t")
        # one task per file: a task takes at most 1 MB, each file counting 4 MB more for its
        # opening (spark.sql.files.openCostInBytes); Spark packs small files together otherwise
        _spark.conf.set(ONE_FILE_PER_TASK, str(2**20))
        try:
            out = {"scan": scan(df), "partitions": df.rdd.getNumPartitions()}
            out.update(_held_read(conn, df, Path(gate)))
        finally:
            _spark.conf.unset(ONE_FILE_PER_TASK)
        out["snapshot_files"] = [
            sorted(f for s in snap.values() for f in s.files) for snap in snaps
        ]
        return out


def _held_read(conn: Any, df: Any, gate: Path) -> dict[str, Any]:
    """Collect ``df`` through tasks that hold until ``gate`` exists, running retention once the
    first task has its rows; the rows, the retention report and the tasks' starts."""
    import threading

    from pyspark import TaskContext

    started = gate.with_name("started")

    def hold(batches: Any) -> Any:
        task = TaskContext.get().partitionId()
        begun = time.time()
        with open(started, "a") as f:
            f.write(f"{task} {begun}\n")
        deadline = time.monotonic() + 300
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        yield from batches

    got: dict[str, Any] = {}

    def collect() -> None:
        try:
            got["rows"] = sorted(tuple(r) for r in df.mapInPandas(hold, df.schema).collect())
        except Exception as exc:  # reported to the test as it is
            got["error"] = f"{type(exc).__name__}: {exc}"

    reader = threading.Thread(target=collect)
    reader.start()
    deadline = time.monotonic() + 300
    while not started.exists() and reader.is_alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    report = conn.run_retention()
    done = time.time()
    gate.write_text("retention done\n")
    reader.join(600)
    starts = [line.split() for line in started.read_text().splitlines()]
    return {
        **got,
        "deleted": sorted((i.kind, str(i.item_id)) for i in report.deleted if i.kind == "snapshot"),
        "errors": report.errors,
        "task_starts_after_retention": sorted((int(t), float(s) - done) for t, s in starts),
    }


def executors_reading(target: dict[str, str]) -> dict[str, Any]:
    """Which executors read ``src``'s snapshot files through ``read_snapshots``: the working
    directory of each task and the rows it read, and the rows in all."""
    from leasekit import spark as lks

    def where(rows: Any) -> Any:
        import os as _os
        import time as _time

        count = sum(1 for _ in rows)
        _time.sleep(0.5)  # keep the task's executor busy: the next task goes to the other
        yield (_os.getcwd(), count)

    tracker, deadline = _spark.sparkContext.statusTracker(), time.monotonic() + 180
    while len(tracker.getExecutorInfos()) < 3:  # the driver and both workers' executors
        assert time.monotonic() < deadline, "the executors did not both register"
        time.sleep(0.5)
    with _connect(target) as conn:
        src = conn.table("src")
        latest = {s.table_bucket: s.snapshot_id for s in src.snapshots()}
        df = lks.read_snapshots(_spark, src, latest)
        tasks = df.rdd.mapPartitions(where).collect()
        return {"tasks": sorted([list(t) for t in tasks]), "rows": df.count(), "scan": scan(df)}
