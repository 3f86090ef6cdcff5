"""The failover stress of test_ensemble_failover.py: workers appending, committing,
snapshotting, running retention and holding leases through the ensemble, a checker of the pins
of live leases, and what every worker had acknowledged, checked for losses at the end."""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import leasekit as lk
from leasekit import testing
from leasekit.log.markers import in_flight
from leasekit.log.segments import list_segments
from leasekit.log.state import read_states
from leasekit.snapshots.catalog import list_snapshots
from leasekit.snapshots.register import Written, register

TB = lk.TableBucket

TABLES = ("orders", "events")
BUCKETS = 4
WORKERS = 4
LEASE_SECONDS = 30.0
GRACE_MS = 1000
SETTINGS = {"lease.expiry-grace": "1s", "orphan.min-age": "15s"}
TABLE_PROPERTIES = {"kv.snapshot.num-retained": 1, "log.retention": "2s"}


def _ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def snapshot_without_spark(table) -> dict[TB, lk.Snapshot]:
    """Register a snapshot of every advanced bucket with a small placeholder file (what a
    Spark compaction registers, minus Spark: retention lists and deletes it, nothing reads it)."""
    ctx = table.context
    states = read_states(table, range(table.num_buckets))
    advanced = {
        b: s.end
        for b, s in enumerate(states)
        if s is not None and s.end > (s.latest_offset if s.latest_snapshot is not None else 0)
    }
    if not advanced:
        return {}
    with in_flight(ctx) as token:
        written = {}
        for bucket, end in advanced.items():
            rel = f"{table.data_dir}/snapshots/{token}/_bucket={bucket}/part-0.parquet"
            path = ctx.warehouse.uri(rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(b"\0" * 64)
            written[bucket] = Written(end, [rel], end, 64)
        return register(table, written, token)


@dataclass
class Slot:
    """A lease only one worker touches, with what its calls acknowledged."""

    worker: int
    slot: int
    generation: int = 0
    exists: bool = False
    pins: dict[TB, int] = field(default_factory=dict)
    expires_ms: int = 0

    @property
    def lease_id(self) -> str:
        return f"w{self.worker}-s{self.slot}-g{self.generation}"

    def abandon(self) -> None:
        """Move on to a fresh id (the old lease, if any, is left to expiry)."""
        self.generation += 1
        self.exists, self.pins, self.expires_ms = False, {}, 0


@dataclass
class Commits:
    """One worker's group: the last acknowledged offset per bucket, and offsets whose commit
    raised (their outcome is unknown: stored or not)."""

    acked: dict[TB, int] = field(default_factory=dict)
    unknown: dict[TB, set[int]] = field(default_factory=dict)


class FailoverStress:
    def __init__(self, connect, seconds: float) -> None:
        self.connect, self.seconds = connect, seconds
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.appends: list[tuple[TB, lk.OffsetRange]] = []
        self.slots = [[Slot(w, s) for s in range(2)] for w in range(WORKERS)]
        self.commits = [Commits() for _ in range(WORKERS)]
        self.failures: list[str] = []
        self.violations: list[str] = []
        self.stop = threading.Event()
        self.killed_at: float | None = None
        self.after_kill = [0] * WORKERS
        self.first_after_kill: list[float | None] = [None] * WORKERS
        self.sessions: list[tuple[int, int]] = []  # (session id before, after) per connection
        self.next_snapshot = dict.fromkeys(TABLES, 0.0)
        self.next_retention = 0.0

    def count(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def _gate(self, key: str | None, every: float) -> bool:
        with self.lock:
            now = time.monotonic()
            due = self.next_retention if key is None else self.next_snapshot[key]
            if now < due:
                return False
            if key is None:
                self.next_retention = now + every
            else:
                self.next_snapshot[key] = now + every
            return True

    # -- operations; each returns after an acknowledged write or raises ----------------------

    def op_append(self, conn, tables, rng, worker) -> None:
        table = tables[rng.choice(TABLES)]
        n = rng.randint(4, 30)
        ranges = table.append([{"id": rng.randrange(5000), "v": f"w{worker}"} for _ in range(n)])
        assert sum(len(r) for r in ranges.values()) == n
        with self.lock:
            self.appends.extend(ranges.items())
        self.count("appends")

    def op_snapshot(self, conn, tables, rng, worker) -> None:
        name = rng.choice(TABLES)
        if not self._gate(name, 1.0):
            return self.op_append(conn, tables, rng, worker)
        self.count("snapshots", len(snapshot_without_spark(tables[name])))

    def op_retention(self, conn, tables, rng, worker) -> None:
        if not self._gate(None, 1.0):
            return self.op_append(conn, tables, rng, worker)
        report = conn.run_retention()
        self.count("retention passes")
        self.count("deleted snapshots", sum(i.kind == "snapshot" for i in report.deleted))
        self.count("deleted segments", sum(i.kind == "segment" for i in report.deleted))

    def op_commit(self, conn, tables, rng, worker, consumer) -> None:
        mine = self.commits[worker]
        tb = TB("orders", rng.randrange(BUCKETS))
        offset = min(mine.acked.get(tb, 0) + rng.randint(1, 20), tables["orders"].end_offsets()[tb])
        try:
            consumer.commit({tb: offset})
        except lk.ZooKeeperUnavailableError:
            mine.unknown.setdefault(tb, set()).add(offset)
            raise
        mine.acked[tb] = offset
        mine.unknown.pop(tb, None)  # a later acknowledged commit overrides whatever came before
        self.count("commits")

    def op_lease(self, conn, tables, rng, worker) -> None:
        slot = rng.choice(self.slots[worker])
        handle = conn.lease(slot.lease_id, LEASE_SECONDS)
        kind = (
            rng.choices(["acquire", "renew", "release", "drop"], [6, 4, 2, 1])[0]
            if slot.exists
            else "acquire"
        )
        try:
            if kind == "acquire":
                result = handle.acquire_latest(rng.choice(TABLES))
                if result.unavailable:
                    self.violations.append(
                        f"acquire_latest of {slot.lease_id} left {result.unavailable} unpinned"
                    )
                slot.exists = True
                slot.pins.update(result.acquired)
                slot.expires_ms = _ms(result.expires_at)
            elif kind == "renew":
                slot.expires_ms = _ms(handle.renew())
            elif kind == "release":
                buckets = rng.sample(sorted(slot.pins), min(2, len(slot.pins)))
                handle.release(buckets)
                for tb in buckets:
                    slot.pins.pop(tb)
            else:
                if not handle.drop():
                    self.violations.append(f"drop of {slot.lease_id} found no lease")
                slot.abandon()
        except (lk.LeaseNotFoundError, lk.LeaseExpiredError) as exc:
            if testing.context(conn).server_time_ms() <= slot.expires_ms + GRACE_MS:
                self.violations.append(
                    f"{kind} of {slot.lease_id} acknowledged until {slot.expires_ms}: {exc!r}"
                )
            slot.abandon()
            return
        except lk.ZooKeeperUnavailableError:
            slot.abandon()  # outcome unknown: leave that lease to expiry
            raise
        self.count(f"lease {kind}s")

    # -- threads -------------------------------------------------------------------------

    def worker(self, index: int) -> None:
        rng = random.Random(2000 + index)
        conn = self.connect()
        session = testing.context(conn).store.client.client_id[0]
        tables = {name: conn.table(name) for name in TABLES}
        consumer = conn.consumer(group_id=f"g{index}", enable_auto_commit=False)
        consumer.assign(list(tables["orders"].buckets))
        ops = [
            (self.op_append, 30),
            (self.op_lease, 40),
            (self.op_snapshot, 8),
            (self.op_retention, 6),
            (lambda *a: self.op_commit(*a, consumer), 16),
        ]
        while not self.stop.is_set():
            op = rng.choices([o for o, _ in ops], [w for _, w in ops])[0]
            try:
                op(conn, tables, rng, index)
            except lk.ZooKeeperUnavailableError:
                self.count("errors ridden out")  # the retriable error: wait and carry on
                time.sleep(0.2)
                continue
            except Exception:
                self.failures.append(f"worker {index}: {traceback.format_exc()}")
                time.sleep(0.1)
                continue
            if self.killed_at is not None:
                self.after_kill[index] += 1
                if self.first_after_kill[index] is None:
                    self.first_after_kill[index] = time.monotonic() - self.killed_at
            time.sleep(rng.uniform(0.0, 0.01))
        consumer.close()
        with self.lock:
            self.sessions.append((session, testing.context(conn).store.client.client_id[0]))

    def checker(self) -> None:
        """Every pin of an unexpired lease names a snapshot whose files all exist."""
        conn = self.connect()
        tables = {name: conn.table(name) for name in TABLES}
        while not self.stop.is_set():
            try:
                now = testing.context(conn).server_time_ms()
                live = [i for i in conn.leases() if _ms(i.expires_at) >= now]
                stored = {
                    (s.table_bucket, s.snapshot_id): s
                    for t in tables.values()
                    for s in list_snapshots(t, range(BUCKETS))
                }
                for info in live:
                    for tb, sid in info.pins.items():
                        self.count("pins checked")
                        snap = stored.get((tb, sid))
                        problem = (
                            "metadata missing"
                            if snap is None
                            else (
                                "files missing"
                                if not all(os.path.exists(f) for f in snap.files)
                                else None
                            )
                        )
                        if problem is not None:
                            self._confirm(conn, info, tb, sid, problem)
            except lk.ZooKeeperUnavailableError:
                self.count("errors ridden out")
                time.sleep(0.2)
            except Exception:
                self.failures.append(f"checker: {traceback.format_exc()}")
                time.sleep(0.1)
            time.sleep(0.05)

    def _confirm(self, conn, seen: lk.LeaseInfo, tb: TB, sid: int, problem: str) -> None:
        """A violation only if the lease still pins it, unexpired, now (not released since)."""
        now = testing.context(conn).server_time_ms()
        try:
            again = conn.lease(seen.lease_id).info()
        except lk.LeaseNotFoundError:
            return
        if (
            again.created_at == seen.created_at
            and again.pins.get(tb) == sid
            and _ms(again.expires_at) >= now
        ):
            self.violations.append(f"lease {seen.lease_id} pins {tb} snapshot {sid}: {problem}")
            self.count("pins on deleted files")

    # -- the end: acknowledged writes against what the ensemble holds --------------------

    def lost_writes(self, conn) -> list[str]:
        lost: list[str] = []
        for name in TABLES:
            table = conn.table(name)
            ends, begins = table.end_offsets(), table.beginning_offsets()
            segments = list_segments(table, range(BUCKETS))
            for bucket in range(BUCKETS):
                tb = TB(name, bucket)
                bounds = {s.base_offset for s in segments[bucket]} | {ends[tb]}
                ranges = sorted(r for t, r in self.appends if t == tb)
                for previous, current in zip(ranges, ranges[1:]):
                    if current.start < previous.end:
                        lost.append(f"{tb}: acknowledged {previous} and {current} overlap")
                for r in ranges:
                    self.count("appends checked")
                    if r.end > ends[tb]:
                        lost.append(f"{tb}: acknowledged {r} beyond the end offset {ends[tb]}")
                    elif r.start >= begins[tb] and not {r.start, r.end} <= bounds:
                        lost.append(f"{tb}: acknowledged {r} is not stored as segments")
        stored = {i.lease_id: i for i in conn.leases()}
        now = testing.context(conn).server_time_ms()
        for slot in (s for slots in self.slots for s in slots if s.exists):
            self.count("leases checked")
            info = stored.get(slot.lease_id)
            if info is None:
                if now <= slot.expires_ms + GRACE_MS:
                    lost.append(f"lease {slot.lease_id} gone, acknowledged until {slot.expires_ms}")
            elif (info.pins, _ms(info.expires_at)) != (slot.pins, slot.expires_ms):
                lost.append(
                    f"lease {slot.lease_id}: stored {info.pins} until {_ms(info.expires_at)}, "
                    f"acknowledged {slot.pins} until {slot.expires_ms}"
                )
        for worker, mine in enumerate(self.commits):
            with conn.consumer(group_id=f"g{worker}", enable_auto_commit=False) as reader:
                for tb in set(mine.acked) | set(mine.unknown):
                    self.count("offsets checked")
                    value = reader.committed(tb)
                    allowed = mine.unknown.get(tb, set()) | (
                        {mine.acked[tb]} if tb in mine.acked else {None}
                    )
                    if value not in allowed:
                        lost.append(
                            f"group g{worker} {tb}: committed {value}, acknowledged "
                            f"{mine.acked.get(tb)}"
                        )
        return lost
