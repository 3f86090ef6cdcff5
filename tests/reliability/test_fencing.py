"""Fencing (docs/security.md): an expired lease is removed only if it is the instance the plan saw,
and a janitor that lost the election (paused past its session) deletes nothing."""

from __future__ import annotations

import logging
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
from helpers import grow, wait_for, warehouse_files

import leasekit as lk
from leasekit import janitor, testing
from leasekit.log.segments import list_segments
from leasekit.retention import apply

TB = lk.TableBucket
SCHEMA = "id BIGINT, v STRING"


def _expired_nightly(conn) -> lk.Table:
    """A table with three snapshots per bucket (only the newest retained, the log expired at
    once) and the lease ``nightly`` on bucket 0's first snapshot, expired, no grace."""
    conn.update_settings({"orphan.min-age": "0s", "lease.expiry-grace": "0s"})
    table = conn.create_table(
        "t",
        SCHEMA,
        "id",
        buckets=2,
        properties={"kv.snapshot.num-retained": 1, "log.retention": "0s"},
    )
    grow(table, 3)
    conn.lease("nightly", "300ms", drop_on_exit=False).acquire({TB("t", 0): 1})
    time.sleep(0.5)
    return table


def _reacquire_nightly(conn) -> None:
    """The user's flow after LeaseExpiredError (L8): drop the lease, acquire it again."""
    assert conn.drop_kv_snapshot_lease("nightly")
    conn.lease("nightly", "1h", drop_on_exit=False).acquire({TB("t", 0): 1})


def _state(conn, table) -> tuple:
    ctx = testing.context(conn)
    snaps = sorted((s.table_bucket.bucket, s.snapshot_id) for s in table.snapshots())
    segs = sorted(
        (b, s.base_offset) for b, ss in list_segments(table, range(2)).items() for s in ss
    )
    pins = ctx.store.children(ctx.paths.snapshot(table.table_id, 0, 1))
    return snaps, segs, pins, sorted(warehouse_files(conn))


def test_lease_dropped_and_reacquired_between_plan_and_apply_survives(conn, monkeypatch):
    # fencing, R2, L8: the plan saw the expired ``nightly``; before the pass applies it the
    # user drops it and acquires ``nightly`` again (same id, same record version): the new
    # lease survives the pass, with its pin and its snapshot's files.
    ctx = testing.context(conn)
    table = _expired_nightly(conn)
    real = apply.plan
    planned = []

    def plan_then_reacquire(meta):
        result = real(meta)
        planned.append({(i.kind, i.item_id) for i in result.deletes})
        _reacquire_nightly(conn)
        return result

    monkeypatch.setattr(apply, "plan", plan_then_reacquire)
    pinned = table.snapshots(0)[0]
    assert pinned.snapshot_id == 1
    report = conn.run_retention()
    assert ("lease", "nightly") in planned[0] and ("snapshot", 1) in planned[0]
    assert "nightly" not in {i.item_id for i in report.deleted if i.kind == "lease"}
    infos = {i.lease_id: i for i in conn.leases()}
    assert "nightly" in infos and infos["nightly"].pins == {TB("t", 0): 1}
    assert infos["nightly"].duration.total_seconds() == 3600
    assert 1 in [s.snapshot_id for s in table.snapshots(0)]
    assert ctx.store.children(ctx.paths.snapshot(table.table_id, 0, 1)) == ["nightly"]
    assert all(os.path.exists(f) for f in pinned.files)  # R2
    # the next pass, with a fresh plan, keeps it too
    monkeypatch.setattr(apply, "plan", real)
    conn.run_retention()
    assert "nightly" in {i.lease_id for i in conn.leases()}


def test_lease_replaced_during_its_own_removal_survives(conn, monkeypatch):
    # fencing (docs/security.md): the same as above in the narrowest window, inside the removal
    # itself: after it read the lease (the instance the plan saw) and before its transaction commits

    from leasekit.leases import upkeep

    table = _expired_nightly(conn)
    real = upkeep.read_pin_chunks
    replaced = []

    def read_then_replace(ctx, lease_id):
        chunks = real(ctx, lease_id)
        if lease_id == "nightly" and not replaced:
            replaced.append(True)
            _reacquire_nightly(conn)
        return chunks

    monkeypatch.setattr(upkeep, "read_pin_chunks", read_then_replace)
    pinned = table.snapshots(0)[0]
    report = conn.run_retention()
    assert replaced and "nightly" not in {i.item_id for i in report.deleted if i.kind == "lease"}
    assert {i.lease_id: i.pins for i in conn.leases()} == {"nightly": {TB("t", 0): 1}}
    assert testing.context(conn).store.children(
        testing.context(conn).paths.snapshot(table.table_id, 0, 1)
    ) == ["nightly"]
    assert all(os.path.exists(f) for f in pinned.files)  # R2


