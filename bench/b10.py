"""B10: takeover after a member is killed with SIGKILL (target: its buckets consumed by the
other members within session_timeout + 1 s).

A 300-bucket table with 20 records in every bucket is consumed by a group of three members
with a ``session_timeout`` of 2 s (sticky assignor): two consumers in this process, each polled
by a thread of its own (auto-commit on), and one in a separate OS process
(``python -m bench.b10_member``) that commits its positions after every poll and reports its
state on stdout. It joins last, so it is not the group's leader. Once the group is settled
(every member at the latest generation with its share claimed, the process caught up and its
offsets committed), the process is killed with SIGKILL; then one record is appended to each of
its buckets. The figure runs from the kill until, for every one of those buckets, a surviving
member's poll has returned the new record. Nothing tells the group the process died: its member
znode goes when ZooKeeper expires its session (the server checks sessions every 500 ms), then
the leader reassigns and the survivors claim the buckets, whose owner znodes still name the dead
member, and read from its committed offsets. Each new record must be returned once, by the
bucket's owner in the new assignment, starting exactly at the offset the killed member had
committed. Every run starts a new process, which takes its share from the two survivors.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leasekit import testing

from .common import Benchmark, Outcome, load_average, log, median, settle, spread, temp_warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit.connection import Connection
    from leasekit.zk.formats import AssignmentRecord

    from .members import AssignmentWatch, PolledMember

__all__ = ["BENCHMARK", "run"]

SESSION_TIMEOUT_S = 2.0
FULL = {
    "buckets": 300,
    "members_here": 2,
    "records_per_bucket": 20,
    "session_timeout": "2s",
    "poll_timeout": "0.5s",
}
LARGE = {**FULL, "buckets": 10_000, "members_here": 49}
QUICK = {**FULL, "buckets": 30}
QUICK_LARGE = {**FULL, "buckets": 1_000, "members_here": 11}
SETTLE_TIMEOUT = 300.0
TAKEOVER_TIMEOUT = 30.0
REPO = Path(__file__).resolve().parent.parent


class _Process:
    """The member in a separate OS process, with the last state it reported."""

    def __init__(self, conn: Connection, table: str, group: str, session_timeout: str) -> None:
        self.state: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stderr = tempfile.TemporaryFile(
            mode="w+"
        )  # a pipe nobody reads could fill and block it
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.b10_member",
                conn.warehouse,
                conn.namespace,
                table,
                group,
                session_timeout,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="bench-b10-process")
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout or ():
            with self._lock:
                self.state = json.loads(line)

    def last(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.state)

    def kill(self) -> float:
        """SIGKILL now; the ``perf_counter`` time of the kill."""
        killed = time.perf_counter()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)
        return killed

    def stop(self) -> str:
        """Kill it if still running; its stderr."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._stderr.seek(0)
        return self._stderr.read()


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    """Both sizes, one warehouse each: the headline is the first (3 members over 300 buckets);
    the second (50 members over 10,000 buckets) is checked against the same target."""
    p, large = (QUICK, QUICK_LARGE) if quick else (FULL, LARGE)
    small = _run_size(p, runs)
    big = _run_size(large, runs)
    figures = small[0]
    size = large["members_here"] + 1
    figures[f"at_{size}_members_{large['buckets']}_buckets"] = big[0]
    figures["note"] += (
        f"; with {size} members over {large['buckets']:,} buckets: {big[0]['value']:.3f} s "
        f"({big[0]['spread']['min']:.3f}–{big[0]['spread']['max']:.3f}), " + big[0]["note"]
    )
    checks = {**small[1], **{f"{k}_with_{size}_members": v for k, v in big[1].items()}}
    checks[f"takeover_with_{size}_members_within_{SESSION_TIMEOUT_S + 1:g}s"] = (
        big[0]["value"] <= SESSION_TIMEOUT_S + 1.0
    )
    parameters = {**p, "large_buckets": large["buckets"], "large_members": size}
    return Outcome(
        figures["value"],
        figures,
        small[2] + big[2],
        {**parameters, "runs": runs, "quick": quick},
        checks,
    )


