"""leasekit's Spark calls over Spark Connect (the server that ships with pyspark, on loopback)
give the same results as on the local classic session: lease.read, read_at, read_snapshots,
read_changes and its commit, write and table.snapshot; lk.spark_session() returns the active
Connect session, and a Spark failure is leasekit's IllegalStateError there too.

The client runs in a job process: a Connect session in this process would switch pyspark's
functions to Connect mode for the classic test session."""

from __future__ import annotations

import pytest
from spark_servers import connect_server, same_as_local

pytestmark = pytest.mark.slow

pytest.importorskip("grpc", reason="Spark Connect's client needs pyspark[connect]'s packages")


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    with connect_server(tmp_path_factory.mktemp("connect")) as url:
        yield url


def test_calls_over_spark_connect_equal_local(
    connect_url, conn, spark, zookeeper, warehouse, namespace, tmp_path
):
    same_as_local(
        conn,
        spark,
        tmp_path,
        dict(zookeeper=zookeeper, warehouse=warehouse, namespace=namespace),
        "connect",
        remote=connect_url,
    )
