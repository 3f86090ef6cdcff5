"""leasekit on a 3-server ZooKeeper ensemble (DESIGN §3 "at scale"): leases, consumer groups
and retention through a comma-separated connect string, and a failover stress in which the
leader is killed with SIGKILL mid-run and later restarted: no acknowledged write is lost, no
pin of a live lease names deleted files, and every client carries on in its own session.

Run the long form with ``pytest tests/scale/test_ensemble.py --ensemble-seconds 60``.
"""

from __future__ import annotations

import os
import random
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import pytest

import leasekit as lk
from leasekit import testing
from leasekit.log.markers import in_flight
from leasekit.log.segments import list_segments
from leasekit.log.state import read_states
from leasekit.snapshots.catalog import list_snapshots
from leasekit.snapshots.register import Written, register
from leasekit.testing import seed_empty_snapshots, seed_history

pytestmark = pytest.mark.slow

TB = lk.TableBucket


def _ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def _eventually(check, seconds: float = 10.0):
    """``check()`` once it is truthy (a follower may answer a moment behind the leader)."""
    deadline = time.monotonic() + seconds
    while (value := check()) is None or value is False:
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.05)
    return value


# -- the public paths through the ensemble's connect string -----------------------------------


def test_connect_string_names_every_server(ensemble, ensemble_connect):
    conn = ensemble_connect()
    assert conn.zookeeper == ensemble.connect_string
    assert len(ensemble.connect_string.split(",")) == 3
    modes = sorted(ensemble.mode(i) for i in range(3))
    assert modes == ["follower", "follower", "leader"]


def test_leases_on_the_ensemble(ensemble, ensemble_connect):
    conn = ensemble_connect()
    table = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    seed_empty_snapshots(testing.context(conn), table)
    lease = conn.lease("q3", "1h")
    acquired = lease.acquire_latest("orders")
    assert acquired.acquired == {tb: 1 for tb in table.buckets} and not acquired.unavailable
    expires = lease.renew()
    assert expires == lease.info().expires_at
    lease.release([TB("orders", 0)])
    assert lease.info().pins == {tb: 1 for tb in table.buckets if tb.bucket != 0}
    # every server holds the lease: a client of one server alone reads it
    for address in ensemble.addresses:
        with lk.connect(address, conn.warehouse, namespace=conn.namespace, timeout="10s") as one:
            _eventually(lambda one=one: [i.lease_id for i in one.leases()] == ["q3"])
            assert one.lease("q3").info().pins == lease.info().pins
    assert lease.drop() is True
    assert conn.leases() == []


def test_consumer_group_on_the_ensemble(ensemble_connect):
    conn = ensemble_connect()
    orders = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    orders.append([{"id": i} for i in range(80)])
    members = [
        ensemble_connect().consumer(
            "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
        )
        for _ in range(2)
    ]
    try:
        seen: set[tuple[TB, int]] = set()
        deadline = time.monotonic() + 30
        ends = orders.end_offsets()

        def settled() -> bool:
            return len(seen) == 80 and all(
                len(m.assignment()) == 2
                and all(m.position(tb) == ends[tb] for tb in m.assignment())
                for m in members
            )

        while not settled():
            assert time.monotonic() < deadline, "the group did not split the buckets"
            for m in members:
                for tb, data in m.poll(timeout="0.05s").items():
                    seen.update((tb, o) for o in data.column("_offset").to_pylist())
        # at least once: a bucket that moved is read again from the group's (no) commit
        assert seen == {(tb, o) for tb, end in ends.items() for o in range(end)}
        assert not members[0].assignment() & members[1].assignment()
        assert {tb for m in members for tb in m.assignment()} == set(orders.buckets)
        assert {(m.member_id, frozenset(m.assignment())) for m in members} == {
            (i.member_id, frozenset(i.buckets)) for i in conn.group_members("g")
        }
        for m in members:
            m.commit()

        # another client may be served by a follower a moment behind the members' servers
        # (ZooKeeper orders each client's view, not all clients'): it sees the commits soon
        def described():
            frame = conn.describe_group("g").set_index("bucket")
            return frame if frame["current_offset"].notna().all() else None

        frame = _eventually(described)
        assert {TB("orders", b): int(frame.loc[b, "current_offset"]) for b in range(4)} == ends
        assert (frame["lag"] == 0).all()
    finally:
        for m in members:
            m.close()
    _eventually(lambda: conn.group_members("g") == [])


def test_retention_on_the_ensemble(ensemble_connect):
    conn = ensemble_connect()
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    seed_history(
        testing.context(conn), table, snapshots=4, segments=4, rows_per_segment=10, file_bytes=16
    )
    conn.lease("report", "1h").acquire({TB("t", 0): 1})
    plan = conn.retention_plan("t")
    snaps = {(i.table_bucket.bucket, i.item_id): i for i in plan.items if i.kind == "snapshot"}
    assert snaps[(0, 1)].action == "keep" and snaps[(0, 1)].reason.startswith(
        "pinned by lease report"
    )
    deletes = {key for key, i in snaps.items() if i.action == "delete"}
    assert deletes == {(0, 2), (1, 1), (1, 2)}
    pinned_files = [s for s in table.snapshots(0) if s.snapshot_id == 1][0].files
    report = conn.run_retention("t")
    assert not report.errors
    assert {
        (i.table_bucket.bucket, i.item_id) for i in report.deleted if i.kind == "snapshot"
    } == deletes
    assert {(s.table_bucket.bucket, s.snapshot_id) for s in table.snapshots()} == {
        (0, 1),
        (0, 3),
        (0, 4),
        (1, 3),
        (1, 4),
    }
    assert all(os.path.exists(f) for f in pinned_files)
    assert not [
        i for i in conn.retention_plan("t").items if i.kind == "snapshot" and i.action == "delete"
    ]


