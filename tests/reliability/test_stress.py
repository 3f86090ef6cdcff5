"""Stress (DESIGN §9): 8 workers do random acquire / renew / release / drop, appends, Spark
snapshots, retention passes, lease expiry and splits and merges of buckets (K1-K8) on 2 tables
while a checker verifies R2 and that every listed segment has its file without pause, another
thread compares the rows of the latest snapshots with ``read_at`` at their offsets every few
seconds, and ZooKeeper is killed with SIGKILL and restarted in the middle. Afterwards every
acknowledged write is still there and, after a janitor pass, no orphan pin (sealed buckets'
included), lease or snapshot metadata is left.

Run the full target with ``pytest tests/reliability --stress-seconds 60``.
"""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

import leasekit as lk
from leasekit import janitor, testing
from leasekit import spark as lks
from leasekit.leases import upkeep as lease_upkeep
from leasekit.log.segments import list_segments
from leasekit.snapshots.catalog import list_snapshots, read_latest
from leasekit.snapshots.cover import cover
from leasekit.tables.bucketing import murmur3_hash
from leasekit.zk.formats import BucketState, LeaseRecord, PinChunk, SnapshotRecord

TB = lk.TableBucket

TABLES = ("orders", "events")
BUCKETS = 4
WORKERS = 8
SHARED_LEASES = ("shared-0", "shared-1", "shared-2")
GRACE = "1s"
GRACE_MS = 1000
# Not 0s, nor 5s: unreferenced files younger than this may be appends or snapshots in flight,
# and a commit delayed by the outage can come several seconds after its file write (the
# writer does not check the age itself: see test_writer_kill's stalled-writer test)
ORPHAN_MIN_AGE = "15s"
TABLE_PROPERTIES = {"kv.snapshot.num-retained": 1, "log.retention": "2s"}
SNAPSHOT_EVERY = 3.0  # seconds between Spark snapshots of one table (2 cores: keep it moderate)
RETENTION_EVERY = 1.0
EXPIRE_EVERY = 0.5
RESCALE_EVERY = 2.0
RESCALED = "orders"  # the table whose buckets split and merge
MAX_ACTIVE = 10
LATEST_CHECK_EVERY = 10.0  # seconds between reads of the latest snapshots (Spark: 2 cores)


def _ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def _uncovered(table, acquired) -> list[int]:
    """The active buckets of ``table`` that neither a pin of their own nor one of an ancestor's
    covers (K4)."""
    pinned = {tb.bucket for tb in acquired if tb.table == table.name}

    def covered(b: int) -> bool:
        return (
            b in pinned
            or bool(table.layout.parents(b))
            and all(covered(p) for p in table.layout.parents(b))
        )

    return [b for b in table.active if not covered(b)]


def _sealed(table, bucket: int) -> str:
    return "active" if table.layout.is_active(bucket) else "sealed"


def missing_segment_files(table, buckets) -> list[str]:
    """W1, R3: every segment the log of ``buckets`` lists has its file; a file found missing
    counts only if the segment is listed again (retention deletes the znode first, the file
    after) and its file is still missing."""
    problems = []
    for bucket, segs in list_segments(table, buckets).items():
        if all(os.path.exists(s.file) for s in segs):
            continue
        again = list_segments(table, [bucket])[bucket]
        for seg in again:
            if not os.path.exists(seg.file) and any(s.file == seg.file for s in segs):
                problems.append(
                    f"W1, R3: {table.name}/{bucket} ({_sealed(table, bucket)}) lists segment "
                    f"[{seg.base_offset}, {seg.end_offset}) but its file {seg.file} is missing"
                )
    return problems


def _rows(df) -> tuple[dict[int, str], list[int]]:
    """The rows of ``df`` by key, and the keys it holds more than once."""
    keys = Counter()
    rows = {}
    for row in df.collect():
        keys[row["id"]] += 1
        rows[row["id"]] = row["v"]
    return rows, sorted(k for k, n in keys.items() if n > 1)


def _owned(rows: dict[int, str], classes) -> dict[int, str]:
    """The rows whose key hashes into one of the residue classes (None: all of them)."""
    if classes is None or not rows:
        return rows
    keys = list(rows)
    hashes = murmur3_hash(pa.table({"id": pa.array(keys, pa.int64())}), ["id"]).astype("int64")
    return {
        k: rows[k]
        for k, h in zip(keys, hashes.tolist())
        if any(h % c.modulus == c.residue for c in classes)
    }


def _state_at(spark, table, offsets: dict[int, int]) -> dict[int, str]:
    """S1, K3: the table's state at ``offsets`` (bucket: offset), each key read at the offset of
    the bucket that stands for it: one read when no bucket descends from another, else each
    bucket's read restricted to the keys it stands for (``cover``), as ``read_snapshots``
    counts them."""
    used = cover(table.refresh().layout, offsets).used
    whole = {b: off for b, off in offsets.items() if used.get(b, ()) is None}
    state, _ = _rows(lks.read_at(spark, table, whole)) if whole else ({}, [])
    for b, classes in used.items():
        if classes is not None:
            part, _ = _rows(lks.read_at(spark, table, {b: offsets[b]}))
            state.update(_owned(part, classes))
    return state


