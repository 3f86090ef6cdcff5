"""The lease inventory (DESIGN §6.12, M4): each lease's state (active, expiring, orphaned,
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

HERE = Path(__file__).resolve().parent


def _by_id(conn) -> dict[str, dict]:
    return {row["lease_id"]: row for row in conn.lease_inventory().to_dict("records")}


def _states(conn) -> dict[str, str]:
    return {lease_id: row["state"] for lease_id, row in _by_id(conn).items()}


def test_columns_and_records(conn):
    # M4: the columns of §6.12, one row per lease, owner and host of the last acquirer
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
        [sys.executable, str(HERE / "lease_holder.py"), zookeeper, warehouse, namespace, "t",
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
    assert row["expires_at"].endswith("Z") and isinstance(row["expires_in_ms"], int)


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
