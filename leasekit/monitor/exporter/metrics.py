"""Prometheus metrics of a namespace (M5), served over HTTP by ``leasekit exporter`` (one
collector per namespace it serves) and ``leasekit janitor --metrics-port``.

A custom collector builds every family afresh on each scrape from cheap readings (every
group's lag, every lease's state and expiry: a few pipelined ZooKeeper round trips); the
heavy figures (the retention plan, each lease's bytes) come from the ``Sampler``'s last
background pass, with its time. Every series has a ``namespace`` label; internal tables
(names starting ``__``) are never labels.

======================================================  =====================================
``leasekit_up``                                         1 when this scrape read ZooKeeper, 0
                                                        when it could not, or the namespace
                                                        could not be opened (``unreachable``;
                                                        the series below that need ZooKeeper
                                                        are then absent)
``leasekit_scrape_duration_seconds``                    time this scrape took
``leasekit_group_committed_offset{group,table,bucket}`` the group's committed offset
``leasekit_bucket_log_end_offset{table,bucket}``        the bucket's log end (buckets some group
                                                        reads)
``leasekit_group_lag{group,table,bucket}``              records not consumed (committed
                                                        buckets only)
``leasekit_group_time_lag_seconds{group,table,bucket}`` age of the first record not consumed
``leasekit_bucket_status{group,table,bucket,status}``   1, labelled with the bucket's Burrow
                                                        status (OK, WARN, STOP, STALL, REWIND,
                                                        MISSING); one series per bucket
``leasekit_group_status{group,status}``                 1 for the group's status as
                                                        ``group_overview`` gives it, 0 for the
                                                        others (OK, WARN, BEHIND, AT_RISK, ERR)
``leasekit_group_behind{group}``                        1 when M6 holds (even under ERR)
``leasekit_group_at_risk{group}``                       1 when M3 holds (even under ERR)
``leasekit_group_max_lag{group}``                       the largest bucket lag
``leasekit_group_consume_rate{group}``                  records committed per second over
                                                        monitor.rate-window (NaN: unknown)
``leasekit_group_produce_rate{group}``                  records appended per second to its
                                                        buckets (NaN: unknown)
``leasekit_group_eta_seconds{group}``                   time to catch up; +Inf when not
                                                        catching up, NaN when unknown
``leasekit_group_retention_headroom_seconds{group}``    time until retention may delete a record
                                                        it has not consumed; +Inf: never
``leasekit_group_members{group}``                       live members
``leasekit_lease_expires_in_seconds{lease}``            seconds to expiry, negative once
                                                        expired
``leasekit_lease_state{lease,state}``                   1 for the lease's state, 0 for the
                                                        others (active, expiring, orphaned,
                                                        expired)
``leasekit_lease_pinned_buckets{lease}``                buckets it pins
``leasekit_lease_pinned_bytes{lease}``                  bytes of the snapshots it pins (*)
``leasekit_lease_exclusive_bytes{lease}``               bytes dropping it would free (*)
``leasekit_retention_reclaimable_bytes{table}``         bytes the retention plan deletes (*)
``leasekit_last_sample_timestamp_seconds``              when the figures marked (*) were
                                                        computed (Unix time)
``leasekit_last_sample_age_seconds``                    their age
``leasekit_sample_failures_total``                      background passes that failed
======================================================  =====================================
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ...errors import LeasekitError
from ..lag.overview import SEVERITY, Assessment, Rates, assess_groups
from ..lag.readings import GroupReading, read_all_groups
from ..leases.lease_book import LEASE_STATES, LeaseBook, lease_state, read_leases
from .sampler import Figures, Sampler

if TYPE_CHECKING:
    from ...context import Context

__all__ = ["LeasekitCollector", "GROUP_STATUSES", "unreachable"]

log = logging.getLogger("leasekit.monitor")

GROUP_STATUSES = SEVERITY
"""Values of ``leasekit_group_status``'s ``status`` label (``group_overview``'s statuses)."""
INF = float("inf")
NAN = float("nan")

Assessed = list[tuple[GroupReading, Rates, Assessment]]


def _internal(table: str) -> bool:
    """Whether ``table`` is one of leasekit's own (the lag history): never a label."""
    return table.startswith("__")


def _gauge(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=["namespace", *labels])


