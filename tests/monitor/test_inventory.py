"""The lease inventory (M4): each lease's state (active, expiring, orphaned,
expired) on the real ZooKeeper, an orphan whose keepalive process was killed with SIGKILL,
and the bytes a lease pins and alone keeps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pandas as pd
from helpers import seed_empty_snapshots

from leasekit import TableBucket, testing
from leasekit.cli import main as cli
from leasekit.zk import Create

TESTS = Path(__file__).resolve().parents[1]


def _by_id(conn) -> dict[str, dict]:
    return {row["lease_id"]: row for row in conn.lease_inventory().to_dict("records")}


def _states(conn) -> dict[str, str]:
    return {lease_id: row["state"] for lease_id, row in _by_id(conn).items()}


def test_columns_and_records(conn):
    # M4: the columns of docs/monitoring.md, one row per lease, owner and host of the last acquirer
    table = conn.create_table("t", "id BIGINT", "id", buckets=3)
    seed_empty_snapshots(testing.context(conn), table)
    assert list(conn.lease_inventory().columns) == [
        "lease_id", "owner", "host", "state", "pinned_buckets", "tables", "pinned_bytes",
        "exclusive_bytes", "created_at", "renewed_at", "expires_at",
    ]  # fmt: skip
    result = conn.acquire_kv_snapshot_lease(
        "q3", {TableBucket("t", 0): 1, TableBucket("t", 2): 1}, "1h"
    )
    frame = conn.lease_inventory()
    assert len(frame) == 1
    row = frame.iloc[0]
    info = conn.leases()[0]
    assert row["lease_id"] == "q3" and row["owner"] == info.owner
    assert row["host"] == info.owner.rsplit(":", 1)[0]
    assert row["state"] == "active" and row["pinned_buckets"] == 2 and row["tables"] == ["t"]
    assert row["expires_at"] == pd.Timestamp(result.expires_at)
    assert row["created_at"] == pd.Timestamp(info.created_at)
    assert row["renewed_at"] == pd.Timestamp(info.renewed_at)
    assert str(frame["expires_at"].dtype) == "datetime64[ns, UTC]"


def test_states_on_the_clock(conn, clock):
    # M4: expiring below a tenth of the duration left, expired past expiry (L7); a lease with
    # no keepalive, or whose keepalive holder lives, is never orphaned however long unrenewed
    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    seed_empty_snapshots(testing.context(conn), table)
    pin = {TableBucket("t", 0): 1}
    for lease_id, duration in (
        ("long", "10h"),
        ("short", "1h"),
        ("brief", "30m"),
        ("manual", "90m"),
    ):
        conn.acquire_kv_snapshot_lease(lease_id, pin, duration)
    with conn.lease("kept", "90m", keepalive=True, drop_on_exit=False) as kept:
        kept.acquire(pin)
        assert set(_states(conn).values()) == {"active"}
        clock.advance(timedelta(minutes=55))
        assert _states(conn) == {
            "long": "active",  # 9h05m of 10h left
            "short": "expiring",  # 5m left < 6m
            "brief": "expired",
            "manual": "active",  # unrenewed for over a third, but no keepalive ever held it
            "kept": "active",  # unrenewed for over a third, but its keepalive runs
        }
        clock.advance(timedelta(minutes=5, seconds=1))
        assert _states(conn)["short"] == "expired"
    # the block ended without dropping: nobody keeps it alive, a third has passed
    assert _states(conn)["kept"] == "orphaned"
    conn.renew_kv_snapshot_lease("kept", "90m")  # renewed by hand: held by nobody, not orphaned
    assert _states(conn)["kept"] == "active"


def test_orphaned_after_holder_killed(conn, clock, zookeeper, warehouse, namespace):
    # M4: orphaned = its keepalive holder's session is gone and it went a third of its
    # duration unrenewed; the holder here is another process, killed with SIGKILL
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    seed_empty_snapshots(testing.context(conn), table)
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "lease_holder.py"), zookeeper, warehouse, namespace, "t",
         "held", "--duration", "1h"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "READY"
        assert _states(conn) == {"held": "active"}
        clock.advance(timedelta(minutes=21))  # over a third of 1h without renewal
        assert _states(conn) == {"held": "active"}  # its holder lives
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _states(conn)["held"] != "orphaned":  # the session ends after its 2 s timeout
            assert time.monotonic() < deadline, "the lease never became orphaned"
            time.sleep(0.2)
        row = _by_id(conn)["held"]
        assert row["pinned_buckets"] == 2 and row["owner"].endswith(f":{proc.pid}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    clock.advance(timedelta(minutes=40))
    assert _states(conn)["held"] == "expired"


def test_pinned_and_exclusive_bytes(conn, clock):
    # M4: pinned_bytes sums the snapshots a lease pins; exclusive_bytes counts the files no
    # other lease or retention rule keeps: what dropping it frees
    ctx = testing.context(conn)
    props = {"log.retention": "1s"}  # the log below the kept snapshots is deletable
    for name in ("shared", "alone"):
        table = conn.create_table(name, "id BIGINT", "id", buckets=1, properties=props)
        # 4 snapshots (offsets 10, 20, 30, 40) and 4 segments of 10 records, 100 bytes each
        testing.seed_history(ctx, table, 4, 4, 10, file_bytes=100)
    clock.advance(timedelta(seconds=10))
    conn.acquire_kv_snapshot_lease("a", {TableBucket("shared", 0): 1}, "1h")
    conn.acquire_kv_snapshot_lease("b", {TableBucket("shared", 0): 1}, "1h")
    conn.acquire_kv_snapshot_lease("newest", {TableBucket("shared", 0): 4}, "1h")
    conn.acquire_kv_snapshot_lease("c", {TableBucket("alone", 0): 1}, "1h")
    rows = _by_id(conn)
    got = {k: (r["pinned_bytes"], r["exclusive_bytes"]) for k, r in rows.items()}
    assert got == {
        "a": (100, 0),  # b pins the same snapshot
        "b": (100, 0),
        "newest": (100, 0),  # kept anyway: newest 2 of the bucket
        # its snapshot, and the segments [10, 30) that only its snapshot's log start keeps
        "c": (100, 300),
    }
    # the same figure as the retention plan: what it deletes more once c is dropped
    before = conn.retention_plan("alone").reclaimable_bytes
    conn.drop_kv_snapshot_lease("c")
    assert conn.retention_plan("alone").reclaimable_bytes - before == 300
    conn.drop_kv_snapshot_lease("b")
    assert _by_id(conn)["a"]["exclusive_bytes"] == 300  # now a alone keeps them, as c did


def test_old_lease_records_stay_readable(conn):
    # records written before holders were recorded (no "h" field) read as held by no keepalive
    import msgpack

    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    ctx = testing.context(conn)
    seed_empty_snapshots(ctx, table)
    conn.acquire_kv_snapshot_lease("old", {TableBucket("t", 0): 1}, "1h")
    path = ctx.paths.lease("old")
    value = msgpack.unpackb(ctx.store.get(path).data)
    assert "h" not in value and value["v"] == 1
    assert _states(conn) == {"old": "active"}
    assert conn.leases()[0].lease_id == "old"


def test_cli_lease_inventory(conn, clock, target, capsys):
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    seed_empty_snapshots(testing.context(conn), table)
    conn.acquire_kv_snapshot_lease("q3", {TableBucket("t", 0): 1}, "2h")
    assert cli([*target, "lease", "inventory"]) == 0
    out = capsys.readouterr().out
    header, line = out.strip().splitlines()
    assert header.split()[:4] == ["LEASE-ID", "STATE", "OWNER", "HOST"]
    assert line.split()[:2] == ["q3", "active"]
    assert "1h 59m" in line or "2h" in line  # expires in, as people read durations
    assert cli([*target, "lease", "inventory", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["lease_id"] == "q3" and row["state"] == "active" and row["tables"] == ["t"]
    assert row["pinned_buckets"] == 1 and row["pinned_bytes"] == 0
    assert row["expires_at"].endswith("Z") and isinstance(row["expires_in"], float)


def test_keepalive_holder_znode_lives_with_the_keepalive(conn):
    # M4: the holder znode is there while the keepalive runs, is put back after a renewal
    # when a new session lost it, and goes when the keepalive stops
    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    ctx = testing.context(conn)
    seed_empty_snapshots(ctx, table)

    def holders() -> list[str]:
        return ctx.store.children(ctx.paths.keepalives) or []

    with conn.lease("kept", "3s", keepalive=True) as lease:  # renewed every second
        lease.acquire({TableBucket("t", 0): 1})
        (token,) = holders()
        ctx.store.delete_tree(ctx.paths.keepalive(token))  # as a session expiry would
        assert holders() == []
        deadline = time.monotonic() + 10
        while holders() != [token]:
            assert time.monotonic() < deadline, "the keepalive never put its holder back"
            time.sleep(0.1)
        assert _states(conn) == {"kept": "active"}
    assert holders() == []
    assert conn.leases() == []  # dropped on exit


def _whole_namespace_bytes(ctx) -> dict[str, tuple[int, int]]:
    """(pinned_bytes, exclusive_bytes) per live lease from retention's planner over every
    table and bucket of the namespace: the plan with the lease held (as if valid now) against
    the plan without it, as M4 defines exclusive bytes."""
    from leasekit.retention.gather import gather
    from leasekit.retention.planner import plan

    meta = gather(ctx)._replace(files=[])  # orphan files do not depend on leases

    def deleted(m):
        return {
            (i.kind, i.table_bucket, i.item_id): i.size_bytes
            for i in plan(m).items
            if i.action == "delete" and i.kind in ("snapshot", "segment")
        }

    sizes = {
        (tm.table.table_id, b, s.snapshot_id): s.size_bytes
        for tm in meta.tables
        for b, snaps in tm.snapshots.items()
        for s in snaps
    }
    out = {}
    for lease in (x for x in meta.leases if x.state == "live"):
        others = [x for x in meta.leases if x.lease_id != lease.lease_id]
        forever = lease._replace(expires_ms=max(lease.expires_ms, meta.now_ms))
        held = deleted(meta._replace(leases=[*others, forever]))
        unpinned = [
            tm._replace(
                snapshots={
                    b: [
                        s._replace(pins=s.pins - 1)
                        if (tm.table.table_id, b, s.snapshot_id) in lease.pins
                        else s
                        for s in snaps
                    ]
                    for b, snaps in tm.snapshots.items()
                }
            )
            for tm in meta.tables
        ]
        freed = deleted(meta._replace(tables=unpinned, leases=others))
        out[lease.lease_id] = (
            sum(sizes.get(pin, 0) for pin in lease.pins),
            sum(size for item, size in freed.items() if item not in held),
        )
    return out


def test_bytes_read_from_pinned_buckets_match_the_plan_of_the_whole_namespace(conn, clock):
    # M4, R1, R3, R5, L5: the inventory reads only the buckets leases pin, and plans only those
    # where nothing else keeps the pinned snapshot; its figures equal those of retention's
    # planner over every bucket, whatever keeps a snapshot: the newest 2, another lease, a lease
    # past its grace (which keeps nothing), a pin of no lease (which keeps nothing: retention
    # reclaims it, L5), a group not read past a
    # segment (respect-consumers), or nothing but the lease itself
    ctx = testing.context(conn)
    t = conn.create_table("t", "id BIGINT", "id", buckets=6, properties={"log.retention": "1s"})
    testing.seed_history(ctx, t, 4, 4, 10, file_bytes=100)  # snapshots at 10..40, 4 segments
    slow = conn.create_table(
        "slow",
        "id BIGINT",
        "id",
        buckets=2,
        properties={"log.retention": "1s", "log.retention.respect-consumers": True},
    )
    testing.seed_history(ctx, slow, 4, 4, 10, file_bytes=100)
    with conn.consumer(group_id="behind", enable_auto_commit=False) as c:
        c.assign([TableBucket("slow", 0)])
        c.commit({TableBucket("slow", 0): 15})  # holds the segment [10, 20) of slow/0
    stray = f"{ctx.paths.snapshot(t.table_id, 4, 1)}/someone-else"
    ctx.store.commit([Create(stray, b"")])  # a pin znode of no known lease
    clock.advance(timedelta(seconds=10))
    acquire = conn.acquire_kv_snapshot_lease
    acquire("gone", {TableBucket("t", 2): 1}, "1m")
    clock.advance(timedelta(minutes=2))  # "gone" is past its expiry and its 30s grace
    acquire("newest", {TableBucket("t", 0): 4, TableBucket("t", 1): 3}, "1h")
    acquire("oldest", {TableBucket("t", 0): 1, TableBucket("t", 5): 2}, "1h")
    acquire("a", {TableBucket("t", 1): 1}, "1h")
    acquire("b", {TableBucket("t", 1): 1, TableBucket("t", 3): 2}, "1h")
    acquire("after-gone", {TableBucket("t", 2): 1}, "1h")
    acquire("stray", {TableBucket("t", 4): 1}, "1h")
    acquire("slow", {TableBucket("slow", 0): 1, TableBucket("slow", 1): 1}, "1h")
    acquire("missing", {TableBucket("t", 3): 9}, "1h")  # unavailable: pins nothing
    rows = _by_id(conn)
    got = {k: (r["pinned_bytes"], r["exclusive_bytes"]) for k, r in rows.items()}
    assert got == _whole_namespace_bytes(ctx)
    assert got["newest"] == (200, 0)  # the newest 2 of their buckets
    # t/0: snapshot 1 and the segments [10, 30) only its log start keeps; t/5: snapshot 2 and
    # the segment [20, 30)
    assert got["oldest"] == (200, 100 + 200 + 100 + 100)
    assert got["a"] == (100, 0) and got["b"] == (200, 100 + 100)  # t/1 shared, t/3 alone
    assert got["after-gone"] == (100, 300)  # "gone" keeps nothing: past its grace (R5, L11)
    assert got["gone"] == (100, 0)  # held as if valid, but after-gone keeps it too
    assert got["stray"] == (100, 300)  # L5: a pin of no lease keeps nothing (reclaimed)
    # the snapshots only: the group at 15 keeps the log of slow/0 from [10, 20) on, and of
    # slow/1, where it committed nothing, all of it
    assert got["slow"] == (200, 100 + 100)
    assert got["missing"] == (0, 0)