def _run_size(
    p: dict[str, Any], runs: int
) -> tuple[dict[str, Any], dict[str, bool], list[dict[str, Any]]]:
    """A warehouse of its own, a warm-up and ``runs`` timed takeovers at size ``p``: (figures,
    checks, runs)."""
    import pyarrow as pa

    from .members import AssignmentWatch, PolledMember, ids_per_bucket

    results: list[dict[str, Any]] = []
    checks = {
        "from_the_committed_offsets": True,
        "each_new_record_once_by_its_new_owner": True,
        "killed_member_was_caught_up": True,
    }
    size = p["members_here"] + 1
    with temp_warehouse("B10") as conn:
        name, group = "orders", "b10"
        table = conn.create_table(name, "id BIGINT", "id", buckets=p["buckets"])
        table.append(pa.table({"id": ids_per_bucket(p["buckets"], p["records_per_bucket"])}))
        watch = AssignmentWatch(conn, group)
        options = {
            "session_timeout": p["session_timeout"],
            "auto_offset_reset": "earliest",
            "poll_timeout": p["poll_timeout"],
        }
        survivors = [
            PolledMember(conn, [name], group, name=f"m{k}", **options).start()
            for k in range(p["members_here"])
        ]
        try:
            for i in range(runs + 1):  # run 0 warms up, untimed
                settle(None)
                result, run_checks = _one_run(conn, table, group, watch, survivors, p)
                label = "warm-up" if i == 0 else f"run {i}/{runs}"
                log(
                    f"B10 ({size} members, {p['buckets']:,} buckets): {label}: takeover "
                    f"{result['takeover_s']:.3f} s (member gone {result['gone_s']:.3f} s, "
                    f"assignment published {result['published_s']:.3f} s, buckets claimed and read "
                    f"{result['claimed_s']:.3f} s), {result['taken_over']} buckets taken over, "
                    "checks "
                    f"{'ok' if all(run_checks.values()) else run_checks}"
                )
                if i == 0:
                    continue
                results.append(result)
                for key, ok in run_checks.items():
                    checks[key] &= ok
        finally:
            for m in survivors:
                m.stop()
            for m in survivors:
                m.join()
            watch.close()
            errors = [f"{m.name}: {m.error!r}" for m in survivors if m.error is not None]
            if errors:
                raise RuntimeError("B10: a member failed: " + "; ".join(errors))
    return _summary(results), checks, results


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures over every timed run: medians and the spread of the takeover."""
    takeover = [r["takeover_s"] for r in results]
    figures = {
        "value": round(median(takeover), 3),
        "spread": spread(takeover),
        "session_timeout_s": SESSION_TIMEOUT_S,
        "gone_s": round(median([r["gone_s"] for r in results]), 3),
        "published_s": round(median([r["published_s"] for r in results]), 3),
        "claimed_s": round(median([r["claimed_s"] for r in results]), 3),
        "after_gone_s": round(median([r["takeover_s"] - r["gone_s"] for r in results]), 3),
        "append_s": round(median([r["append_s"] for r in results]), 3),
        "taken_over": round(median([r["taken_over"] for r in results])),
        "load_average": median([r["load_average"] or 0.0 for r in results]),
    }
    figures["note"] = (
        f"session_timeout {SESSION_TIMEOUT_S:g} s: member znode gone after {figures['gone_s']:.2f} "
        "s, assignment "
        f"published {figures['published_s']:.2f} s, its {figures['taken_over']} buckets claimed "
        "and read "
        f"{figures['claimed_s']:.2f} s, new records returned {figures['after_gone_s'] * 1000:.0f} "
        "ms after the "
        f"member znode went"
    )
    return figures


def _one_run(
    conn: Connection,
    table: Any,
    group: str,
    watch: AssignmentWatch,
    survivors: list[PolledMember],
    p: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, bool]]:
    import pyarrow as pa

    from .members import buckets_of, ids_per_bucket

    process = _Process(conn, table.name, group, p["session_timeout"])
    try:
        record = _settle(watch, survivors, process, len(survivors) + 1)
        state = process.last()
        dead = state["member_id"]
        doomed = buckets_of(record, dead)
        caught_up = state["caught_up"]
        mark = time.perf_counter()
        for m in survivors:
            m.forget(mark)
        gone = _MemberGone(conn, group, dead)
        before = table.end_offsets()
        killed = process.kill()
        table.append(
            pa.table(
                {"id": ids_per_bucket(table.num_buckets, 1, only=[tb.bucket for tb in doomed])}
            )
        )
        appended = time.perf_counter()
        after = watch.wait_for(
            lambda r: dead not in r.buckets and r.generation > record.generation, TAKEOVER_TIMEOUT
        )
        if after is None:
            raise RuntimeError(
                f"B10: no assignment without the killed member within {TAKEOVER_TIMEOUT:g} s"
            )
        return _measure_takeover(
            watch, survivors, doomed, before, after, killed, appended, gone, caught_up
        )
    finally:
        stderr = process.stop()
        if process.proc.returncode not in (0, -signal.SIGKILL):
            raise RuntimeError(
                f"B10: the member process failed ({process.proc.returncode}): {stderr[-2000:]}"
            )


def _measure_takeover(
    watch: AssignmentWatch,
    survivors: list[PolledMember],
    doomed: set[Any],
    before: dict[Any, int],
    after: Any,
    killed: float,
    appended: float,
    gone: _MemberGone,
    caught_up: bool,
) -> tuple[dict[str, Any], dict[str, bool]]:
    """Once the assignment without the killed member is out: wait until its buckets are read
    by their new owners, then time each step from the kill; checked."""
    from .members import buckets_of

    done, polls = _wait_taken_over(survivors, doomed, before, after, TAKEOVER_TIMEOUT)
    owner = {tb: m.name for m in survivors for tb in buckets_of(after, m.member_id)}
    published = next(t for t, r in watch.seen if r.generation == after.generation)
    claimed = _claimed(survivors, after, killed) or done
    gone_at = gone.wait(5.0)
    gone.close()
    checks = {
        "from_the_committed_offsets": all(polls[tb][0][1] == before[tb] for tb in doomed),
        "each_new_record_once_by_its_new_owner": all(
            len(polls[tb]) == 1 and polls[tb][0][2] == owner.get(tb) for tb in doomed
        ),
        "killed_member_was_caught_up": caught_up,
    }
    result = {
        "takeover_s": done - killed,
        "gone_s": (gone_at or done) - killed,
        "published_s": published - killed,
        "claimed_s": claimed - killed,
        "append_s": appended - killed,
        "taken_over": len(doomed),
        "generation": after.generation,
        "load_average": load_average(),
    }
    return result, checks


def _settle(
    watch: AssignmentWatch, survivors: list[PolledMember], process: _Process, size: int
) -> AssignmentRecord:
    """Wait until all ``size`` members consume their share of the latest assignment, the process
    has read and committed every record of its share; that assignment."""
    from .members import buckets_of

    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        time.sleep(0.05)
        if process.proc.poll() is not None:
            raise RuntimeError(
                f"B10: the member process exited ({process.proc.returncode}): "
                f"{process.stop()[-2000:]}"
            )
        record = watch.latest()
        state = process.last()
        if record is None or len(record.buckets) != size or not state:
            continue
        share = {tuple(tb) for tb in buckets_of(record, state["member_id"])}
        if not (
            state["generation"] == record.generation
            and state["caught_up"]
            and {tuple(tb) for tb in state["assignment"]} == share
            and share
        ):
            continue
        if all(_consuming(m, record) for m in survivors):
            return record
    raise RuntimeError(f"B10: the group of {size} did not settle within {SETTLE_TIMEOUT:g} s")


def _consuming(member: PolledMember, record: AssignmentRecord) -> bool:
    from .members import buckets_of

    last = member.last_fetch()
    return (
        last is not None
        and last.generation == record.generation
        and last.assignment == buckets_of(record, member.member_id)
        and not last.skipped
    )


def _wait_taken_over(
    survivors: list[PolledMember],
    doomed: frozenset[Any],
    before: dict[Any, int],
    after: AssignmentRecord,
    timeout: float,
) -> tuple[float, dict[Any, list[tuple[float, int, str]]]]:
    """When the last of ``doomed`` had its new record returned by a survivor; per bucket, the
    polls that returned new records (time, first offset, member), in time order.

    While waiting, only each bucket's new owner under ``after`` is asked, about that bucket:
    this loop shares the interpreter with the members it watches, so it must cost them next to
    nothing. Every member's polls are gathered once at the end (for the checks)."""
    from .members import buckets_of

    owner = {tb: m for m in survivors for tb in buckets_of(after, m.member_id) if tb in doomed}
    deadline = time.monotonic() + timeout
    waiting = set(doomed)
    while waiting and time.monotonic() < deadline:
        waiting = {
            tb for tb in waiting if tb not in owner or not owner[tb].returned_past(tb, before[tb])
        }
        if waiting:
            time.sleep(0.02)
    if waiting:
        raise RuntimeError(
            f"B10: the killed member's buckets were not all consumed within {timeout:g} s"
        )
    polls: dict[Any, list[tuple[float, int, str]]] = {}
    for m in survivors:
        for tb, returned in m.returned().items():
            if tb in doomed:
                polls.setdefault(tb, []).extend(
                    (t, start, m.name) for t, start, end in returned if end > before[tb]
                )
    return max(min(polls[tb])[0] for tb in doomed), {tb: sorted(polls[tb]) for tb in doomed}