_BUCKET = ("group", "table", "bucket")
_FAMILIES = (
    ("committed", "leasekit_group_committed_offset", "The group's committed offset", _BUCKET),
    ("end", "leasekit_bucket_log_end_offset", "The bucket's log end offset", ("table", "bucket")),
    ("lag", "leasekit_group_lag", "Records not consumed (log end - committed offset)", _BUCKET),
    ("time_lag", "leasekit_group_time_lag_seconds", "Age of the first record not consumed",
     _BUCKET),
    ("bucket_status", "leasekit_bucket_status",
     "1, labelled with the bucket's lag health (OK, WARN, STOP, STALL, REWIND, MISSING)",
     (*_BUCKET, "status")),
    ("status", "leasekit_group_status",
     "1 for the group's status (OK, WARN, BEHIND, AT_RISK, ERR), 0 for the other values",
     ("group", "status")),
    ("behind", "leasekit_group_behind", "1 when the group consumes slower than its tables grow",
     ("group",)),
    ("at_risk", "leasekit_group_at_risk",
     "1 when retention may delete records the group has not consumed soon", ("group",)),
    ("max_lag", "leasekit_group_max_lag", "The largest bucket lag", ("group",)),
    ("consume", "leasekit_group_consume_rate", "Records committed per second (rate window)",
     ("group",)),
    ("produce", "leasekit_group_produce_rate",
     "Records appended per second to the group's buckets (rate window)", ("group",)),
    ("eta", "leasekit_group_eta_seconds",
     "Time to catch up at the current rates (+Inf: not catching up, NaN: unknown)", ("group",)),
    ("headroom", "leasekit_group_retention_headroom_seconds",
     "Time until retention may delete a record the group has not consumed (+Inf: never)",
     ("group",)),
    ("members", "leasekit_group_members", "Live members of the group", ("group",)),
    ("expires", "leasekit_lease_expires_in_seconds",
     "Seconds until the lease expires (negative once expired)", ("lease",)),
    ("state", "leasekit_lease_state",
     "1 for the lease's state (active, expiring, orphaned, expired), 0 for the others",
     ("lease", "state")),
    ("buckets", "leasekit_lease_pinned_buckets", "Buckets the lease pins", ("lease",)),
)  # fmt: skip
"""(attribute, name, help, labels besides namespace) of the families read on each scrape, in
the order they are served."""


class _Families:
    """The metric families of one scrape, filled from what it read."""

    def __init__(self, namespace: str) -> None:
        self.ns = namespace
        self.of = {attr: _gauge(name, doc, *labels) for attr, name, doc, labels in _FAMILIES}

    def add_groups(self, groups: Assessed) -> None:
        ns = self.ns
        ends: dict[tuple[str, int], int] = {}
        for g, rate, a in groups:
            for b in g.buckets:
                table, bucket = b.table_bucket.table, b.table_bucket.bucket
                if _internal(table):
                    continue
                ends[(table, bucket)] = b.log_end_offset
                if b.lag is None:
                    continue  # never committed: no lag to show
                labels = [ns, g.group, table, str(bucket)]
                self.of["committed"].add_metric(labels, b.current_offset or 0)
                self.of["lag"].add_metric(labels, b.lag)
                self.of["time_lag"].add_metric(labels, (b.time_lag_ms or 0) / 1000)
                if b.status is not None:  # the current status only: 1 series per bucket
                    self.of["bucket_status"].add_metric([*labels, b.status], 1)
            group = [ns, g.group]
            for status in GROUP_STATUSES:
                self.of["status"].add_metric([*group, status], 1 if a.status == status else 0)
            self.of["behind"].add_metric(group, float(a.behind))
            self.of["at_risk"].add_metric(group, float(a.at_risk))
            self.of["max_lag"].add_metric(group, max((b.lag or 0 for b in g.buckets), default=0))
            self.of["consume"].add_metric(group, rate.consume)
            self.of["produce"].add_metric(group, rate.produce)
            eta = a.eta_ms / 1000 if a.eta_ms is not None else INF if rate.known else NAN
            self.of["eta"].add_metric(group, eta)
            headroom = INF if a.headroom_ms is None else a.headroom_ms / 1000
            self.of["headroom"].add_metric(group, headroom)
            self.of["members"].add_metric(group, len(g.members))
        for (table, bucket), end in sorted(ends.items()):
            self.of["end"].add_metric([ns, table, str(bucket)], end)

    def add_leases(self, book: LeaseBook) -> None:
        ns = self.ns
        for entry in book.leases:
            if not entry.live:
                continue
            state = lease_state(entry, book.now_ms)
            lease = entry.lease_id
            self.of["expires"].add_metric(
                [ns, lease], (entry.record.expires_ms - book.now_ms) / 1000
            )
            for each in LEASE_STATES:
                self.of["state"].add_metric([ns, lease, each], 1 if each == state else 0)
            self.of["buckets"].add_metric([ns, lease], len(entry.pins))

    def read(self) -> list[GaugeMetricFamily]:
        return list(self.of.values())


