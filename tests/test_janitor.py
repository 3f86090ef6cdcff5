"""The janitor against the real ZooKeeper: lease expiry on time (L11), one leader at a time and
takeover (R7), a janitor killed mid-pass (R7), corrupt znodes skipped (section 9)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pyarrow as pa
import pytest
from helpers import grow, wait_for, warehouse_files

import leasekit as lk
from leasekit import janitor, testing
from leasekit.zk import Create, Delete, SetData
from leasekit.zk.formats import DroppedTable

TB = lk.TableBucket
SCHEMA = "id BIGINT, v STRING"
HOUR_MS = 3_600_000


def passes(caplog, thread_name: str | None = None) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "leasekit.janitor"
        and r.getMessage().startswith("janitor pass:")
        and (thread_name is None or r.threadName == thread_name)
    ]


def snapshot_ids(table) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for s in table.snapshots():
        out.setdefault(s.table_bucket.bucket, []).append(s.snapshot_id)
    return {b: sorted(ids) for b, ids in out.items()}


@pytest.fixture(autouse=True)
def janitor_logs(caplog):
    caplog.set_level(logging.INFO, logger="leasekit.janitor")
    return caplog


@pytest.fixture
def connect(zookeeper, warehouse, namespace):
    """Opens more connections on the test's namespace; closes them at the end."""
    opened = []

    def open_one(**kwargs):
        c = lk.connect(zookeeper, warehouse, namespace=namespace, **kwargs)
        opened.append(c)
        return c

    yield open_one
    for c in opened:
        c.close()


@pytest.fixture
def start_janitor():
    """Runs ``janitor.run`` in named threads; stops and joins every one at the end."""
    started: list[tuple[threading.Event, threading.Thread]] = []

    def start(conn, interval="200ms", name=None):
        stop = threading.Event()
        thread = threading.Thread(
            target=janitor.run,
            args=(conn, interval, stop),
            name=name or f"janitor-{len(started)}",
            daemon=True,
        )
        thread.start()
        started.append((stop, thread))
        return stop, thread

    yield start
    for stop, _ in started:
        stop.set()
    for _, thread in started:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for _, thread in started)


def test_interval_is_checked_before_any_io(conn) -> None:
    for bad in ("0s", 0, -1, "soon", None):
        with pytest.raises(lk.InvalidDurationError):
            janitor.run(conn, bad)
    assert janitor.check_interval("1.5s") == timedelta(seconds=1.5)
    stop = threading.Event()
    stop.set()
    janitor.run(conn, "1s", stop)  # already stopped: returns at once


def test_expired_lease_reclaimed_within_one_interval_real_clock(
    conn, start_janitor, caplog
) -> None:
    # L11 on the ZooKeeper clock: never before expires_at + grace, within one interval after;
    # eagerly: the snapshot only the lease kept goes in the same pass (R5), no new snapshot needed.
    ctx = testing.context(conn)
    conn.update_settings({"lease.expiry-grace": "1s"})
    table = conn.create_table(
        "t", SCHEMA, "id", buckets=1, properties={"kv.snapshot.num-retained": 1}
    )
    grow(table, 2)
    expires_ms = int(
        conn.lease("short", "1s").acquire({TB("t", 0): 1}).expires_at.timestamp() * 1000
    )
    deadline, interval_ms, slack_ms = expires_ms + 1000, 300, 500
    path = ctx.paths.lease("short")
    start_janitor(conn, "300ms")
    observations = 0
    while True:
        t0 = ctx.server_time_ms()
        present = ctx.store.exists(path) is not None
        t1 = ctx.server_time_ms()
        observations += 1
        if present:
            assert t0 <= deadline + interval_ms + slack_ms, "not reclaimed within one interval"
        else:
            break
        time.sleep(0.02)
    assert t1 >= deadline and observations > 20  # every earlier look saw it: never before
    wait_for(lambda: snapshot_ids(table) == {0: [2]}, 2, "the unpinned snapshot to go")
    # the pass logs its summary after its last deletion: wait for it, not only for the files
    wait_for(
        lambda: any(
            r.getMessage().startswith("janitor pass: deleted 2 items") for r in passes(caplog)
        ),
        2,
        "the pass's summary",
    )
    assert ctx.store.children(ctx.paths.snapshot(table.table_id, 0, 2)) == []  # no pin left


