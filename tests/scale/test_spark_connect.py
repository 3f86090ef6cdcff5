"""leasekit's Spark calls over Spark Connect (the server that ships with pyspark, on loopback)
give the same results as on the local classic session: lease.read, read_at, read_snapshots,
read_changes and its commit, write and table.snapshot; lk.spark_session() returns the active
Connect session, and a Spark failure is leasekit's IllegalStateError there too.

The client runs in a job process: a Connect session in this process would switch pyspark's
functions to Connect mode for the classic test session."""

from __future__ import annotations

import pytest
from spark_leasekit_job import run_calls
from spark_servers import connect_server, make_source, run_job

pytestmark = pytest.mark.slow

pytest.importorskip("grpc", reason="Spark Connect's client needs pyspark[connect]'s packages")


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    with connect_server(tmp_path_factory.mktemp("connect")) as url:
        yield url


def test_calls_over_spark_connect_equal_local(connect_url, conn, spark, zookeeper, warehouse, namespace, tmp_path):
    spec = make_source(conn, spark, ("connect", "local"))
    spec.update(zookeeper=zookeeper, warehouse=warehouse, namespace=namespace)
    remote, local = run_job(dict(spec, suffix="connect", remote=connect_url), tmp_path,
                            meanwhile=lambda: run_calls(spark, conn, dict(spec, suffix="local")))

    assert len(local["read_at"]) == 64  # ids 0-69 less 0, 5, 10, 15, 21 and 55, deleted
    assert local["read_changes_after_commit"] == 0
    assert local["missing_file"] == ["leasekit.errors", "IllegalStateError", True]
    for name in local:
        assert remote[name] == local[name], name
    assert remote["active_session_is_this"] is True
