"""Races (docs/security.md) of log compaction (R8) with what else writes a bucket's log: appends
from other processes, a split of the bucket, retention deleting segments below snapshots and the
files merges replaced. Each loops until it has hit its window, then checks what users see: every
bucket's segments contiguous with their files, and a consumer reading from the beginning gets
every acknowledged record once, in offset order, with the offset, timestamp, op and values it
was appended with (W1, W3). test_compaction_faults.py has the readers and faults."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
from stress_checks import Rec, check_log, log_problems, read_all

import leasekit as lk
from leasekit import testing
from leasekit.log import compaction
from leasekit.log.state import read_states
from leasekit.retention import apply
from leasekit.zk import ConflictReason, SetData, TxnConflict

TB = lk.TableBucket
SCHEMA = "id BIGINT, v STRING"

APPENDER = textwrap.dedent("""
    import json, os, random, sys, time
    import leasekit as lk
    from leasekit import testing

    zookeeper, warehouse, namespace, name, seed, out, stop, pause = sys.argv[1:9]
    seed, pause = int(seed), float(pause)
    rng = random.Random(seed)
    conn = lk.connect(zookeeper, warehouse, namespace=namespace, timeout="30s")
    table = conn.table(name)
    clock = testing.context(conn).server_clock
    written, n = [], 0
    with open(out, "w") as f:
        while not os.path.exists(stop):
            if written and rng.random() < 0.2:
                rows = [["delete", k, None] for k in rng.sample(written, min(3, len(written)))]
                call = table.delete
            else:
                rows = []
                for _ in range(rng.randint(1, 6)):
                    n += 1
                    rows.append(["upsert", seed * 10_000_000 + n, f"s{seed}-{n}"])
                call = table.append
            before = clock.fresh_ms()
            ranges = call([{"id": k, "v": v} if op == "upsert" else {"id": k} for op, k, v in rows])
            after = clock.fresh_ms()
            written += [k for op, k, _ in rows if op == "upsert"]
            done = {str(tb.bucket): [r.start, r.end] for tb, r in ranges.items()}
            f.write(json.dumps({"rows": rows, "ranges": done, "t0": before, "t1": after}) + "\\n")
            f.flush()
            time.sleep(rng.uniform(0, pause))
    conn.close()