def _claimed(survivors: list[PolledMember], record: AssignmentRecord, since: float) -> float | None:
    """When the last survivor's fetch under ``record`` had read its whole share (None if one
    has not yet)."""
    from .members import buckets_of

    times = []
    for m in survivors:
        share = buckets_of(record, m.member_id)
        times.append(
            next(
                (
                    f.end
                    for f in m.fetches(since)
                    if f.generation == record.generation and f.assignment == share and not f.skipped
                ),
                None,
            )
        )
    return None if None in times else max(t for t in times if t is not None)


class _MemberGone:
    """When the member znode of ``member`` was seen gone, from a watch on the group's members."""

    def __init__(self, conn: Connection, group: str, member: str) -> None:
        ctx = testing.context(conn)
        # a session of its own: on the consumers' shared one it would queue behind their watches
        self._store = ctx.store.sibling(ctx.store.session_timeout)
        self._store.open()
        self._gone = threading.Event()
        self.at: float | None = None

        def changed(names: list[str] | None) -> None:
            if names is not None and member not in names and self.at is None:
                self.at = time.perf_counter()
                self._gone.set()

        self._watch = self._store.watch_children(ctx.paths.group_members(group), changed)

    def wait(self, timeout: float) -> float | None:
        self._gone.wait(timeout)
        return self.at

    def close(self) -> None:
        self._watch.remove()
        self._store.close()


BENCHMARK = Benchmark(
    id="B10",
    what=(
        "takeover: a group member in another process is killed with SIGKILL, until its buckets "
        "are consumed by the other members (session_timeout 2 s)"
    ),
    metric="value",
    target=SESSION_TIMEOUT_S + 1.0,
    op="<=",
    run=run,
    unit="s",
    target_note="session_timeout + 1 s",
    spark=False,
    quick_runs=2,
    quick_note="30 of 300 buckets",
    quick_less_work=True,
)
