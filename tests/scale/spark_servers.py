"""Spark servers on loopback for the scale tests, run from the pyspark distribution: a standalone
master with workers, and a Spark Connect server. Also the table the Spark jobs read and a runner
for ``spark_leasekit_job.py``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyspark

from leasekit.embedded.java import java_home

SPARK_HOME = Path(pyspark.__file__).resolve().parent
JOB = Path(__file__).resolve().parent / "spark_leasekit_job.py"
DDL = "id BIGINT, name STRING, amount DOUBLE, at TIMESTAMP"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(**extra: str) -> dict[str, str]:
    """Environment of Spark daemons and jobs: this pyspark, leasekit's Java, this Python."""
    env = dict(
        os.environ,
        SPARK_HOME=str(SPARK_HOME),
        JAVA_HOME=java_home(),
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
    )
    for key in (
        "SPARK_CONNECT_MODE_ENABLED",
        "SPARK_REMOTE",
        "SPARK_CONNECT_MODE",
        "PYSPARK_SUBMIT_ARGS",
    ):
        env.pop(key, None)
    env.update(extra)
    return env


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    """A foreground Spark process in its own process group, output to ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log.parent,
            start_new_session=True,
        )


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group, then SIGKILL what is left after 10 s."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


def wait_for(
    what: str,
    check: Callable[[], bool],
    procs: list[subprocess.Popen],
    logs: list[Path],
    timeout: float = 120,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p, log in zip(procs, logs):
            if p.poll() is not None:
                raise RuntimeError(
                    f"{what}: process exited with {p.returncode}:\n{log.read_text()[-3000:]}"
                )
        with contextlib.suppress(OSError, ValueError):
            if check():
                return
        time.sleep(0.3)
    tails = "\n".join(log.read_text()[-1500:] for log in logs)
    raise RuntimeError(f"{what}: not ready after {timeout} s\n{tails}")


@contextlib.contextmanager
def standalone_cluster(root: Path, workers: int = 2) -> Iterator[dict[str, Any]]:
    """A standalone master and ``workers`` workers (1 core, 1g each) on 127.0.0.1."""
    env = spark_env()
    port, ui = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    try:
        logs.append(root / "master.log")
        procs.append(
            start(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                logs[-1],
                env,
            )
        )

        def master() -> dict:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                return json.load(r)

        wait_for("Spark master", lambda: master().get("status") == "ALIVE", procs, logs)
        work_dirs = []
        for i in range(workers):
            work = root / f"worker{i}"
            work.mkdir()
            work_dirs.append(work)
            logs.append(root / f"worker{i}.log")
            procs.append(
                start(
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        "--host",
                        "127.0.0.1",
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(work),
                    ],
                    logs[-1],
                    env,
                )
            )
        wait_for("Spark workers", lambda: master().get("aliveworkers") == workers, procs, logs)
        yield {"url": url, "work_dirs": work_dirs, "master": master}
    finally:
        stop(procs)


@contextlib.contextmanager
def connect_server(root: Path) -> Iterator[str]:
    """A Spark Connect server (``local[2]`` driver) on 127.0.0.1; yields its ``sc://`` URL."""
    port = free_port()
    log = root / "connect.log"
    args = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--name",
        "leasekit-connect",
        "--driver-memory",
        "1g",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "--conf",
        "spark.sql.session.timeZone=UTC",
    ]
    proc = start(args, log, spark_env(SPARK_DAEMON_MEMORY="1g"))  # the server's driver heap
    try:
        wait_for(
            "Spark Connect server",
            lambda: "Spark Connect server started" in log.read_text(),
            [proc],
            [log],
            timeout=120,
        )
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop([proc])


def _rows(lo: int, hi: int, tag: str) -> list[dict]:
    return [
        {
            "id": i,
            "name": f"{tag}{i}",
            "amount": i / 4,
            "at": datetime(2026, 1, 1, i % 24, i % 60, tzinfo=timezone.utc),
        }
        for i in range(lo, hi)
    ]


