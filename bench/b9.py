"""B9: rebalance when a member joins a group of 10 consumers over 1,000 buckets (target: every
member consuming under the new generation within 1 s, median; buckets that do not move are
never paused).

Each run creates a 1,000-bucket table with 20 records in every bucket and a new group of 10
consumers (sticky assignor, ``auto_offset_reset="earliest"``, auto-commit on, so a revoked
bucket's position is committed for its next owner), each polled by a thread of its own. Once
they are settled (every member at the latest generation with its share claimed, every record
read), an 11th consumer starts polling. The figure runs from its first poll until the last
member is consuming under the new generation: its generation is the new one, its assignment
is what the published assignment gives it (every bucket claimed) and a fetch of that poll has
read every one of its buckets (``last_poll_timestamp`` renewed). Every fetch of every member
and every listener call are recorded; a bucket that stays with its owner must never be revoked,
leave the assignment, be paused or be skipped by a fetch, and the seconds it would have spent so
are summed (``unmoved_stalled_s``, 0 when met). Then, untimed, one record is appended to every
bucket: each must be returned exactly once, by the bucket's owner under the new generation, the
moved buckets' new owner starting at the offset their last owner committed. Across the run every
record of the table is returned exactly once (the ten joins of the setup included).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .common import (
    Benchmark,
    Outcome,
    load_average,
    log,
    median,
    settle,
    spread,
    temp_warehouse,
    zk_monitor,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit.connection import Connection
    from leasekit.zk.formats import AssignmentRecord

    from .members import AssignmentWatch, PolledMember

__all__ = ["BENCHMARK", "run"]

FULL = {
    "buckets": 1000,
    "members": 10,
    "records_per_bucket": 20,
    "session_timeout": "10s",
    "poll_timeout": "0.5s",
}
LARGE = {**FULL, "buckets": 10_000, "members": 50}
QUICK = {**FULL, "buckets": 100, "members": 4}
QUICK_LARGE = {**FULL, "buckets": 1_000, "members": 12}
LARGE_TARGET = 1.0
SETTLE_TIMEOUT = 300.0
REBALANCE_TIMEOUT = 30.0


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    """Both sizes, one warehouse each: the headline is the first size (10 + 1 members over
    1,000 buckets); the second (50 + 1 over 10,000) is checked against the same 1 s."""
    p, large = (QUICK, QUICK_LARGE) if quick else (FULL, LARGE)
    small = _run_size(p, runs)
    big = _run_size(large, runs)
    figures = small[0]
    key = f"at_{large['members'] + 1}_members_{large['buckets']}_buckets"
    figures[key] = big[0]
    figures["note"] += (
        f"; a {large['members'] + 1}th member joining {large['members']} over "
        f"{large['buckets']:,} buckets: {big[0]['value']:.3f} s "
        f"({big[0]['spread']['min']:.3f}–{big[0]['spread']['max']:.3f}), " + big[0]["note"]
    )
    checks = {**small[1], **{f"{k}_at_{large['buckets']}": v for k, v in big[1].items()}}
    checks[f"rebalance_at_{large['buckets']}_within_{LARGE_TARGET:g}s"] = (
        big[0]["value"] <= LARGE_TARGET
    )
    parameters = {**p, "large_buckets": large["buckets"], "large_members": large["members"]}
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
    """A warehouse of its own, a warm-up and ``runs`` timed rebalances at size ``p``: (figures,
    checks, runs)."""
    results: list[dict[str, Any]] = []
    checks = {
        "one_new_generation": True,
        "only_the_minimum_moves": True,
        "unmoved_never_paused": True,
        "new_records_read_once_by_their_owners": True,
        "every_record_once": True,
    }
    with temp_warehouse("B9") as conn:
        for i in range(runs + 1):  # run 0 warms up, untimed
            settle(None)
            result, run_checks = _one_run(conn, p, i)
            label = "warm-up" if i == 0 else f"run {i}/{runs}"
            zk = result["zookeeper"]
            log(
                f"B9 ({p['members'] + 1} members, {p['buckets']:,} buckets): {label}: rebalance "
                f"{result['rebalance_s'] * 1000:.0f} ms (assignment published "
                f"{result['published_s'] * 1000:.0f} ms, new member consuming "
                f"{result['newcomer_s'] * 1000:.0f} ms), "
                f"{result['moved']} buckets moved, unmoved buckets stalled "
                f"{result['unmoved_stalled_s']:.3f} s, ZooKeeper {zk['transactions']} "
                f"transactions / {zk['znode_writes']} znode writes / {zk['reads']} reads, "
                f"watches {zk['watches_added']:+} (of {zk['watches_after']}), "
                f"checks {'ok' if all(run_checks.values()) else run_checks}"
            )
            if i == 0:
                continue
            results.append(result)
            for name, ok in run_checks.items():
                checks[name] &= ok
    return _figures(p, results), checks, results


def _figures(p: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the timed runs of one size, with the spread of the rebalance time."""

    def mid(key: str, digits: int = 3) -> float:
        return round(median([r[key] for r in results]), digits)

    rebalance = [r["rebalance_s"] for r in results]
    zk = {k: round(median([r["zookeeper"][k] for r in results])) for k in results[0]["zookeeper"]}
    figures = {
        "value": round(median(rebalance), 3),
        "spread": spread(rebalance),
        "members": p["members"] + 1,
        "buckets": p["buckets"],
        "published_s": mid("published_s"),
        "newcomer_s": mid("newcomer_s"),
        "moved": round(median([r["moved"] for r in results])),
        "unmoved_stalled_s": max(r["unmoved_stalled_s"] for r in results),
        "unmoved_revoked": max(r["unmoved_revoked"] for r in results),
        "moved_unowned_bucket_s": mid("moved_unowned_bucket_s"),
        "moved_unowned_max_s": mid("moved_unowned_max_s"),
        "eager_paused_bucket_s": mid("eager_paused_bucket_s", 1),
        "new_records_consumed_s": mid("new_records_consumed_s"),
        "zookeeper": zk,
        "load_average": median([r["load_average"] or 0.0 for r in results]),
    }
    figures["note"] = (
        f"assignment published after {figures['published_s'] * 1000:.0f} ms, the new member "
        "consuming its "
        f"{figures['moved']} moved buckets after {figures['newcomer_s'] * 1000:.0f} ms; buckets "
        "that stayed: "
        f"{figures['unmoved_stalled_s']:g} s stalled, {figures['unmoved_revoked']} revoked; moved "
        "buckets "
        f"{figures['moved_unowned_bucket_s']:.1f} bucket-seconds without a consuming owner (eager "
        "protocol: "
        f"at least {figures['eager_paused_bucket_s']:,.0f}, all {p['buckets']:,} buckets paused "
        f"throughout); ZooKeeper per rebalance: {zk['transactions']} write requests "
        f"({zk['znode_writes']} znode writes, {zk['bytes_written']:,} B), {zk['reads']} reads, "
        f"{zk['watches_added']:+,} watches"
    )
    return figures


