"""A writer killed with SIGKILL between writing its files and committing them (docs/security.md):
no offset gap (W1, W2), and its orphan files go once older than orphan.min-age (R4)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import read_log, warehouse_files

import leasekit as lk
from leasekit import testing
from leasekit.log.segments import list_segments

CHILD = textwrap.dedent("""
    import json, os, sys, time
    import leasekit as lk
    import leasekit.log.append as log

    zookeeper, warehouse, namespace, signal_file = sys.argv[1:5]

    def stall(table, files, token, **_):
        # the files are complete; tell the parent which, then wait to be killed
        tmp = signal_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump([seg.rel for seg in files], f)
        os.replace(tmp, signal_file)
        time.sleep(600)

    log.commit_segments = stall
    with lk.connect(zookeeper, warehouse, namespace=namespace) as conn:
        conn.table("events").append([{"id": i, "v": "lost"} for i in range(1000, 1060)])
    sys.exit(3)  # never reached: the parent kills us first
""")


def _kill_writer_before_commit(zookeeper, warehouse, namespace, tmp_path) -> list[str]:
    """Run a writer that stops between file write and commit, SIGKILL it; its files."""
    signal_file = tmp_path / "written.json"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, zookeeper, warehouse, namespace, str(signal_file)]
    )
    try:
        deadline = time.monotonic() + 120
        while not signal_file.exists():
            assert child.poll() is None, f"writer exited early with {child.returncode}"
            assert time.monotonic() < deadline, "writer never reached its commit"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return json.loads(signal_file.read_text())


@pytest.fixture
def events(conn):
    table = conn.create_table("events", "id BIGINT, v STRING", "id", buckets=4)
    table.append([{"id": i, "v": "first"} for i in range(40)])
    return table


def test_killed_writer_leaves_no_offset_gap(
    conn, events, zookeeper, warehouse, namespace, tmp_path
):
    # W1, W2: a writer killed between file write and commit changes no offset
    before_ends = events.end_offsets()
    before_begins = events.beginning_offsets()
    before_files = warehouse_files(conn)

    written = _kill_writer_before_commit(zookeeper, warehouse, namespace, tmp_path)

    assert len(written) == 4  # 60 keys over 4 buckets: one complete file per bucket
    assert set(written) == warehouse_files(conn) - before_files
    assert events.end_offsets() == before_ends
    assert events.beginning_offsets() == before_begins
    referenced = {s.file for segs in list_segments(events, range(4)).values() for s in segs}
    assert not {testing.context(conn).warehouse.uri(f) for f in written} & referenced
    assert all(r["v"] == "first" for rows in read_log(events).values() for r in rows)

    # the next append continues densely where the committed log ended
    ranges = events.append([{"id": i, "v": "next"} for i in range(2000, 2060)])
    assert {tb: r.start for tb, r in ranges.items()} == {tb: before_ends[tb] for tb in ranges}
    after_ends = events.end_offsets()
    assert sum(after_ends.values()) == sum(before_ends.values()) + 60
    for bucket, rows in read_log(events).items():
        assert [r["_offset"] for r in rows] == list(
            range(after_ends[lk.TableBucket("events", bucket)])
        )
        assert "lost" not in {r["v"] for r in rows}


def test_killed_writers_orphans_are_removed_after_min_age(
    conn, events, zookeeper, warehouse, namespace, tmp_path
):
    # W2, R4: the dead writer's files are orphans; retention keeps them while younger than
    # orphan.min-age (they may be a write in progress) and deletes them after
    written = _kill_writer_before_commit(zookeeper, warehouse, namespace, tmp_path)
    orphans = {testing.context(conn).warehouse.uri(f) for f in written}
    committed = warehouse_files(conn) - set(written)
    assert all(os.path.exists(uri) for uri in orphans)

    plan = conn.retention_plan()  # default orphan.min-age 1h
    kept = {i.item_id: i for i in plan.items if i.kind == "orphan"}
    assert set(kept) == orphans
    # kept: the dead writer's marker lives until its session times out, then min-age applies
    assert all(
        i.action == "keep" and ("orphan.min-age" in i.reason or "still in progress" in i.reason)
        for i in kept.values()
    )
    assert not conn.run_retention().deleted
    assert all(os.path.exists(uri) for uri in orphans)

    conn.update_settings({"orphan.min-age": "1s"})
    deadline = time.monotonic() + 30
    while True:  # orphan age is ZooKeeper time minus the file's mtime
        plan = conn.retention_plan()
        doomed = {i.item_id for i in plan.items if i.kind == "orphan" and i.action == "delete"}
        if doomed == orphans:
            break
        assert time.monotonic() < deadline, f"orphans never became old enough: {plan.to_pandas()}"
        time.sleep(0.25)
    assert {i.table_bucket for i in plan.items if i.kind == "orphan"} == set(events.buckets)

    report = conn.run_retention()
    assert {i.item_id for i in report.deleted if i.kind == "orphan"} == orphans
    assert not report.errors
    assert not any(os.path.exists(uri) for uri in orphans)
    assert warehouse_files(conn) == committed  # every committed file is still there
    assert sum(len(rows) for rows in read_log(events).values()) == 40
    assert not [i for i in conn.retention_plan().items if i.kind == "orphan"]


def test_writer_stalled_past_orphan_min_age_keeps_its_files(conn, events, monkeypatch):
    # W2, R4, section 2 ("a reader that sees metadata always finds every file it names"): a
    # writer whose commit comes later than orphan.min-age after its file write keeps its files
    # (its in-flight marker protects them) and commits files that all exist
    import leasekit.log.append as log

    conn.update_settings({"orphan.min-age": "1s"})
    commit = log.commit_segments
    plans = []

    def stalled_commit(table, files, token, **kwargs):
        time.sleep(1.5)  # the files are now older than orphan.min-age and unreferenced
        plans.append(conn.retention_plan())
        conn.run_retention()
        return commit(table, files, token, **kwargs)

    monkeypatch.setattr(log, "commit_segments", stalled_commit)
    ranges = events.append([{"id": i, "v": "late"} for i in range(500, 510)])
    monkeypatch.setattr(log, "commit_segments", commit)
    kept = [i for i in plans[0].items if i.kind == "orphan"]
    assert kept and all(i.action == "keep" and "still in progress" in i.reason for i in kept)
    segments = list_segments(events, range(4))
    assert ranges
    for tb, r in ranges.items():
        (segment,) = [s for s in segments[tb.bucket] if s.base_offset == r.start]
        assert os.path.exists(segment.file), f"acknowledged append {tb} {r} names a deleted file"


def test_writer_whose_marker_is_gone_cannot_commit(conn, events, monkeypatch):
    # W2, R4: once a writer's marker is gone (its ZooKeeper session ended), its files may be
    # swept as orphans, so its commit must be refused and nothing acknowledged
    ctx = testing.context(conn)
    import leasekit.log.append as log
    from leasekit.zk import Delete

    conn.update_settings({"orphan.min-age": "1s"})
    ends = events.end_offsets()
    commit = log.commit_segments
    swept = []

    def session_lost(table, files, token, **kwargs):
        ctx.store.commit([Delete(ctx.paths.write(token))])  # as if the session had expired
        time.sleep(1.2)
        swept.extend(i.item_id for i in conn.run_retention().deleted if i.kind == "orphan")
        return commit(table, files, token, **kwargs)

    monkeypatch.setattr(log, "commit_segments", session_lost)
    with pytest.raises(lk.SessionLostError, match="lost its ZooKeeper session"):
        events.append([{"id": i, "v": "late"} for i in range(600, 610)])
    monkeypatch.setattr(log, "commit_segments", commit)
    assert swept, "with the marker gone, the files are orphans"
    assert events.end_offsets() == ends
