"""Spark's own ``s3a`` reader on an S3 warehouse (docs/scale.md): SeaweedFS on loopback (the
``s3`` fixture), and a Spark driver process whose session ``lk.spark_session`` started for the
``s3://`` warehouse, with the ``hadoop-aws`` jars of ``make peers`` and the s3a settings taken
from the AWS environment (``s3a_driver``, ``s3a_calls``).

leasekit's Spark calls on the S3 warehouse give the same rows as on a local one, each read a
native Parquet scan of ``s3a://`` files; a lease's snapshot survives a retention pass that runs
while a Spark job reads it; a standalone cluster's executors read S3 through the same jars.
Without the jars the session is refused with an error naming ``make peers``. A read given no
session asks for one for its own table's warehouse, so a new one gets the s3a jars and settings.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pyspark
import pytest
import s3a_calls
from s3a_driver import Driver

from leasekit.errors import IllegalStateError, InvalidTypeError
from leasekit.sparkio import s3a
from leasekit.warehouse import Warehouse
from peers.seaweedfs import BUCKET, client

S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"


@pytest.fixture(scope="module")
def driver(s3):
    """A ``local[2]`` driver started by ``lk.spark_session(warehouse="s3://...")``."""
    started = Driver(
        {"PYSPARK_SUBMIT_ARGS": "--master local[2] --driver-memory 1g pyspark-shell"},
        f"s3://{BUCKET}/driver",
    )
    yield started
    started.close()


def _artifact(jar: str) -> str:
    """The artifact name of a jar file's name (``netty-common-4.2.13.Final.jar``: netty-common)."""
    return re.split(r"-\d", jar, maxsplit=1)[0]


def _target(zookeeper: str, warehouse: str, namespace: str) -> dict[str, str]:
    return {"zookeeper": zookeeper, "warehouse": warehouse, "namespace": namespace}


def _objects(s3: str, prefix: str) -> set[str]:
    """Every object below ``prefix`` in the bucket, as ``s3://`` URIs, listed by a client of
    its own."""
    import pyarrow.fs as pafs

    infos = client(s3).get_file_info(
        pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True)
    )
    return {f"s3://{i.path}" for i in infos if i.type == pafs.FileType.File}


def test_the_session_carries_the_jars_and_the_s3a_settings(driver, s3):
    facts = driver.facts
    assert facts["file_system"] == S3A  # what Spark opens s3a:// paths with
    names = {os.path.basename(j) for j in facts["jars"]}
    assert {"hadoop-aws-3.5.0.jar", "s3-2.35.4.jar", "s3-transfer-manager-2.35.4.jar"} <= names
    # one copy of each class: no artifact of pyspark's own jars again, nor the SDK's bundle
    pyspark_jars = os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    assert not {_artifact(n) for n in names} & {_artifact(n) for n in pyspark_jars}
    assert "bundle" not in {_artifact(n) for n in names}
    assert facts["s3a"] == {
        "spark.hadoop.fs.s3a.endpoint": f"http://{s3}",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": os.environ["AWS_ACCESS_KEY_ID"],
        "spark.hadoop.fs.s3a.secret.key": os.environ["AWS_SECRET_ACCESS_KEY"],
        "spark.hadoop.fs.s3a.aws.credentials.provider": s3a.SIMPLE_PROVIDER,
    }


def test_spark_calls_on_s3_read_through_s3a_as_on_a_local_warehouse(
    driver, s3, zookeeper, namespace, tmp_path
):
    targets = {
        "s3": _target(zookeeper, f"s3://{BUCKET}/{namespace}", namespace),
        "local": _target(zookeeper, str(tmp_path / "warehouse"), f"{namespace}l"),
    }
    got = {
        name: driver.call(s3a_calls.calls_on, target, "run", str(tmp_path / f"ck-{name}"), True)
        for name, target in targets.items()
    }
    local, remote = got["local"]["results"], got["s3"]["results"]
    assert len(local["read_at"]) == 64  # ids 0-69 less 0, 5, 10, 15, 21 and 55, deleted
    assert local["read_changes_after_commit"] == 0
    assert local["missing_file"] == ["IllegalStateError", True]
    assert local["ds_read"] == local["read_at"] and local["ds_lease"] == local["lease_read"]
    assert local["ds_sink"] == local["read_at"] and local["ds_stream_batches"]
    for name in local:
        assert remote[name] == local[name], name
    assert remote.keys() == local.keys()
    # every read is Spark's own Parquet scan: of s3a:// files on S3, of file:// ones locally
    native = {"native_parquet_scan": True}
    assert got["s3"]["scans"] == {n: {"schemes": ["s3a"], **native} for n in got["s3"]["scans"]}
    assert got["local"]["scans"] == {n: {"schemes": ["file"], **native} for n in got["s3"]["scans"]}
    # the snapshots Spark wrote through s3a are objects in the bucket (one deleted by the test)
    stored = _objects(s3, namespace)
    files = got["s3"]["files"]
    assert files["src_snapshots"] and set(files["src_snapshots"]) <= stored
    assert set(files["dst_snapshot"][1:]) <= stored and files["dst_snapshot"][0] not in stored
    assert all(f.startswith(f"s3://{BUCKET}/{namespace}/") for f in files["src_snapshots"])