""")


class Appenders:
    """``count`` processes appending to (and deleting from) table ``name``, up to ``pause``
    seconds apart, until ``stop``; ``stop`` gives what they acknowledged, each append as {rows,
    ranges, t0, t1}: its rows (op, id, v) in order, its offset range per bucket, the ZooKeeper
    clock around the call."""

    def __init__(
        self, conn: lk.Connection, name: str, count: int, tmp: Path, pause: float = 0.01
    ) -> None:
        self.stop_file = tmp / f"{name}.stop"
        self.outs = [tmp / f"{name}-{i}.jsonl" for i in range(count)]
        self.errs = [tmp / f"{name}-{i}.err" for i in range(count)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.procs = []
        for i, (out, err) in enumerate(zip(self.outs, self.errs)):
            args = (name, i + 1, out, self.stop_file, pause)
            argv = [sys.executable, "-c", APPENDER, conn.zookeeper, conn.warehouse,
                    conn.namespace, *map(str, args)]  # fmt: skip
            with open(err, "w") as errors:
                self.procs.append(subprocess.Popen(argv, env=env, stderr=errors))

    def wait_running(self, timeout: float = 60) -> None:
        """Until each process has acknowledged an append (they take seconds to start)."""
        deadline = time.monotonic() + timeout
        while not all(out.exists() and out.stat().st_size for out in self.outs):
            for proc, err in zip(self.procs, self.errs):
                assert proc.poll() is None, err.read_text()[-3000:]
            assert time.monotonic() < deadline, "the appenders did not start"
            time.sleep(0.05)

    def acknowledged(self) -> list[dict]:
        appends = []
        for out in self.outs:
            if out.exists():
                appends += [json.loads(line) for line in out.read_text().splitlines() if line]
        return appends

    def stop(self) -> list[dict]:
        self.stop_file.touch()
        for proc, err in zip(self.procs, self.errs):
            try:
                proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == 0, err.read_text()[-3000:]
        return self.acknowledged()

    def __enter__(self) -> Appenders:
        return self

    def __exit__(self, *exc: object) -> None:  # a test that failed: kill them
        self.stop_file.touch()
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def connections(stack: contextlib.ExitStack, conn: lk.Connection, n: int) -> list:
    """``n`` more connections to the namespace of ``conn``, closed with ``stack``."""
    address, warehouse, namespace = conn.zookeeper, conn.warehouse, conn.namespace
    return [
        stack.enter_context(lk.connect(address, warehouse, namespace=namespace)) for _ in range(n)
    ]


class Loops:
    """Threads each running a body over and over until ``stop``; an exception stops them all
    and fails the test there."""

    def __init__(self) -> None:
        self.halt = threading.Event()
        self.failures: list[str] = []
        self.threads: list[threading.Thread] = []

    def start(self, name: str, body: Callable[[], None]) -> None:
        def loop() -> None:
            while not self.halt.is_set():
                try:
                    body()
                except Exception:
                    self.failures.append(f"{name}: {traceback.format_exc()}")
                    self.halt.set()

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def __enter__(self) -> Loops:
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt.set()

    def stop(self) -> None:
        self.halt.set()
        for thread in self.threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in self.threads), "a loop hung"
        assert not self.failures, "\n".join(self.failures[:3])


def record_originals(monkeypatch) -> dict[tuple[int, int], tuple[int, int]]:
    """(bucket, offset) -> (timestamp, id) of the records of every appended (never merged)
    segment that compaction in this process lists: what they must keep once merged (R8)."""
    originals: dict[tuple[int, int], tuple[int, int]] = {}
    seen: set[str] = set()
    real = compaction.list_segments

    def listing(table, buckets):
        out = real(table, buckets)
        for bucket, segs in out.items():
            for seg in segs:
                if seg.first_timestamp_ms is not None or seg.file in seen:
                    continue
                try:
                    ids = pq.read_table(seg.file, columns=["id"]).column("id").to_pylist()
                except FileNotFoundError:
                    continue  # retention took it meanwhile
                seen.add(seg.file)
                for i, key in enumerate(ids):
                    originals[(bucket, seg.base_offset + i)] = (seg.timestamp_ms, key)
        return out

    monkeypatch.setattr(compaction, "list_segments", listing)
    return originals


def count_conflicts(
    monkeypatch, conn: lk.Connection, counted: Callable[[TxnConflict], bool]
) -> list[TxnConflict]:
    """The conflicts of this process's transactions on ``conn`` that ``counted`` accepts."""
    store = testing.context(conn).store
    real = store.commit
    seen: list[TxnConflict] = []

    def commit(ops):
        try:
            return real(ops)
        except TxnConflict as exc:
            if counted(exc):
                seen.append(exc)
            raise

    monkeypatch.setattr(store, "commit", commit)
    return seen


def on_state(exc: TxnConflict) -> bool:
    """A merge that gave way to another write of its bucket's state."""
    return exc.reason == ConflictReason.VERSION and isinstance(exc.op, SetData)


def test_compaction_racing_appends_from_processes(conn, monkeypatch, tmp_path):
    # R8, W1, W3: three processes append and delete while this one merges their segments in a
    # loop. Guard: the swap writes the bucket state at the version it read, so an append that
    # committed meanwhile makes it rebuild on the new state (without it, the merge writes the
    # old end offset back and appends after it collide or vanish).
    table = conn.create_table("t", SCHEMA, "id", buckets=2)
    originals = record_originals(monkeypatch)
    hits = count_conflicts(monkeypatch, conn, on_state)
    merged = 0
    with Appenders(conn, "t", 3, tmp_path) as appenders:
        appenders.wait_running()
        started = time.monotonic()
        while time.monotonic() - started < 5.0 or (
            len(hits) < 3 and time.monotonic() - started < 40
        ):
            merged += table.compact_log().written
            time.sleep(0.02)
        appends = appenders.stop()
    merged += table.compact_log().written
    problems = check_log(conn, "t", appends, originals)
    assert not problems, "\n".join(problems[:10])
    assert len(hits) >= 3 and merged >= 5, (len(hits), merged)  # the window was hit


def seal_hits(monkeypatch) -> list[str]:
    """The state paths where a merge of this process read its bucket active, failed its commit,
    and read it sealed when it rebuilt: a seal that landed inside the merge's window."""
    hits: list[str] = []
    last: dict[str, bool] = {}
    real = compaction.BucketState

    class Seen:
        @staticmethod
        def decode(node, path):
            state = real.decode(node, path)
            if last.get(path) is False and state.sealed:
                hits.append(path)
            last[path] = state.sealed
            return state

    monkeypatch.setattr(compaction, "BucketState", Seen)
    return hits


