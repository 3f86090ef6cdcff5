"""B17: takeover beside Kafka: a member of a group of 3 over 300 buckets (leasekit) or
partitions (a Kafka 4.4 broker), in a separate OS process, is killed with SIGKILL; then one
record is written to each of its buckets/partitions; the time runs from the kill until every
one of those records was returned by a survivor's poll (target: Kafka's time ÷ leasekit's ≥ 1
against every peer, at equal session timeouts of 2 s).

**leasekit** runs B10's takeover at B10's size (``bench.b10``) with a fresh group each run: two
consumers in this process, each polled by a thread of its own (auto-commit on), and one in a
separate process (``bench.b10_member``, committing after every poll), which joins last;
session_timeout 2 s. Once settled, the process is killed, a record appended to each of its
buckets, and the time runs until a survivor's poll returned each (its member znode goes when
ZooKeeper expires its session, then the leader reassigns; B10's docstring has the details and
checks).

**Kafka**: one broker for the benchmark (``bench.peer.kafka_broker`` with the lower bounds of
``kafka_group.BROKER_SETTINGS``, which let a session timeout be 2 s and change no default),
a 300-partition topic with 20 records per partition, and each run a fresh group: two
confluent-kafka consumers in this process, each polled by a thread of its own
(``kafka_group.KafkaMember``, auto-commit on), and, once they have settled, one in a separate
process (``bench.kafka_member``, auto-commit off, a synchronous commit after every poll that
returned records), so it joins last (in the classic protocol the first member leads). Once
the three are settled (the partitions split evenly, every record read, the process's
partitions committed at their ends, the coordinator calling the group stable, no callback for
half a second), the process is killed with SIGKILL and one record is written to each of its
partitions through a producer connected beforehand (the write is inside the time, as
leasekit's append is). Nothing tells the group the process died: the coordinator drops it when
its session times out, and the survivors learn of it at their next heartbeat. The time runs
until a survivor's poll returned each of the new records; each must be returned by its
partition's new owner. The partitions with records returned again (the new one twice, or from
below the offset the killed member had committed: Kafka delivers at least once; in about one
takeover in fifty of the trial runs a survivor returned a taken-over partition from offset 0
although its committed offset was at the end) are counted (``redelivered_partitions``, the
most of any run). The results also give when the survivors' first callback ran and when the
last of the partitions was assigned to them (``on_assign``), from the kill. A session times
out counted from the member's last heartbeat in Kafka, from the session's last request or
ping in ZooKeeper (which checks its sessions every 500 ms here), so either may see the dead
member go a little before 2 s after the kill.

**The peers** (``VARIANTS``), all with a 2 s session timeout as leasekit's: the classic protocol
with librdkafka's cooperative-sticky assignor (``session.timeout.ms`` 2000 and a heartbeat at
a third of it, as Kafka advises, 667 ms; fastest: heartbeat 100 ms) and the KIP-848 consumer
protocol (``group.protocol=consumer``, the group's own configuration: session 2 s, heartbeat
667 ms, Kafka's other defaults; fastest: heartbeat 100 ms, assignment interval 0). The fastest
also set ``fetch.wait.max.ms`` to 10 ms (default 500): a survivor's fetch of its own idle
partitions waits that long, and partitions assigned meanwhile are fetched once it returns.
Kafka's default session timeouts are 45 s in both protocols (classic: the client's
``session.timeout.ms``; KIP-848: the broker's ``group.consumer.session.timeout.ms``), with
which a takeover takes about 45 s; the broker refuses less than 6 s (classic) and 45 s
(KIP-848) unless its lower bounds are lowered, as here.

Each run measures every side once, in alternating order (leasekit first on even runs, last on
odd ones), each after ``settle()``; run 0 warms every side up, untimed. A run's figure per peer
is that peer's time ÷ leasekit's in the same run; the headline is the lowest of the peers'
medians (the strongest peer). Quick: 30 buckets/partitions.
"""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Any

from . import b10
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
    split_evenly,
    wait_settled,
)
from .kafka_member import MemberProcess
from .peer import create_topic, kafka_broker, produce

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run", "VARIANTS"]