def test_expiry_follows_the_injected_clock(conn, clock, start_janitor, caplog) -> None:
    # L11 with connect(clock=...): the janitor on the same connection sees the shifted time.
    ctx = testing.context(conn)
    table = conn.create_table("t", SCHEMA, "id", buckets=2)
    grow(table, 1)
    conn.lease("q3", "1h").acquire_latest("t")
    start_janitor(conn, "100ms")
    wait_for(lambda: len(passes(caplog)) >= 2, 5, "two passes")
    clock.advance(timedelta(milliseconds=HOUR_MS + 29_000))  # expired, still within the 30s grace
    seen = len(passes(caplog))
    wait_for(lambda: len(passes(caplog)) >= seen + 3, 5, "three more passes")
    assert [i.lease_id for i in conn.leases()] == ["q3"]
    clock.advance(2)  # an hour and 31 s ahead: past the grace
    seen = len(passes(caplog))
    wait_for(lambda: ctx.store.exists(ctx.paths.lease("q3")) is None, 5, "the lease to go")
    assert len(passes(caplog)) <= seen + 2  # the pass under way, at most one more
    assert conn.leases() == []


def test_one_janitor_acts_at_a_time_and_a_standby_takes_over(
    connect, start_janitor, caplog
) -> None:
    # R7: leader election; when the leader's session ends, the standby leads.
    first, second = connect(), connect()
    start_janitor(first, "100ms", name="janitor-a")
    wait_for(lambda: passes(caplog, "janitor-a"), 5, "the first janitor to lead")
    start_janitor(second, "100ms", name="janitor-b")
    election = testing.context(first).store.election(
        f"{testing.context(first).paths.janitor}/election", "probe"
    )
    wait_for(lambda: len(election.contenders()) == 2, 5, "two contenders")
    time.sleep(1.0)
    assert len(passes(caplog, "janitor-a")) >= 5
    assert passes(caplog, "janitor-b") == []

    first.close()  # ends the leader's session: its election znode goes with it
    wait_for(lambda: passes(caplog, "janitor-b"), 5, "the standby to take over")
    wait_for(
        lambda: not any(t.name == "janitor-a" for t in threading.enumerate()),
        5,
        "the old leader's thread to end",
    )
    done_a = len(passes(caplog, "janitor-a"))
    time.sleep(0.5)
    assert len(passes(caplog, "janitor-a")) == done_a  # the old leader does no more passes
    assert len(passes(caplog, "janitor-b")) >= 3
    assert testing.context(second).store.election(
        f"{testing.context(second).paths.janitor}/election", "probe"
    ).contenders() == [testing.context(second).owner]


def test_stop_returns_promptly_for_standby_and_leader(connect, start_janitor, caplog) -> None:
    # R7: a standby waiting in the election leaves at once; the leader ends after its pass.
    leader, standby = connect(), connect()
    stop_a, thread_a = start_janitor(leader, "1h", name="janitor-a")
    wait_for(lambda: passes(caplog, "janitor-a"), 5, "the first janitor to lead")
    stop_b, thread_b = start_janitor(standby, "1h", name="janitor-b")
    election = testing.context(leader).store.election(
        f"{testing.context(leader).paths.janitor}/election", "probe"
    )
    wait_for(lambda: len(election.contenders()) == 2, 5, "two contenders")
    for stop, thread in ((stop_b, thread_b), (stop_a, thread_a)):
        started = time.monotonic()
        stop.set()
        thread.join(timeout=5)
        assert not thread.is_alive() and time.monotonic() - started < 1.0
    assert election.contenders() == []
    assert passes(caplog, "janitor-b") == []
    assert len(passes(caplog, "janitor-a")) == 1  # interval 1h: one pass, then the stop


