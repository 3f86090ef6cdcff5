"""Kafka group members for the side-by-side benchmarks B15 and B17: confluent-kafka (librdkafka)
consumers of one topic, each polled by a Python thread of its own as an application runs them
(``consume`` releases the GIL while it waits; each consumer has its own librdkafka threads),
with what each did recorded: its rebalance callbacks and every record its polls returned,
timed by ``time.perf_counter``. Also the protocol variants the benchmarks compare leasekit
with, and the broker settings that allow their timings.

The rebalance callbacks are librdkafka's incremental ones: with ``cooperative-sticky`` (classic
protocol) and with ``group.protocol=consumer`` (KIP-848) ``on_assign`` and ``on_revoke`` name
the partitions added or removed, and the client adds them to the assignment after the callback
(``incremental_assign``), as it does when an application does not. Auto-commit is on unless
asked otherwise: librdkafka then commits a revoked partition's position before giving it up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "alternating_runs",
    "BROKER_SETTINGS",
    "Variant",
    "classic",
    "kip848",
    "KafkaMember",
    "Callback",
    "configure_group",
    "group_stable",
    "served",
    "latest_offsets",
    "split_evenly",
    "wait_settled",
]

BROKER_SETTINGS: dict[str, Any] = {
    # Lower bounds only, so that a variant may ask for short timings; no default changes.
    "group.min.session.timeout.ms": 1000,  # classic; Kafka's default bound is 6 s
    "group.consumer.min.session.timeout.ms": 1000,  # KIP-848; default bound 45 s
    "group.consumer.min.heartbeat.interval.ms": 50,  # KIP-848; default bound 5 s
}
"""Broker settings for the group benchmarks (``bench.peer.kafka_broker(label, settings)``)."""

POLL_TIMEOUT_S = 0.5
"""Each poll waits at most this long (a callback or a record ends it at once)."""
QUIET_S = 0.5
"""A group counts as settled once stable and without a callback for this long (a member's
callbacks run in its poll right after the coordinator's answer)."""


@dataclass(frozen=True)
class Variant:
    """A Kafka group protocol with its timings: the consumer settings and, for KIP-848, where
    the broker decides the timings, the group's own configuration (set before it forms)."""

    name: str
    protocol: str
    """``"classic"`` or ``"consumer"`` (KIP-848)."""
    client: dict[str, Any] = field(default_factory=dict)
    group: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        protocol = "classic cooperative-sticky" if self.protocol == "classic" else "KIP-848"
        settings = {**self.client, **self.group}
        settings.pop("partition.assignment.strategy", None)
        settings.pop("group.protocol", None)
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()) or "defaults"
        return f"{protocol} ({shown})"


def classic(
    name: str, heartbeat_ms: int = 3000, session_ms: int = 45_000, fetch_wait_ms: int = 500
) -> Variant:
    """The classic protocol with librdkafka's cooperative-sticky assignor; librdkafka's default
    heartbeat interval is 3 s, its default session timeout 45 s, and a fetch of partitions
    without new records waits up to ``fetch.wait.max.ms``, 500 ms, for some (partitions
    assigned meanwhile are fetched once it returns)."""
    client: dict[str, Any] = {"partition.assignment.strategy": "cooperative-sticky"}
    if heartbeat_ms != 3000:
        client["heartbeat.interval.ms"] = heartbeat_ms
    if session_ms != 45_000:
        client["session.timeout.ms"] = session_ms
    if fetch_wait_ms != 500:
        client["fetch.wait.max.ms"] = fetch_wait_ms
    return Variant(name, "classic", client)


def kip848(
    name: str,
    heartbeat_ms: int = 5000,
    session_ms: int = 45_000,
    assignment_interval_ms: int = 1000,
    fetch_wait_ms: int = 500,
) -> Variant:
    """The KIP-848 consumer protocol (the broker assigns; Kafka 4.4's defaults: heartbeat
    interval 5 s, session timeout 45 s, a new target assignment at most every 1 s). The
    timings are the group's own configuration, not the client's, apart from
    ``fetch.wait.max.ms`` (as for ``classic``)."""
    group = {}
    if heartbeat_ms != 5000:
        group["consumer.heartbeat.interval.ms"] = str(heartbeat_ms)
    if session_ms != 45_000:
        group["consumer.session.timeout.ms"] = str(session_ms)
    if assignment_interval_ms != 1000:
        group["consumer.assignment.interval.ms"] = str(assignment_interval_ms)
    client: dict[str, Any] = {"group.protocol": "consumer"}
    if fetch_wait_ms != 500:
        client["fetch.wait.max.ms"] = fetch_wait_ms
    return Variant(name, "consumer", client, group)