def _differences(got: dict[int, str], want: dict[int, str]) -> list[str]:
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    return [
        f"{len(keys)} keys {what} (e.g. {keys[:5]})"
        for what, keys in (("missing", missing), ("extra", extra), ("with other values", differ))
        if keys
    ]


def check_latest(conn, spark, name: str, lease_id: str) -> list[str] | None:
    """K3, K4, S1: ``read_snapshots`` of ``latest_snapshots()`` holds each key once and equals
    ``read_at`` at the offsets those snapshots were taken at. The snapshots are pinned by lease
    ``lease_id`` meanwhile (retention may delete them otherwise); None when one of them went
    before it was pinned."""
    table = conn.table(name)
    latest = table.latest_snapshots()
    if not latest:
        return []
    with conn.lease(lease_id, "2m") as lease:  # dropped at the end of the block
        if lease.acquire(latest).acquired != latest:
            return None  # one was deleted meanwhile: another round
        stored = {
            (s.table_bucket, s.snapshot_id): s
            for s in list_snapshots(table, sorted(tb.bucket for tb in latest))
        }
        if any(key not in stored for key in latest.items()):
            return [f"{name}: pinned latest snapshots {latest} are not all stored"]
        offsets = {tb.bucket: stored[(tb, sid)].log_offset for tb, sid in latest.items()}
        shown = {tb.bucket: sid for tb, sid in latest.items()}
        try:
            got, twice = _rows(lks.read_snapshots(spark, table, latest))
            want = _state_at(spark, table, offsets)
        except (lk.InvalidArgumentError, lk.OffsetOutOfRangeError) as exc:
            return [f"{name}: latest snapshots {shown} cannot be read: {exc}"]
    problems = [f"{len(twice)} keys read twice (e.g. {twice[:5]})"] if twice else []
    problems += _differences(got, want)
    if not problems:
        return []
    return [
        f"K3, S1: {name}: read_snapshots of latest snapshots {shown} != read_at at their "
        f"offsets {offsets}: " + "; ".join(problems)
    ]


class Counts:
    """Thread-safe counters for the summary line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def __getitem__(self, key: str) -> int:
        with self._lock:
            return self._counts[key]


@dataclass
class OwnLease:
    """A lease only one worker touches, so the worker knows what ZooKeeper must hold for it."""

    worker: int
    slot: int
    generation: int = 0
    exists: bool = False
    pins: dict[TB, int] = field(default_factory=dict)
    expires_ms: int = 0
    duration: float = 5.0
    created_at: datetime | None = None
    history: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.history.append(f"{time.monotonic():.3f} {self.lease_id} {text}")

    @property
    def lease_id(self) -> str:
        return f"w{self.worker}-s{self.slot}-g{self.generation}"

    def next_generation(self, rng: random.Random) -> None:
        """Move on to a fresh id (the old lease, if any, is left to expiry)."""
        self.generation += 1
        self.exists, self.pins, self.expires_ms, self.created_at = False, {}, 0, None
        self.duration = rng.uniform(3.0, 10.0)


@dataclass
class Acked:
    """Everything a successful call acknowledged."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    appends: list[tuple[TB, lk.OffsetRange]] = field(default_factory=list)
    snapshots: dict[tuple[TB, int], lk.Snapshot] = field(default_factory=dict)
    deleted_snapshots: set[tuple[str, int, int]] = field(default_factory=set)
    retention_interrupted: int = 0


