"""Group churn (docs/security.md): consumers join and leave a group every second for 30 s while
records are appended and consumed, each member in a thread of its own with auto-commit. No
bucket is ever owned by two members at once (C10), no record is skipped (C12), and no
``CommitFailedError`` (nor anything else) reaches user code (C11 under auto-commit)."""

from __future__ import annotations

import random
import threading
import time

import leasekit as lk

BUCKETS = 8


class Ownership(lk.BucketRebalanceListener):
    """One member's listener: keeps the shared map of bucket -> owner, and notes any bucket
    assigned while another member still held it."""

    owners: dict[lk.TableBucket, str] = {}
    violations: list[str] = []
    lock = threading.Lock()

    def __init__(self, name: str) -> None:
        self.name = name

    def on_buckets_assigned(self, assigned):
        with self.lock:
            for tb in assigned:
                holder = self.owners.get(tb)
                if holder is not None:
                    self.violations.append(f"{tb} assigned to {self.name} while {holder} owned it")
                self.owners[tb] = self.name

    def on_buckets_revoked(self, revoked):
        with self.lock:
            for tb in revoked:
                if self.owners.get(tb) == self.name:
                    del self.owners[tb]


class Member(threading.Thread):
    def __init__(self, conn, name: str, seen: set, errors: list) -> None:
        super().__init__(name=name, daemon=True)
        self.conn, self.seen, self.errors = conn, seen, errors
        self.leave = threading.Event()
        self.joined = threading.Event()

    def run(self) -> None:
        try:
            with self.conn.consumer(
                "orders",
                group_id="g",
                auto_offset_reset="earliest",
                session_timeout="3s",
                auto_commit_interval="0.2s",
                listener=Ownership(self.name),
            ) as consumer:
                while not self.leave.is_set():
                    for tb, table in consumer.poll(timeout="0.1s").items():
                        self.seen.update(
                            (tb.bucket, o) for o in table.column("_offset").to_pylist()
                        )
                    self.joined.set()
        except BaseException as exc:  # anything reaching user code fails the test
            self.errors.append(f"{self.name}: {type(exc).__name__}: {exc}")
            self.joined.set()


def test_members_joining_and_leaving_every_second(conn, churn_seconds):
    # group churn; C9 exact coverage at the end, C10 never two owners, C11 nothing raised
    # under auto-commit, C12 nothing skipped
    orders = conn.create_table("orders", "id BIGINT", "id", buckets=BUCKETS)
    Ownership.owners, Ownership.violations = {}, []
    seen: set[tuple[int, int]] = set()
    errors: list[str] = []
    stop = threading.Event()

    def write():
        i = 0
        while not stop.is_set():
            orders.append([{"id": i + k} for k in range(16)])
            i += 16
            time.sleep(0.1)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    rng = random.Random(7)
    members: list[Member] = []
    joined = left = 0
    try:
        deadline = time.monotonic() + churn_seconds
        while time.monotonic() < deadline:
            if len(members) < 2 or (len(members) < 5 and rng.random() < 0.6):
                m = Member(conn, f"m{joined}", seen, errors)
                m.start()
                members.append(m)
                joined += 1
            if len(members) > 2 and rng.random() < 0.6:
                m = members.pop(rng.randrange(len(members)))
                m.leave.set()
                left += 1
            time.sleep(1.0)
            assert not errors, errors
    finally:
        stop.set()
        writer.join()
    ends = orders.end_offsets()
    settle = time.monotonic() + 60
    while not all((tb.bucket, ends[tb] - 1) in seen for tb in orders.buckets if ends[tb]):
        assert time.monotonic() < settle, "the remaining members did not reach the end"
        assert not errors, errors
        time.sleep(0.1)
    for m in members:
        m.leave.set()
    for m in [*members]:
        m.join(timeout=30)
    assert not errors, errors
    assert joined >= churn_seconds / 2 and left >= churn_seconds / 4  # it did churn
    assert Ownership.violations == []  # C10: never two owners at once
    for tb in orders.buckets:  # C12: every record of every bucket consumed at least once
        assert {o for b, o in seen if b == tb.bucket} >= set(range(ends[tb])), tb