def test_a_leased_snapshot_survives_retention_on_s3_while_spark_reads_it(
    driver, s3, zookeeper, namespace, tmp_path
):
    target = _target(zookeeper, f"s3://{BUCKET}/{namespace}", namespace)
    got = driver.call(s3a_calls.read_through_retention, target, str(tmp_path / "gate"))
    assert "error" not in got, got.get("error")
    assert got["scan"] == {"schemes": ["s3a"], "native_parquet_scan": True}
    assert got["rows"] == sorted((i, f"a{i}") for i in range(200))  # the pinned snapshot 1
    assert got["partitions"] == 4 and not got["errors"]
    # retention ran while the job's first tasks held; the others opened their files after it
    starts = [at for _, at in got["task_starts_after_retention"]]
    assert len(starts) == 4 and min(starts) < 0 < max(starts), starts
    assert got["deleted"] == [("snapshot", "2")] * 4  # neither pinned nor the newest
    first, second, third = (set(files) for files in got["snapshot_files"])
    stored = _objects(s3, namespace)
    assert first <= stored and third <= stored and not second & stored


def test_without_the_jars_a_session_for_s3_is_refused_naming_make_peers(tmp_path, monkeypatch):
    monkeypatch.setenv("LEASEKIT_PEERS_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv(s3a.JARS_ENV, raising=False)
    with pytest.raises(IllegalStateError, match="make peers"):
        s3a.s3a_conf("s3://bucket/wh")
    assert s3a.s3a_conf("s3://bucket/wh", s3a=False) == {}
    assert s3a.s3a_conf(str(tmp_path / "wh")) == {}  # a local warehouse needs none
    # lk.spark_session refuses before starting Java (no session is active in a new process)
    code = "import leasekit as lk; lk.spark_session(warehouse='s3://bucket/wh')"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0
    assert "IllegalStateError" in done.stderr and "make peers" in done.stderr, done.stderr


def test_the_s3a_settings_follow_the_uri_and_the_aws_environment(tmp_path, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert s3a.s3a_settings(Warehouse("s3://bucket/wh")) == {}  # AWS itself: s3a's defaults
    uri = "s3://bucket/wh?endpoint_override=host:9000&scheme=http&region=eu-west-1"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://elsewhere:1")  # the URI's endpoint wins
    assert s3a.s3a_settings(Warehouse(uri)) == {
        "spark.hadoop.fs.s3a.endpoint": "http://host:9000",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.access.key": "key",
        "spark.hadoop.fs.s3a.secret.key": "secret",
        "spark.hadoop.fs.s3a.session.token": "token",
        "spark.hadoop.fs.s3a.aws.credentials.provider": s3a.TEMPORARY_PROVIDER,
    }
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://minio.example:443")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    settings = s3a.s3a_settings(Warehouse("s3://bucket/wh"))
    assert settings["spark.hadoop.fs.s3a.endpoint"] == "https://minio.example:443"
    assert "spark.hadoop.fs.s3a.connection.ssl.enabled" not in settings  # https: SSL on
    assert settings["spark.hadoop.fs.s3a.endpoint.region"] == "us-west-2"
    # LEASEKIT_S3A_JARS instead of the cache; s3a=True whatever the warehouse
    (tmp_path / "jars").mkdir()
    (tmp_path / "jars" / "a.jar").write_bytes(b"")
    monkeypatch.setenv(s3a.JARS_ENV, str(tmp_path / "jars"))
    conf = s3a.s3a_conf(str(tmp_path / "wh"), s3a=True)
    assert conf["spark.jars"] == str(tmp_path / "jars" / "a.jar")
    monkeypatch.setenv("LEASEKIT_WAREHOUSE", "s3://bucket/wh")
    assert s3a.s3a_conf()["spark.jars"] == str(tmp_path / "jars" / "a.jar")
    with pytest.raises(InvalidTypeError):
        s3a.s3a_conf(42)
    with pytest.raises(InvalidTypeError):
        s3a.s3a_conf(None, s3a="yes")


class _Started(Exception):
    """Raised in place of starting a session; its argument is what that session would carry."""


def test_reads_without_a_session_start_one_for_their_own_warehouse(
    s3, zookeeper, namespace, tmp_path, monkeypatch
):
    """``spark=None`` with no active session: ``lease.read``, ``read_changes`` (and ``read_at``,
    ``read_snapshots``) ask for a session for the connection's S3 warehouse, not for the
    local one ``LEASEKIT_WAREHOUSE`` names, so it would carry the s3a jars and settings."""
    import leasekit as lk
    from leasekit import spark as lks
    from leasekit.sparkio import session as sessions

    def new_session(*_: object, warehouse: object = None) -> None:
        raise _Started(s3a.s3a_conf(warehouse))

    monkeypatch.setattr(sessions, "spark_session", new_session)
    monkeypatch.setenv("LEASEKIT_WAREHOUSE", str(tmp_path / "local"))
    uri = f"s3://{BUCKET}/{namespace}"
    asked = {}
    with lk.connect(zookeeper, uri, namespace=namespace) as conn:
        table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
        reads = {
            "lease.read": lambda: conn.lease("r", "1h", drop_on_exit=False).read(None, "t"),
            "read_changes": lambda: lks.read_changes(None, table, "g"),
            "read_at": lambda: lks.read_at(None, table),
            "read_snapshots": lambda: lks.read_snapshots(None, table, {}),
        }
        for name, read in reads.items():
            with pytest.raises(_Started) as started:
                read()
            asked[name] = started.value.args[0]
    expected = s3a.s3a_conf(uri)
    assert expected["spark.hadoop.fs.s3a.endpoint"] == f"http://{s3}"
    assert "hadoop-aws-3.5.0.jar" in {
        os.path.basename(j) for j in expected["spark.jars"].split(",")
    }
    assert asked == dict.fromkeys(reads, expected)
    assert s3a.s3a_conf() == {}  # what LEASEKIT_WAREHOUSE alone would have given


@pytest.mark.slow
def test_a_standalone_cluster_reads_s3_through_s3a(driver, s3, zookeeper, namespace, tmp_path):
    from spark_servers import standalone_cluster

    local = driver.call(
        s3a_calls.calls_on,
        _target(zookeeper, str(tmp_path / "warehouse"), f"{namespace}l"),
        "run",
        str(tmp_path / "ck-local"),
        False,
    )
    target = _target(zookeeper, f"s3://{BUCKET}/{namespace}", namespace)
    (tmp_path / "standalone").mkdir()
    with standalone_cluster(tmp_path / "standalone") as cluster:
        remote = Driver({"PYSPARK_SUBMIT_ARGS": _cluster_args(cluster["url"])}, target["warehouse"])
        try:
            assert remote.facts["master"] == cluster["url"]
            got = remote.call(s3a_calls.calls_on, target, "run", str(tmp_path / "ck"), False)
            readers = remote.call(s3a_calls.executors_reading, target)
        finally:
            remote.close()
    assert got["results"] == local["results"]
    assert {scan["schemes"][0] for scan in got["scans"].values()} == {"s3a"}
    # both workers' executors read s3a:// files, with the jars the driver served them
    assert len({cwd for cwd, _ in readers["tasks"]}) == 2, readers
    assert sum(rows for _, rows in readers["tasks"]) == readers["rows"] > 0
    assert {p.parent.parent for p in map(_path, readers["tasks"])} == set(cluster["work_dirs"])


def _path(task: list) -> object:
    from pathlib import Path

    return Path(task[0])


def _cluster_args(url: str) -> str:
    """PYSPARK_SUBMIT_ARGS of a driver on the standalone master ``url`` (as
    ``spark_leasekit_job`` configures its cluster session)."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.pyspark.python": sys.executable,
        "spark.executor.extraJavaOptions": os.environ.get("SPARK_SUBMIT_OPTS", ""),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
    }
    args = ["--master", url, "--driver-memory", "512m"]
    for key, value in conf.items():
        args += ["--conf", f"{key}={value}"]
    return shlex.join([*args, "pyspark-shell"])