class Stress:
    """The workers, the R2 checker and what they saw."""

    def __init__(self, connect: Callable[..., lk.Connection], spark, seconds: float) -> None:
        self.connect, self.spark, self.seconds = connect, spark, seconds
        self.ends_at = time.monotonic() + seconds
        self.counts = Counts()
        self.acked = Acked()
        self.violations: list[str] = []
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.pause = threading.Event()
        self.resume = threading.Event()
        self.paused = [threading.Event() for _ in range(WORKERS)]
        self.slots = [[OwnLease(w, s) for s in range(2)] for w in range(WORKERS)]
        self.gate_lock = threading.Lock()
        self.next_snapshot = dict.fromkeys(TABLES, 0.0)
        self.snapshot_busy: set[str] = set()
        self.next_retention = 0.0
        self.next_expire = 0.0
        self.next_rescale = 0.0

    def violation(self, text: str) -> None:
        self.violations.append(text)

    # -- gates: Spark snapshots (one per table at a time), retention and expiry are rate-limited

    def _gate_snapshot(self, name: str) -> bool:
        with self.gate_lock:
            if name in self.snapshot_busy or time.monotonic() < self.next_snapshot[name]:
                return False
            self.snapshot_busy.add(name)
            return True

    def _gate(self, attr: str, every: float) -> bool:
        with self.gate_lock:
            now = time.monotonic()
            if now < getattr(self, attr):
                return False
            setattr(self, attr, now + every)
            return True

    # -- worker operations ---------------------------------------------------------------

    def op_append(self, conn, tables, rng) -> None:
        table = tables[rng.choice(TABLES)]
        n = rng.randint(4, 40)
        rows = [{"id": rng.randrange(5000), "v": f"w{rng.random():.6f}"} for _ in range(n)]
        ranges = table.append(rows)  # W1
        assert sum(len(r) for r in ranges.values()) == n
        with self.acked.lock:
            self.acked.appends.extend(ranges.items())
        self.counts.add("appends")
        self.counts.add("rows", n)

    def op_snapshot(self, conn, tables, rng) -> None:
        name = rng.choice(TABLES)
        if not self._gate_snapshot(name):
            return self.op_append(conn, tables, rng)
        try:
            taken = tables[name].snapshot(self.spark)
            for tb, snap in taken.items():
                with self.acked.lock:
                    self.acked.snapshots[(tb, snap.snapshot_id)] = snap
                if not all(os.path.exists(f) for f in snap.files):  # S2
                    self.violation(f"snapshot {tb} {snap.snapshot_id} registered before its files")
            self.counts.add("snapshots", len(taken))
            self.counts.add("snapshot calls")
        finally:
            with self.gate_lock:
                self.snapshot_busy.discard(name)
                self.next_snapshot[name] = time.monotonic() + SNAPSHOT_EVERY

    def op_retention(self, conn, tables, rng) -> None:
        if not self._gate("next_retention", RETENTION_EVERY):
            return self.op_append(conn, tables, rng)
        try:
            report = conn.run_retention()
        except lk.ZooKeeperUnavailableError:
            with self.acked.lock:
                self.acked.retention_interrupted += 1
            raise
        with self.acked.lock:
            for item in report.deleted:
                if item.kind == "snapshot":
                    self.acked.deleted_snapshots.add(
                        (item.table_bucket.table, item.table_bucket.bucket, int(item.item_id))
                    )
        self.counts.add("retention passes")
        self.counts.add("deleted items", len(report.deleted))
        for item in report.deleted:
            self.counts.add(f"deleted {item.kind}s")
        self.counts.add("retention item errors", len(report.errors))

    def op_expire(self, conn, tables, rng) -> None:
        if not self._gate("next_expire", EXPIRE_EVERY):
            return self.op_append(conn, tables, rng)
        self.counts.add("expired leases", len(conn.expire_leases()))  # L11
        self.counts.add("expiry passes")

    def op_rescale(self, conn, tables, rng) -> None:
        if not self._gate("next_rescale", RESCALE_EVERY):
            return self.op_append(conn, tables, rng)
        table = tables[RESCALED]
        active = table.buckets
        pairs = [
            lin.children
            for lin in table.lineage()
            if len(lin.children) == 2 and all(TB(RESCALED, c) in active for c in lin.children)
        ]
        try:
            if pairs and (len(active) >= MAX_ACTIVE or rng.random() < 0.4):
                table.merge_buckets(*rng.choice(pairs))  # K1
                self.counts.add("merges")
            else:
                table.split_bucket(rng.choice(active))  # K1
                self.counts.add("splits")
        except lk.IllegalStateError as exc:
            if "another rescale" not in str(exc) and "sealed" not in str(exc):
                raise
            self.counts.add("rescale races")  # K8: another worker's rescale came first

    def _wanted(self, tables, rng) -> dict[TB, int]:
        table = tables[rng.choice(TABLES)]
        wanted = {}
        known = range(table.refresh().layout.count)
        for bucket in rng.sample(known, rng.randint(1, min(len(known), BUCKETS))):
            ids = [s.snapshot_id for s in list_snapshots(table, [bucket])]
            if not ids or rng.random() < 0.1:
                wanted[TB(table.name, bucket)] = max(ids, default=0) + 1000  # never exists
            else:
                wanted[TB(table.name, bucket)] = rng.choice(ids)
        return wanted

    def _lost(self, conn, slot: OwnLease, what: str, exc: Exception) -> None:
        """An own lease raised not-found/expired: legitimate only once its time was up."""
        now = testing.context(conn).server_time_ms()
        limit = slot.expires_ms + (GRACE_MS if isinstance(exc, lk.LeaseNotFoundError) else 0)
        if slot.exists and now <= limit:
            self.violation(
                f"{what} of {slot.lease_id}: {type(exc).__name__} at {now}, "
                f"acknowledged until {slot.expires_ms}: {exc}"
            )

    def op_own(self, conn, tables, rng, worker: int) -> None:
        slot = rng.choice(self.slots[worker])
        handle = conn.lease(slot.lease_id, slot.duration)
        kind = rng.choices(["acquire", "renew", "release", "drop", "info"], [8, 5, 3, 2, 2])[0]
        if not slot.exists and kind != "acquire":
            kind = "acquire"
        try:
            if kind == "acquire":
                if rng.random() < 0.4:
                    name = rng.choice(TABLES)
                    result = handle.acquire_latest(name)
                    uncovered = _uncovered(tables[name].refresh(), result.acquired)
                    if uncovered or result.unavailable:
                        # L6, K4: every bucket has a snapshot of its own or its ancestors'
                        self.violation(
                            f"acquire_latest of {slot.lease_id} left {result.unavailable} "
                            f"unpinned, {uncovered} uncovered"
                        )
                else:
                    wanted = self._wanted(tables, rng)
                    result = handle.acquire(wanted)  # L3, L4
                    for tb, sid in result.acquired.items():
                        if wanted[tb] != sid:
                            self.violation(
                                f"acquire of {slot.lease_id} pinned {tb} {sid}, asked {wanted[tb]}"
                            )
                    for tb, sid in wanted.items():
                        if sid >= 1000 and tb not in result.unavailable:
                            self.violation(
                                f"acquire of {slot.lease_id}: missing snapshot {tb} {sid} not "
                                "unavailable"
                            )
                    self.counts.add("unavailable", len(result.unavailable))
                slot.note(f"acquire -> {result}")
                info = handle.info()
                if slot.exists and info.created_at != slot.created_at:
                    # L8, L11: the first acquire after a reclaim creates a fresh lease; the
                    # old one may only have gone after expiry + grace
                    if _ms(info.renewed_at) <= slot.expires_ms + GRACE_MS:
                        self.violation(
                            f"{slot.lease_id} was recreated at {_ms(info.renewed_at)}, "
                            f"acknowledged until {slot.expires_ms}"
                        )
                    slot.pins = {}
                    self.counts.add("own leases recreated")
                slot.exists, slot.created_at = True, info.created_at
                slot.pins.update(result.acquired)
                slot.expires_ms = _ms(result.expires_at)
                self._read_back(slot, info)
                self.counts.add("acquires")
            elif kind == "renew":
                slot.expires_ms = _ms(handle.renew())  # L7
                self.counts.add("renews")
            elif kind == "release":
                buckets = rng.sample(sorted(slot.pins), min(len(slot.pins), rng.randint(0, 3)))
                buckets.append(
                    TB(rng.choice(TABLES), rng.randrange(BUCKETS))
                )  # maybe not pinned (L9)
                handle.release(buckets)
                slot.note(f"release {buckets}")
                for tb in buckets:
                    slot.pins.pop(tb, None)
                self.counts.add("releases")
            elif kind == "drop":
                if not handle.drop():  # L10
                    self._lost(conn, slot, "drop", lk.LeaseNotFoundError("drop returned False"))
                slot.next_generation(rng)
                self.counts.add("drops")
            else:
                self._read_back(slot, handle.info())
        except (lk.LeaseNotFoundError, lk.LeaseExpiredError) as exc:
            self._lost(conn, slot, kind, exc)
            self.counts.add("own leases expired")
            slot.next_generation(rng)
        except lk.ZooKeeperUnavailableError:
            slot.note(f"{kind} unavailable")
            slot.next_generation(rng)  # outcome unknown: leave that lease to expiry
            raise

    def _read_back(self, slot: OwnLease, info: lk.LeaseInfo) -> None:
        # L4, L7, L9: the stored lease is exactly what its calls acknowledged
        if (info.pins, _ms(info.expires_at), info.created_at) != (
            slot.pins,
            slot.expires_ms,
            slot.created_at,
        ):
            self.violation(
                f"{slot.lease_id} reads back pins {info.pins} until {_ms(info.expires_at)}, "
                f"acknowledged {slot.pins} until {slot.expires_ms}\n"
                + "\n".join(slot.history[-12:])
            )
        self.counts.add("lease reads")

    def op_shared(self, conn, tables, rng) -> None:
        lease = conn.lease(rng.choice(SHARED_LEASES), rng.uniform(3.0, 8.0))
        kind = rng.choice(["acquire", "acquire", "renew", "release", "drop"])
        try:
            if kind == "acquire":
                lease.acquire_latest(rng.choice(TABLES))
                self.counts.add("acquires")
            elif kind == "renew":
                lease.renew()
                self.counts.add("renews")
            elif kind == "release":
                lease.release([TB(rng.choice(TABLES), rng.randrange(BUCKETS))])
                self.counts.add("releases")
            else:
                lease.drop()
                self.counts.add("drops")
        except (lk.LeaseNotFoundError, lk.LeaseExpiredError):
            self.counts.add("shared lease races")

    def worker(self, index: int) -> None:
        rng = random.Random(1000 + index)
        for slot in self.slots[index]:
            slot.duration = rng.uniform(3.0, 10.0)
        conn = self.connect()
        tables = {name: conn.table(name) for name in TABLES}
        ops = [
            (self.op_append, 25),
            (lambda *a: self.op_own(*a, index), 35),
            (self.op_shared, 12),
            (self.op_snapshot, 6),
            (self.op_retention, 6),
            (self.op_expire, 6),
            (self.op_rescale, 3),
        ]
        while not self.stop.is_set():
            if self.pause.is_set():
                self.paused[index].set()
                self.resume.wait()
                self.paused[index].clear()
                continue
            op = rng.choices([o for o, _ in ops], [w for _, w in ops])[0]
            try:
                op(conn, tables, rng)
            except (lk.ZooKeeperUnavailableError, lk.SessionLostError):
                # retriable (a write that lost its session committed nothing): wait, carry on
                self.counts.add("zookeeper errors ridden out")
                time.sleep(0.3)
            except Exception:  # every unexpected error fails the test
                self.failures.append(f"worker {index}: {traceback.format_exc()}")
                time.sleep(0.1)
            time.sleep(rng.uniform(0.0, 0.02))

    # -- the R2 checker --------------------------------------------------------------------

    def checker(self) -> None:
        # R2, L5: every pin of an unexpired lease names a snapshot whose files all exist
        conn = self.connect()
        tables = {name: conn.table(name) for name in TABLES}
        while not self.stop.is_set():
            try:
                self._check_pins(conn, tables)
                for table in tables.values():  # every bucket ever, sealed ones too
                    for problem in missing_segment_files(table, range(table.layout.count)):
                        self._seen(problem)
                self.counts.add("invariant checks")
            except lk.ZooKeeperUnavailableError:
                self.counts.add("zookeeper errors ridden out")
                time.sleep(0.3)
            except Exception:
                self.failures.append(f"checker: {traceback.format_exc()}")
                time.sleep(0.1)

    def _seen(self, problem: str) -> None:
        """A violation, said once however many rounds of the checker see it."""
        if problem not in self.violations:
            self.violation(problem)

    def latest_checker(self) -> None:
        # K3, K4, S1: every LATEST_CHECK_EVERY seconds, the rows of the rescaled table's latest
        # snapshots are its state at their offsets (Spark reads: slow, so not in the checker)
        conn = self.connect()
        rounds = 0
        while not self.stop.wait(LATEST_CHECK_EVERY):
            if time.monotonic() + LATEST_CHECK_EVERY > self.ends_at:
                break  # a round takes seconds: none that would hold up the end (the CI run)
            rounds += 1
            began = time.monotonic()
            try:
                problems = check_latest(conn, self.spark, RESCALED, f"latest-check-{rounds}")
            except (lk.ZooKeeperUnavailableError, lk.SessionLostError):
                self.counts.add("zookeeper errors ridden out")
                continue
            except Exception:
                self.failures.append(f"latest checker: {traceback.format_exc()}")
                continue
            if problems is None:
                self.counts.add("latest checks skipped")
            else:
                self.violations.extend(problems)
                self.counts.add("latest checks")
            self.counts.add("latest check ms", round(1000 * (time.monotonic() - began)))

    def _check_pins(self, conn, tables) -> None:
        now = testing.context(conn).server_time_ms()
        live = [i for i in conn.leases() if _ms(i.expires_at) >= now]
        stored = {
            (s.table_bucket, s.snapshot_id): s
            for table in tables.values()
            for s in list_snapshots(table, range(table.refresh().layout.count))
        }
        for info in live:
            for tb, sid in info.pins.items():
                snap = stored.get((tb, sid))
                if snap is None:
                    problem = "snapshot metadata missing"
                else:
                    missing = [f for f in snap.files if not os.path.exists(f)]
                    problem = f"files {missing} missing" if missing else None
                self.counts.add("pins checked")
                if problem is not None:
                    self._confirm(conn, info, tb, sid, problem)

    def _confirm(self, conn, seen: lk.LeaseInfo, tb: TB, sid: int, problem: str) -> None:
        """A violation only if the same lease still pins it and is still unexpired."""
        ctx = testing.context(conn)
        now = ctx.server_time_ms()
        try:
            again = lease_upkeep.info(ctx, seen.lease_id)
        except lk.LeaseNotFoundError:
            return
        if (
            again.created_at == seen.created_at
            and again.pins.get(tb) == sid
            and _ms(again.expires_at) >= now
        ):
            self.violation(f"R2: lease {seen.lease_id} pins {tb} snapshot {sid} but {problem}")

    # -- the run -------------------------------------------------------------------------

    def pause_workers(self) -> None:
        self.resume.clear()
        self.pause.set()
        deadline = time.monotonic() + 180
        for event in self.paused:
            assert event.wait(max(0.0, deadline - time.monotonic())), "a worker did not pause"

    def resume_workers(self) -> None:
        self.pause.clear()
        self.resume.set()