FULL = {"partitions": 300, "members": 3, "records_per_partition": 20}
QUICK = {**FULL, "partitions": 30}
SESSION_MS = 2000
TOPIC = "orders"
VARIANTS = (
    classic("classic", heartbeat_ms=667, session_ms=SESSION_MS),
    classic("classic-fastest", heartbeat_ms=100, session_ms=SESSION_MS, fetch_wait_ms=10),
    kip848("kip848", heartbeat_ms=667, session_ms=SESSION_MS),
    kip848(
        "kip848-fastest",
        heartbeat_ms=100,
        session_ms=SESSION_MS,
        assignment_interval_ms=0,
        fetch_wait_ms=10,
    ),
)
SETTLE_TIMEOUT = 300.0
TAKEOVER_TIMEOUT = 60.0


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    import pyarrow as pa

    from .members import ids_per_bucket

    p = QUICK if quick else FULL
    lk_p = b10.QUICK if quick else b10.FULL
    assert (lk_p["buckets"], lk_p["members_here"] + 1) == (p["partitions"], p["members"])
    assert lk_p["session_timeout"] == f"{SESSION_MS // 1000}s"
    n, sides = p["partitions"], ["leasekit", *(v.name for v in VARIANTS)]
    variants = {v.name: v for v in VARIANTS}
    with temp_warehouse("B17") as conn, kafka_broker("B17", BROKER_SETTINGS) as broker:
        table = conn.create_table("orders", "id BIGINT", "id", buckets=n)
        table.append(pa.table({"id": ids_per_bucket(n, p["records_per_partition"])}))
        create_topic(broker.bootstrap, TOPIC, n)
        rows = ((q, None, b"%d" % k) for q in range(n) for k in range(p["records_per_partition"]))
        produce(broker.bootstrap, TOPIC, rows)

        def measure(side: str, i: int) -> tuple[dict[str, Any], dict[str, bool]]:
            if side == "leasekit":
                return _leasekit(conn, table, lk_p, i)
            return _kafka(broker.bootstrap, p, variants[side], i)

        results, checks = alternating_runs(runs, sides, measure, _log_run)
    figures = _figures(results)
    parameters = {**p, "runs": runs, "quick": quick, "peers": [v.describe() for v in VARIANTS]}
    return Outcome(figures["ratio"], figures, results, parameters, checks)


def _log_run(row: dict[str, Any], i: int, runs: int) -> None:
    label = "warm-up" if i == 0 else f"run {i}/{runs}"
    lk = row["leasekit"]
    peers = ", ".join(
        f"{v.name} {row[v.name]['takeover_s']:.3f} s "
        f"({row[v.name]['takeover_s'] / lk['takeover_s']:.2f}x, all assigned "
        f"{row[v.name]['assigned_s']:.2f} s; side {row[v.name]['side_wall_s']:.0f} s)"
        for v in VARIANTS
    )
    log(
        f"B17: {label}: leasekit {lk['takeover_s']:.3f} s (member gone {lk['gone_s']:.2f} s, "
        f"published {lk['published_s']:.2f} s; side {lk['side_wall_s']:.0f} s), "
        f"{lk['taken_over']} taken over; {peers}"
    )


def _leasekit(
    conn: Any, table: Any, p: dict[str, Any], index: int
) -> tuple[dict[str, Any], dict[str, bool]]:
    """B10's takeover, once, in a fresh group; its figures."""
    from .members import AssignmentWatch, PolledMember

    group = f"b17-{index}"
    watch = AssignmentWatch(conn, group)
    options = {
        "session_timeout": p["session_timeout"],
        "auto_offset_reset": "earliest",
        "poll_timeout": p["poll_timeout"],
    }
    survivors = [
        PolledMember(conn, [table.name], group, name=f"m{k}", **options).start()
        for k in range(p["members_here"])
    ]
    try:
        result, checks = b10._one_run(conn, table, group, watch, survivors, p)
    finally:
        for m in survivors:
            m.stop()
        for m in survivors:
            m.join()
        watch.close()
        failed = [f"{m.name}: {m.error!r}" for m in survivors if m.error is not None]
        if failed:
            raise RuntimeError("B17 (leasekit): a member failed: " + "; ".join(failed))
    keep = ("takeover_s", "gone_s", "published_s", "claimed_s", "append_s", "taken_over")
    return {k: result[k] for k in keep}, checks


