"""Live views over a connection: note what a read touched in ZooKeeper, watch it, call back once
per burst of changes, and say how fresh a view is; plus the readings the panels show. All of it
goes through the connection's public methods (``change_watcher``, ``group_board``, ...)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .durations import eta_text, headroom_text, human_duration, parse_duration, parse_timestamp
from .errors import LeasekitError
from .memory import collector_paused
from .rates import history_rates
from .sizes import human_bytes
from .structs import DESCRIBE_COLUMNS, GroupBoard
from .validate import is_internal_table

if TYPE_CHECKING:
    import pandas as pd

    from .connection import Connection

__all__ = [
    "LiveView",
    "Follow",
    "DEBOUNCE",
    "STALE_AFTER",
    "RETRY_AFTER",
    "freshness",
    "server_time_estimate",
    "GroupBoard",
    "group_board",
    "lag_histories",
    "history_rates",
    "sample_lag_history",
    "NO_SAMPLER",
    "DESCRIBE_COLUMNS",
    "human_duration",
    "human_bytes",
    "is_internal_table",
    "eta_text",
    "headroom_text",
    "parse_duration",
    "parse_timestamp",
]

T = TypeVar("T")

DEBOUNCE = 0.25
"""Seconds a burst of ZooKeeper changes is gathered into one call back."""

STALE_AFTER = 30.0
"""Seconds after which a live view reads again although nothing it watches changed (time lags,
ages and statuses move with the clock alone)."""

RETRY_AFTER = 2.0
"""Seconds after a failed read (or the session's loss) when a following view reads again."""

Follow = Literal["all", "positions", "retention"]
"""Which changes of what a read touched matter: ``"all"``; ``"positions"``, all but the log's
segment records (immutable); ``"retention"``, the children of every znode listed and the data of
tables and leases. Each is watched through its change marker (``zk.changes``)."""


class LiveView:
    """What a live view of one connection reads, watches and runs, on a thread of its own.

    While ``following``, each ``read`` watches what it touched: a change of any of it calls
    ``on_change`` once per burst, and so do ``stale_after`` seconds without a change. Building
    a view does no I/O.

    Arguments:
        conn: the Connection the view shows.
        on_change: called on the view's thread when what the last read touched changed, when
            the session came back (changes may have been missed) or when the data is stale.
        on_state: called on the view's thread with True or False when the ZooKeeper session
            is connected again or lost (suspended or expired).
        follow: which changes of what was read matter (see ``Follow``).
        debounce: seconds a burst of changes is gathered into one ``on_change``.
        stale_after: seconds after a read when ``on_change`` is called anyway.
        name: the name of the view's thread.

    Raises:
        InvalidArgumentError: ``follow`` is not one of ``Follow``'s values.
    """

    def __init__(
        self,
        conn: Connection,
        on_change: Callable[[], None],
        *,
        on_state: Callable[[bool], None] | None = None,
        follow: Follow = "all",
        debounce: float = DEBOUNCE,
        stale_after: float = STALE_AFTER,
        name: str = "leasekit-live",
    ) -> None:
        self._changes = conn.change_watcher(follow=follow, name=name)  # checks ``follow``
        self._on_change = on_change
        self._on_state = on_state
        self._debounce = debounce
        self._stale_after = stale_after
        self._lock = threading.Lock()
        self._watches: Any = None
        self._unlisten: Callable[[], None] | None = None
        self._closed = False
        self.following = False
        """Whether reads watch what they touched (set with ``follow_changes``)."""
        self.refreshed_at: datetime | None = None
        """When the last read that succeeded ended (UTC); None before the first."""

    # -- reading ----------------------------------------------------------------------------

    def read(self, load: Callable[[], T], *, then: Callable[[T], None] | None = None) -> T:
        """Run ``load()`` (reads only) noting the znodes it reads; while following, watch them.

        Arguments:
            load: reads through the connection and returns what the view shows.
            then: called with ``load()``'s result once it is read (a view showing it), with
                the cycle collector still paused as it was for the reading: a collection
                right after the reading would walk everything it built.

        Returns:
            ``load()``'s result; ``refreshed_at`` is now.

        Raises:
            ZooKeeperUnavailableError: the session is down (at once, without waiting for it).
            LeasekitError: what ``load`` raises (``IllegalStateError`` once the connection is
                closed); while following, ``on_change`` comes again after ``RETRY_AFTER``.
        """
        with collector_paused():
            try:
                with self._changes.reading() as seen:  # (down: ZooKeeperUnavailable at once)
                    result = load()
            except Exception:
                if self.following:  # read again soon: the view recovers once ZooKeeper answers
                    self._changes.submit("retry", self._stale, min(RETRY_AFTER, self._stale_after))
                raise
            self.refreshed_at = datetime.now(timezone.utc)
            if self.following:
                self._watch(seen.data, seen.children)
            if then is not None:
                then(result)
        return result

    def _watch(self, data: set[str], children: set[str]) -> None:
        with self._lock:
            if self._closed or not self.following:
                return
            if self._watches is None:
                self._watches = self._changes.watch_set(self._changed)
            fresh = self._watches.update(*self._changes.targets(data, children))
        if fresh:
            self._changed(None)  # newly watched: a change before its watch was set is read now
        self._changes.submit("stale", self._stale, self._stale_after)

    def _listen(self) -> None:
        with self._lock:
            if self._on_state is None or self._unlisten is not None or self._closed:
                return
            on_state = self._on_state

            def state(name: str) -> None:  # kazoo's thread: only schedule
                up = name == "CONNECTED"
                self._changes.submit("state", lambda: on_state(up))  # the latest state wins
                if not up:  # keep trying: each failed read schedules the next
                    self._changes.submit("retry", self._stale, RETRY_AFTER)

            with contextlib.suppress(LeasekitError):  # closed: there is nothing to hear
                self._unlisten = self._changes.add_state_listener(state)

    def _changed(self, path: str | None) -> None:
        """A watched znode changed (on kazoo's thread): schedule one call for the burst."""
        if not self._closed and self.following:
            self._changes.submit("change", self._on_change, self._debounce)

    def _stale(self) -> None:
        if self.following and not self._closed:
            self._on_change()

    # -- following --------------------------------------------------------------------------

    def follow_changes(self, on: bool, *, read_now: bool = True) -> None:
        """Start (``on``) or stop following changes. Stopping unregisters every watch at once.

        Arguments:
            on: True to follow changes, False to stop.
            read_now: when starting, call ``on_change`` at once (its read sets the watches);
                False when the caller reads itself right after.
        """
        with self._lock:
            if self._closed:
                return
            self.following = on
            watches = unlisten = None
            if not on:
                watches, self._watches = self._watches, None
                unlisten, self._unlisten = self._unlisten, None
        if on:
            self._listen()  # also when the first read fails: the view hears the server return
        if on and read_now:
            self._changes.submit("change", self._on_change, 0.0)
        if watches is not None:
            watches.close()
        if unlisten is not None:
            unlisten()

    def every(self, seconds: float, call: Callable[[], None], *, key: str = "tick") -> None:
        """Call ``call`` every ``seconds`` on the view's thread while following (local work
        only, such as a countdown: no ZooKeeper access).

        Arguments:
            seconds: the period.
            call: what to run.
            key: tells apart several periodic calls of one view.
        """

        def tick() -> None:
            if self.following and not self._closed:
                call()
                self._changes.submit(key, tick, seconds)

        self._changes.submit(key, tick, seconds)

    @property
    def watched(self) -> int:
        """ZooKeeper watches this view holds now."""
        watches = self._watches
        return 0 if watches is None else watches.registered()

    @property
    def connected(self) -> bool:
        """Whether the connection's ZooKeeper session is up (no I/O)."""
        return self._changes.connected

    def close(self) -> None:
        """Stop following: unregister every watch and listener and end the view's thread (a
        call running on it finishes). Nothing calls back afterwards."""
        with self._lock:
            self._closed = True
            self.following = False
            watches, self._watches = self._watches, None
            unlisten, self._unlisten = self._unlisten, None
        if watches is not None:
            watches.close()
        if unlisten is not None:
            unlisten()
        self._changes.close()


def freshness(refreshed_at: datetime | None, connected: bool, *, failed: bool = False) -> str:
    """How fresh a view is, for people: when it last refreshed and whether ZooKeeper answers,
    with the age of what is shown when it is stale.

    Arguments:
        refreshed_at: when the view last read successfully (UTC), None if never.
        connected: whether the ZooKeeper session is up.
        failed: whether the last read failed.

    Returns:
        For instance ``"refreshed 12:04:05 UTC · ZooKeeper connected"``.
    """
    server = "ZooKeeper connected" if connected else "ZooKeeper unreachable"
    if refreshed_at is None:
        return f"not refreshed yet · {server}"
    at = f"{refreshed_at:%H:%M:%S} UTC"
    if connected and not failed:
        return f"refreshed {at} · {server}"
    age = human_duration(datetime.now(timezone.utc) - refreshed_at)
    return f"stale: showing data of {at} ({age} old) · {server}"


def server_time_estimate(conn: Connection) -> int | None:
    """The ZooKeeper clock (epoch ms) estimated from the last reading, without I/O (the base of
    countdowns between refreshes): ``conn.server_time_estimate()``, None before the first
    reading."""
    return conn.server_time_estimate()


# -- a consumer group's board -----------------------------------------------------------------


def group_board(
    conn: Connection,
    group_id: str,
    *,
    stop_after: timedelta = timedelta(seconds=60),
    stall_after: timedelta = timedelta(seconds=60),
) -> GroupBoard:
    """Read a consumer group once, as a dashboard shows it: ``conn.group_board(group_id, ...)``,
    whose docstring gives the arguments, the return and the errors."""
    return conn.group_board(group_id, stop_after=stop_after, stall_after=stall_after)


NO_SAMPLER = (
    "the lag is recorded only while a sampler runs, every monitor.interval (30s by default)",
    "leasekit janitor (or: leasekit exporter)",
)
"""Why a lag history can be empty, and the command that starts a sampler: what the CLI and
the panels say where they have no sample to show (M1)."""


def sample_lag_history(conn: Connection) -> int:
    """Take a lag history sample if one is due (what a panel does while open, M1):
    ``conn.sample_lag_history()``, whose docstring gives the return and the errors."""
    return conn.sample_lag_history()


def lag_histories(
    conn: Connection, group_ids: list[str], *, since: Any = None, until: Any = None
) -> dict[str, pd.DataFrame]:
    """Each group's lag over time from one read of the history (the Overview's trends):
    ``conn.lag_histories(group_ids, ...)``, whose docstring gives the arguments, the return and
    the errors."""
    return conn.lag_histories(group_ids, since=since, until=until)