def kv_state(got: dict[int, list[Rec]], upto: dict[int, int], known: int) -> dict[int, str]:
    """K3, S1: the state of the keys at ``upto`` (the active buckets' offsets when the table had
    ``known`` buckets, the others sealed): every sealed bucket's records, parents before
    children (K2), then each active bucket's below its offset; the last write of a key wins."""
    state: dict[int, str] = {}
    for bucket in range(known):
        for _, _, op, key, value in got[bucket][: upto.get(bucket)]:
            if op == "delete":
                state.pop(key, None)
            else:
                state[key] = value
    return state


def spark_state(spark, table, offsets: dict[int, int]) -> dict[int, str]:
    from leasekit import spark as lks

    return {r["id"]: r["v"] for r in lks.read_at(spark, table, offsets).collect()}


def seal_problems(table) -> list[str]:
    """K1: every sealed bucket's log ends where it was sealed, and its state says it is sealed
    (an active one's that it is not)."""
    ends = table.end_offsets()
    problems = [
        f"K1: {lin.table_bucket} sealed at {lin.sealed_at}, ends at {ends[lin.table_bucket]}"
        for lin in table.lineage()
        if lin.state == "sealed" and ends[lin.table_bucket] != lin.sealed_at
    ]
    states = read_states(table, range(table.layout.count))
    wrong = [b for b, s in enumerate(states) if s and s.sealed == table.layout.is_active(b)]
    if wrong:
        problems.append(f"K1: the states of buckets {wrong} disagree with the layout on a seal")
    return problems


def rescale_meeting_merges(table, other: lk.Connection, swapping: threading.Event) -> None:
    """Split the table's one active bucket, or merge its two back, as soon as a merge of their
    segments on ``other`` starts its swap (or after 2 s if none does)."""
    active = list(table.refresh().active)
    swapping.clear()
    merging = threading.Thread(
        target=lambda: [other.table("t").compact_log(b) for b in active], name="compactor"
    )
    merging.start()
    swapping.wait(2.0)
    if len(active) == 1:
        table.split_bucket(active[0])
    else:
        table.merge_buckets(*active)
    merging.join(timeout=60)
    assert not merging.is_alive()


def test_compaction_racing_split_of_its_bucket(conn, spark, monkeypatch, tmp_path):
    # R8, K1, K3: two processes append while this one alternately splits a bucket and merges
    # its two children back, each time as a merge of the segments of the buckets it seals, on
    # a second connection, starts its swap. Guard: the bucket-state version check again, now
    # against the seal (without it, a merge writes the parent's state back as it read it:
    # appends committed since fall out of its end offset, and its seal may go).
    table = conn.create_table("t", SCHEMA, "id", buckets=1, properties={"log.segment.min-merge": 2})
    other = lk.connect(conn.zookeeper, conn.warehouse, namespace=conn.namespace)
    originals = record_originals(monkeypatch)
    hits = seal_hits(monkeypatch)
    swapping = threading.Event()
    real_swap = compaction._swap

    def swap(*args):
        swapping.set()
        return real_swap(*args)

    monkeypatch.setattr(compaction, "_swap", swap)
    samples: list[tuple[dict[int, int], int, dict[int, str]]] = []
    rescales = 0
    with other, Appenders(conn, "t", 2, tmp_path) as appenders:
        appenders.wait_running()
        started = time.monotonic()
        while rescales < 8 or (not hits and time.monotonic() - started < 45):
            if rescales == 1:  # K3: the state before a rescale, read again at the end
                active = table.refresh().active
                upto = {
                    tb.bucket: n for tb, n in table.end_offsets().items() if tb.bucket in active
                }
                samples.append((upto, table.layout.count, spark_state(spark, table, upto)))
            time.sleep(0.2)  # a few segments to merge in each
            rescale_meeting_merges(table, other, swapping)
            rescales += 1
        appends = appenders.stop()
    assert table.compact_log().written > 0  # sealed logs are merged like any other
    got = read_all(conn, "t")
    problems = check_log(conn, "t", appends, originals, got) + seal_problems(table)
    for upto, known, before in samples:  # K3: read the same before and after
        if not before == spark_state(spark, table, upto) == kv_state(got, upto, known):
            problems.append(f"K3: the state at {upto} changed")
    assert not problems, "\n".join(problems[:10])
    assert hits and rescales >= 8, (hits, rescales)  # the window was hit


def newest_offsets(table) -> dict[lk.TableBucket, int]:
    """The log offset of each bucket's newest snapshot."""
    out: dict[lk.TableBucket, int] = {}
    for snap in table.snapshots():
        out[snap.table_bucket] = max(out.get(snap.table_bucket, 0), snap.log_offset)
    return out