def _zk_counters(conn: Connection) -> dict[str, int]:
    """The server's running counts (``mntr``): write requests (a transaction counts once),
    znode writes and their bytes in this namespace, reads, and watches held now."""
    m = zk_monitor(conn)
    ns = conn.namespace
    return {
        "transactions": m.get("cnt_updatelatency", 0),
        "znode_writes": m.get(f"cnt_{ns}_write_per_namespace", 0),
        "bytes_written": m.get(f"sum_{ns}_write_per_namespace", 0),
        "reads": m.get("cnt_readlatency", 0),
        "watches": m.get("watch_count", 0),
    }


def _zk_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    out = {k: after[k] - before[k] for k in before if k != "watches"}
    out["watches_before"], out["watches_after"] = before["watches"], after["watches"]
    out["watches_added"] = after["watches"] - before["watches"]
    return out


def _one_run(
    conn: Connection, p: dict[str, Any], index: int
) -> tuple[dict[str, Any], dict[str, bool]]:
    import pyarrow as pa

    from .members import AssignmentWatch, PolledMember, buckets_of, ids_per_bucket

    n, size = p["buckets"], p["members"]
    name, group = f"orders_{index}", f"b9-{index}"
    table = conn.create_table(name, "id BIGINT", "id", buckets=n)
    table.append(pa.table({"id": ids_per_bucket(n, p["records_per_bucket"])}))
    ends = table.end_offsets()
    watch = AssignmentWatch(conn, group)
    options = {
        "session_timeout": p["session_timeout"],
        "auto_offset_reset": "earliest",
        "poll_timeout": p["poll_timeout"],
    }
    members = [
        PolledMember(conn, [name], group, name=f"m{k}", **options).start() for k in range(size)
    ]
    newcomer: PolledMember | None = None
    try:
        settled = _settle(watch, members, ends)
        mark = time.perf_counter()
        for m in members:
            m.forget(mark)
        before = {m.member_id: buckets_of(settled, m.member_id) for m in members}
        newcomer = PolledMember(
            conn, [name], group, name=f"m{size}", **options
        )  # no I/O: built untimed
        counted = _zk_counters(conn)  # untimed: before the newcomer's first poll
        newcomer.start()
        record = watch.wait_for(
            lambda r: newcomer.member_id in r.buckets and len(r.buckets) == size + 1,
            REBALANCE_TIMEOUT,
        )
        if record is None:
            raise RuntimeError(
                f"B9: no assignment with {size + 1} members within {REBALANCE_TIMEOUT:g} s"
            )
        return _outcome(
            watch, members, newcomer, settled, record, before, mark, table, conn, counted
        )
    finally:
        started = [*members, *([newcomer] if newcomer is not None else [])]
        for m in started:
            m.stop()
        for m in started:
            m.join()
        watch.close()
        errors = [f"{m.name}: {m.error!r}" for m in started if m.error is not None]
        if errors:
            raise RuntimeError("B9: a member failed: " + "; ".join(errors))


