"""Large acquires with the longest names ZooKeeper paths can get still split into
transactions under ZooKeeper's 1 MB request limit (L14)."""

from __future__ import annotations

import uuid

from helpers import seed_empty_snapshots

import leasekit as lk
from leasekit import testing


def test_acquire_with_longest_namespace_lease_id_and_acls(zookeeper, warehouse):
    # L14: 5,000 pins whose paths carry a 128-character namespace and lease id, with digest ACLs
    namespace = ("n" + uuid.uuid4().hex * 4)[:128]
    lease_id = "L" * 128
    with lk.connect(zookeeper, warehouse, namespace=namespace, auth=("analyst", "s3cret")) as conn:
        table = conn.create_table("t", "id BIGINT", "id", buckets=5_000)
        seed_empty_snapshots(testing.context(conn), table)
        result = conn.lease(lease_id, "1h").acquire_latest("t")
        assert len(result.acquired) == 5_000 and result.unavailable == {}
        assert conn.drop_kv_snapshot_lease(lease_id) is True
