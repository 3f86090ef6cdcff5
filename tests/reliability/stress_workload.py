"""The stress run's workload: 8 workers doing random lease calls, appends, Spark snapshots,
retention passes, lease expiry, rescales and merges of small log segments, beside an R2 and
log checker and a latest-snapshots checker; what they saw goes into the run's records and
violations."""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from collections.abc import Callable

from stress_checks import check_latest, log_problems, uncovered_buckets
from stress_plan import (
    BUCKETS,
    COMPACT_EVERY,
    EXPIRE_EVERY,
    GRACE_MS,
    LATEST_CHECK_EVERY,
    MAX_ACTIVE,
    RESCALE_EVERY,
    RESCALED,
    RETENTION_EVERY,
    SHARED_LEASES,
    SNAPSHOT_EVERY,
    TABLES,
    TB,
    WORKERS,
    Acked,
    Counts,
    OwnLease,
    epoch_ms,
)

import leasekit as lk
from leasekit import testing
from leasekit.leases import upkeep as lease_upkeep
from leasekit.snapshots.catalog import list_snapshots


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
        self.next_compact = 0.0

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

    def op_compact(self, conn, tables, rng) -> None:
        if not self._gate("next_compact", COMPACT_EVERY):
            return self.op_append(conn, tables, rng)
        table = tables[rng.choice(TABLES)]
        count = table.refresh().layout.count
        done = table.compact_log(None if rng.random() < 0.3 else rng.randrange(count))  # R8
        self.counts.add("compactions")
        self.counts.add("merged segments", done.merged)
        self.counts.add("merged into", done.written)
        self.counts.add("merges lost", done.lost)

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
                    uncovered = uncovered_buckets(tables[name].refresh(), result.acquired)
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
                    if epoch_ms(info.renewed_at) <= slot.expires_ms + GRACE_MS:
                        self.violation(
                            f"{slot.lease_id} was recreated at {epoch_ms(info.renewed_at)}, "
                            f"acknowledged until {slot.expires_ms}"
                        )
                    slot.pins = {}
                    self.counts.add("own leases recreated")
                slot.exists, slot.created_at = True, info.created_at
                slot.pins.update(result.acquired)
                slot.expires_ms = epoch_ms(result.expires_at)
                self._read_back(slot, info)
                self.counts.add("acquires")
            elif kind == "renew":
                slot.expires_ms = epoch_ms(handle.renew())  # L7
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
        if (info.pins, epoch_ms(info.expires_at), info.created_at) != (
            slot.pins,
            slot.expires_ms,
            slot.created_at,
        ):
            self.violation(
                f"{slot.lease_id} reads back pins {info.pins} until {epoch_ms(info.expires_at)}, "
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
            (self.op_compact, 4),
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
        # R2, L5: every pin of an unexpired lease names a snapshot whose files all exist;
        # W1, R8: every bucket's segments follow each other and every listed file exists
        conn = self.connect()
        tables = {name: conn.table(name) for name in TABLES}
        while not self.stop.is_set():
            try:
                self._check_pins(conn, tables)
                for table in tables.values():  # every bucket ever, sealed ones too
                    for problem in log_problems(table, quiet=False):
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
        live = [i for i in conn.leases() if epoch_ms(i.expires_at) >= now]
        stored = {
            (s.table_bucket, s.snapshot_id): s
            for table in tables.values()
            for s in list_snapshots(table, range(table.refresh().layout.count))
        }
        for info in live:
            for tb, sid in info.pins.items():
                if sid == 0:
                    continue  # L15: pinned as empty, nothing to keep
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
            and epoch_ms(again.expires_at) >= now
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
