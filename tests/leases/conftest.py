"""The lease tests' table: ``orders``, two snapshots per bucket."""

from __future__ import annotations

import pytest
from helpers import Compacted

ROUNDS = (
    [{"id": i, "status": "new"} for i in range(200)],
    [{"id": i, "status": "paid"} for i in range(0, 200, 2)],
)
"""The appends of ``orders``, each followed by a snapshot."""


@pytest.fixture(scope="module")
def compacted(zookeeper, spark, tmp_path_factory):
    """The two snapshots of every bucket of ``orders``, compacted by Spark once per module."""
    folder = tmp_path_factory.mktemp("orders-template")
    return Compacted(zookeeper, spark, folder, "id BIGINT, status STRING", ROUNDS)


@pytest.fixture
def orders(conn, compacted):
    """A 4-bucket table with two snapshots per bucket (ids 1 and 2): its own appends, and
    copies of the template's compactions registered as its snapshots (what its own would
    write: ``test_the_copied_snapshots_hold_the_state_of_the_log`` checks)."""
    return compacted.make(conn)