# -- checks on quiet metadata ---------------------------------------------------------------


def verify_acknowledged(conn, stress: Stress) -> list[str]:
    """Every acknowledged append, snapshot and own lease is there (workers quiet)."""
    problems = []
    acked = stress.acked
    for name in TABLES:
        table = conn.table(name)
        ends, begins = table.end_offsets(), table.beginning_offsets()
        known = range(table.layout.count)
        sealed = {b for b in known if not table.layout.is_active(b)}
        segments = list_segments(table, known)
        latest = read_latest(table)
        stored = {(s.table_bucket, s.snapshot_id): s for s in table.snapshots()}
        for bucket in known:
            tb = TB(name, bucket)
            segs = segments.get(bucket, [])
            bounds = [(s.base_offset, s.end_offset) for s in segs]
            expected = begins[tb]  # W1: the stored log is contiguous from begin to end
            for base, end in bounds:
                if base != expected:
                    problems.append(f"{tb}: segment at {base}, expected {expected}")
                expected = end
            if expected != ends[tb]:
                problems.append(f"{tb}: segments end at {expected}, end offset {ends[tb]}")
            if any(not os.path.exists(s.file) for s in segs):
                problems.append(f"{tb}: a registered segment file is missing")
            bases = {b for b, _ in bounds} | {ends[tb]}
            ranges = sorted(r for t, r in acked.appends if t == tb)
            for previous, current in zip(ranges, ranges[1:]):
                if current.start < previous.end:
                    problems.append(f"{tb}: acknowledged ranges {previous} and {current} overlap")
            for r in ranges:
                if r.end > ends[tb]:
                    problems.append(f"{tb}: acknowledged {r} beyond end offset {ends[tb]}")
                elif r.start >= begins[tb] and not (r.start in bases and r.end in bases):
                    problems.append(f"{tb}: acknowledged {r} is not stored as segments")
                elif r.start < begins[tb] < r.end:
                    problems.append(
                        f"{tb}: acknowledged {r} is cut by beginning offset {begins[tb]}"
                    )
            mine = [sid for (t, sid) in acked.snapshots if t == tb]
            if mine and latest.get(bucket, 0) < max(mine) and bucket not in sealed:  # K7
                problems.append(
                    f"{tb}: latest snapshot {latest.get(bucket)} < acknowledged {max(mine)}"
                )
        for (tb, sid), snap in acked.snapshots.items():
            if tb.table != name:
                continue
            now = stored.get((tb, sid))
            if now is not None:
                if (now.log_offset, now.files) != (snap.log_offset, snap.files):
                    problems.append(f"{tb} snapshot {sid} changed: {now} != {snap}")
                if not all(os.path.exists(f) for f in now.files):
                    problems.append(f"{tb} snapshot {sid} lost files")
            elif (
                name,
                tb.bucket,
                sid,
            ) not in acked.deleted_snapshots and not acked.retention_interrupted:
                problems.append(f"{tb} snapshot {sid} vanished without retention deleting it")
            elif sid >= latest.get(tb.bucket, 0) and tb.bucket not in sealed:
                problems.append(f"{tb} snapshot {sid} (the newest) was deleted")
    now = testing.context(conn).server_time_ms()
    stored_leases = {i.lease_id: i for i in conn.leases()}
    for slot in (s for slots in stress.slots for s in slots):
        if not slot.exists:
            continue
        info = stored_leases.get(slot.lease_id)
        if info is None:
            if now <= slot.expires_ms + GRACE_MS:  # L11: never reclaimed before expiry + grace
                problems.append(
                    f"lease {slot.lease_id} gone although acknowledged until {slot.expires_ms}"
                )
        elif info.pins != slot.pins or _ms(info.expires_at) != slot.expires_ms:
            problems.append(
                f"lease {slot.lease_id}: stored {info.pins} until {_ms(info.expires_at)}, "
                f"acknowledged {slot.pins} until {slot.expires_ms}\n"
                + "\n".join(slot.history[-12:])
            )
    return problems