def _kafka(
    bootstrap: str, p: dict[str, Any], variant: Variant, index: int
) -> tuple[dict[str, Any], dict[str, bool]]:
    """A fresh group: two members here, settled, then one in another process; killed, a record
    written to each of its partitions, the takeover measured and checked."""
    from confluent_kafka import Producer

    n = p["partitions"]
    group = f"b17-{variant.name}-{index}"
    configure_group(bootstrap, group, variant.group)
    ends = latest_offsets(bootstrap, TOPIC, n)
    stable = group_stable(bootstrap, group)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.list_topics(TOPIC, timeout=30)  # connected, the topic's leaders known: untimed
    survivors = [
        KafkaMember(bootstrap, TOPIC, group, variant, name=f"m{k}").start()
        for k in range(p["members"] - 1)
    ]
    process: MemberProcess | None = None
    try:
        wait_settled(survivors, n, ends, stable, SETTLE_TIMEOUT)
        process = MemberProcess(bootstrap, TOPIC, group, variant.client)
        doomed = _settle_with(process, survivors, n, ends, stable, bootstrap, group)
        killed = process.kill()
        for q in sorted(doomed):
            producer.produce(TOPIC, b"new", partition=q)
        if producer.flush(30):
            raise RuntimeError("B17: the new records were not acknowledged within 30 s")
        appended = time.perf_counter()
        return _takeover(survivors, doomed, ends, killed, appended)
    finally:
        stderr = process.stop() if process is not None else ""
        for m in survivors:
            m.stop()
        for m in survivors:
            m.join()
        failed = [f"{m.name}: {m.error!r}" for m in survivors if m.error is not None]
        if process is not None and process.proc.returncode not in (0, -signal.SIGKILL):
            failed.append(f"the member process ({process.proc.returncode}): {stderr[-2000:]}")
        if failed:
            raise RuntimeError(f"B17 ({variant.name}): a member failed: " + "; ".join(failed))


