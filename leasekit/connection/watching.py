"""What a live view needs of ZooKeeper, behind the connection (``Connection.change_watcher``):
the znodes a read touched, watches on their change markers, the session's state, and a thread
that runs the view's calls."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal

from ..errors import InvalidArgumentError, ZooKeeperUnavailableError
from ..zk.changes import watch_targets
from ..zk.watches import Dispatcher

if TYPE_CHECKING:
    from ..context import Context
    from ..zk.watchset import Recorder, WatchSet

__all__ = ["ChangeWatcher", "FOLLOW"]

FOLLOW = ("all", "positions", "retention")
"""Which changes of what a read touched matter: ``"all"``; ``"positions"``, all but the log's
segment records (immutable); ``"retention"``, the children of every znode listed and the data of
tables and leases. Each is watched through its change marker (``zk.changes``)."""


class ChangeWatcher:
    """Reads that note the znodes they touch, watches on what they touched, the session's state
    and a thread of its own that runs calls in due-time order (a call submitted under a key
    already waiting replaces it: debouncing), for a live view of one connection. Building one
    does no I/O.

    Arguments:
        context: the connection's context.
        follow: which changes of what was read matter (one of ``FOLLOW``).
        name: the name of its thread.

    Raises:
        InvalidArgumentError: ``follow`` is not one of ``FOLLOW``.
    """

    def __init__(
        self,
        context: Context,
        *,
        follow: Literal["all", "positions", "retention"] = "all",
        name: str = "leasekit-live",
    ) -> None:
        if follow not in FOLLOW:
            raise InvalidArgumentError(f"follow must be one of {FOLLOW}, not {follow!r}")
        self._context = context
        self._follow = follow
        self._worker = Dispatcher(name=name)

    @property
    def connected(self) -> bool:
        """Whether the connection's ZooKeeper session is up (no I/O)."""
        return self._context.store.connected

    def reading(self) -> contextlib.AbstractContextManager[Recorder]:
        """Note the znodes this thread reads through the connection inside the block.

        Returns:
            A context manager giving the record of what was read (``data``: znodes whose data
            or existence was read; ``children``: znodes listed), complete when the block ends.

        Raises:
            ZooKeeperUnavailableError: the session is down (at once, before the block runs).
            IllegalStateError: the connection is closed.
        """
        return self._reading()

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Recorder]:
        store = self._context.store
        if store.client is not None and not store.connected:  # (closed: IllegalState)
            raise ZooKeeperUnavailableError(f"ZooKeeper at {store.hosts} is unreachable")
        with store.recording() as seen:
            yield seen

    def targets(self, data: set[str], children: set[str]) -> tuple[set[str], set[str]]:
        """What to watch (data, children) for what a read touched: the change markers of the
        znodes read whose change ``follow`` says matters (``zk.changes``), so watches grow with
        tables and groups.

        Arguments:
            data: znodes whose data or existence was read.
            children: znodes listed.

        Returns:
            (paths whose data to watch, paths whose children to watch).
        """
        paths = self._context.paths
        if self._follow == "positions":
            data = {p for p in data if not paths.is_segment(p)}
        elif self._follow == "retention":  # a table's reads (its directories' stats) and leases
            kept = (paths.leases + "/", paths.data + "/")
            data = {p for p in data if p.startswith(kept)}
        return watch_targets(paths, data, children)

    def watch_set(self, on_change: Callable[[str | None], None]) -> WatchSet:
        """An empty set of watches, filled with its ``update(data, children)`` (which says
        whether it watches anything new); ``on_change(path)`` is called on kazoo's thread when
        a watched znode changes (``None``: the session came back, changes may have been missed).

        Arguments:
            on_change: what a change calls; it should only schedule work.

        Returns:
            The ``WatchSet``; its ``registered()`` counts the watches, ``close()`` ends them.

        Raises:
            IllegalStateError: the connection is closed.
        """
        return self._context.store.watch_set(on_change)

    def add_state_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener`` with "CONNECTED", "SUSPENDED" or "LOST" on session changes (on
        kazoo's thread: it should only schedule work).

        Arguments:
            listener: what a session change calls.

        Returns:
            A function that removes the listener again.

        Raises:
            IllegalStateError: the connection is closed.
        """
        return self._context.store.add_state_listener(listener)

    def submit(self, key: object, call: Callable[[], None], delay: float = 0.0) -> None:
        """Run ``call`` on the watcher's thread after ``delay`` seconds, unless a call under
        ``key`` is waiting already: that one is replaced and keeps its due time.

        Arguments:
            key: what tells calls apart.
            call: what to run (an exception it raises is logged).
            delay: seconds from now.
        """
        self._worker.submit(key, call, delay)

    def close(self) -> None:
        """Drop the waiting calls and end the thread (a running call finishes); the watch sets
        and listeners it gave are the caller's to close."""
        self._worker.close()
