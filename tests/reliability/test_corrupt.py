"""Garbage bytes in metadata (docs/architecture.md, docs/security.md): ``CorruptMetadataError``
naming the znode; retention and lease expiry skip it, keep what it may protect, and carry on
with the rest."""

from __future__ import annotations

import os

import msgpack
import pytest
from helpers import namespace_tree, run_cli, run_cli_json, warehouse_files

import leasekit as lk
from leasekit import testing

TB = lk.TableBucket

GARBAGE = {
    "not-msgpack": b"\xc1\xc1garbage",
    "trailing-bytes": b"\x00\xff\xfe\x93",
    "empty": b"",
    "not-a-record": msgpack.packb([1, 2, 3]),
    "unknown-version": msgpack.packb({"v": 99, "d": 1000, "f": 0, "o": "x", "s": "live"}),
    "missing-fields": msgpack.packb({"v": 1}),
}


TABLE_GARBAGE = [pytest.param(data, id=name) for name, data in GARBAGE.items()]


def _corrupt(conn, path: str, data: bytes) -> None:
    ctx = testing.context(conn)
    assert ctx.store.exists(path) is not None
    ctx.store.set(path, data)


def _names_path(exc_info, path: str) -> None:
    assert exc_info.value.path == path
    assert path in str(exc_info.value)


@pytest.fixture
def orders(conn, spark):
    """4 buckets with snapshots 1 and 2 each; only the newest one is retained."""
    table = conn.create_table(
        "orders",
        "id BIGINT, status STRING",
        "id",
        buckets=4,
        properties={"kv.snapshot.num-retained": 1},
    )
    table.append([{"id": i, "status": "new"} for i in range(100)])
    table.snapshot(spark)
    table.append([{"id": i, "status": "paid"} for i in range(100)])
    table.snapshot(spark)
    return table


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_garbage_lease_znode_raises_naming_the_path(conn, garbage):
    # docs/architecture.md: decoding garbage raises CorruptMetadataError naming the path (leases(),
    # info, renew, acquire); nothing is silently recreated over it (L8)
    ctx = testing.context(conn)
    conn.acquire_kv_snapshot_lease("sane", {}, "1h")
    conn.acquire_kv_snapshot_lease("bad", {}, "1h")
    path = ctx.paths.lease("bad")
    _corrupt(conn, path, garbage)
    calls = [
        conn.leases,
        lambda: conn.lease("bad").info(),
        lambda: conn.renew_kv_snapshot_lease("bad", "1h"),
        lambda: conn.acquire_kv_snapshot_lease("bad", {}, "1h"),
    ]
    for call in calls:
        with pytest.raises(lk.CorruptMetadataError) as exc_info:
            call()
        _names_path(exc_info, path)
    assert ctx.store.get(path).data == garbage
    assert conn.lease("sane").info().lease_id == "sane"


@pytest.mark.parametrize(
    "garbage",
    [GARBAGE["not-msgpack"], GARBAGE["missing-fields"]],
    ids=["not-msgpack", "missing-fields"],
)
def test_expire_leases_skips_a_corrupt_lease_and_reclaims_the_others(conn, clock, garbage):
    # L11: expiry skips the unreadable lease and still reclaims the expired ones
    ctx = testing.context(conn)
    conn.update_settings({"lease.expiry-grace": "30s"})
    for lease_id in ("a-old", "bad", "z-old"):
        conn.acquire_kv_snapshot_lease(lease_id, {}, "1m")
    conn.acquire_kv_snapshot_lease("keeper", {}, "2h")
    _corrupt(conn, ctx.paths.lease("bad"), garbage)
    clock.advance(60 + 31)
    assert sorted(conn.expire_leases()) == ["a-old", "z-old"]
    assert ctx.store.get(ctx.paths.lease("bad")).data == garbage
    assert ctx.store.exists(ctx.paths.lease("keeper")) is not None