def test_corrupt_lease_is_logged_and_skipped(conn, clock, start_janitor, caplog) -> None:
    # Section 9: garbage in a lease znode is CorruptMetadataError naming the path; the janitor
    # skips it, keeps what it pins and still reclaims the other expired lease.
    ctx = testing.context(conn)
    table = conn.create_table(
        "t", SCHEMA, "id", buckets=1, properties={"kv.snapshot.num-retained": 1}
    )
    grow(table, 3)
    conn.lease("good", "1h").acquire({TB("t", 0): 1})
    conn.lease("bad", "1h").acquire({TB("t", 0): 2})
    bad = ctx.paths.lease("bad")
    ctx.store.commit([SetData(bad, b"\xc1garbage")])
    with pytest.raises(lk.CorruptMetadataError) as info:
        conn.lease("bad").info()
    assert info.value.path == bad
    clock.advance(timedelta(milliseconds=2 * HOUR_MS))
    start_janitor(conn, "100ms")
    wait_for(lambda: ctx.store.exists(ctx.paths.lease("good")) is None, 5, "the good lease to go")
    wait_for(lambda: len(passes(caplog)) >= 2, 5, "a second pass")
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "leasekit.janitor" and r.levelno == logging.WARNING
    ]
    assert any(bad in w and "decode" in w for w in warnings)
    assert ctx.store.get(bad).data == b"\xc1garbage"  # left untouched
    assert snapshot_ids(table) == {
        0: [2, 3]
    }  # 1 went with "good"; 2 is held by the unreadable lease
    reason = next(
        i.reason for i in conn.retention_plan().items if i.kind == "snapshot" and i.item_id == 2
    )
    assert reason == "pinned by 1 pin(s) of no known lease"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_pass_finishes_a_half_done_table_drop(conn, caplog) -> None:
    # A dropper that died after its first step (table znode gone, drop marker written).
    ctx = testing.context(conn)
    table = conn.create_table("t", SCHEMA, "id", buckets=2)
    grow(table, 2)
    assert warehouse_files(conn)
    node = ctx.store.get(ctx.paths.table("t"))
    marker = DroppedTable("t", table.data_dir).encode()
    ctx.store.commit(
        [
            Delete(ctx.paths.table("t"), node.stat.version),
            Create(ctx.paths.dropped_table(table.table_id), marker),
        ]
    )
    report = janitor.run_once(conn)
    assert report.errors == [] and not report.dry_run
    assert ctx.store.children(ctx.paths.dropped) == []
    assert ctx.store.exists(ctx.paths.table_data(table.table_id)) is None
    assert warehouse_files(conn) == set()
    assert len(passes(caplog)) == 1


def test_a_pass_whose_election_znode_is_gone_deletes_nothing(conn) -> None:
    # fencing (docs/security.md): the leader's election znode goes (as
    # with its session); the pass it runs next writes nothing and
    # deletes no file: not a half-done drop, snapshot, segment or orphan
    ctx = testing.context(conn)
    conn.update_settings({"orphan.min-age": "0s"})
    dropped = conn.create_table("t", SCHEMA, "id", buckets=2)
    grow(dropped, 2)
    node = ctx.store.get(ctx.paths.table("t"))
    ctx.store.commit(
        [
            Delete(ctx.paths.table("t"), node.stat.version),
            Create(
                ctx.paths.dropped_table(dropped.table_id),
                DroppedTable("t", dropped.data_dir).encode(),
            ),
        ]
    )
    table = conn.create_table(
        "u",
        SCHEMA,
        "id",
        buckets=2,
        properties={"kv.snapshot.num-retained": 1, "log.retention": "0s"},
    )
    grow(table, 3)
    ctx.warehouse.write_parquet(f"{table.data_dir}/stray/part-0.parquet", pa.table({"id": [1]}))
    assert len(conn.retention_plan().deletes) > 5
    files, tree = warehouse_files(conn), ctx.store.descendants(ctx.paths.root)
    election = ctx.store.election(f"{ctx.paths.janitor}/election", "test")

    def lead() -> None:
        fence = election.leader_path()
        assert fence is not None
        ctx.store.commit([Delete(fence)])
        with ctx.store.fenced(fence), pytest.raises(lk.LeadershipLostError):
            janitor.run_once(conn)

    election.run(lead)
    assert warehouse_files(conn) == files
    assert [p for p in ctx.store.descendants(ctx.paths.root) if "/janitor" not in p] == tree
    assert janitor.run_once(conn).deleted  # unfenced (a user's pass), the same pass deletes