def _outcome(
    watch: AssignmentWatch,
    members: list[PolledMember],
    newcomer: PolledMember,
    settled: Any,
    record: Any,
    before: dict[str, set[Any]],
    mark: float,
    table: Any,
    conn: Connection,
    counted: dict[str, int],
) -> tuple[dict[str, Any], dict[str, bool]]:
    """Once the newcomer's assignment is published: wait until every member consumes under
    it, then measure what moved, what stalled and when each member was done; checked."""
    from .members import buckets_of

    n, size, every = table.num_buckets, len(members), [*members, newcomer]
    done = _wait_consuming(every, record, REBALANCE_TIMEOUT)
    t0 = newcomer.first_poll or mark
    time.sleep(0.3)
    zookeeper = _zk_delta(counted, _zk_counters(conn))
    latest = watch.latest()
    published = next(t for t, r in watch.seen if r.generation == record.generation)
    after = {m.member_id: buckets_of(record, m.member_id) for m in every}
    moved = {tb for m in members for tb in before[m.member_id] - after[m.member_id]}
    gained = {tb for m in members for tb in after[m.member_id] - before[m.member_id]}
    stalled_s, revoked = _unmoved_stalls(members, before, after, mark)
    unowned = _moved_unowned(members, newcomer, moved, t0)
    rebalance_s = max(done.values()) - t0
    checks = {
        "one_new_generation": record.generation == settled.generation + 1
        and latest is not None
        and latest.generation == record.generation,
        "only_the_minimum_moves": moved == after[newcomer.member_id]
        and not gained
        and len(moved) <= -(-n // (size + 1)),
        "unmoved_never_paused": stalled_s == 0 and revoked == 0,
    }
    consumed_s, ok = _new_records(table, every, record, moved)
    checks["new_records_read_once_by_their_owners"] = ok
    checks["every_record_once"] = _every_record_once(every, table.end_offsets())
    result = {
        "rebalance_s": rebalance_s,
        "published_s": published - t0,
        "newcomer_s": done[newcomer.name] - t0,
        "member_done_s": {k: round(v - t0, 4) for k, v in done.items()},
        "generation": record.generation,
        "moved": len(moved),
        "unmoved_stalled_s": stalled_s,
        "unmoved_revoked": revoked,
        "moved_unowned_bucket_s": sum(unowned),
        "moved_unowned_max_s": max(unowned, default=0.0),
        "eager_paused_bucket_s": n * rebalance_s,
        "new_records_consumed_s": consumed_s,
        "zookeeper": zookeeper,
        "load_average": load_average(),
    }
    return result, checks


def _settle(watch: Any, members: list[PolledMember], ends: dict[Any, int]) -> AssignmentRecord:
    """Wait until every member is consuming its share of the latest assignment and the group has
    read every record; the assignment."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        time.sleep(0.05)
        record = watch.latest()
        if record is None or len(record.buckets) != len(members):
            continue
        if not all(_consuming(m, record) for m in members):
            continue
        read: dict[Any, int] = {}
        for m in members:
            for tb, end in m.consumed_to().items():
                read[tb] = max(read.get(tb, 0), end)
        if any(read.get(tb, 0) < end for tb, end in ends.items() if end):
            continue
        time.sleep(0.5)
        if watch.latest() is record and all(_consuming(m, record) for m in members):
            return record
    raise RuntimeError(
        f"B9: the group of {len(members)} did not settle within {SETTLE_TIMEOUT:g} s"
    )


def _consuming(member: PolledMember, record: AssignmentRecord) -> bool:
    from .members import buckets_of

    last = member.last_fetch()
    return (
        last is not None
        and last.generation == record.generation
        and last.assignment == buckets_of(record, member.member_id)
        and not last.skipped
    )


def _wait_consuming(
    members: list[PolledMember], record: AssignmentRecord, timeout: float
) -> dict[str, float]:
    """Per member, when the first fetch under ``record`` that read its whole share ended."""
    from .members import buckets_of

    deadline = time.monotonic() + timeout
    done: dict[str, float] = {}
    # the shares once, and each member's fetches looked at once: this loop shares the
    # interpreter with the members it watches, so it must cost them next to nothing
    shares = {m.name: buckets_of(record, m.member_id) for m in members}
    looked = dict.fromkeys(shares, 0)
    while time.monotonic() < deadline:
        for m in members:
            if m.name in done:
                continue
            fetches = m.fetches_from(looked[m.name])
            looked[m.name] += len(fetches)
            for f in fetches:
                if (
                    f.generation == record.generation
                    and f.assignment == shares[m.name]
                    and not f.skipped
                    and not f.paused
                ):
                    done[m.name] = f.end
                    break
        if len(done) == len(members):
            return done
        time.sleep(0.02)
    missing = [m.name for m in members if m.name not in done]
    raise RuntimeError(
        f"B9: {', '.join(missing)} not consuming generation {record.generation} after {timeout:g} s"
    )


def _unmoved_stalls(
    members: list[PolledMember], before: dict[Any, Any], after: dict[Any, Any], since: float
) -> tuple[float, int]:
    """Bucket-seconds that buckets staying with their owner spent revoked, out of its assignment,
    paused or skipped by a fetch (each fetch that misses one counts the time since the fetch
    before), and how many of them the listener heard revoked."""
    stalled, revoked = 0.0, 0
    for m in members:
        unmoved = before[m.member_id] & after[m.member_id]
        previous = since
        for f in m.fetches(since):
            bad = (unmoved - f.assignment) | (unmoved & (f.paused | f.skipped))
            stalled += len(bad) * (f.end - previous)
            previous = f.end
        revoked += sum(len(e.buckets & unmoved) for e in m.events(since) if e.kind == "revoked")
    return stalled, revoked


def _moved_unowned(
    members: list[PolledMember], newcomer: PolledMember, moved: set[Any], t0: float
) -> list[float]:
    """Per moved bucket: from its revocation by its last owner until a fetch of its new owner
    read it."""
    revoked_at = {
        tb: e.time for m in members for e in m.events(t0) if e.kind == "revoked" for tb in e.buckets
    }
    read_at: dict[Any, float] = {}
    for f in newcomer.fetches(t0):
        for tb in f.assignment - f.skipped - f.paused:
            read_at.setdefault(tb, f.end)
    return [read_at[tb] - revoked_at.get(tb, t0) for tb in moved if tb in read_at]


def _new_records(
    table: Any, members: list[PolledMember], record: AssignmentRecord, moved: set[Any]
) -> tuple[float, bool]:
    """Append one record to every bucket (untimed setup); seconds until all were returned, and
    whether each was returned once, by its owner under ``record``, the moved buckets' new owner
    starting where their last owner stopped."""
    import pyarrow as pa

    from .members import buckets_of, ids_per_bucket

    before = table.end_offsets()
    table.append(pa.table({"id": ids_per_bucket(table.num_buckets, 1)}))
    appended = time.perf_counter()
    ends = table.end_offsets()
    owner = {tb: m for m in members for tb in buckets_of(record, m.member_id)}
    # only the buckets still waiting are asked about, each of its owner: this loop shares the
    # interpreter with the members it watches, so it must cost them next to nothing
    deadline = time.monotonic() + max(30.0, 0.015 * table.num_buckets)
    waiting = set(ends)
    while waiting and time.monotonic() < deadline:
        waiting = {tb for tb in waiting if not owner[tb].returned_past(tb, ends[tb] - 1)}
        if waiting:
            time.sleep(0.02)
    last = 0.0
    ok = True
    for m in members:
        for tb, polls in m.returned().items():
            new = [(t, first, end) for t, first, end in polls if end > before[tb]]
            if not new:
                continue
            ok &= owner[tb] is m and len(new) == 1 and new[0][1:] == (before[tb], ends[tb])
            last = max(last, new[0][0])
    consumed = {m.name: m.consumed_to() for m in members}
    ok &= all(consumed[owner[tb].name].get(tb, 0) >= end for tb, end in ends.items())
    return last - appended, ok


def _every_record_once(members: list[PolledMember], ends: dict[Any, int]) -> bool:
    """Every record of the table was returned once, by one member or another."""
    ranges: dict[Any, list[tuple[int, int]]] = {}
    for m in members:
        for tb, polls in m.returned().items():
            ranges.setdefault(tb, []).extend((first, end) for _, first, end in polls)
    for tb, end in ends.items():
        at = 0
        for first, stop in sorted(ranges.get(tb, [])):
            if first != at:
                return False
            at = stop
        if at != end:
            return False
    return True


BENCHMARK = Benchmark(
    id="B9",
    what=(
        "rebalance: an 11th member joins a group of 10 consumers over 1,000 buckets, until every "
        "member consumes under the new generation"
    ),
    metric="value",
    target=1.0,
    op="<=",
    run=run,
    unit="s",
    target_note="median; buckets that do not move are never paused",
    spark=False,
    # the quick run's second size is the nearest to the committed first: compare that one
    quick_figure=(
        f"at_{QUICK_LARGE['members'] + 1}_members_{QUICK_LARGE['buckets']}_buckets.value"
    ),
    quick_runs=2,
    quick_note="a 13th member joining 12 over 1,000 buckets (committed: an 11th joining 10)",
)
