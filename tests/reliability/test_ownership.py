"""Ownership of a warehouse namespace directory (docs/security.md, "Ownership"): its marker names
the metadata store (namespace identity in ZooKeeper) that owns it; a second ZooKeeper, or a
namespace recreated in ZooKeeper, pointed at the same directory is refused with a clear error
before it writes or deletes anything."""

from __future__ import annotations

import json
import os

import pytest

import leasekit as lk
from leasekit import testing
from leasekit.context import Context
from leasekit.ownership import MARKER
from leasekit.zk import ZkStore


def marker(conn: lk.Connection) -> dict[str, str]:
    with open(os.path.join(conn.warehouse, conn.namespace, MARKER)) as f:
        return json.load(f)


def data_files(conn: lk.Connection) -> dict[str, int]:
    return {e.path: e.size for e in testing.context(conn).warehouse.list(conn.namespace)}


def stock(conn: lk.Connection) -> None:
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(20)])
    conn.update_settings({"orphan.min-age": 0})


def test_second_zookeeper_on_the_same_warehouse_is_refused_and_deletes_nothing(
    zookeeper, own_zk, warehouse, namespace
):
    # ownership (docs/security.md): LEASEKIT_ZOOKEEPER for one user, another ZooKeeper for the other
    with lk.connect(zookeeper, warehouse, namespace=namespace) as first:
        stock(first)
        files = data_files(first)
        with pytest.raises(lk.WarehouseOwnedError) as info:
            lk.connect(own_zk.address, warehouse, namespace=namespace)
        message = str(info.value)
        assert zookeeper in message and namespace in message and MARKER in message
        assert isinstance(info.value, lk.IllegalStateError)
        assert data_files(first) == files
        assert first.run_retention().deleted == []  # the marker is no orphan
        assert data_files(first) == files
        assert sum(first.table("t").end_offsets().values()) == 20


def test_fresh_namespace_directory_gets_the_marker(conn, namespace):
    # ownership (docs/security.md): the first connection records the namespace's identity and, for
    # people, where its metadata lives; retention never takes the marker for an orphan
    owner = marker(conn)
    assert owner["identity"] == testing.context(conn).identity and len(owner["identity"]) == 32
    assert owner["zookeeper"] == conn.zookeeper and owner["namespace"] == namespace
    conn.update_settings({"orphan.min-age": 0})
    conn.create_table("t", "id BIGINT", "id").append([{"id": 1}])
    conn.run_retention()
    assert marker(conn) == owner


def test_existing_warehouse_without_marker_is_adopted(zookeeper, warehouse, namespace):
    # ownership (docs/security.md): a warehouse written before markers is adopted by its namespace
    with lk.connect(zookeeper, warehouse, namespace=namespace) as conn:
        stock(conn)
        files = data_files(conn)
        identity = testing.context(conn).identity
    os.remove(os.path.join(warehouse, namespace, MARKER))
    with lk.connect(zookeeper, warehouse, namespace=namespace) as again:
        assert marker(again)["identity"] == identity == testing.context(again).identity
        assert data_files(again) == files
        assert sum(again.table("t").end_offsets().values()) == 20


def test_namespace_recreated_in_zookeeper_does_not_own_the_old_files(
    zookeeper, warehouse, namespace
):
    # ownership (docs/security.md): a namespace dropped
    # from ZooKeeper and created again is another instance
    with lk.connect(zookeeper, warehouse, namespace=namespace) as conn:
        ctx = testing.context(conn)
        stock(conn)
        files = data_files(conn)
        ctx.store.delete_tree(ctx.paths.root)
    with pytest.raises(lk.WarehouseOwnedError, match="remove"):
        lk.connect(zookeeper, warehouse, namespace=namespace)
    assert data_files_at(warehouse, namespace) == files
    os.remove(os.path.join(warehouse, namespace, MARKER))  # what the message says to do
    with lk.connect(zookeeper, warehouse, namespace=namespace) as adopted:
        assert marker(adopted)["identity"] == testing.context(adopted).identity


def data_files_at(warehouse: str, namespace: str) -> dict[str, int]:
    root = os.path.join(warehouse, namespace)
    return {
        os.path.relpath(os.path.join(d, f), warehouse): os.path.getsize(os.path.join(d, f))
        for d, _, names in os.walk(root)
        for f in names
    }


def test_pyarrow_file_system_warehouse_is_owned_too(zookeeper, own_zk, namespace):
    # ownership (docs/security.md) on a warehouse addressed by a pyarrow URI (pyarrow's in-memory
    # "mock" file system, shared here by two stores the way one object store would be)
    with lk.connect(zookeeper, "mock:///wh", namespace=namespace) as first:
        ctx = testing.context(first)
        first.create_table("t", "id BIGINT", "id").append([{"id": 1}])
        owner = json.loads(ctx.warehouse.read_small(f"{namespace}/{MARKER}"))
        assert owner["identity"] == ctx.identity
        store = ZkStore(own_zk.address)
        store.open()
        second = Context(store, ctx.warehouse, namespace)
        try:
            second.ensure_namespace()
            with pytest.raises(lk.WarehouseOwnedError):
                second.claim_warehouse()
            with pytest.raises(lk.WarehouseOwnedError):
                second.ensure_writable("run retention")
        finally:
            store.close()
        assert sum(first.table("t").end_offsets().values()) == 1