def test_retention_skips_a_corrupt_lease_and_still_reclaims_the_rest(conn, clock, orders):
    # R5, R6, L11, R2: the plan names the corrupt lease in ``skipped`` and plans
    # everything else; the pass reclaims the other expired lease and what it alone pinned,
    # and keeps the snapshot the unreadable lease pins
    ctx = testing.context(conn)
    conn.update_settings({"lease.expiry-grace": "30s"})
    conn.acquire_kv_snapshot_lease("bad", {TB("orders", 0): 1}, "1m")
    conn.acquire_kv_snapshot_lease("old", {TB("orders", 1): 1}, "1m")
    conn.acquire_kv_snapshot_lease("keeper", {TB("orders", 2): 1}, "2h")
    bad_path = ctx.paths.lease("bad")
    _corrupt(conn, bad_path, GARBAGE["not-msgpack"])
    clock.advance(60 + 31)  # "bad" and "old" would both be expired

    before = namespace_tree(conn)
    plan = conn.retention_plan()
    assert namespace_tree(conn) == before  # R6: planning changes nothing
    assert len(plan.skipped) == 1 and bad_path in plan.skipped[0]
    leases = {i.item_id: i.action for i in plan.items if i.kind == "lease"}
    assert leases == {"old": "delete", "keeper": "keep"}
    snapshots = {(i.table_bucket.bucket, i.item_id): i for i in plan.items if i.kind == "snapshot"}
    assert {k: i.action for k, i in snapshots.items()} == {
        (0, 1): "keep",
        (0, 2): "keep",  # pinned by the unreadable lease: kept, to be safe
        (1, 1): "delete",
        (1, 2): "keep",  # its lease "old" expires in this pass (R5)
        (2, 1): "keep",
        (2, 2): "keep",  # pinned by "keeper"
        (3, 1): "delete",
        (3, 2): "keep",
    }
    assert "no known lease" in snapshots[(0, 1)].reason
    assert "keeper" in snapshots[(2, 1)].reason

    report = conn.run_retention()
    assert any(bad_path in e for e in report.errors)
    deleted = {
        (i.kind, i.table_bucket.bucket if i.table_bucket else None, i.item_id)
        for i in report.deleted
    }
    assert deleted == {("lease", None, "old"), ("snapshot", 1, 1), ("snapshot", 3, 1)}
    assert ctx.store.get(bad_path).data == GARBAGE["not-msgpack"]
    assert ctx.store.exists(ctx.paths.lease("old")) is None
    remaining = {(s.table_bucket.bucket, s.snapshot_id) for s in orders.snapshots()}
    assert remaining == {(0, 1), (0, 2), (1, 2), (2, 1), (2, 2), (3, 2)}
    for snap in orders.snapshots():  # R2: nothing that still has a pin lost a file
        assert all(os.path.exists(f) for f in snap.files)


@pytest.mark.parametrize("garbage", TABLE_GARBAGE)
def test_garbage_table_znode_raises_naming_the_path(conn, garbage):
    # docs/architecture.md: conn.table() of a corrupt table
    # znode raises CorruptMetadataError naming the path
    conn.create_table("sane", "id BIGINT", "id", buckets=2)
    conn.create_table("bad", "id BIGINT", "id", buckets=2)
    path = testing.context(conn).paths.table("bad")
    _corrupt(conn, path, garbage)
    with pytest.raises(lk.CorruptMetadataError) as exc_info:
        conn.table("bad")
    _names_path(exc_info, path)
    assert conn.table("sane").num_buckets == 2
    assert conn.tables() == ["bad", "sane"]


@pytest.mark.parametrize(
    "garbage", [p for p in TABLE_GARBAGE if p.id in ("not-msgpack", "missing-fields")]
)
def test_retention_skips_a_corrupt_table_and_never_deletes_its_files(conn, garbage):
    # R4, R6: the corrupt table is skipped by name; its files are never taken for
    # orphans, even with orphan.min-age 0s; the other table is planned and reclaimed
    ctx = testing.context(conn)
    conn.update_settings({"orphan.min-age": "0s"})
    sane = conn.create_table("sane", "id BIGINT", "id", buckets=2)
    bad = conn.create_table("bad", "id BIGINT", "id", buckets=2)
    sane.append([{"id": i} for i in range(10)])
    bad.append([{"id": i} for i in range(10)])
    stray = f"{sane.data_dir}/log/0/stray.parquet"  # an unreferenced file of the sane table
    ctx.warehouse.write_parquet(stray, bad.schema.empty_table())
    bad_files = {f for f in warehouse_files(conn) if f.startswith(f"{ctx.tables_dir}/{bad.name}/")}
    path = ctx.paths.table("bad")
    _corrupt(conn, path, garbage)

    plan = conn.retention_plan()
    assert len(plan.skipped) == 1 and path in plan.skipped[0]
    orphans = {i.item_id for i in plan.items if i.kind == "orphan"}
    assert orphans == {ctx.warehouse.uri(stray)}
    assert {i.table_bucket.table for i in plan.items if i.kind == "segment"} == {"sane"}
    report = conn.run_retention()
    assert {i.item_id for i in report.deleted} == {ctx.warehouse.uri(stray)}
    assert bad_files <= warehouse_files(conn)