def configure_group(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """Set a group's own configuration (KIP-848 timings) before any member joins it."""
    if not configs:
        return
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def latest_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset, in one ListOffsets request (``bench.peer.end_offsets`` asks
    partition by partition: seconds at 1,000 partitions)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    asked = {TopicPartition(topic, q): OffsetSpec.latest() for q in range(partitions)}
    return {tp.partition: f.result(30).offset for tp, f in admin.list_offsets(asked).items()}


@dataclass(frozen=True)
class Callback:
    """A rebalance callback: when it was called, which, and the partitions it named."""

    time: float
    kind: str
    """``"assigned"``, ``"revoked"`` or ``"lost"``."""
    partitions: frozenset[int]


class KafkaMember:
    """A consumer of ``topic`` in ``group`` whose thread subscribes (the join), then polls until
    ``stop()`` and closes it. Built here, connected to the broker and the topic's metadata
    fetched (untimed); ``subscribed`` is the ``perf_counter`` time of the subscribe call."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        variant: Variant,
        *,
        name: str,
        auto_commit: bool = True,
    ) -> None:
        from confluent_kafka import Consumer

        self.name, self.topic = name, topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": auto_commit,
                **variant.client,
            }
        )
        self.consumer.list_topics(topic, timeout=30)
        self.subscribed: float | None = None
        self.error: BaseException | None = None
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._callbacks: list[Callback] = []
        self._assigned: set[int] = set()
        self._returned: dict[int, list[tuple[float, int]]] = {}
        self._requests: list[tuple[Callable[[], None], threading.Event]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"bench-{name}", daemon=True)

    # -- the polling thread -------------------------------------------------------------------

    def start(self) -> KafkaMember:
        self._thread.start()
        return self

    def _run(self) -> None:
        c = self.consumer
        try:
            self.subscribed = time.perf_counter()
            c.subscribe(
                [self.topic],
                on_assign=lambda _c, ps: self._callback("assigned", ps),
                on_revoke=lambda _c, ps: self._callback("revoked", ps),
                on_lost=lambda _c, ps: self._callback("lost", ps),
            )
            while not self._stop.is_set():
                self._serve()
                # poll returns at the first record (consume's batch waits to fill or time out),
                # then what else is already fetched is drained
                first = c.poll(POLL_TIMEOUT_S)
                messages = [] if first is None else [first, *c.consume(1000, 0)]
                now = time.perf_counter()
                with self._lock:
                    for m in messages:
                        if m.error() is not None:
                            self.errors.append(str(m.error()))
                            continue
                        self._returned.setdefault(m.partition(), []).append((now, m.offset()))
        except BaseException as exc:  # noqa: BLE001 - reported by the benchmark
            self.error = exc
        finally:
            try:
                c.close()
            except BaseException as exc:  # noqa: BLE001
                self.error = self.error or exc

    def _callback(self, kind: str, partitions: Sequence[Any]) -> None:
        named = frozenset(tp.partition for tp in partitions)
        with self._lock:
            self._callbacks.append(Callback(time.perf_counter(), kind, named))
            if kind == "assigned":
                self._assigned |= named
            else:
                self._assigned -= named

    def _serve(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        for request, done in requests:
            request()
            done.set()

    def _on_thread(self, request: Callable[[], None]) -> threading.Event:
        done = threading.Event()
        with self._lock:
            self._requests.append((request, done))
        return done

    def pause_all(self) -> threading.Event:
        """Ask its thread to pause every partition assigned now, between two polls; the event
        is set once done (``served``)."""
        return self._on_thread(lambda: self.consumer.pause(self.consumer.assignment()))

    def resume_all(self) -> threading.Event:
        return self._on_thread(lambda: self.consumer.resume(self.consumer.assignment()))

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 60.0) -> None:
        self._thread.join(timeout)

    # -- what it did --------------------------------------------------------------------------

    def assigned(self) -> frozenset[int]:
        """The partitions its callbacks have assigned and not revoked."""
        with self._lock:
            return frozenset(self._assigned)

    def callbacks(self, since: float = 0.0) -> list[Callback]:
        with self._lock:
            return [c for c in self._callbacks if c.time >= since]

    def last_callback(self) -> float:
        with self._lock:
            return self._callbacks[-1].time if self._callbacks else 0.0

    def consumed_to(self) -> dict[int, int]:
        """Per partition, one past the highest offset returned so far."""
        with self._lock:
            return {p: max(o for _, o in v) + 1 for p, v in self._returned.items()}

    def returned(self, since: float = 0.0) -> dict[int, list[tuple[float, int]]]:
        """Per partition, ``(time, offset)`` of every record returned since ``since``."""
        with self._lock:
            out = {p: [r for r in v if r[0] >= since] for p, v in self._returned.items()}
        return {p: v for p, v in out.items() if v}

    def first_returned(self, partitions: frozenset[int], since: float) -> dict[int, float]:
        """Per partition of ``partitions``, when a poll first returned one of its records."""
        with self._lock:
            out = {}
            for p in partitions:
                t = next((t for t, _ in self._returned.get(p, ()) if t >= since), None)
                if t is not None:
                    out[p] = t
            return out


def served(requests: Sequence[threading.Event], timeout: float = 30.0) -> None:
    """Wait until the members' threads have served the requests (all asked at once, each
    thread serves its own after its current poll)."""
    deadline = time.monotonic() + timeout
    for done in requests:
        if not done.wait(max(0.0, deadline - time.monotonic())):
            raise RuntimeError(f"a member's thread did not serve a request within {timeout:g} s")


def split_evenly(assignments: Sequence[frozenset[int]], partitions: int) -> bool:
    """Whether the assignments split every partition between the members, each one some, none
    twice, the sizes differing by at most one."""
    sizes = [len(a) for a in assignments]
    union = frozenset().union(*assignments)
    return (
        min(sizes) > 0
        and max(sizes) - min(sizes) <= 1
        and sum(sizes) == partitions
        and union == frozenset(range(partitions))
    )


def group_stable(bootstrap: str, group: str) -> Callable[[], bool]:
    """A check of the coordinator's view: whether ``group`` is stable (classic: no rebalance
    under way; KIP-848: every member has acknowledged its target assignment)."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})

    def stable() -> bool:
        described = admin.describe_consumer_groups([group], request_timeout=10)[group]
        return described.result(15).state == ConsumerGroupState.STABLE

    return stable


