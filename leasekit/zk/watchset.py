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

from ..errors import LeasekitError
from .ops import Node

__all__ = ["Recorder", "Recording", "WatchSet", "DataWatches"]


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


class DataWatches:
    """The data of many znodes kept current: a ``WatchSet`` on them, and after each change the
    changed znodes read again in pipelined batches on the dispatcher's thread, each new value
    given to ``callback(path, node)`` there (``node`` None while the znode does not exist).

    ``add`` reads the first values in one pipelined round trip (a watch per znode set one after
    another would wait for each), with the watches armed before the read, so no change after
    the read goes unheard. A value is delivered only when it is newer than the last one seen
    (by creation zxid, then data version): a slow read never overtakes a newer one. After the
    session comes back every watched znode is read again.
    """

    def __init__(
        self,
        client: KazooClient,
        submit: Callable[[object, Callable[[], None]], None],
        read: Callable[[list[str]], list[Node | None]],
        callback: Callable[[str, Node | None], None],
    ) -> None:
        self._submit, self._read, self._callback = submit, read, callback
        self._lock = threading.Lock()  # _paths, _pending, _seen
        self._paths: set[str] = set()
        self._pending: set[str] = set()
        self._seen: dict[str, tuple[int, int]] = {}
        self._watches = WatchSet(client, self._changed)

    def add(self, paths: list[str]) -> list[Node | None]:
        """Watch ``paths`` too; their values now, in order.

        Raises:
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        with self._lock:
            self._paths.update(paths)
            watched = set(self._paths)
        self._watches.update(watched, ())
        nodes = self._read(paths)
        with self._lock:
            for path, node in zip(paths, nodes):
                if path in self._paths and _version(node) > self._seen.get(path, (-1, -1)):
                    self._seen[path] = _version(node)
        return nodes

    def remove(self, paths: Iterable[str]) -> None:
        """Stop watching ``paths``."""
        with self._lock:
            self._paths.difference_update(paths)
            for path in paths:
                self._seen.pop(path, None)
            watched = set(self._paths)
        self._watches.update(watched, ())

    def close(self) -> None:
        """Stop every watch: nothing calls back afterwards."""
        with self._lock:
            self._paths.clear()
            self._pending.clear()
        self._watches.close()

    def _changed(self, path: str | None) -> None:
        # on kazoo's event thread: note what to read, read it on the dispatcher's
        with self._lock:
            if path is None:
                self._pending.update(self._paths)
            elif path in self._paths:
                self._pending.add(path)
            else:
                return
        self._submit(self, self._flush)

    def _flush(self) -> None:
        with self._lock:
            paths, self._pending = sorted(self._pending), set()
        if not paths:
            return
        try:
            nodes = self._read(paths)
        except LeasekitError:
            return  # the session is down: everything is read again once it is back
        for path, node in zip(paths, nodes):
            version = _version(node)
            with self._lock:
                seen = self._seen.get(path)
                if path not in self._paths or (
                    seen is not None and not (version > seen if node else seen[1] >= 0)
                ):
                    continue  # not watched any more, or not newer than what was seen
                self._seen[path] = version
            self._callback(path, node)


def _version(node: Node | None) -> tuple[int, int]:
    """A znode value's place in time: (creation zxid, data version); (0, -1) when missing."""
    return (0, -1) if node is None else (node.stat.czxid, node.stat.version)