def below_snapshots(table) -> list[str]:
    """R3: no bucket's beginning is past its newest snapshot's offset (read in this order, so a
    snapshot taken in between only makes the check weaker)."""
    begins = table.beginning_offsets()
    newest = newest_offsets(table)
    return [
        f"R3: {tb} begins at {begins[tb]}, past its newest snapshot's offset {newest[tb]}"
        for tb in newest
        if begins[tb] > newest[tb]
    ]


def slow_deletes(monkeypatch) -> None:
    """Retention deletes segments up to 200 ms after it planned them: a wider window for a
    merge to replace some meanwhile (timing only)."""
    real = apply.delete_segments

    def delete_segments(*args):
        time.sleep(random.uniform(0, 0.2))
        return real(*args)

    monkeypatch.setattr(apply, "delete_segments", delete_segments)


class Gate:
    """Merges and retention pass together; a snapshot waits until none is under way and holds
    them off while it runs."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.passing = 0
        self.shut = False

    @contextlib.contextmanager
    def through(self) -> Iterator[None]:
        with self.cond:
            self.cond.wait_for(lambda: not self.shut)
            self.passing += 1
        try:
            yield
        finally:
            with self.cond:
                self.passing -= 1
                self.cond.notify_all()

    @contextlib.contextmanager
    def closed(self) -> Iterator[None]:
        with self.cond:
            self.shut = True
            self.cond.wait_for(lambda: self.passing == 0)
        try:
            yield
        finally:
            with self.cond:
                self.shut = False
                self.cond.notify_all()


def test_compaction_racing_retention_below_snapshots(conn, spark, monkeypatch, tmp_path):
    # R8, R3, R4: two processes append while this one merges segments in a loop and runs
    # retention in a loop (log.retention 0s, one snapshot kept, orphan.min-age 0s), both let
    # loose together after each Spark snapshot. Guard: retention deletes a segment only as its
    # plan saw it (extent and file); one a merge replaced since, and all after it, stays
    # (without it, retention deletes a merged segment that reaches past the snapshot).
    conn.update_settings({"orphan.min-age": "0s"})
    props = {"log.retention": "0s", "kv.snapshot.num-retained": 1, "log.segment.min-merge": 2}
    table = conn.create_table("t", SCHEMA, "id", buckets=2, properties=props)
    originals = record_originals(monkeypatch)
    slow_deletes(monkeypatch)
    counts: Counter[str] = Counter()
    violations: list[str] = []
    gate = Gate()

    def merge() -> None:
        with gate.through():
            done = merging.compact_log()
        counts.update(merged=done.written, lost=done.lost)

    def retain() -> None:
        with gate.through():
            report = retaining.run_retention()
        counts.update(i.kind for i in report.deleted)
        for error in report.errors:  # R8: a segment a merge replaced since the plan is kept
            assert "replaced by a merge" in error, error
            counts["kept"] += 1

    def check() -> None:
        found = below_snapshots(checking) + log_problems(checking, quiet=False)
        violations.extend(p for p in found if p not in violations)
        counts["checks"] += 1

    with contextlib.ExitStack() as stack:
        opened = connections(stack, conn, 3)
        merging, checking, retaining = opened[0].table("t"), opened[1].table("t"), opened[2]
        appenders = stack.enter_context(Appenders(conn, "t", 2, tmp_path, pause=0.1))
        loops = stack.enter_context(Loops())
        appenders.wait_running()
        for body in (merge, retain, check):
            loops.start(body.__name__, body)
        started = time.monotonic()
        while counts["snapshots"] < 3 or (
            counts["kept"] + counts["lost"] < 2 and time.monotonic() - started < 45
        ):
            with gate.closed():  # a file a merge replaced would go at once (0s) under Spark
                table.compact_log()  # few files for Spark to read, then new small ones...
                time.sleep(0.3)
                counts["snapshots"] += bool(table.snapshot(spark))
            time.sleep(0.5)  # ...on both sides of its offset: merges and retention race now
            assert not loops.halt.is_set(), "\n".join(loops.failures[:3])
        loops.stop()
        appends = appenders.stop()
    assert not (table.compact_log().lost or conn.run_retention().errors)
    problems = violations + below_snapshots(table) + check_log(conn, "t", appends, originals)
    assert not problems, "\n".join(problems[:10])
    # retention deleted below snapshots, and replaced files; the window was hit
    assert counts["segment"] and counts["orphan"] and counts["kept"] + counts["lost"] >= 2, counts
