"""leasekit's Spark calls on a standalone cluster (a master and two 1-core workers on loopback,
from the pyspark distribution) give the same results as on the local session: lease.read,
read_at, read_snapshots, read_changes and its commit, write and table.snapshot.

The cluster's driver runs in a job process (one SparkSession per Python process); executors run
this Python (PYSPARK_PYTHON) and share the local warehouse directory with the driver."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from spark_servers import same_as_local, standalone_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as running:
        yield running


def test_calls_on_a_standalone_cluster_equal_local(
    cluster, conn, spark, zookeeper, warehouse, namespace, tmp_path
):
    remote = same_as_local(
        conn,
        spark,
        tmp_path,
        dict(zookeeper=zookeeper, warehouse=warehouse, namespace=namespace),
        "cluster",
        master=cluster["url"],
    )

    # the tasks ran in two executors, one per worker, on this Python
    executors = remote["executors"]
    assert {python for _, python in executors} == {sys.executable}
    dirs = {Path(cwd) for cwd, _ in executors}
    assert len(dirs) == 2
    assert {d.parent.parent for d in dirs} == set(cluster["work_dirs"])
    assert cluster["master"]()["aliveworkers"] == 2