def metadata_consistency(conn) -> list[str]:
    """No orphan pin, lease or snapshot metadata: pins and lease pin arrays agree both ways,
    every lease record decodes and is live, every snapshot's and segment's files exist."""
    ctx = testing.context(conn)
    problems = []
    store, paths = ctx.store, ctx.paths
    lease_ids = store.children(paths.leases) or []
    arrays: dict[str, dict[tuple[str, int], int]] = {}
    for lease_id in lease_ids:
        path = paths.lease(lease_id)
        node = store.get(path)
        if node is None:
            continue
        try:
            record = LeaseRecord.decode(node, path)
        except lk.CorruptMetadataError as exc:
            problems.append(f"orphan lease: {exc}")
            continue
        if record.state != "live":
            problems.append(f"lease {lease_id} left in state {record.state!r}")
        if store.exists(paths.lease_pins(lease_id)) is None:
            problems.append(f"lease {lease_id} has no pins znode")
        arrays[lease_id] = {}
        for name in store.children(paths.lease_pins(lease_id)) or []:
            chunk_path = f"{paths.lease_pins(lease_id)}/{name}"
            table_id, chunk = paths.parse_lease_chunk(name)
            pin_chunk = PinChunk.decode(store.get(chunk_path), chunk_path, table_id, chunk)
            for bucket, sid in pin_chunk.array.items():
                arrays[lease_id][(table_id, bucket)] = sid
                if store.exists(paths.pin(table_id, bucket, sid, lease_id)) is None:
                    problems.append(
                        f"lease {lease_id} lists {table_id}/{bucket} snapshot {sid} without a pin"
                    )
    for name in TABLES:
        table = conn.table(name)
        tid = table.table_id
        for bucket in range(table.layout.count):
            node = store.get(paths.bucket(tid, bucket))
            if node is None:
                continue  # a new bucket never written
            state = BucketState.decode(node, paths.bucket(tid, bucket))
            ids = sorted(int(s) for s in store.children(paths.snapshots(tid, bucket)) or [])
            latest = state.latest_snapshot
            if state.sealed and latest not in ids:
                latest = None  # K7: its newest snapshot went (pinned older ones may stay)
            elif ids and (latest != ids[-1] or state.next_snapshot <= ids[-1]):
                problems.append(
                    f"{name}/{bucket}: bucket state {state} disagrees with snapshots {ids}"
                )
            if read_latest(table, [bucket]).get(bucket) != latest:
                problems.append(
                    f"{name}/{bucket}: latest-snapshot array disagrees with the bucket state"
                )
            for sid in ids:
                snap_path = paths.snapshot(tid, bucket, sid)
                files = SnapshotRecord.decode(store.get(snap_path).data, snap_path).files
                if not all(os.path.exists(ctx.warehouse.uri(f)) for f in files):
                    problems.append(
                        f"orphan snapshot metadata: {name}/{bucket} snapshot {sid} lost files"
                    )
                for holder in store.children(snap_path) or []:  # sealed buckets' too
                    where = f"{snap_path}/{holder} ({_sealed(table, bucket)} bucket {bucket})"
                    if holder not in lease_ids:
                        problems.append(f"orphan pin: {where}: lease {holder!r} does not exist")
                    elif arrays.get(holder, {}).get((tid, bucket)) != sid:
                        pinned = arrays.get(holder, {}).get((tid, bucket))
                        problems.append(
                            f"orphan pin: {where}: lease {holder!r} pins snapshot {pinned} there"
                        )
        problems += missing_segment_files(table, range(table.layout.count))
    return problems