@pytest.mark.parametrize("damage", ["garbage-snapshot", "garbage-bucket", "stray-child"])
def test_retention_never_takes_files_of_unreadable_bucket_metadata_for_orphans(
    conn, orders, damage
):
    # R4, R6: a snapshot or bucket znode that cannot be read, or a child that is no
    # snapshot id, is named in ``skipped``; the files it may reference are kept even with
    # orphan.min-age 0s, and the other buckets are planned and reclaimed as usual
    ctx = testing.context(conn)
    conn.update_settings({"orphan.min-age": "0s"})
    newest = [
        f
        for s in orders.snapshots()
        if (s.table_bucket.bucket, s.snapshot_id) == (0, 2)
        for f in s.files
    ]
    if damage == "garbage-snapshot":
        path = ctx.paths.snapshot(orders.table_id, 0, 2)
        _corrupt(conn, path, GARBAGE["not-msgpack"])
    elif damage == "garbage-bucket":
        path = ctx.paths.bucket(orders.table_id, 0)
        _corrupt(conn, path, GARBAGE["missing-fields"])
    else:
        path = f"{ctx.paths.snapshots(orders.table_id, 0)}/not-a-snapshot"
        ctx.store.ensure_path(path)

    plan = conn.retention_plan()
    assert len(plan.skipped) == 1 and path in plan.skipped[0]
    assert [i for i in plan.items if i.kind == "orphan"] == []
    deletes = {
        (i.table_bucket.bucket, i.item_id)
        for i in plan.items
        if i.kind == "snapshot" and i.action == "delete"
    }
    assert {(1, 1), (2, 1), (3, 1)} <= deletes
    report = conn.run_retention()
    assert not [i for i in report.deleted if i.kind == "orphan"]
    assert newest and all(os.path.exists(f) for f in newest)


CLI_GARBAGE = [p for p in TABLE_GARBAGE if p.id in ("not-msgpack", "missing-fields")]


@pytest.mark.parametrize("garbage", CLI_GARBAGE)
def test_cli_table_list_shows_a_corrupt_table_and_lists_the_rest(conn, capsys, target, garbage):
    # docs/security.md: like the janitor, `table list` carries on past an unreadable table record:
    # the good tables are listed, the corrupt one is shown with CorruptMetadataError and its path
    conn.create_table("sane", "id BIGINT", "id", buckets=2)
    conn.create_table("bad", "id BIGINT", "id", buckets=2)
    path = testing.context(conn).paths.table("bad")
    _corrupt(conn, path, garbage)

    code, out, err = run_cli(capsys, *target, "table", "list")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["TABLE", "BUCKETS", "PRIMARY-KEY", "CREATED-AT"]
    assert lines[1].split()[:3] == ["sane", "2", "id"]
    unreadable = [line for line in lines if "CorruptMetadataError" in line]
    assert len(unreadable) == 1 and path in unreadable[0] and "'bad'" in unreadable[0]

    rows = run_cli_json(capsys, *target, "table", "list")
    assert [(r["table"], r["state"]) for r in rows] == [("bad", "corrupt"), ("sane", "ok")]
    assert rows[0]["buckets"] is None and rows[0]["error"].startswith("CorruptMetadataError")
    assert path in rows[0]["error"]
    assert rows[1]["buckets"] == 2 and rows[1]["error"] is None


@pytest.mark.parametrize("garbage", CLI_GARBAGE)
def test_cli_lease_and_consumer_list_show_corrupt_records_and_list_the_rest(
    conn, capsys, target, garbage
):
    # docs/security.md: garbage bytes in a lease or offset znode: `lease list` shows the lease as
    # unreadable (CorruptMetadataError naming the path) beside the good ones; `consumer list` still
    # lists the group whose offset znode holds garbage
    ctx = testing.context(conn)
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    conn.acquire_kv_snapshot_lease("bad", {}, "1h")
    conn.acquire_kv_snapshot_lease("sane", {}, "1h")
    with conn.consumer(group_id="billing", enable_auto_commit=False) as c:
        c.assign([TB("orders", 0)])
        c.commit({TB("orders", 0): 0})
    lease_path = ctx.paths.lease("bad")
    _corrupt(conn, lease_path, garbage)
    offsets = ctx.paths.group_offsets("billing")
    offset_path = f"{offsets}/{ctx.store.children(offsets)[0]}"
    _corrupt(conn, offset_path, garbage)
    assert table.num_buckets == 2

    code, out, err = run_cli(capsys, *target, "lease", "list")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[0] == "LEASE-ID"
    assert [line.split()[0] for line in lines[1:] if "CorruptMetadataError" not in line] == ["sane"]
    unreadable = [line for line in lines if "CorruptMetadataError" in line]
    assert len(unreadable) == 1 and lease_path in unreadable[0] and "'bad'" in unreadable[0]

    rows = run_cli_json(capsys, *target, "lease", "list")
    assert [(r["lease_id"], r["state"]) for r in rows] == [("bad", "corrupt"), ("sane", "ok")]
    assert rows[0]["error"].startswith("CorruptMetadataError") and lease_path in rows[0]["error"]
    assert rows[1]["error"] is None and rows[1]["duration"] == 3600

    assert run_cli_json(capsys, *target, "consumer", "list") == {"groups": ["billing"]}
    code, out, err = run_cli(capsys, *target, "consumer", "list")
    assert (code, out.split()) == (0, ["billing"]), err
