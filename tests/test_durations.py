"""The name and id rules of ``leasekit.durations``: ids (L1), table names and namespaces are
checked whole, before any ZooKeeper call."""

from __future__ import annotations

import pytest

import leasekit as lk
from leasekit.durations import check_id

TRAILING = ["q3\n", "orders\n", "a.b\n", "x\n\n"]


@pytest.mark.parametrize("value", TRAILING)
def test_lease_ids_with_a_trailing_newline_are_refused_before_any_zookeeper_call(conn, value):
    # L1
    before = conn.store.round_trips
    with pytest.raises(lk.InvalidLeaseIdError):
        conn.lease(value)
    with pytest.raises(lk.InvalidLeaseIdError):
        conn.acquire_kv_snapshot_lease(value, {}, "1h")
    with pytest.raises(lk.InvalidLeaseIdError):
        conn.drop_kv_snapshot_lease(value)
    assert conn.store.round_trips == before


@pytest.mark.parametrize("value", TRAILING)
def test_group_like_ids_with_a_trailing_newline_are_refused(value):
    # L1 (group ids follow the lease-id rule and raise InvalidArgumentError, DESIGN 6.5)
    with pytest.raises(lk.InvalidArgumentError, match="invalid group id"):
        check_id(value, what="group id", error=lk.InvalidArgumentError)
    assert check_id(value.rstrip("\n"), what="group id", error=lk.InvalidArgumentError) == value.rstrip("\n")


@pytest.mark.parametrize("value", TRAILING)
def test_table_names_with_a_trailing_newline_are_refused_before_any_zookeeper_call(conn, value):
    # L1 (the table name rule, DESIGN 4)
    before = conn.store.round_trips
    for call in (lambda: conn.create_table(value, "id BIGINT", "id"), lambda: conn.table(value),
                 lambda: conn.drop_table(value), lambda: conn.lease("q3").acquire_latest(value)):
        with pytest.raises(lk.InvalidArgumentError, match="invalid table name"):
            call()
    assert conn.store.round_trips == before
    assert conn.tables() == []


@pytest.mark.parametrize("value", TRAILING)
def test_namespaces_with_a_trailing_newline_are_refused_before_connecting(warehouse, value):
    # L1 (namespaces follow the id rule); an unreachable address shows no connection is tried
    with pytest.raises(lk.InvalidArgumentError, match="invalid namespace"):
        lk.connect("127.0.0.1:1", warehouse, namespace=value, timeout="1s")