STALE_JANITOR = r"""
import logging, os, signal, sys, time
import leasekit as lk
from leasekit import janitor
from leasekit.retention import apply
from leasekit import testing

logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
zookeeper, warehouse, namespace = sys.argv[1:4]
conn = lk.connect(zookeeper, warehouse, namespace=namespace, timeout="2s")
store = testing.context(conn).store
real = apply.plan
calls = []

def plan_then_pause(meta):
    result = real(meta)
    if not calls:
        calls.append(1)
        session = store.client.client_id
        print("planned", len(result.deletes), flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        # resumed past its session: wait until the client runs on a new session, so that
        # nothing but a fence stops this stale plan's writes
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
                not store.connected or store.client.client_id == session):
            time.sleep(0.05)
        print("applying on a new session", store.client.client_id != session, flush=True)
    return result

apply.plan = plan_then_pause
janitor.run(conn, "500ms")
"""


def _line(proc: subprocess.Popen, timeout: float) -> str:
    """The next line the process prints, or "" after ``timeout`` seconds or at its end."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_janitor_paused_past_its_session_deletes_nothing(
    conn, zookeeper, warehouse, namespace, caplog, tmp_path: Path
) -> None:
    # fencing, R7: a real janitor process plans, is stopped (SIGSTOP) past its session while
    # another janitor is elected and runs passes, and is resumed (SIGCONT) with its stale
    # plan. Meanwhile the lease was dropped and acquired again, log segments became needed by
    # the snapshot it pins, and orphan.min-age was raised: the stale janitor deletes nothing.
    caplog.set_level(logging.INFO, logger="leasekit.janitor")
    table = _expired_nightly(conn)
    stray = f"{table.data_dir}/stray/part-0.parquet"
    testing.context(conn).warehouse.write_parquet(stray, pa.table({"id": [1]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    err_path = tmp_path / "stale.err"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", STALE_JANITOR, zookeeper, warehouse, namespace],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    stop = threading.Event()
    other = threading.Thread(
        target=janitor.run, args=(conn, "300ms", stop), name="janitor-new", daemon=True
    )
    try:
        line = _line(proc, 60)
        assert line.startswith("planned"), line + err_path.read_text()
        assert int(line.split()[1]) > 5
        wait_for(lambda: _stopped(proc.pid), 10, "the stale janitor to stop itself")

        _reacquire_nightly(conn)
        conn.update_settings({"orphan.min-age": "1h"})
        other.start()

        def passes() -> int:
            return len(
                [
                    r
                    for r in caplog.records
                    if r.threadName == "janitor-new" and r.getMessage().startswith("janitor pass:")
                ]
            )

        wait_for(lambda: passes() >= 2, 30, "the other janitor to be elected and run passes")
        wait_for(lambda: not conn.retention_plan().deletes, 10, "the other janitor's work done")
        before = _state(conn, table)
        assert before[2] == ["nightly"]
        assert stray.rsplit("/", 1)[0] in "\n".join(before[3])
        # what the other janitor left is what the current metadata needs: segments from
        # snapshot 1's log offset on in bucket 0 stay
        assert any(b == 0 for b, _ in before[1])

        proc.send_signal(signal.SIGCONT)
        line = _line(proc, 60)
        assert line.startswith("applying on a new session True"), line + err_path.read_text()
        wait_for(
            lambda: re.search(r"janitor pass|lost the election", err_path.read_text()),
            30,
            "the stale janitor to finish its pass",
        )
        time.sleep(1.0)
        assert _state(conn, table) == before, err_path.read_text()
        assert "nightly" in {i.lease_id for i in conn.leases()}
        assert all(os.path.exists(f) for f in table.snapshots(0)[0].files)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
        proc.wait(timeout=10)
        stop.set()
        if other.is_alive():
            other.join(timeout=10)