KILLABLE = """
import sys
import leasekit as lk
from leasekit import janitor
conn = lk.connect(sys.argv[1], sys.argv[2], namespace=sys.argv[3], timeout="2s")
janitor.run(conn, "1h")
"""


def test_janitor_killed_mid_pass_next_one_finishes(
    conn, zookeeper, warehouse, namespace, start_janitor, caplog
) -> None:
    # R7: kill -9 during a pass with much to delete; a new janitor takes over once the dead
    # one's session ends and leaves exactly what a clean run leaves.
    ctx = testing.context(conn)
    conn.update_settings({"orphan.min-age": "0s", "lease.expiry-grace": "0s"})
    table = conn.create_table(
        "big",
        SCHEMA,
        "id",
        buckets=32,
        # compaction off: the test compares the segments retention keeps, base by base
        properties={
            "kv.snapshot.num-retained": 1,
            "log.retention": "0s",
            "log.segment.min-merge": 1_000_000,
        },
    )
    grow(table, 16)
    for i, sid in enumerate((2, 3, 4)):
        conn.lease(f"gone-{i}", "300ms").acquire({TB("big", b): sid for b in range(32)})
    conn.lease("keeper", "1h").acquire({TB("big", b): 5 for b in range(4)})
    time.sleep(0.4)
    plan = conn.retention_plan()
    keep = {(i.kind, i.table_bucket, i.item_id) for i in plan.items if i.action == "keep"}
    kept_snaps = {tb.bucket: [] for tb in table.buckets}
    for kind, tb, item in sorted(keep, key=str):
        if kind == "snapshot":
            kept_snaps[tb.bucket].append(item)
    before = sum(len(v) for v in snapshot_ids(table).values())
    assert len(plan.deletes) > 500

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, zookeeper, warehouse, namespace], env=env
    )
    try:
        snap_dirs = [ctx.paths.snapshots(table.table_id, b) for b in range(32)]

        def count() -> int:
            return sum(len(k or []) for k in ctx.store.children_many(snap_dirs))

        wait_for(
            lambda: proc.poll() is not None or count() < before - 40,
            30,
            "the pass to start",
            step=0,
        )
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    left = count()
    assert left > sum(len(v) for v in kept_snaps.values()), "killed too late: the pass had finished"

    started = time.monotonic()
    start_janitor(conn, "300ms", name="janitor-new")
    wait_for(lambda: passes(caplog, "janitor-new"), 20, "the new janitor to take over")
    assert time.monotonic() - started > 1.0  # it waited for the dead leader's session to end
    wait_for(lambda: not conn.retention_plan().deletes, 10, "nothing left to delete", step=0.2)

    assert snapshot_ids(table) == {b: sorted(ids) for b, ids in kept_snaps.items()}
    segments = {(tb.bucket, base) for kind, tb, base in keep if kind == "segment"}
    from leasekit.log.segments import list_segments

    stored = {
        (b, s.base_offset) for b, segs in list_segments(table, range(32)).items() for s in segs
    }
    assert stored == segments
    snaps = {(s.table_bucket.bucket, s.snapshot_id): s for s in table.snapshots()}
    begin = table.beginning_offsets()
    for b in range(32):
        oldest = min(kept_snaps[b])
        assert begin[TB("big", b)] == snaps[(b, oldest)].log_offset > 0
    assert [i.lease_id for i in conn.leases()] == ["keeper"]
    assert ctx.store.children(ctx.paths.leases) == ["keeper"]
    pins = ctx.store.children_many([ctx.paths.snapshot(table.table_id, b, s) for b, s in snaps])
    assert sorted(p for kids in pins for p in kids) == ["keeper"] * 4
    referenced = {os.path.relpath(f, warehouse) for s in table.snapshots() for f in s.files}
    referenced |= {
        os.path.relpath(s.file, warehouse)
        for segs in list_segments(table, range(32)).values()
        for s in segs
    }
    assert warehouse_files(conn) == referenced  # no orphan left, nothing referenced missing