def wait_settled(
    members: Sequence[KafkaMember],
    partitions: int,
    ends: dict[int, int],
    stable: Callable[[], bool],
    timeout: float,
) -> list[frozenset[int]]:
    """Wait until the members split the partitions evenly, have read every record, the
    coordinator calls the group stable and no callback has run for ``QUIET_S``; their
    assignments."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.1)
        failed = [f"{m.name}: {m.error!r}" for m in members if m.error is not None]
        if failed:
            raise RuntimeError("a Kafka member failed: " + "; ".join(failed))
        assignments = [m.assigned() for m in members]
        if not split_evenly(assignments, partitions):
            continue
        read: dict[int, int] = {}
        for m in members:
            for p, end in m.consumed_to().items():
                read[p] = max(read.get(p, 0), end)
        if any(read.get(p, 0) < end for p, end in ends.items() if end):
            continue
        if time.perf_counter() - max(m.last_callback() for m in members) < QUIET_S:
            continue
        if stable():
            return assignments
    raise RuntimeError(f"the Kafka group of {len(members)} did not settle within {timeout:g} s")


def alternating_runs(
    runs: int,
    sides: Sequence[str],
    measure: Callable[[str, int], tuple[dict[str, Any], dict[str, bool]]],
    log_run: Callable[[dict[str, Any], int, int], None],
) -> tuple[list[dict[str, Any]], dict[str, bool]]:
    """Run 0 (every side warmed up, untimed) and ``runs`` timed runs, each measuring every
    side once in alternating order after ``settle``: ``measure(side, run)`` gives the side's
    figures and checks. Returns the timed runs' rows and the checks (a peer's prefixed with
    its name; the warm-up's failures do not count)."""
    from .common import alternate, load_average, settle

    results: list[dict[str, Any]] = []
    checks: dict[str, bool] = {}
    for i in range(runs + 1):
        row: dict[str, Any] = {"order": alternate(i, sides), "load_average": load_average()}
        for side in row["order"]:
            settle(None)
            started = time.perf_counter()
            result, ok = measure(side, i)
            row[side] = {**result, "side_wall_s": time.perf_counter() - started}
            for name, passed in ok.items():
                key = name if side == "leasekit" else f"{side}_{name}"
                checks[key] = checks.get(key, True) and (passed or i == 0)
        log_run(row, i, runs)
        if i > 0:
            results.append(row)
    return results, checks
