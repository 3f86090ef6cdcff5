"""Log compaction (R8) against readers and faults (docs/security.md): a consumer in the middle
of its reads while the files it listed go, retention taking a run's files while it is merged, a
janitor paused in the middle of a merge past its session, ZooKeeper killed between a merged
file's write and its commit. What users see stays whole: every bucket's segments contiguous
with their files, every record read once, in offset order, as it was appended (W1, W3)."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import pytest
from helpers import wait_for, warehouse_files
from stress_checks import Rec, check_log, log_problems, read_all, records
from test_compaction_races import SCHEMA, TB, Appenders, Loops, connections, record_originals

import leasekit as lk
from leasekit import janitor, testing
from leasekit.log import compaction
from leasekit.log.reader import SegmentGone, SegmentReader
from leasekit.log.segments import delete_segments, list_segments
from leasekit.log.state import read_states


def count_reads(monkeypatch) -> Counter[str]:
    """The segment reads of consumers in this process: "gone" the reads of a file deleted under
    them (its segment merged, then its file taken by retention), "merged" those of merged files."""
    seen: Counter[str] = Counter()
    real = SegmentReader.read

    def read(self, segment, start, max_records):
        try:
            data = real(self, segment, start, max_records)
        except SegmentGone:
            seen["gone"] += 1
            raise
        seen["merged" if segment.first_timestamp_ms is not None else "appended"] += 1
        return data

    monkeypatch.setattr(SegmentReader, "read", read)
    return seen


def test_consumer_mid_poll_while_merges_and_retention_run(conn, monkeypatch, tmp_path):
    # R8, C1, W1: a consumer polls a few records at a time from the beginning while two
    # processes append and this one merges segments and runs retention (orphan.min-age 0s) in
    # loops, so the files of segments it listed go under it. Guard: a consumer that meets a
    # deleted file lists the bucket's segments again and reads on in the merged one (without
    # it, it keeps asking the file that is gone and never gets further).
    conn.update_settings({"orphan.min-age": "0s"})
    table = conn.create_table("t", SCHEMA, "id", buckets=2, properties={"log.segment.min-merge": 2})
    originals = record_originals(monkeypatch)
    reads = count_reads(monkeypatch)
    counts: Counter[str] = Counter()

    def merge() -> None:
        done = opened[0].table("t").compact_log()
        counts.update(merged=done.written, lost=done.lost)

    def retain() -> None:
        report = opened[1].run_retention()
        counts.update(i.kind for i in report.deleted)
        assert not report.errors, report.errors

    got: dict[int, list[Rec]] = {0: [], 1: []}

    def poll(n: int) -> None:
        for tb, data in consumer.poll("50ms", max_records=n).items():
            got[tb.bucket] += records(data)

    with contextlib.ExitStack() as stack:
        opened = connections(stack, conn, 2)
        appenders = stack.enter_context(Appenders(conn, "t", 2, tmp_path))
        loops = stack.enter_context(Loops())
        consumer = stack.enter_context(
            contextlib.closing(conn.consumer("t", auto_offset_reset="earliest"))
        )
        appenders.wait_running()
        loops.start("merge", merge)
        loops.start("retain", retain)
        started = time.monotonic()
        while time.monotonic() - started < 6 or (
            reads["gone"] < 3 and time.monotonic() - started < 40
        ):
            poll(3)
            time.sleep(0.03)  # slower than the appends: the files it listed ahead get merged
            assert not loops.halt.is_set(), "\n".join(loops.failures[:3])
        loops.stop()
        appends = appenders.stop()
        ends = table.end_offsets()
        deadline = time.monotonic() + 60
        while any(len(got[tb.bucket]) < end for tb, end in ends.items()):
            assert time.monotonic() < deadline, f"read {[len(r) for r in got.values()]} of {ends}"
            poll(50)
    problems = check_log(conn, "t", appends, originals, got)
    assert not problems, "\n".join(problems[:10])
    assert reads["gone"] >= 3 and reads["merged"] and counts["orphan"], (reads, counts)


def test_merge_gives_way_to_retention_taking_its_files(conn, monkeypatch):
    # R8, R3: retention deletes the first segments of a run after the merge listed them and
    # before it reads their files. Guard: a merge that finds a file of its run gone gives the
    # run up (lost) and deletes its own file, and compaction goes on (without it, compact_log
    # fails with an I/O error and leaves the merged file behind); the log reads as retention
    # left it.
    table = conn.create_table("t", SCHEMA, "id", buckets=1)
    for i in range(6):
        table.append([{"id": i, "v": f"v{i}"}])
    real = compaction.list_segments

    def listed_then_retained(t, buckets):
        out = real(t, buckets)
        delete_segments(t, 0, [s.base_offset for s in out[0][:2]])  # as retention does
        return out

    monkeypatch.setattr(compaction, "list_segments", listed_then_retained)
    done = table.compact_log()
    assert (done.written, done.lost) == (0, 1)
    monkeypatch.undo()
    assert table.beginning_offsets() == {TB("t", 0): 2}
    assert not log_problems(table)
    assert [(r[0], r[3]) for r in read_all(conn, "t")[0]] == [(i, i) for i in range(2, 6)]
    listed = {s.file for s in list_segments(table, [0])[0]}
    assert {os.path.join(conn.warehouse, f) for f in warehouse_files(conn)} == listed  # R4


def acknowledge(table, rows: list[dict]) -> dict:
    """Append ``rows``; what was acknowledged, as ``check_log`` takes it."""
    clock = table.context.server_clock
    before = clock.fresh_ms()
    ranges = table.append(rows)
    after = clock.fresh_ms()
    return {
        "rows": [["upsert", r["id"], r["v"]] for r in rows],
        "ranges": {str(tb.bucket): [r.start, r.end] for tb, r in ranges.items()},
        "t0": before,
        "t1": after,
    }


def files_named(conn, *names: str) -> set[str]:
    """The files the logs of tables ``names`` list, warehouse-relative."""
    out = set()
    for name in names:
        table = conn.table(name).refresh()
        for segs in list_segments(table, range(table.layout.count)).values():
            out |= {os.path.relpath(s.file, conn.warehouse) for s in segs}
    return out


STALE_JANITOR = textwrap.dedent("""
    import logging, os, signal, sys, time
    import leasekit as lk
    from leasekit import janitor, testing
    from leasekit.log import compaction

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    conn = lk.connect(*sys.argv[1:3], namespace=sys.argv[3], timeout="2s")
    store = testing.context(conn).store
    real, files = compaction._swap, []

    def swap(table, bucket, run, record, token):
        files.append(record.file)
        if len(files) == 2:  # a first merged segment is in; this one's file is written
            session = store.client.client_id
            print("paused", record.file, flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            deadline = time.monotonic() + 30  # past its session: wait for a new one
            while time.monotonic() < deadline and (
                    not store.connected or store.client.client_id == session):
                time.sleep(0.05)
            print("resumed on a new session", store.client.client_id != session, flush=True)
        real(table, bucket, run, record, token)
        print("committed", record.file, flush=True)

    compaction._swap = swap
    janitor.run(conn, "1h")
""")


def _line(proc: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def passes(caplog, thread: str) -> int:
    return sum(
        r.threadName == thread and r.getMessage().startswith("janitor pass:")
        for r in caplog.records
    )


def _view(conn) -> tuple:
    """The logs of tables a and b as their metadata holds them, and the warehouse's files."""
    ctx = testing.context(conn)
    logs = {}
    for name in ("a", "b"):
        table = conn.table(name).refresh()
        buckets = range(table.layout.count)
        logs[name] = (
            list_segments(table, buckets),
            read_states(table, buckets),
            ctx.store.children_many([ctx.paths.retired(table.table_id, b) for b in buckets]),
        )
    return logs, warehouse_files(conn)


def test_janitor_paused_mid_merge_commits_nothing(conn, caplog, tmp_path):
    # R8, R7, fencing: a janitor process stops itself (SIGSTOP) after its first merge, with its
    # second merged file written, past its 2 s session; a janitor of this process is elected and
    # merges everything; table b gets segments to merge; the first is resumed. Guard: the fence
    # (each transaction of a janitor's pass checks its election znode): it commits nothing,
    # deletes its merged file, and the pass ends (without it, it lets that merge go on a lost
    # marker and merges table b's segments beside the janitor that leads).
    caplog.set_level(logging.INFO, logger="leasekit.janitor")
    a = conn.create_table("a", SCHEMA, "id", buckets=16)
    b = conn.create_table("b", SCHEMA, "id", buckets=1)
    acked = [acknowledge(a, [{"id": k, "v": f"r{r}"} for k in range(80)]) for r in range(5)]
    argv = [sys.executable, "-c", STALE_JANITOR, conn.zookeeper, conn.warehouse, conn.namespace]
    err = tmp_path / "stale.err"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(err, "w") as errors:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
    stop = threading.Event()
    other = threading.Thread(target=janitor.run, args=(conn, "1h", stop), name="janitor-new")
    try:
        line = _line(proc, 60)
        while line.startswith("committed"):  # its first merge
            line = _line(proc, 60)
        assert line.startswith("paused"), line + err.read_text()
        merged = os.path.join(conn.warehouse, line.split()[1])
        wait_for(lambda: _stopped(proc.pid), 10, "the janitor to stop itself")
        other.start()
        wait_for(lambda: passes(caplog, "janitor-new"), 30, "the new janitor's pass")
        assert all(len(segs) == 1 for segs in list_segments(a, range(16)).values())  # all
        acked += [acknowledge(b, [{"id": k, "v": "b"}]) for k in range(4)]
        before = _view(conn)
        proc.send_signal(signal.SIGCONT)
        line = _line(proc, 60)
        assert line.startswith("resumed on a new session True"), line + err.read_text()
        ended = re.compile(r"lost the election during a pass|janitor pass:")
        wait_for(lambda: ended.search(err.read_text()), 30, "the stale janitor's pass to end")
        time.sleep(0.5)
        assert not _line(proc, 0.1), err.read_text()  # it committed nothing
        assert "lost the election during a pass" in err.read_text()
        assert _view(conn) == (before[0], before[1] - {os.path.relpath(merged, conn.warehouse)})
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.terminate()
        proc.wait(timeout=10)
        stop.set()
        if other.is_alive():
            other.join(timeout=10)
    problems = check_log(conn, "a", acked[:5]) + check_log(conn, "b", acked[5:])
    assert not problems, "\n".join(problems[:10])
    conn.update_settings({"orphan.min-age": "0s"})  # R4: nothing of the merges is left over
    assert not conn.run_retention().errors
    assert warehouse_files(conn) == files_named(conn, "a", "b")


def attempt(call) -> object:
    try:
        return call()
    except lk.LeasekitError as exc:
        return exc


@pytest.mark.parametrize("moment", ["waiting", "committing"])
def test_zookeeper_killed_between_merged_file_and_commit(own_zk, connect, monkeypatch, moment):
    # R8, W2, R4: the merged file is written; ZooKeeper is killed -9 while the merge waits to
    # commit ("waiting") or as it sends its commit ("committing": the merge may then fail with
    # ZooKeeperUnavailableError whether or not the commit landed, and keeps its file), and
    # restarted; retention (orphan.min-age 0s) runs before the merge goes on. The merge commits
    # wholly or not at all and the log reads the same; an uncommitted file goes as an orphan
    # once its writer's session ends. Guard: the merge's write marker, live while it waits,
    # keeps its file from orphan cleanup (without it, "waiting" commits a segment whose file is
    # gone).
    conn, writer = connect(), connect()
    conn.update_settings({"orphan.min-age": "0s"})
    table = conn.create_table("t", SCHEMA, "id", buckets=1)
    acked = [acknowledge(table, [{"id": k, "v": f"v{k}"}]) for k in range(8)]
    written, release = threading.Event(), threading.Event()
    merged: list[str] = []
    real = compaction._swap

    def swap(t, bucket, run, record, token):
        merged.append(os.path.join(conn.warehouse, record.file))
        written.set()
        assert release.wait(120)
        return real(t, bucket, run, record, token)

    monkeypatch.setattr(compaction, "_swap", swap)
    outcome: list[object] = []
    merging = threading.Thread(
        target=lambda: outcome.append(attempt(writer.table("t").compact_log)), daemon=True
    )
    merging.start()
    assert written.wait(60)
    if moment == "committing":
        release.set()
        time.sleep(random.uniform(0, 0.005))
    own_zk.kill()
    time.sleep(1.0)
    own_zk.restart(wait_for=[conn, writer])
    assert not conn.run_retention().errors
    assert os.path.exists(merged[0]) or moment == "committing"  # W2: its marker keeps it
    release.set()
    merging.join(timeout=120)
    segments = list_segments(table, [0])[0]
    committed = [s.file for s in segments if s.first_timestamp_ms is not None]
    assert [(s.base_offset, s.end_offset) for s in segments] == (  # all or nothing
        [(0, 8)] if committed else [(k, k + 1) for k in range(8)]
    )
    if isinstance(outcome[0], lk.LogCompaction):
        assert committed == merged
    elif not isinstance(outcome[0], lk.ZooKeeperUnavailableError):  # surely not committed
        assert not committed and not os.path.exists(merged[0]), outcome
    problems = check_log(conn, "t", acked)
    assert not problems, "\n".join(problems[:10])
    writer.close()  # its write markers go with its session: its files are orphans if unnamed
    assert not conn.run_retention().errors
    assert warehouse_files(conn) == files_named(conn, "t")  # R4
