"""Shared fixtures: one real embedded ZooKeeper and one real local SparkSession per test
session (per pytest-xdist worker when ``make test`` runs the suite in parallel); a fresh
namespace (and warehouse directory) per test."""

from __future__ import annotations

import os
import uuid

import pytest
import spark_jvm
import zk_jvm

import leasekit as lk
from leasekit import embedded, testing

_JVM_NOTE = pytest.StashKey[str]()
_OWN_ZK_FLAGS = "LEASEKIT_TEST_OWN_ZK_FLAGS"
"""SERVER_JVMFLAGS of each worker's own ZooKeeper (set with the others before workers start)."""

GROUPED_FIXTURES = ("zk_ensemble", "lag_report_with_history", "kafka_broker")
"""Session fixtures too costly to start once per worker: their tests share one worker."""

SERVER_JOBS = ("tests/scale/test_spark_", "tests/scale/test_s3")
"""Tests that start Spark servers and jobs of their own (a cluster, Spark Connect, S3 with a
Spark job): one at a time, on one worker, so their Python workers start within Spark's
connect-back timeout even on a busy 2-core machine."""


def pytest_configure(config):
    """Before any worker starts: give every Spark driver the suite starts (in workers, kernels,
    CLI subprocesses) the quick JIT and the class-data archive of ``spark_jvm``, built once per
    machine, and every ZooKeeper server those of ``zk_jvm`` (the workers' own servers keep
    C2: with C1 alone the 100,000-pin lease tests took 50 s longer).
    ``LEASEKIT_TEST_JVM=default`` leaves the JVMs as a user's would be."""
    if hasattr(config, "workerinput") or os.environ.get("LEASEKIT_TEST_JVM") == "default":
        return
    opts, training = spark_jvm.spark_submit_opts()
    building = ", building it now" if training is not None else ""
    config.stash[_JVM_NOTE] = f"Spark drivers: {opts}{building}"
    quick = spark_jvm.QUICK_JIT  # the launcher's JVM, and a standalone master's and workers'
    for key, value in (
        ("SPARK_SUBMIT_OPTS", opts),
        ("SPARK_LAUNCHER_OPTS", quick),
        ("SPARK_DAEMON_JAVA_OPTS", quick),
    ):
        os.environ[key] = f"{os.environ.get(key, '')} {value}".strip()
    # ZooKeeper servers: a user's SERVER_JVMFLAGS come last, so they win
    short_lived, own = zk_jvm.server_jvmflags()
    user = os.environ.get("SERVER_JVMFLAGS", "")
    os.environ["SERVER_JVMFLAGS"] = f"{short_lived} {user}".strip()
    os.environ[_OWN_ZK_FLAGS] = f"{own} {user}".strip()


def pytest_report_header(config):
    return config.stash.get(_JVM_NOTE, None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup``, keep on one worker the tests that share a costly server:
    a module's tests that use a module-scoped fixture (its own ZooKeeper, say), the tests of
    each fixture in ``GROUPED_FIXTURES``, and the ``SERVER_JOBS``. Without xdist this changes
    nothing."""
    for item in items:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            continue
        shared = [name for name in GROUPED_FIXTURES if name in info.names_closure]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
            continue
        if item.nodeid.startswith(SERVER_JOBS):
            item.add_marker(pytest.mark.xdist_group("scale-servers"))
            continue
        defs = [d for ds in info.name2fixturedefs.values() for d in ds]
        if any(d.scope == "module" for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


@pytest.fixture(scope="session")
def lag_report_with_history(zookeeper, tmp_path_factory):
    """The lag report run once by papermill over a group with lag history samples of the last
    7 hours (``lag_report_run.run_with_history``), shared by the notebook test and the browser
    test that reads what it saved: one kernel start for both."""
    from lag_report_run import run_with_history

    return run_with_history(zookeeper, tmp_path_factory.mktemp("lag-report"))


@pytest.fixture(scope="session")
def zk_dir(tmp_path_factory):
    """Data directory of the session's embedded ZooKeeper."""
    return tmp_path_factory.mktemp("zookeeper")


@pytest.fixture(scope="session")
def zookeeper(zk_dir):
    """Address of a real ZooKeeper server shared by the whole test session."""
    with pytest.MonkeyPatch.context() as env:
        if _OWN_ZK_FLAGS in os.environ:
            env.setenv("SERVER_JVMFLAGS", os.environ[_OWN_ZK_FLAGS])
        address = embedded.ensure_running(zk_dir)
    yield address
    embedded.stop(zk_dir)


@pytest.fixture
def namespace():
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def warehouse(tmp_path):
    path = tmp_path / "warehouse"
    path.mkdir()
    return str(path)


@pytest.fixture
def clock():
    """The expiry clock of ``conn``: the ZooKeeper clock until a test moves it ahead with
    ``clock.advance(...)`` to make leases expire or files age without waiting."""
    return testing.ShiftedClock()


@pytest.fixture
def conn(zookeeper, warehouse, namespace, clock):
    """A connection on a fresh namespace and warehouse, deciding expiry by ``clock``."""
    with lk.connect(zookeeper, warehouse, namespace=namespace, clock=clock) as connection:
        yield connection


@pytest.fixture
def target(zookeeper, warehouse, namespace) -> list[str]:
    """Global options pointing the CLI at the test ZooKeeper, warehouse and namespace."""
    return ["--zookeeper", zookeeper, "--warehouse", warehouse, "--namespace", namespace]


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession, shared by the whole test session."""
    from pyspark.sql import SparkSession

    from leasekit.sparkio.worker_python import worker_python

    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    session = (
        SparkSession.builder.master("local[2]")
        .appName("leasekit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
