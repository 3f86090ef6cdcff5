"""Group members in processes of their own (C11, C12), on the real ZooKeeper: a member killed
with SIGKILL mid-consumption loses its buckets within its session timeout and the others
resume from its commits, skipping nothing; a member stopped with SIGSTOP past its session
finds its late commit refused when it wakes up."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import leasekit as lk

TB = lk.TableBucket
MEMBER = str(Path(__file__).parent.parent / "group_member.py")
SESSION = 2.0
BUCKETS = 4


class Member:
    """A ``group_member.py`` process and the events it wrote."""

    def __init__(self, zookeeper, warehouse, namespace, events: Path, *extra: str) -> None:
        self.events = events
        self.process = subprocess.Popen(
            [
                sys.executable,
                MEMBER,
                zookeeper,
                warehouse,
                namespace,
                str(events),
                "--session-timeout",
                f"{SESSION}s",
                *extra,
            ]
        )

    def lines(self) -> list[list[str]]:
        if not self.events.exists():
            return []
        return [line.split(" ", 5) for line in self.events.read_text().splitlines() if line]

    def owned(self) -> set[int]:
        """The buckets it holds after its last ASSIGNED/REVOKED events."""
        held: set[int] = set()
        for fields in self.lines():
            if fields[0] == "ASSIGNED":
                held |= {int(b) for b in " ".join(fields[4:]).split()}
            elif fields[0] == "REVOKED":
                held -= {int(b) for b in " ".join(fields[3:]).split()}
        return held

    def records(self) -> set[tuple[int, int]]:
        return {(int(f[1]), int(f[2])) for f in self.lines() if f[0] == "R"}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


def wait_for(what, until, seconds=60.0, members=()):
    deadline = time.monotonic() + seconds
    while not until():
        for m in members:
            assert m.process.poll() is None, f"a member exited with {m.process.returncode}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=BUCKETS)
    table.append([{"id": i} for i in range(400)])
    return table


@pytest.fixture
def members(zookeeper, warehouse, namespace, tmp_path):
    started = []

    def start(name, *extra):
        m = Member(zookeeper, warehouse, namespace, tmp_path / f"{name}.events", *extra)
        started.append(m)
        return m

    yield start
    for m in started:
        m.stop()


def test_a_member_killed_with_sigkill_loses_its_buckets_and_nothing_is_skipped(
    conn, orders, members
):
    # C12: a member killed mid-consumption loses its buckets after session_timeout (within
    # session_timeout + 5 s); the survivor resumes from the committed offsets: every record of
    # every bucket is consumed at least once. C9: the two split the buckets 2/2 before.
    a = members("a")
    wait_for("a to own every bucket", lambda: a.owned() == set(range(BUCKETS)), members=[a])
    b = members("b")
    wait_for("a 2/2 split", lambda: len(a.owned()) == 2 and len(b.owned()) == 2, members=[a, b])
    assert not a.owned() & b.owned()
    stop = threading.Event()

    def write():  # keep the log growing while a member dies
        i = 400
        while not stop.is_set():
            orders.append([{"id": i + k} for k in range(20)])
            i += 20
            time.sleep(0.05)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_for(
            "a to consume new records", lambda: len(a.records()) > 400 // 2 + 20, members=[a, b]
        )
        victim = a.owned()
        a.process.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        a.process.wait(timeout=10)
        wait_for(
            "b to take over",
            lambda: b.owned() == set(range(BUCKETS)),
            seconds=SESSION + 5,
            members=[b],
        )
        took = time.monotonic() - killed
    finally:
        stop.set()
        writer.join()
    assert took <= SESSION + 5, took
    assert victim and victim <= b.owned()
    ends = orders.end_offsets()
    wait_for(
        "b to reach the end",
        lambda: all((tb.bucket, ends[tb] - 1) in b.records() for tb in orders.buckets),
        members=[b],
    )
    seen = a.records() | b.records()
    for tb in orders.buckets:  # at least once (C12): nothing skipped
        assert {o for bucket, o in seen if bucket == tb.bucket} >= set(range(ends[tb])), tb


def test_a_member_stopped_past_its_session_has_its_late_commit_refused(conn, orders, members):
    # C11: a member stopped with SIGSTOP (here: between processing a batch and committing it)
    # past its session timeout loses its buckets to the other member; when it resumes, its
    # commit raises CommitFailedError and writes nothing: the new owner's commits stand
    a = members("a", "--pause", "1.0")
    wait_for("a to own every bucket", lambda: a.owned() == set(range(BUCKETS)), members=[a])
    b = members("b")
    wait_for("a 2/2 split", lambda: len(a.owned()) == 2 and len(b.owned()) == 2, members=[a, b])
    orders.append([{"id": i} for i in range(400, 480)])

    def processing():
        return [f for f in a.lines() if f[0] == "PROCESSING"]

    before = len(processing())
    wait_for("a to process a batch", lambda: len(processing()) > before, members=[a, b])
    a.process.send_signal(signal.SIGSTOP)  # inside its 1 s pause: the commit comes after
    batch = len(processing())  # the batch whose commit is late
    try:
        stopped_with = a.owned()
        wait_for(
            "b to take over",
            lambda: b.owned() == set(range(BUCKETS)),
            seconds=SESSION + 5,
            members=[b],
        )
        ends = orders.end_offsets()
        wait_for(
            "b to commit the end",
            lambda: all(
                conn.consumer(group_id="g").committed(tb) == ends[tb] for tb in orders.buckets
            ),
            members=[b],
        )
        committed = {tb: conn.consumer(group_id="g").committed(tb) for tb in orders.buckets}
    finally:
        a.process.send_signal(signal.SIGCONT)
    wait_for("a's late commit", lambda: _outcome(a.lines(), batch) is not None, members=[a, b])
    assert stopped_with
    assert _outcome(a.lines(), batch)[0] == "REFUSED"  # C11: refused...
    assert {
        tb: conn.consumer(group_id="g").committed(tb) for tb in orders.buckets
    } == committed  # ...nothing written


def _outcome(lines, batch):
    """The outcome (REFUSED or COMMITTED line) of the commit after the ``batch``-th PROCESSING
    line (1-based), or None before it is written."""
    seen = 0
    for i, fields in enumerate(lines):
        if fields[0] == "PROCESSING":
            seen += 1
            if seen == batch:
                rest = [f for f in lines[i + 1 :] if f[0] in ("REFUSED", "COMMITTED")]
                return rest[0] if rest else None
    return None