def test_stress_with_zookeeper_kill(connect, spark, own_zk, stress_seconds, capsys):
    # R2, L3-L11, W1, W2, S2, R1, R4, R5 (§9): concurrent everything, a kill -9 mid-run
    seconds = stress_seconds
    conn = connect()
    conn.update_settings({"lease.expiry-grace": GRACE, "orphan.min-age": ORPHAN_MIN_AGE})
    for name in TABLES:
        table = conn.create_table(
            name, "id BIGINT, v STRING", "id", buckets=BUCKETS, properties=TABLE_PROPERTIES
        )
        table.append([{"id": i, "v": "seed"} for i in range(200)])
        table.snapshot(spark)
    stress = Stress(connect, spark, seconds)
    # L13: a keepalive lease held through the whole run, restarts included; 90 s outlasts a
    # client stuck 30 s in its reconnect (see OwnZooKeeper.restart)
    keeper = connect().lease("keepalive", "90s", keepalive=True, drop_on_exit=False)
    keeper_pins = keeper.acquire_latest(TABLES).acquired

    threads = [
        threading.Thread(target=stress.worker, args=(i,), daemon=True) for i in range(WORKERS)
    ]
    threads.append(threading.Thread(target=stress.checker, daemon=True))
    threads.append(threading.Thread(target=stress.latest_checker, daemon=True))
    start = time.monotonic()
    kills = [0.4] if seconds < 30 else [0.3, 0.65]
    downtimes = []
    with keeper:
        for thread in threads:
            thread.start()
        for at in kills:
            time.sleep(max(0.0, start + at * seconds - time.monotonic()))
            own_zk.kill()
            down = time.monotonic()
            time.sleep(2.0)  # workers hit the outage and ride it out
            own_zk.restart(wait_for=[conn])
            downtimes.append(time.monotonic() - down)
            time.sleep(1.0)
            stress.pause_workers()  # W1, S2, L7: what was acknowledged before the kill is there
            problems = verify_acknowledged(conn, stress)
            stress.violations += [f"after restart: {p}" for p in problems]
            stress.resume_workers()
            # L4: the keepalive lease moves its "orders" pins to the newest snapshots, so the
            # log below its old ones can go (R3) while "events" stays pinned at snapshot 1
            moved = keeper.acquire_latest("orders")
            assert not moved.unavailable  # K4: a new bucket's ancestors' snapshots instead
            keeper_pins.update(moved.acquired)  # L4: pins of buckets not acquired again stay
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        stress.stop.set()
        stress.resume.set()
        for thread in threads:
            thread.join(timeout=300)
        assert not any(t.is_alive() for t in threads), "a worker hung"
        assert keeper.alive, (
            f"the keepalive lease did not ride out the restart: {keeper._failure!r}"
        )  # L13
        assert keeper.info().pins == keeper_pins

    assert not stress.failures, "\n".join(stress.failures[:5])
    stress.violations += verify_acknowledged(conn, stress)
    stress.violations += metadata_consistency(conn)
    ended = time.monotonic()
    problems = check_latest(conn, spark, RESCALED, "latest-check-end")  # K3, S1: quiet
    assert problems is not None, "a latest snapshot went with retention stopped"
    stress.violations += problems
    stress.counts.add("latest checks")
    # R5, L10, L11: after a janitor pass no pin is left without its lease, on a sealed bucket's
    # snapshot neither, and no committed segment of any bucket ever lacks its file
    janitor.run_once(conn)
    stress.violations += [f"after a janitor pass: {p}" for p in metadata_consistency(conn)]
    stress.counts.add("end check ms", round(1000 * (time.monotonic() - ended)))

    # the end: drop every remaining lease, one more retention pass
    ctx = testing.context(conn)
    for lease_id in ctx.store.children(ctx.paths.leases) or []:
        conn.drop_kv_snapshot_lease(lease_id)
    for name in TABLES:  # K3: every active bucket, a new one included, gets its own snapshot
        conn.table(name).snapshot(spark)
    report = conn.run_retention()
    assert not report.errors, report.errors
    final = metadata_consistency(conn)  # R5, L10: no pin outlives its lease, sealed or not
    assert not ctx.store.children(ctx.paths.leases)
    for name in TABLES:  # R1, K7: with no pins left, only an active bucket's newest snapshot stays
        table = conn.table(name)
        snapshots = table.snapshots()
        active = [tb.bucket for tb in table.buckets]
        kept = sorted(s.table_bucket.bucket for s in snapshots)
        if kept != active:
            reasons = [
                f"{i.table_bucket.bucket}/{i.item_id} {i.action}: {i.reason}"
                for i in conn.retention_plan(name).items
                if i.kind == "snapshot" and i.table_bucket.bucket not in active
            ]
            final.append(
                f"R1, K7: {name}: snapshots of buckets {kept} kept, active {active}; the plan "
                f"now: {reasons}"
            )
        for snap in snapshots:
            pins = ctx.store.children(
                ctx.paths.snapshot(table.table_id, snap.table_bucket.bucket, snap.snapshot_id)
            )
            if pins:
                final.append(f"{name}: {snap.table_bucket} snapshot {snap.snapshot_id} pins {pins}")

    c = stress.counts
    summary = (
        f"STRESS SUMMARY {seconds:g}s x {WORKERS} workers: acquires={c['acquires']} "
        f"renews={c['renews']} "
        f"releases={c['releases']} drops={c['drops']} appends={c['appends']} (rows={c['rows']}) "
        f"snapshots={c['snapshots']} (calls={c['snapshot calls']}) retention "
        f"passes={c['retention passes']} "
        f"deleted items={c['deleted items']} (snapshots={c['deleted snapshots']} "
        f"segments={c['deleted segments']} "
        f"orphans={c['deleted orphans']} leases={c['deleted leases']}) expired "
        f"leases={c['expired leases']} splits={c['splits']} merges={c['merges']} "
        f"invariant checks={c['invariant checks']} (pins={c['pins checked']}) "
        f"latest checks={c['latest checks']} (skipped={c['latest checks skipped']}, "
        f"{c['latest check ms'] / 1000:.1f}s; at the end {c['end check ms'] / 1000:.1f}s) "
        f"violations={len(stress.violations) + len(final)} zookeeper kills={len(downtimes)} "
        f"(down {', '.join(f'{d:.1f}s' for d in downtimes)}) zookeeper errors ridden out="
        f"{c['zookeeper errors ridden out']}"
    )
    with capsys.disabled():
        print("\n" + summary)
    assert not stress.violations, "\n".join(stress.violations[:20])
    assert not final, "\n".join(final[:20])