def make_source(conn: Any, spark: Any, suffixes: tuple[str, ...]) -> dict[str, Any]:
    """Table ``src`` (3 buckets) with a snapshot, a log tail with upserts and deletes on both sides
    of it, a lease on its latest snapshots and an empty ``dst_<suffix>`` per run; the job spec."""
    src = conn.create_table("src", DDL, "id", buckets=3)
    for suffix in suffixes:
        conn.create_table(f"dst_{suffix}", DDL, "id", buckets=2)
        conn.create_table(f"copy_{suffix}", DDL, "id", buckets=2)
    src.append(_rows(0, 40, "a"))
    src.delete([{"id": i} for i in range(0, 40, 5)])
    middle = {tb.bucket: off for tb, off in src.end_offsets().items()}
    src.append(_rows(20, 60, "b"))
    snaps = src.snapshot(spark)
    src.append(_rows(50, 70, "c"))
    src.delete([{"id": 21}, {"id": 55}])
    lease = conn.lease(drop_on_exit=False)
    lease.acquire_latest("src")
    return {
        "ends": {tb.bucket: end for tb, end in src.end_offsets().items()},
        "snapshot_ids": {tb.bucket: s.snapshot_id for tb, s in snaps.items()},
        "offsets": middle,
        "lease_id": lease.lease_id,
    }


def run_job(
    spec: dict[str, Any],
    root: Path,
    meanwhile: Callable[[], Any],
    timeout: float = 300,
) -> tuple[dict[str, Any], Any]:
    """Run ``spark_leasekit_job.py`` on ``spec`` in a new Python process and ``meanwhile()`` in
    this one; the job's results and what ``meanwhile`` returned."""
    spec = dict(spec, out=str(root / f"out-{spec['suffix']}.json"))
    path = root / f"spec-{spec['suffix']}.json"
    path.write_text(json.dumps(spec))
    log = root / f"job-{spec['suffix']}.log"
    proc = start([sys.executable, str(JOB), str(path)], log, spark_env())
    try:
        here = meanwhile()
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"job still running after {timeout} s:\n{log.read_text()[-4000:]}"
        ) from None
    finally:
        stop([proc])  # its Spark driver JVM too
    if proc.returncode != 0:
        raise AssertionError(f"job exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
    return json.loads(Path(spec["out"]).read_text()), here


def same_as_local(
    conn: Any, spark: Any, root: Path, connect: dict[str, str], suffix: str, **where: str
) -> dict[str, Any]:
    """Run leasekit's Spark calls in a job process, connected as ``connect`` says (zookeeper,
    warehouse, namespace), on the session ``where`` describes (``master`` or ``remote``) and,
    meanwhile, on the local test session over the same source; check that each call gave the
    same result on both. The job's results."""
    from spark_leasekit_job import run_calls

    spec = make_source(conn, spark, (suffix, "local"))
    spec.update(connect)
    remote, local = run_job(
        dict(spec, suffix=suffix, checkpoints=str(root / f"ck-{suffix}"), **where),
        root,
        meanwhile=lambda: run_calls(
            spark, conn, dict(spec, suffix="local", checkpoints=str(root / "ck-local"))
        ),
    )
    assert len(local["read_at"]) == 64  # ids 0-69 less 0, 5, 10, 15, 21 and 55, deleted
    assert local["read_changes_after_commit"] == 0
    assert local["missing_file"] == ["leasekit.errors", "IllegalStateError", True]
    # D1: format("leasekit") reads what read_at and lease.read return; D2-D4: the stream read
    # every record, its group committed the ends, and the sink's copy equals the source
    assert local["ds_read"] == local["read_at"] and local["ds_lease"] == local["lease_read"]
    assert local["ds_sink"] == local["read_at"] and local["ds_stream_batches"]
    assert len(local["ds_stream"]) == sum(int(e) for e in spec["ends"].values())
    for name in local:
        assert remote[name] == local[name], name
    assert remote["active_session_is_this"] is True
    return remote
