"""B15: rebalance beside Kafka: an 11th member joins a group of 10 over 1,000 buckets (leasekit)
or partitions (a Kafka 4.4 broker), until every member consumes under the new assignment
(target: Kafka's time ÷ leasekit's ≥ 1 against every peer; partition-seconds paused reported).

**leasekit** runs B9's rebalance at B9's size (``bench.b9``): each run a fresh 1,000-bucket table
with 20 records per bucket and a fresh group of 10 consumers (sticky assignor, auto-commit),
each polled by a thread of its own in this process. Once they are settled, an 11th starts
polling; the time runs from its first poll (the join) until the last member's fetch under the
new generation has read its whole share: the newcomer its moved buckets, every other member
the buckets it kept (B9's docstring has the details and checks). A moved bucket is paused
from its revocation by its old owner until the newcomer's fetch read it; kept buckets are
never paused (checked).

**Kafka**: one broker for the benchmark (``bench.peer.kafka_broker`` with the lower bounds of
``kafka_group.BROKER_SETTINGS``, which allow short timings and change no default) and a
1,000-partition topic with 20 records per partition. Each run a fresh group of 10
confluent-kafka consumers in this process, each polled by a thread of its own as leasekit's are
(``kafka_group.KafkaMember``: auto-commit on, so librdkafka commits a revoked partition's
position before releasing it). Once settled (the partitions split evenly, every record read,
the coordinator calling the group stable, no rebalance callback for half a second), the ten
pause their partitions and one record is written to every partition: a moved partition's
record waits for its new owner, whose first fetch returns it at once, which makes its
consuming observable (an empty fetch of a new partition is invisible to the application, and
the broker holds it for ``fetch.wait.max.ms``). The ten keep polling, so their callbacks run
and their heartbeats go on. An 11th consumer, built and connected untimed, subscribes on its
own thread: the time runs from the subscribe call until the later of the last rebalance
callback of any member (``on_revoke``, ``on_assign``; the rebalance is over once the
partitions are split evenly again, the newcomer has a record of each of its own, the
coordinator calls the group stable and no callback ran for half a second) and the newcomer's
first record from the last of its partitions. Partition-
seconds paused: per moved partition, from its old owner's ``on_revoke`` until the newcomer's
poll returned its record; partitions that stay and were revoked anyway are counted apart
(the cooperative protocols revoke only moving ones); the eager protocol would pause every
partition for the whole time (reported as the partitions times the time). Untimed after:
the ten resume, and each new record must be returned by its partition's final owner; the
partitions with records returned again (the new one twice, or the newcomer's from below the
offset the old owner committed: Kafka delivers at least once) are counted
(``redelivered_partitions``, the most of any run).

**The peers** (``VARIANTS``), each at its documented default timings and at its fastest:
the classic protocol with librdkafka's cooperative-sticky assignor (client-side: heartbeat
3 s, session 45 s; fastest: heartbeat 100 ms, session 2 s) and the KIP-848 consumer protocol
(``group.protocol=consumer``, the broker assigns; broker-side: heartbeat 5 s, session 45 s,
assignment interval 1 s; fastest, as the group's own configuration: heartbeat 100 ms, session
2 s, assignment interval 0). The fastest also set ``fetch.wait.max.ms`` to 10 ms (default
500): a fetch of partitions without new records waits that long, and partitions assigned
meanwhile are fetched only once it returns. librdkafka's classic protocol serves its group
state from its main loop, which wakes about every 500 ms when idle, and joins at most once a
second, whatever the heartbeat interval: the Java client may rebalance faster.

Each run measures every side once, in alternating order (leasekit first on even runs, last
on odd ones), each after ``settle()``; run 0 warms every side up, untimed. A run's figure per
peer is that peer's time ÷ leasekit's in the same run; the headline is the lowest of the
peers' medians (the strongest peer). Quick: 100 buckets/partitions, a 5th member joining 4.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import b9
from .common import (
    Benchmark,
    Outcome,
    log,
    median,
    spread,
    temp_warehouse,
)
from .kafka_group import (
    BROKER_SETTINGS,
    QUIET_S,
    KafkaMember,
    Variant,
    alternating_runs,
    classic,
    configure_group,
    group_stable,
    kip848,
    latest_offsets,
    served,
    split_evenly,
    wait_settled,
)
from .peer import create_topic, kafka_broker, produce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run", "VARIANTS"]

FULL = {"partitions": 1000, "members": 10, "records_per_partition": 20}
QUICK = {"partitions": 100, "members": 4, "records_per_partition": 20}
TOPIC = "orders"
VARIANTS = (
    classic("classic-default"),
    classic("classic-fastest", heartbeat_ms=100, session_ms=2000, fetch_wait_ms=10),
    kip848("kip848-default"),
    kip848(
        "kip848-fastest",
        heartbeat_ms=100,
        session_ms=2000,
        assignment_interval_ms=0,
        fetch_wait_ms=10,
    ),
)
SETTLE_TIMEOUT = 300.0
REBALANCE_TIMEOUT = 60.0


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    lk_p = {**(b9.QUICK if quick else b9.FULL)}
    assert (lk_p["buckets"], lk_p["members"]) == (p["partitions"], p["members"])
    sides = ["leasekit", *(v.name for v in VARIANTS)]
    variants = {v.name: v for v in VARIANTS}
    with temp_warehouse("B15") as conn, kafka_broker("B15", BROKER_SETTINGS) as broker:
        create_topic(broker.bootstrap, TOPIC, p["partitions"])
        n = p["partitions"]
        rows = ((q, None, b"%d" % k) for q in range(n) for k in range(p["records_per_partition"]))
        produce(broker.bootstrap, TOPIC, rows)

        def measure(side: str, i: int) -> tuple[dict[str, Any], dict[str, bool]]:
            if side == "leasekit":
                return _leasekit(conn, lk_p, i)
            return _kafka(broker.bootstrap, p, variants[side], i)

        results, checks = alternating_runs(runs, sides, measure, _log_run)
    figures = _figures(results)
    parameters = {**p, "runs": runs, "quick": quick, "peers": [v.describe() for v in VARIANTS]}
    return Outcome(figures["ratio"], figures, results, parameters, checks)


def _log_run(row: dict[str, Any], i: int, runs: int) -> None:
    label = "warm-up" if i == 0 else f"run {i}/{runs}"
    lk_s = row["leasekit"]["rebalance_s"]
    peers = ", ".join(
        f"{v.name} {row[v.name]['rebalance_s']:.3f} s "
        f"({row[v.name]['rebalance_s'] / lk_s:.2f}x, {row[v.name]['moved']} moved, "
        f"{row[v.name]['moved_unowned_partition_s']:.1f} partition-s paused; side "
        f"{row[v.name]['side_wall_s']:.0f} s)"
        for v in VARIANTS
    )
    log(
        f"B15: {label}: leasekit {lk_s:.3f} s ({row['leasekit']['moved']} moved, "
        f"{row['leasekit']['moved_unowned_partition_s']:.1f} bucket-s paused; side "
        f"{row['leasekit']['side_wall_s']:.0f} s); {peers}"
    )


def _leasekit(conn: Any, p: dict[str, Any], index: int) -> tuple[dict[str, Any], dict[str, bool]]:
    """B9's rebalance, once; its figures under B15's names."""
    result, checks = b9._one_run(conn, p, index)
    keep = ("rebalance_s", "published_s", "newcomer_s", "moved", "unmoved_stalled_s")
    out = {k: result[k] for k in keep}
    out["moved_unowned_partition_s"] = result["moved_unowned_bucket_s"]
    out["moved_unowned_max_s"] = result["moved_unowned_max_s"]
    out["eager_paused_partition_s"] = result["eager_paused_bucket_s"]
    out["unmoved_revoked"] = result["unmoved_revoked"]
    return out, checks


def _kafka(
    bootstrap: str, p: dict[str, Any], variant: Variant, index: int
) -> tuple[dict[str, Any], dict[str, bool]]:
    """A fresh group of ``p["members"]``, settled, paused, a record written to every partition,
    then an 11th member joins: measured and checked."""
    n, size = p["partitions"], p["members"]
    group = f"b15-{variant.name}-{index}"
    configure_group(bootstrap, group, variant.group)
    ends = latest_offsets(bootstrap, TOPIC, n)
    stable = group_stable(bootstrap, group)
    members = [
        KafkaMember(bootstrap, TOPIC, group, variant, name=f"m{k}").start() for k in range(size)
    ]
    newcomer: KafkaMember | None = None
    try:
        before = wait_settled(members, n, ends, stable, SETTLE_TIMEOUT)
        served([m.pause_all() for m in members])
        produce(bootstrap, TOPIC, ((q, None, b"new") for q in range(n)))
        newcomer = KafkaMember(bootstrap, TOPIC, group, variant, name=f"m{size}")
        newcomer.start()
        share = _wait_rebalanced(members, newcomer, n, stable, REBALANCE_TIMEOUT)
        result = _measure(members, newcomer, before, share, n)
        served([m.resume_all() for m in members])
        ok, result["redelivered_partitions"] = _new_records(members, newcomer, before, share, ends)
        return result, {"new_records_read_by_their_owners": ok}
    finally:
        every = [*members, *([newcomer] if newcomer is not None else [])]
        for m in every:
            m.stop()
        for m in every:
            m.join()
        failed = [f"{m.name}: {m.error!r}" for m in every if m.error is not None]
        if failed:
            raise RuntimeError(f"B15 ({variant.name}): a member failed: " + "; ".join(failed))


def _wait_rebalanced(
    members: list[KafkaMember],
    newcomer: KafkaMember,
    n: int,
    stable: Callable[[], bool],
    timeout: float,
) -> frozenset[int]:
    """Wait until the partitions are split evenly with the newcomer, it has received a record
    of each of its partitions, the coordinator calls the group stable and no callback ran for
    ``QUIET_S``; its partitions."""
    every = [*members, newcomer]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.02)
        t0 = newcomer.subscribed
        share = newcomer.assigned()
        if t0 is None or not share or not split_evenly([m.assigned() for m in every], n):
            continue
        if len(newcomer.first_returned(share, t0)) < len(share):
            continue
        if time.perf_counter() - max(m.last_callback() for m in every) < QUIET_S:
            continue
        if stable():
            return share
    states = {m.name: len(m.assigned()) for m in every}
    raise RuntimeError(f"B15: the group did not rebalance within {timeout:g} s: {states}")


def _measure(
    members: list[KafkaMember],
    newcomer: KafkaMember,
    before: list[frozenset[int]],
    share: frozenset[int],
    n: int,
) -> dict[str, Any]:
    """The rebalance's times and paused partition-seconds, from the recorded callbacks and
    records."""
    t0 = newcomer.subscribed or 0.0
    every = [*members, newcomer]
    callbacks = [c for m in every for c in m.callbacks(t0)]
    last_callback = max(c.time for c in callbacks)
    firsts = newcomer.first_returned(share, t0)
    consuming = max(firsts.values())
    revoked_at: dict[int, float] = {}
    for m in members:
        for c in m.callbacks(t0):
            if c.kind in ("revoked", "lost"):
                for q in c.partitions:
                    revoked_at.setdefault(q, c.time)
    unowned = [firsts[q] - revoked_at.get(q, t0) for q in share]
    after = [m.assigned() for m in members]
    gained = sum(len(a - b) for a, b in zip(after, before))
    rebalance_s = max(last_callback, consuming) - t0
    return {
        "rebalance_s": rebalance_s,
        "newcomer_s": consuming - t0,
        "callbacks_done_s": last_callback - t0,
        "first_callback_s": min(c.time for c in callbacks) - t0,
        "moved": len(share),
        "moved_between_old_members": gained,
        "unmoved_revoked": len(set(revoked_at) - share),
        "moved_unowned_partition_s": sum(unowned),
        "moved_unowned_max_s": max(unowned),
        "eager_paused_partition_s": n * rebalance_s,
        "callbacks": len(callbacks),
    }


def _new_records(
    members: list[KafkaMember],
    newcomer: KafkaMember,
    before: list[frozenset[int]],
    share: frozenset[int],
    ends: dict[int, int],
) -> tuple[bool, int]:
    """Whether each partition's new record (offset ``ends[q]``) was returned by its final owner;
    how many partitions had records returned again (the new one twice, or the newcomer's
    starting below the committed offset: Kafka promises each record at least once)."""
    owner = {q: newcomer for q in share}
    for m, had in zip(members, before):
        owner.update({q: m for q in had - share})
    every = [*members, newcomer]
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        read = {q for m in every for q, end in m.consumed_to().items() if end > ends[q]}
        if len(read) == len(ends):
            break
        time.sleep(0.05)
    time.sleep(QUIET_S)  # a second return of a new record would show by now
    newcomer_first = {q: min(o for _, o in v) for q, v in newcomer.returned().items()}
    seen: dict[int, list[KafkaMember]] = {}
    for m in every:
        for q, records in m.returned().items():
            seen.setdefault(q, []).extend(m for _, o in records if o == ends[q])
    by_owner = all(owner[q] in seen.get(q, ()) for q in ends)
    again = {q for q in ends if len(seen.get(q, ())) > 1}
    again |= {q for q in share if newcomer_first.get(q, ends[q]) < ends[q]}
    return by_owner, len(again)


def _figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and spreads over the timed runs: leasekit's, each peer's and their ratios."""

    def mid(side: str, key: str) -> float:
        return round(median([r[side][key] for r in results]), 3)

    lk = [r["leasekit"]["rebalance_s"] for r in results]
    peers: dict[str, Any] = {}
    for v in VARIANTS:
        times = [r[v.name]["rebalance_s"] for r in results]
        ratios = [r[v.name]["rebalance_s"] / r["leasekit"]["rebalance_s"] for r in results]
        keys = ("newcomer_s", "callbacks_done_s", "moved_unowned_partition_s", "moved")
        peers[v.name] = {
            "settings": v.describe(),
            "ratio": round(median(ratios), 3),
            "ratio_spread": spread(ratios),
            "rebalance_s": round(median(times), 3),
            "spread": spread(times),
            **{k: mid(v.name, k) for k in keys},
            "eager_paused_partition_s": mid(v.name, "eager_paused_partition_s"),
            "unmoved_revoked": max(r[v.name]["unmoved_revoked"] for r in results),
            "redelivered_partitions": max(r[v.name]["redelivered_partitions"] for r in results),
        }
    strongest = min(peers, key=lambda k: peers[k]["ratio"])
    figures = {
        "ratio": peers[strongest]["ratio"],
        "spread": peers[strongest]["ratio_spread"],
        "strongest_peer": strongest,
        "leasekit_s": round(median(lk), 3),
        "baseline_s": peers[strongest]["rebalance_s"],
        "leasekit": {
            "rebalance_s": round(median(lk), 3),
            "spread": spread(lk),
            "newcomer_s": mid("leasekit", "newcomer_s"),
            "moved_unowned_partition_s": mid("leasekit", "moved_unowned_partition_s"),
            "moved": mid("leasekit", "moved"),
            "unmoved_stalled_s": max(r["leasekit"]["unmoved_stalled_s"] for r in results),
        },
        "peers": peers,
        "load_average": median([r["load_average"] or 0.0 for r in results]),
    }
    figures["note"] = "; ".join(
        f"{k} {x['rebalance_s']:.3f} s ({x['ratio']:.2f}x, {x['moved_unowned_partition_s']:.1f} "
        "partition-s paused)"
        for k, x in peers.items()
    ) + (
        f"; leasekit {figures['leasekit']['moved_unowned_partition_s']:.1f} bucket-s paused, "
        f"kept buckets stalled {figures['leasekit']['unmoved_stalled_s']:g} s"
    )
    return figures


BENCHMARK = Benchmark(
    id="B15",
    what=(
        "rebalance beside Kafka: an 11th member joins 10 over 1,000 buckets/partitions, until "
        "every member consumes under the new assignment (Kafka classic cooperative-sticky and "
        "KIP-848, default and fastest timings)"
    ),
    metric="ratio",
    target=1.0,
    op=">=",
    run=run,
    target_note="Kafka time / leasekit time against the strongest peer; partition-seconds "
    "paused reported",
    spark=False,
    quick_runs=2,
    quick_note="a 5th member joining 4 over 100 buckets/partitions",
)