def _sampled(namespace: str, figures: Figures | None, failures: int) -> Iterator[Any]:
    """The families of the background pass's figures."""
    pinned = _gauge("leasekit_lease_pinned_bytes", "Bytes of the snapshots the lease pins", "lease")
    exclusive = _gauge(
        "leasekit_lease_exclusive_bytes",
        "Bytes dropping the lease would free (files no other lease or retention rule keeps)",
        "lease",
    )
    reclaimable = _gauge(
        "leasekit_retention_reclaimable_bytes",
        "Bytes the retention plan would delete now",
        "table",
    )
    when = _gauge(
        "leasekit_last_sample_timestamp_seconds",
        "When the lease bytes and reclaimable bytes were computed (Unix time)",
    )
    age = _gauge("leasekit_last_sample_age_seconds", "Age of the lease and reclaimable bytes")
    if figures is not None:
        for lease, (pin, own) in sorted(figures.lease_bytes.items()):
            pinned.add_metric([namespace, lease], pin)
            exclusive.add_metric([namespace, lease], own)
        for table, size in sorted(figures.reclaimable.items()):
            if not _internal(table):
                reclaimable.add_metric([namespace, table], size)
        when.add_metric([namespace], figures.time_s)
        age.add_metric([namespace], max(0.0, time.time() - figures.time_s))
    failed = CounterMetricFamily(
        "leasekit_sample_failures", "Background passes that failed", labels=["namespace"]
    )
    failed.add_metric([namespace], failures)
    yield from (pinned, exclusive, reclaimable, when, age, failed)


def _up(namespace: str, up: bool) -> GaugeMetricFamily:
    gauge = _gauge("leasekit_up", "1 when this scrape read the namespace in ZooKeeper, else 0")
    gauge.add_metric([namespace], 1 if up else 0)
    return gauge


def unreachable(namespace: str) -> Iterator[Any]:
    """The families of a namespace that could not be opened: ``leasekit_up`` 0."""
    yield _up(namespace, False)


class LeasekitCollector:
    """A prometheus_client collector of one namespace's metrics (see the module's table).

    Each scrape reads ZooKeeper on a worker thread and waits at most ``budget_s`` for it: a
    reading that takes longer (a server that just died, before the session notices) gives
    ``leasekit_up`` 0 and goes on alone; scrapes while it runs answer ``leasekit_up`` 0 at
    once, so a scrape never hangs on ZooKeeper.

    Arguments:
        ctx: the connection's context.
        sampler: the background pass whose last figures are served.
        budget_s: the longest a scrape waits for ZooKeeper, in seconds.
    """

    def __init__(self, ctx: Context, sampler: Sampler, budget_s: float = 5.0) -> None:
        self._ctx = ctx
        self._sampler = sampler
        self._budget_s = budget_s
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasekit-scrape")
        self._reading: Future[tuple[Assessed, LeaseBook]] | None = None
        self._lock = threading.Lock()

    def describe(self) -> list[Any]:
        """Nothing: registering the collector must not scrape it."""
        return []

    def _groups(self) -> Assessed:
        """Every group with its rates and assessment (``group_overview``'s); one whose znodes
        hold garbage is left out and logged."""
        skipped: list[str] = []
        groups = read_all_groups(self._ctx, skipped=skipped)
        for reason in skipped:
            log.warning("scrape left out %s", reason)
        return assess_groups(self._ctx, groups)

    def _read(self) -> tuple[Assessed, LeaseBook] | None:
        """Every group and lease now; None when ZooKeeper cannot answer within the budget."""
        if not self._ctx.store.connected:  # a session down answers at once
            return None
        with self._lock:
            if self._reading is not None and not self._reading.done():
                return None  # an earlier reading still waits on ZooKeeper
            self._reading = reading = self._pool.submit(
                lambda: (self._groups(), read_leases(self._ctx))
            )
        try:
            return reading.result(timeout=self._budget_s)
        except FutureTimeout:
            log.warning("scrape: ZooKeeper did not answer within %gs", self._budget_s)
        except LeasekitError as exc:
            log.warning("scrape could not read namespace %s: %s", self._ctx.namespace, exc)
        return None

    def collect(self) -> Iterator[Any]:
        """Every family, read now; ZooKeeper unreachable gives ``leasekit_up`` 0."""
        started = time.perf_counter()
        ns = self._ctx.namespace
        read = self._read()
        if read is not None:
            families = _Families(ns)
            families.add_groups(read[0])
            families.add_leases(read[1])
            yield from families.read()
        yield from _sampled(ns, self._sampler.figures, self._sampler.failures)
        yield _up(ns, read is not None)
        took = _gauge("leasekit_scrape_duration_seconds", "Time this scrape took")
        took.add_metric([ns], time.perf_counter() - started)
        yield took

    def close(self) -> None:
        """Stop the worker thread (a reading under way finishes on its own)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
