"""Watching what a view read: ``Recorder`` notes the znodes a thread reads through the store,
and a ``WatchSet`` keeps one ZooKeeper watch on each of many znodes, set again each time it
fires, so a view that shows them hears of every change without polling."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

__all__ = ["Recorder", "Recording", "WatchSet"]


class Recorder:
    """The paths read while recording: ``data`` (znodes whose data or existence was read) and
    ``children`` (znodes whose children were listed)."""

    def __init__(self) -> None:
        self.data: set[str] = set()
        self.children: set[str] = set()


class Recording:
    """Each thread's current ``Recorder`` of the znodes read through one store (none unless
    inside ``scope``); nested scopes add what they noted to the enclosing one."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def active(self) -> bool:
        """Whether this thread records now."""
        return getattr(self._local, "recorder", None) is not None

    @contextlib.contextmanager
    def scope(self) -> Iterator[Recorder]:
        """Record this thread's reads inside the block."""
        outer = getattr(self._local, "recorder", None)
        recorder = self._local.recorder = Recorder()
        try:
            yield recorder
        finally:
            self._local.recorder = outer
            if outer is not None:
                outer.data |= recorder.data
                outer.children |= recorder.children

    def note(self, data: Iterable[str] = (), children: Iterable[str] = ()) -> None:
        """Note reads of the data of ``data`` and of the children of ``children``."""
        recorder = getattr(self._local, "recorder", None)
        if recorder is not None:
            recorder.data.update(data)
            recorder.children.update(children)


class WatchSet:
    """One watch on each znode of ``data`` (its creation, change or deletion) and on the children
    of each of ``children``. ``on_change(path)`` is called on kazoo's event thread, so it must
    only schedule work; ``path`` is None when every watch was set again after the session came
    back (changes may have been missed meanwhile). ``close()`` unregisters every watch: nothing
    calls back afterwards."""

    def __init__(self, client: KazooClient, on_change: Callable[[str | None], None]) -> None:
        self._client = client
        self._on_change = on_change
        self._lock = threading.Lock()
        self._data: set[str] = set()
        self._children: set[str] = set()
        self._closed = False
        self._was_connected = True
        client.add_listener(self._on_state)

    @property
    def paths(self) -> tuple[frozenset[str], frozenset[str]]:
        """The watched (data paths, children paths)."""
        with self._lock:
            return frozenset(self._data), frozenset(self._children)

    def update(self, data: Iterable[str], children: Iterable[str]) -> bool:
        """Watch exactly these paths from now on; True when some were not watched before (a
        change between their reading and now was not heard: the caller should read again)."""
        data, children = set(data), set(children)
        with self._lock:
            if self._closed:
                return False
            new_data, new_children = data - self._data, children - self._children
            gone_data, gone_children = self._data - data, self._children - children
            self._data, self._children = data, children
        self._unregister(gone_data, gone_children)
        self._arm(new_data, new_children)
        return bool(new_data or new_children)

    def registered(self) -> int:
        """How many of the client's watch registrations are this set's (0 once closed)."""
        client = self._client
        return sum(
            1
            for table in (client._data_watchers, client._child_watchers)
            for callbacks in list(table.values())
            if self._fired in callbacks
        )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            data, children = self._data, self._children
            self._data, self._children = set(), set()
        self._client.remove_listener(self._on_state)
        self._unregister(data, children)

    # -- internals --------------------------------------------------------------------------

    def _arm(self, data: Iterable[str], children: Iterable[str]) -> None:
        for path in data:
            self._client.exists_async(path, watch=self._fired)
        for path in children:
            result = self._client.get_children_async(path, watch=self._fired)
            result.rawlink(lambda r, path=path: self._listed(r, path))

    def _listed(self, result: Any, path: str) -> None:
        if isinstance(result.exception, kx.NoNodeError):  # not there yet: hear of its creation
            self._client.exists_async(path, watch=self._fired)

    def _fired(self, event: Any) -> None:
        path = event.path
        with self._lock:
            if self._closed:
                return
            data, children = path in self._data, path in self._children
        if event.type == "NONE":  # the session ended: kazoo dropped every watch
            return  # set again, and reported, when the new session connects (_on_state)
        if not (data or children):
            return
        self._arm([path] if data else [], [path] if children else [])
        self._on_change(path)

    def _on_state(self, state: str) -> None:
        if state != KazooState.CONNECTED:
            self._was_connected = False
            return
        if self._was_connected:
            return
        self._was_connected = True
        self._client.handler.spawn(self._rearm)

    def _rearm(self) -> None:
        data, children = self.paths
        if self._closed:
            return
        self._arm(data, children)
        self._on_change(None)

    def _unregister(self, data: Iterable[str], children: Iterable[str]) -> None:
        # kazoo has no call to remove a watch: take this set's callback out of its registries
        # (a children path may hold an existence watch while it is missing), so an event on
        # these paths finds nothing to call
        paths = {*data, *children}
        for table in (self._client._data_watchers, self._client._child_watchers):
            for path in paths:
                callbacks = table.get(path)
                if callbacks is not None:
                    callbacks.discard(self._fired)