# -- leader kill -9 in the middle of a stress -----------------------------------------------

TABLES = ("orders", "events")
BUCKETS = 4
WORKERS = 4
LEASE_SECONDS = 30.0
GRACE_MS = 1000
SETTINGS = {"lease.expiry-grace": "1s", "orphan.min-age": "15s"}
TABLE_PROPERTIES = {"kv.snapshot.num-retained": 1, "log.retention": "2s"}


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


def test_leader_kill_during_stress(ensemble, ensemble_connect, ensemble_seconds, capsys):
    seconds = ensemble_seconds
    conn = ensemble_connect()
    conn.update_settings(SETTINGS)
    for name in TABLES:
        table = conn.create_table(
            name, "id BIGINT, v STRING", "id", buckets=BUCKETS, properties=TABLE_PROPERTIES
        )
        table.append([{"id": i, "v": "seed"} for i in range(100)])
        assert len(snapshot_without_spark(table)) == BUCKETS
    stress = FailoverStress(ensemble_connect, seconds)
    threads = [
        threading.Thread(target=stress.worker, args=(i,), daemon=True) for i in range(WORKERS)
    ]
    threads.append(threading.Thread(target=stress.checker, daemon=True))
    start = time.monotonic()
    for thread in threads:
        thread.start()
    killed = None
    try:
        time.sleep(max(0.0, start + 0.35 * seconds - time.monotonic()))
        killed = ensemble.wait_leader()
        ensemble.kill(killed)
        stress.killed_at = kill_time = time.monotonic()
        new_leader = ensemble.wait_leader(timeout=30)
        election = time.monotonic() - kill_time
        assert new_leader != killed
        # the two left serve on their own for a while, then the killed one comes back
        time.sleep(max(2.0, start + 0.6 * seconds - time.monotonic()))
        ensemble.restart(killed)
        killed = None
        rejoined = time.monotonic() - kill_time
        assert sorted(ensemble.mode(i) for i in range(3)) == ["follower", "follower", "leader"]
        time.sleep(max(0.0, start + seconds - time.monotonic()))
    finally:
        stress.stop.set()
        for thread in threads:
            thread.join(timeout=120)
        if killed is not None:
            ensemble.restart(killed)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not stress.failures, "\n".join(stress.failures[:5])
    lost = stress.lost_writes(conn)

    c = stress.counts
    acknowledged = (
        c["appends"]
        + c["commits"]
        + c['snapshots']
        + sum(c[f"lease {k}s"] for k in ("acquire", "renew", "release", "drop"))
    )
    failover = max((t for t in stress.first_after_kill if t is not None), default=float("nan"))
    summary = (
        f"ENSEMBLE STRESS SUMMARY {seconds:g}s x {WORKERS} workers on 3 servers: writes "
        "acknowledged="
        f"{acknowledged} (appends={c['appends']} commits={c['commits']} bucket "
        f"snapshots={c['snapshots']} "
        f"lease acquires={c['lease acquires']} renews={c['lease renews']} "
        f"releases={c['lease releases']} "
        f"drops={c['lease drops']}) lost={len(lost)} (checked append ranges={c['appends checked']} "
        f"leases={c['leases checked']} offsets={c['offsets checked']}) retention "
        f"passes={c['retention passes']} "
        f"(deleted snapshots={c['deleted snapshots']} segments={c['deleted segments']}) "
        f"pins checked={c['pins checked']} pins on deleted files={c['pins on deleted files']} "
        f"errors ridden out={c['errors ridden out']} failover: election {election:.2f}s, every "
        "worker writing "
        f"again after {failover:.2f}s, killed server rejoined after {rejoined:.1f}s; ops after the "
        "kill per "
        f"worker={stress.after_kill} sessions "
        f"kept={sum(a == b for a, b in stress.sessions)}/{len(stress.sessions)}"
    )
    with capsys.disabled():
        print("\n" + summary)
    assert not lost, "\n".join(lost[:20])
    assert not stress.violations, "\n".join(stress.violations[:20])
    assert all(n > 0 for n in stress.after_kill), (
        f"a worker did no work after the kill: {stress.after_kill}"
    )
    # sessions moved to another server within their timeout: the same session, ephemerals kept
    assert len(stress.sessions) == WORKERS and all(a == b for a, b in stress.sessions), (
        stress.sessions
    )
    assert c["pins checked"] > 0 and c["retention passes"] > 0 and c["deleted snapshots"] > 0
