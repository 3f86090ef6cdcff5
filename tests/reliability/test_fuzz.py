"""Fuzzed arguments for the public entry points: only LeasekitError, ValueError or TypeError
come out, never a kazoo, Py4J or pyarrow exception (docs/security.md).

Here tables, leases, settings and connect; consumers, leasekit.spark and oversized numbers in
test_fuzz_consumers, test_fuzz_spark and test_fuzz_numbers."""

from __future__ import annotations

from datetime import timedelta

from fuzz_cases import ALLOWED, FUZZ, _call, snapshot_maps, values
from hypothesis import given

import leasekit as lk


@FUZZ
@given(name=values, schema=values, key=values, n=values, props=values)
def test_fuzz_create_table(conn, name, schema, key, n, props):
    _call(conn.create_table, name, schema, key, n, props)


@FUZZ
@given(rows=values)
def test_fuzz_append_and_delete(table, rows):
    _call(table.append, rows)
    _call(table.delete, rows)


@FUZZ
@given(
    lease_id=values, duration=values, keepalive=values, ids=snapshot_maps, tables=values, bs=values
)
def test_fuzz_lease_handle(conn, table, lease_id, duration, keepalive, ids, tables, bs):
    try:
        lease = conn.lease(lease_id, duration, keepalive=keepalive)
    except ALLOWED:
        return
    _call(lease.acquire, ids)
    _call(lease.acquire_latest, tables)
    _call(lease.renew, duration)
    _call(lease.release, bs)
    _call(lease.drop)


@FUZZ
@given(lease_id=values, ids=snapshot_maps, duration=values, bs=values)
def test_fuzz_fluss_shaped_lease_api(conn, table, lease_id, ids, duration, bs):
    _call(conn.acquire_kv_snapshot_lease, lease_id, ids, duration)
    _call(conn.renew_kv_snapshot_lease, lease_id, duration)
    _call(conn.release_kv_snapshot_lease, lease_id, bs)
    _call(conn.drop_kv_snapshot_lease, lease_id)


@FUZZ
@given(name=values, mapping=values, dry=values, force=values)
def test_fuzz_admin(conn, table, name, mapping, dry, force):
    _call(conn.table, name)
    _call(conn.update_settings, mapping)
    _call(conn.retention_plan, name)
    _call(conn.run_retention, name, dry_run=dry if not isinstance(dry, bool) else True)
    _call(conn.drop_table, name if name != "t" else "nope", force=force)
    _call(table.snapshots, name)


@FUZZ
@given(zookeeper=values, namespace=values, auth=values, timeout=values)
def test_fuzz_connect_arguments(tmp_path, zookeeper, namespace, auth, timeout):
    from leasekit.durations import parse_duration

    if zookeeper is None or (isinstance(zookeeper, str) and zookeeper.strip()):
        zookeeper = "127.0.0.1:1"  # no embedded server, no address made up by the fuzzer
    try:
        if parse_duration(timeout) > timedelta(seconds=1):
            timeout = "1s"  # a valid long timeout would only make the unreachable server slow
    except ALLOWED:
        pass
    try:
        lk.connect(
            zookeeper, str(tmp_path / "wh"), namespace=namespace, auth=auth, timeout=timeout
        ).close()
    except ALLOWED:
        pass
