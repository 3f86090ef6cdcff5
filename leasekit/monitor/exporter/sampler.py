"""The exporter's background pass: every interval it samples the lag history (M1, when
asked: the janitor samples on its own) and computes the figures too heavy for a scrape (the
retention plan's reclaimable bytes per table, each lease's pinned and exclusive bytes);
scrapes serve the last ones with their age. A failed pass keeps the previous figures and is
counted; the next interval tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, NamedTuple

from ...errors import LeasekitError
from ...memory import collector_paused
from ...retention.apply import retention_plan
from ..lag.history import sample
from ..leases.lease_book import read_leases
from ..leases.lease_bytes import lease_bytes

if TYPE_CHECKING:
    from ...context import Context

__all__ = ["Figures", "Sampler"]

log = logging.getLogger("leasekit.monitor")


class Figures(NamedTuple):
    """The heavy figures of one background pass."""

    time_s: float
    """When the pass finished (Unix time, seconds)."""
    reclaimable: dict[str, int]
    """Bytes the retention plan would delete now, per table."""
    lease_bytes: dict[str, tuple[int, int]]
    """(pinned_bytes, exclusive_bytes) per lease id."""


@collector_paused()
def compute_figures(ctx: Context) -> Figures:
    """One background pass.

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
        CorruptMetadataError: the settings or a table's metadata are unreadable.
    """
    plan = retention_plan(ctx)
    reclaimable: dict[str, int] = {}
    for item in plan.items:
        if item.table_bucket is not None:
            table = item.table_bucket.table
            deleted = item.size_bytes if item.action == "delete" else 0
            reclaimable[table] = reclaimable.get(table, 0) + deleted
    return Figures(time.time(), reclaimable, lease_bytes(ctx, read_leases(ctx)))


class Sampler:
    """Runs ``compute_figures`` now and every ``interval_s`` on a thread of its own.

    Arguments:
        ctx: the connection's context.
        interval_s: seconds between the starts of two passes.
        sample_history: also sample the lag history in each pass (``history.sample``: it
            writes only when a sample is due, whoever else samples).
    """

    def __init__(self, ctx: Context, interval_s: float, *, sample_history: bool = False) -> None:
        self._ctx = ctx
        self.interval_s = interval_s
        self.sample_history = sample_history
        self.figures: Figures | None = None
        """The last figures computed; None before the first pass succeeds."""
        self.failures = 0
        """Passes that failed so far."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (its first pass starts at once)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="leasekit-sampler", daemon=True)
        self._thread.start()

    def run_once(self) -> bool:
        """One pass now; whether it succeeded (a failure is logged and counted)."""
        ok = True
        if self.sample_history:
            try:
                sample(self._ctx)
            except LeasekitError as exc:
                ok = False
                log.warning("lag history sample failed: %s", exc)
        try:
            self.figures = compute_figures(self._ctx)
        except LeasekitError as exc:
            ok = False
            log.warning("monitoring pass failed (the last figures stay served): %s", exc)
        self.failures += not ok
        return ok

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.run_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread; a pass under way is left to finish on its own (daemon thread)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
