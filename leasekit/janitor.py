"""The janitor: finishes table drops, merges small log segments (R8) and runs retention (lease
expiry first) every interval, and samples the lag history of every consumer group every
``monitor.interval`` (M1).

One janitor acts at a time, chosen by a ZooKeeper leader election; standbys take over when the
leader's session ends (R7, L11).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .durations import human_duration, parse_duration
from .errors import (
    CorruptMetadataError,
    IllegalStateError,
    InvalidDurationError,
    LeadershipLostError,
    LeasekitError,
    TableNotFoundError,
    ZooKeeperUnavailableError,
)
from .log.compaction import compact_log
from .monitor.lag.history import sample
from .retention.apply import run_retention
from .structs import LogCompaction, RetentionReport
from .table import finish_drop
from .tables.catalog import list_tables, load_table, pending_drops

if TYPE_CHECKING:
    from .connection import Connection
    from .context import Context

__all__ = ["run", "run_once", "check_interval"]

log = logging.getLogger(__name__)

_POLL = 0.1
"""Seconds between looks at the stop event while standing by, and while suspended."""


def check_interval(interval: Any) -> timedelta:
    """The janitor interval as a ``timedelta`` (no I/O: checked before anything starts).

    Arguments:
        interval: a duration (``timedelta``, seconds or a string like ``"30s"``).

    Returns:
        The interval.

    Raises:
        InvalidDurationError: not a duration, not > 0, or longer than
            ``leasekit.durations.MAX_DURATION``.
    """
    value = parse_duration(interval, what="janitor interval")
    if value <= timedelta(0):
        raise InvalidDurationError(f"janitor interval must be greater than 0, got {interval!r}")
    return value


def run_once(conn: Connection) -> RetentionReport:
    """One pass without election: finish pending table drops, merge small log segments of every
    table (``compact_log``, R8), then ``run_retention``
    (which expires leases first). Logs one INFO line, and a WARNING per error or skipped znode.

    Arguments:
        conn: the connection to run the pass on.

    Returns:
        The retention report, with the errors of unfinished table drops first.

    Raises:
        CorruptMetadataError: the namespace settings or a table's metadata cannot be read.
        PermissionDeniedError: this connection's credentials may not write the namespace.
        WarehouseOwnedError: another metadata store owns the warehouse directory.
    """
    from .connection import context_of

    return _pass(context_of(conn))


def _pass(ctx: Context) -> RetentionReport:
    """``run_once`` on a context; inside ``ctx.store.fenced`` (as a janitor runs it) it raises
    ``LeadershipLostError`` when the election znode is gone, writing and deleting nothing more.
    """
    started = time.monotonic()
    errors: list[str] = []
    for table_id in pending_drops(ctx):
        try:
            finish_drop(ctx, table_id)
        except LeadershipLostError:
            raise
        except LeasekitError as exc:
            errors.append(f"dropped table {table_id}: {exc}")
    compacted = _compact(ctx, errors)
    report = run_retention(ctx)
    report = dataclasses.replace(report, errors=errors + report.errors, compacted=compacted)
    for error in report.errors:
        log.warning("janitor pass skipped: %s", error)
    log.info(
        "janitor pass: deleted %d items, freed %d bytes, merged %d segments into %d, "
        "%d errors in %s",
        len(report.deleted),
        report.freed_bytes,
        sum(c.merged for c in compacted),
        sum(c.written for c in compacted),
        len(report.errors),
        human_duration(time.monotonic() - started),
    )
    return report


def _compact(ctx: Context, errors: list[str]) -> list[LogCompaction]:
    """Merge the small segments of every table (R8), internal ones too; a table that cannot be
    read or merged now is said in ``errors`` and left for the next pass."""
    done: list[LogCompaction] = []
    for name in list_tables(ctx, internal=True, skipped=errors):
        try:
            result = compact_log(load_table(ctx, name, internal=True))
        except LeadershipLostError:
            raise
        except TableNotFoundError:
            continue  # dropped since it was listed
        except LeasekitError as exc:
            errors.append(f"compaction of table {name}: {exc}")
            continue
        if result.written or result.lost:
            done.append(result)
    return done


def run(conn: Connection, interval: Any = "30s", stop_event: threading.Event | None = None) -> None:
    """Join the janitor election and, while leader, do a pass every ``interval``.

    Blocks until ``stop_event`` is set (a leader finishes its current pass first) or the
    connection is closed. A pass never raises: errors are logged and the next pass retries.

    Arguments:
        conn: the connection whose namespace the janitor looks after.
        interval: the time between passes (a duration).
        stop_event: set it to stop the janitor; ``None`` runs until the connection closes.

    Returns:
        None, once stopped.

    Raises:
        InvalidDurationError: a bad ``interval``, before anything starts.
    """
    from .connection import context_of

    seconds = check_interval(interval).total_seconds()
    Janitor(context_of(conn), seconds, stop_event or threading.Event()).run()


class Janitor:
    """One janitor on one context; ``run`` blocks (see ``leasekit.janitor.run``)."""

    def __init__(
        self, ctx: Context, interval: float, stop: threading.Event, *, once: bool = False
    ) -> None:
        self.ctx = ctx
        self.interval = interval
        self.stop = stop
        self.once = once
        """Stop after the first pass done as leader (``leasekit janitor --once``)."""
        self.report: RetentionReport | None = None
        """The report of the last pass that ended without an error."""
        self.path = f"{ctx.paths.janitor}/election"
        self._lost = threading.Event()
        self._connected = threading.Event()
        self._connected.set()
        self._finished = threading.Event()
        self._election: Any = None

    def _on_state(self, state: str) -> None:
        if state == "CONNECTED":
            self._connected.set()
            return
        self._connected.clear()
        if state == "LOST":
            self._lost.set()

    def _cancel_on_stop(self) -> None:
        # Cancelling again every poll covers an election created just after the stop.
        while not self._finished.wait(_POLL):
            if self.stop.is_set() and self._election is not None:
                self._election.cancel()

    def run(self) -> None:
        try:
            remove_listener = self.ctx.store.add_state_listener(self._on_state)
        except IllegalStateError as exc:
            log.warning("janitor not started: %s", exc)
            return
        watcher = threading.Thread(target=self._cancel_on_stop, name="janitor-stop", daemon=True)
        watcher.start()
        try:
            while not self.stop.is_set():
                try:
                    self._election = self.ctx.store.election(self.path, self.ctx.owner)
                except IllegalStateError as exc:  # the connection was closed
                    log.warning("janitor stops: %s", exc)
                    return
                self._lost.clear()
                try:
                    self._election.run(self._lead)
                except LeasekitError as exc:
                    log.warning("janitor election interrupted: %s; joining again", exc)
                    self.stop.wait(min(self.interval, 1.0))
        finally:
            self._finished.set()
            watcher.join()
            with contextlib.suppress(Exception):
                remove_listener()

    def _lead(self) -> None:
        log.info(
            "janitor %s leads at %s (interval %s)",
            self.ctx.owner,
            self.path,
            human_duration(self.interval),
        )
        next_pass = next_sample = time.monotonic()
        while not self.stop.is_set():
            if self._lost.is_set():
                log.warning(
                    "janitor %s lost its ZooKeeper session; joining the election again",
                    self.ctx.owner,
                )
                return
            if not self._connected.is_set():  # suspended: maybe no longer leader; wait
                self.stop.wait(_POLL)
                continue
            if time.monotonic() >= next_pass:
                if not self._fenced(self._pass, "pass"):
                    return
                next_pass = time.monotonic() + self.interval
            if time.monotonic() >= next_sample:  # M1: on its own interval, not the pass's
                if not self._fenced(sample, "lag history sample"):
                    return
                next_sample = time.monotonic() + self._sample_interval()
            if self.once:  # the first pass and sample are done
                self.stop.set()
                break
            self._sleep(min(next_pass, next_sample) - time.monotonic())
        log.info("janitor %s stops", self.ctx.owner)

    def _pass(self, ctx: Context) -> None:
        self.report = _pass(ctx)

    def _sample_interval(self) -> float:
        """``monitor.interval`` as last seen (no I/O)."""
        return float(self.ctx.cached_settings()["monitor.interval"].total_seconds())

    def _sleep(self, seconds: float) -> None:
        """Wait for the next pass; wakes at once on stop and within a poll on a lost session."""
        deadline = time.monotonic() + seconds
        while not self._lost.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.stop.wait(min(remaining, _POLL)):
                return

    def _fenced(self, work: Callable[[Context], Any], what: str) -> bool:
        """``work`` (a pass or a lag history sample), fenced: each of its transactions checks
        that this janitor still holds the election, and no file goes without such a check
        first (docs/security.md, "Fencing"). False when it turns out to have lost the election."""
        fence = self._election.leader_path()
        try:
            if fence is None:
                raise LeadershipLostError("the election znode is unknown")
            with self.ctx.store.fenced(fence):
                work(self.ctx)
        except LeadershipLostError as exc:
            log.warning(
                "janitor %s lost the election during a %s; joining it again: %s",
                self.ctx.owner,
                what,
                exc,
            )
            return False
        except CorruptMetadataError as exc:
            log.warning("janitor %s skipped corrupt metadata at %s: %s", what, exc.path, exc)
        except ZooKeeperUnavailableError as exc:
            log.warning("janitor %s: %s; retrying after the interval", what, exc)
        except LeasekitError as exc:
            log.error("janitor %s failed: %s", what, exc)
        except Exception:  # a janitor that dies stops all retention: log and carry on
            log.exception("janitor %s failed unexpectedly", what)
        return True
