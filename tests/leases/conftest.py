"""The lease tests' table: ``orders``, two snapshots per bucket."""

from __future__ import annotations

import uuid

import pytest

import leasekit as lk
from leasekit import testing

ROUNDS = (
    [{"id": i, "status": "new"} for i in range(200)],
    [{"id": i, "status": "paid"} for i in range(0, 200, 2)],
)
"""The appends of ``orders``, each followed by a snapshot."""


@pytest.fixture(scope="module")
def compacted(zookeeper, spark, tmp_path_factory):
    """The two snapshots of every bucket of ``orders``, compacted by Spark once per module."""
    warehouse = str(tmp_path_factory.mktemp("orders-template"))
    with lk.connect(zookeeper, warehouse, namespace=f"t{uuid.uuid4().hex[:12]}") as conn:
        table = conn.create_table("orders", "id BIGINT, status STRING", "id", buckets=4)
        generations = []
        for rows in ROUNDS:
            table.append(rows)
            generations.append(table.snapshot(spark))
        return generations


@pytest.fixture
def orders(conn, compacted):
    """A 4-bucket table with two snapshots per bucket (ids 1 and 2): its own appends, and
    copies of the template's compactions registered as its snapshots (what its own would
    write: ``test_the_copied_snapshots_hold_the_state_of_the_log`` checks)."""
    table = conn.create_table("orders", "id BIGINT, status STRING", "id", buckets=4)
    for rows, snapshots in zip(ROUNDS, compacted):
        table.append(rows)
        testing.register_copies(table, snapshots)
    return table
