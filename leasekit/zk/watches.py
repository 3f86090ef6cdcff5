"""Watches of the ZooKeeper layer: on a znode's data or on its children, removable, with
kazoo's errors translated, callbacks run in order on one dispatcher thread (never on kazoo's
event thread, so they may call ZooKeeper) and optionally debounced."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from .errors import translated
from .ops import Stat, stat_of

__all__ = ["Dispatcher", "Watch", "watch_data", "watch_children"]

log = logging.getLogger(__package__)


class Dispatcher:
    """Runs callbacks on one daemon thread, in due-time order. A call submitted under a key that
    is already waiting replaces the waiting one and keeps its due time (debouncing)."""

    def __init__(self, name: str = "leasekit-watches") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, object]] = []
        self._waiting: dict[object, Callable[[], None]] = {}
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, key: object, call: Callable[[], None], delay: float = 0.0) -> None:
        with self._cond:
            if self._closed:
                return
            if key not in self._waiting:
                heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), key))
            self._waiting[key] = call
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(
                        None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic())
                    )
                if self._closed:
                    return
                _, _, key = heapq.heappop(self._heap)
                call = self._waiting.pop(key)
            try:
                call()
            except Exception:  # a failing callback must not stop the others
                log.exception("watch callback failed")

    def close(self) -> None:
        """Drop waiting calls and stop the thread (a running callback finishes)."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._waiting.clear()
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


class Watch:
    """A registered watch; ``remove()`` stops further callbacks at once."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._removed = threading.Event()
        self._on_remove: list[Callable[[], None]] = []

    @property
    def active(self) -> bool:
        return not self._removed.is_set()

    def remove(self) -> None:
        if self._removed.is_set():
            return
        self._removed.set()
        for undo in self._on_remove:
            undo()

    def __repr__(self) -> str:
        return f"Watch({self.path!r}, active={self.active})"


def watch_data(
    client: KazooClient,
    dispatcher: Dispatcher,
    path: str,
    callback: Callable[[bytes | None, Stat | None], None],
    *,
    debounce: float = 0.0,
) -> Watch:
    """Call ``callback(data, stat)`` now and after every change of ``path``'s data; (None, None)
    while the znode does not exist. With ``debounce``, changes within that many seconds of the
    first one are delivered once, with the newest value."""
    watch = Watch(path)

    def on_change(data: bytes | None, stat: Any) -> bool | None:
        if not watch.active:
            return False  # tells kazoo to stop watching
        value = (data, None if stat is None else stat_of(stat))

        def deliver() -> None:
            if watch.active:
                callback(*value)

        dispatcher.submit(watch, deliver, debounce)
        return None

    with translated(f"watch {path}"):
        client.DataWatch(path, on_change)
    return watch


def watch_children(
    client: KazooClient,
    dispatcher: Dispatcher,
    path: str,
    callback: Callable[[list[str] | None], None],
    *,
    debounce: float = 0.0,
) -> Watch:
    """Call ``callback(children)`` (sorted names) now and after every change of ``path``'s
    children, told by the znode's child version: a child deleted and created again under the
    same name between two reads is a change too. ``callback(None)`` once if the znode does not
    exist or is deleted, which ends the watch. Re-reads after the session reconnects, so no
    change is missed. With ``debounce``, changes within that many seconds of the first one are
    delivered once, newest last."""
    return _ChildrenWatch(client, dispatcher, path, callback, debounce).start()


class _ChildrenWatch:
    """The state of one ``watch_children``: the child version last delivered, and a lock so
    that reads (the first one, after events, after reconnects) deliver one at a time."""

    def __init__(
        self,
        client: KazooClient,
        dispatcher: Dispatcher,
        path: str,
        callback: Callable[[list[str] | None], None],
        debounce: float,
    ) -> None:
        self.client, self.dispatcher, self.path = client, dispatcher, path
        self.callback, self.debounce = callback, debounce
        self.watch = Watch(path)
        self.prior: int | None = None
        self.lock = threading.Lock()

    def start(self) -> Watch:
        client, watch = self.client, self.watch
        client.add_listener(self.on_state)
        watch._on_remove.append(lambda: client.remove_listener(self.on_state))
        # Under the lock: a fetch the first read's watch starts delivers after it.
        with self.lock, translated(f"watch the children of {self.path}"):
            try:
                children, stat = client.retry(
                    client.get_children, self.path, self.on_event, include_data=True
                )
            except kx.NoNodeError:
                children = stat = None
            if children is None or stat is None:
                self.deliver(None)
                watch.remove()
            else:
                self.prior = stat.cversion
                self.deliver(sorted(children))
        return watch

    def deliver(self, children: list[str] | None) -> None:
        def call() -> None:
            if self.watch.active or children is None:  # the end of the znode is always told
                self.callback(children)

        self.dispatcher.submit(self.watch, call, self.debounce)

    def on_event(self, event: Any) -> None:
        if self.watch.active and event.type != "NONE":
            self.client.handler.spawn(self.fetch)

    def on_state(self, state: str) -> None:
        if state == KazooState.CONNECTED and self.watch.active:
            self.client.handler.spawn(self.fetch)

    def fetch(self) -> None:
        client = self.client
        with self.lock:
            if not self.watch.active:
                return
            try:
                children, stat = client.retry(
                    client.get_children, self.path, self.on_event, include_data=True
                )
            except kx.NoNodeError:
                self.deliver(None)
                self.watch.remove()
                return
            except (kx.ConnectionLoss, kx.SessionExpiredError, kx.ConnectionClosedError):
                return  # fetched again once the session is back
            if stat.cversion != self.prior:
                self.prior = stat.cversion
                self.deliver(sorted(children))
