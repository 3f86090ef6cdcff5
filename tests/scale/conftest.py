"""Fixtures for the scale tests: a 3-server ZooKeeper ensemble on loopback (started once for
the session, stopped at its end), the ``--ensemble-seconds`` option of its failover stress, and
an S3 server on loopback (``s3``: SeaweedFS, ``peers.seaweedfs``, once per module)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

import leasekit as lk
from leasekit.embedded.ensemble import Ensemble

ENSEMBLE_TIMEOUT = "10s"
"""Timeout of the clients here: their session timeout and how long a call retries; far above
a leader election on loopback (about a second), so sessions move to another server intact."""


def pytest_addoption(parser):
    parser.addoption(
        "--ensemble-seconds",
        type=float,
        default=float(os.environ.get("LEASEKIT_ENSEMBLE_SECONDS", "15")),
        help="how long the ensemble failover stress runs (default 15 for CI; 60 by hand)",
    )


@pytest.fixture(scope="session")
def ensemble_seconds(pytestconfig) -> float:
    return float(pytestconfig.getoption("ensemble_seconds"))


@pytest.fixture(scope="session")
def zk_ensemble(tmp_path_factory) -> Iterator[Ensemble]:
    """A 3-server ZooKeeper ensemble for the whole session."""
    ensemble = Ensemble(tmp_path_factory.mktemp("zk-ensemble"), size=3)
    ensemble.start()
    try:
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture
def ensemble(zk_ensemble) -> Ensemble:
    """The session's ensemble with every server up and a leader (a test that failed after a
    kill leaves a server down)."""
    for index in range(zk_ensemble.size):
        if zk_ensemble.mode(index) is None:
            zk_ensemble.restart(index)
    zk_ensemble.wait_leader()
    return zk_ensemble


@pytest.fixture
def ensemble_connect(ensemble, warehouse):
    """Open connections to the ensemble (the full connect string) on a fresh namespace; all
    closed at teardown."""
    namespace = f"e{uuid.uuid4().hex[:12]}"
    opened: list[lk.Connection] = []

    def open_connection(**kwargs) -> lk.Connection:
        kwargs.setdefault("namespace", namespace)
        kwargs.setdefault("timeout", ENSEMBLE_TIMEOUT)
        zookeeper = kwargs.pop("zookeeper", ensemble.connect_string)
        connection = lk.connect(zookeeper, warehouse, **kwargs)
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        connection.close()


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[str]:
    """Endpoint (host:port) of a SeaweedFS S3 server (``peers.seaweedfs.seaweed_s3``) with the
    bucket ``peers.seaweedfs.BUCKET``; the AWS environment points at it while the module runs."""
    from peers.seaweedfs import SeaweedError, SeaweedMissingError, aws_environment, seaweed_s3

    with contextlib.ExitStack() as stack:
        try:
            endpoint = stack.enter_context(seaweed_s3(tmp_path_factory.mktemp("seaweedfs")))
        except (SeaweedMissingError, SeaweedError) as exc:
            pytest.fail(str(exc))
        with pytest.MonkeyPatch.context() as env:
            for key, value in aws_environment(endpoint).items():
                env.setenv(key, value)
            yield endpoint