def _settle_with(
    process: MemberProcess,
    survivors: list[KafkaMember],
    n: int,
    ends: dict[int, int],
    stable: Any,
    bootstrap: str,
    group: str,
) -> frozenset[int]:
    """Wait until the process and the survivors split the partitions evenly, the process's
    partitions are committed at their ends, the group is stable and no callback ran for
    ``QUIET_S``; the process's partitions."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if process.proc.poll() is not None:
            raise RuntimeError(f"B17: the member process exited: {process.stop()[-2000:]}")
        doomed = process.assigned()
        if not split_evenly([*(m.assigned() for m in survivors), doomed], n):
            continue
        if time.perf_counter() - max(m.last_callback() for m in survivors) < QUIET_S:
            continue
        asked = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, q) for q in doomed])
        got = admin.list_consumer_group_offsets([asked])[group].result(15)
        if any(tp.offset != ends[tp.partition] for tp in got.topic_partitions):
            continue
        if stable() and process.assigned() == doomed:
            return doomed
    raise RuntimeError(f"B17: the group with the process did not settle in {SETTLE_TIMEOUT:g} s")


def _takeover(
    survivors: list[KafkaMember],
    doomed: frozenset[int],
    ends: dict[int, int],
    killed: float,
    appended: float,
) -> tuple[dict[str, Any], dict[str, bool]]:
    """Wait until a survivor returned each new record (offset ``ends[q]``); the times from the
    kill, and the checks."""
    deadline = time.monotonic() + TAKEOVER_TIMEOUT
    waiting = set(doomed)
    while waiting and time.monotonic() < deadline:
        read = {q for m in survivors for q, end in m.consumed_to().items() if end > ends[q]}
        waiting -= read
        if waiting:
            time.sleep(0.01)
    if waiting:
        raise RuntimeError(f"B17: {len(waiting)} partitions not taken over in {TAKEOVER_TIMEOUT} s")
    time.sleep(QUIET_S)  # a second return of a new record would show by now
    returns: dict[int, list[tuple[float, int, KafkaMember]]] = {}
    for m in survivors:
        for q, records in m.returned(killed).items():
            if q in doomed:
                returns.setdefault(q, []).extend((t, o, m) for t, o in records)
    assigned_at = {}
    callbacks = [c for m in survivors for c in m.callbacks(killed)]
    for c in callbacks:
        if c.kind == "assigned":
            for q in c.partitions & doomed:
                assigned_at.setdefault(q, c.time)
    new = {q: [r for r in returns[q] if r[1] == ends[q]] for q in doomed}
    again = [q for q in doomed if len(new[q]) > 1 or min(o for _, o, _ in returns[q]) < ends[q]]
    checks = {
        "each_new_record_by_its_new_owner": all(
            any(q in m.assigned() for _, _, m in new[q]) for q in doomed
        )
    }
    result = {
        "takeover_s": max(new[q][0][0] for q in doomed) - killed,
        "first_callback_s": min(c.time for c in callbacks) - killed,
        "assigned_s": max(assigned_at.values(), default=killed) - killed,
        "append_s": appended - killed,
        "taken_over": len(doomed),
        "redelivered_partitions": len(again),
    }
    return result, checks


def _figures(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and spreads over the timed runs: leasekit's, each peer's and their ratios."""

    def mid(side: str, key: str) -> float:
        return round(median([r[side][key] for r in results]), 3)

    lk = [r["leasekit"]["takeover_s"] for r in results]
    peers: dict[str, Any] = {}
    for v in VARIANTS:
        times = [r[v.name]["takeover_s"] for r in results]
        ratios = [r[v.name]["takeover_s"] / r["leasekit"]["takeover_s"] for r in results]
        peers[v.name] = {
            "settings": v.describe(),
            "ratio": round(median(ratios), 3),
            "ratio_spread": spread(ratios),
            "takeover_s": round(median(times), 3),
            "spread": spread(times),
            **{k: mid(v.name, k) for k in ("first_callback_s", "assigned_s", "append_s")},
            "redelivered_partitions": max(r[v.name]["redelivered_partitions"] for r in results),
        }
    strongest = min(peers, key=lambda k: peers[k]["ratio"])
    figures = {
        "ratio": peers[strongest]["ratio"],
        "spread": peers[strongest]["ratio_spread"],
        "strongest_peer": strongest,
        "session_timeout_s": SESSION_MS / 1000,
        "leasekit_s": round(median(lk), 3),
        "baseline_s": peers[strongest]["takeover_s"],
        "leasekit": {
            "takeover_s": round(median(lk), 3),
            "spread": spread(lk),
            **{k: mid("leasekit", k) for k in ("gone_s", "published_s", "claimed_s", "append_s")},
            "taken_over": round(median([r["leasekit"]["taken_over"] for r in results])),
        },
        "peers": peers,
        "load_average": median([r["load_average"] or 0.0 for r in results]),
    }
    figures["note"] = (
        f"session timeout {SESSION_MS / 1000:g} s on both; "
        + "; ".join(
            f"{k} {x['takeover_s']:.3f} s ({x['ratio']:.2f}x, all assigned {x['assigned_s']:.2f} s)"
            for k, x in peers.items()
        )
        + f"; leasekit member gone {figures['leasekit']['gone_s']:.2f} s, assignment published "
        f"{figures['leasekit']['published_s']:.2f} s"
    )
    return figures


BENCHMARK = Benchmark(
    id="B17",
    what=(
        "takeover beside Kafka: a member of 3 over 300 buckets/partitions, in another process, "
        "killed with SIGKILL, until a survivor consumed a new record of each of its partitions "
        "(session timeout 2 s on both; Kafka classic cooperative-sticky and KIP-848)"
    ),
    metric="ratio",
    target=1.0,
    op=">=",
    run=run,
    target_note="Kafka time / leasekit time against the strongest peer, equal session timeouts",
    spark=False,
    quick_runs=2,
    quick_note="30 of 300 buckets/partitions",
)
