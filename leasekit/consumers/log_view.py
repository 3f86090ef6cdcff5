"""The log as a consumer sees it: log ends and beginnings of buckets kept current from
ZooKeeper watches on their bucket states, an index of segments per bucket refreshed when a read
needs it, and reads of records at given offsets, of the tables the subscription knows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from ..errors import LeasekitError
from ..log.reader import SegmentGone, SegmentReader, find_segment
from ..log.segments import list_segments, lost_file
from ..log.stamps import offset_for_time
from ..structs import LogSegment, TableBucket
from ..zk import Node
from ..zk.formats import BucketState

if TYPE_CHECKING:
    from ..tables.info import TableInfo
    from ..zk import ZkStore
    from ..zk.watchset import DataWatches
    from .subscription import SubscriptionState

__all__ = ["Bounds", "LogView", "MAX_WAIT", "SegmentGone"]

MAX_WAIT = 3600.0
"""Longest single wait on the condition (a longer timeout waits in turns: any float is fine)."""


class Bounds(NamedTuple):
    """A bucket's log bounds: records [begin, end) are stored."""

    begin: int
    end: int
    sealed: bool = False
    """A rescale sealed the bucket at ``end`` (K1)."""


class LogView:
    """Bounds, segments and reads of buckets of the tables ``subscription`` knows (a table
    created again under the name of a dropped one is read as the new one); ``wait`` blocks
    until a watched bucket's log grows."""

    def __init__(self, subscription: SubscriptionState) -> None:
        self._sub = subscription
        self._readers: dict[str, tuple[str, SegmentReader]] = {}
        """A reader per table name, with the id of the table it reads."""
        self._bounds: dict[TableBucket, Bounds] = {}
        self._segments: dict[TableBucket, list[LogSegment]] = {}
        self._watches: dict[TableBucket, tuple[ZkStore, str]] = {}
        """Each watched bucket, with the store it is watched through and its state's path."""
        self._paths: dict[str, TableBucket] = {}
        """The bucket of each watched bucket-state path."""
        self._data_watches: dict[int, DataWatches] = {}
        """One set of data watches per ZooKeeper store (by id)."""
        self._changed = threading.Condition()
        self._version = 0

    def _table(self, name: str) -> TableInfo:
        """The table known by ``name``; when it is not the one read so far (dropped and created
        again), its reader and segment index are replaced (its buckets are not watched)."""
        table = self._sub.known[name]
        reader = self._readers.get(name)
        if reader is None or reader[0] != table.table_id:
            if reader is not None:
                reader[1].close()
                for tb in [tb for tb in self._segments if tb.table == name]:
                    del self._segments[tb]
            self._readers[name] = (table.table_id, SegmentReader(table))
        return table

    # -- bucket bounds, from watches ------------------------------------------------------

    def watch(self, buckets: Iterable[TableBucket]) -> None:
        """Keep the bounds of ``buckets`` current (the first values are read now, every new
        bucket's watch set in one pipelined round trip; buckets already watched cost nothing).

        Raises:
            CorruptMetadataError: a bucket state's bytes are not a bucket state.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        new: dict[int, tuple[ZkStore, dict[str, TableBucket]]] = {}
        for tb in buckets:
            if tb in self._watches:
                continue
            table = self._table(tb.table)
            store = table.context.store
            path = table.context.paths.bucket(table.table_id, tb.bucket)
            new.setdefault(id(store), (store, {}))[1][path] = tb
        for store, paths in new.values():
            watches = self._data_watches.get(id(store))
            if watches is None:
                watches = self._data_watches[id(store)] = store.data_watches(self._on_state)
            with self._changed:
                self._paths.update(paths)
                self._watches.update({tb: (store, path) for path, tb in paths.items()})
            nodes = watches.add(list(paths))
            with self._changed:
                for (path, tb), node in zip(paths.items(), nodes):
                    if self._watches.get(tb) == (store, path):
                        self._bounds[tb] = _bounds(path, node)
                self._version += 1
                self._changed.notify_all()

    def _on_state(self, path: str, node: Node | None) -> None:
        """A watched bucket state changed (on the store's watch thread)."""
        try:
            bounds = _bounds(path, node)
        except LeasekitError:
            return  # keep the last good bounds; reads report the corrupt znode
        with self._changed:
            tb = self._paths.get(path)
            if tb is None or tb not in self._watches:
                return
            self._bounds[tb] = bounds
            self._version += 1
            self._changed.notify_all()

    def watched(self) -> list[TableBucket]:
        return list(self._watches)

    def unwatch(self, buckets: Iterable[TableBucket]) -> None:
        gone: dict[int, list[str]] = {}
        with self._changed:
            for tb in buckets:
                watched = self._watches.pop(tb, None)
                if watched is not None:
                    self._paths.pop(watched[1], None)
                    gone.setdefault(id(watched[0]), []).append(watched[1])
                self._segments.pop(tb, None)
                self._bounds.pop(tb, None)
        for store_id, paths in gone.items():
            self._data_watches[store_id].remove(paths)

    def refresh_bounds(self, buckets: list[TableBucket]) -> dict[TableBucket, Bounds]:
        """Read the bounds of ``buckets`` from ZooKeeper now (pipelined), and keep them."""
        by_table: dict[str, list[TableBucket]] = {}
        for tb in buckets:
            by_table.setdefault(tb.table, []).append(tb)
        out = {}
        for name, tbs in by_table.items():
            table = self._table(name)
            ctx = table.context
            paths = [ctx.paths.bucket(table.table_id, tb.bucket) for tb in tbs]
            for tb, path, node in zip(tbs, paths, ctx.store.get_many(paths)):
                if node is None:
                    out[tb] = Bounds(0, 0)
                else:
                    state = BucketState.decode(node, path)
                    out[tb] = Bounds(state.begin, state.end, state.sealed)
        with self._changed:
            for tb, bounds in out.items():
                if tb in self._watches or tb in self._bounds:
                    old = self._bounds.get(tb)
                    if old is None or bounds.end >= old.end:
                        self._bounds[tb] = bounds
        return out

    @property
    def version(self) -> int:
        """A number that changes whenever a watched bucket's bounds do."""
        return self._version

    def bounds(self, tb: TableBucket) -> Bounds | None:
        """The last known bounds of a watched bucket."""
        with self._changed:
            return self._bounds.get(tb)

    def wait(self, timeout: float, ready: Callable[[], bool]) -> bool:
        """Wait up to ``timeout`` seconds until ``ready()`` holds, re-checked after every change
        of a watched bucket; whether it holds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not ready():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, MAX_WAIT))
            return True

    def wake(self) -> None:
        """Wake ``wait`` (a change it does not watch: a pause, a seek, a close)."""
        with self._changed:
            self._version += 1
            self._changed.notify_all()

    # -- segments and reads ---------------------------------------------------------------

    def offset_for_time(self, tb: TableBucket, timestamp_ms: int, begin: int) -> int | None:
        """The earliest stored offset (>= ``begin``) whose timestamp is >= ``timestamp_ms`` (C7):
        inside a merged segment, found in its file's record timestamps. When the segments known
        hold none that recent, they are listed again: they may predate the records asked for.

        Raises:
            DataFileMissingError: a merged segment's file is missing while the metadata still
                lists it.
        """
        known = self._segments.get(tb)
        segments = self.segments(tb, begin)
        warehouse = self._table(tb.table).context.warehouse

        def relist() -> list[LogSegment]:
            self._segments.pop(tb, None)
            return self.segments(tb, begin)

        found = offset_for_time(warehouse, segments, timestamp_ms, begin, relist)
        if found is None and segments is known:  # listed before this call
            found = offset_for_time(warehouse, relist(), timestamp_ms, begin, relist)
        return found

    def segments(self, tb: TableBucket, offset: int) -> list[LogSegment]:
        """The bucket's segments, refreshed when none known holds ``offset``."""
        table = self._table(tb.table)
        known = self._segments.get(tb)
        if known is None or find_segment(known, offset) is None:
            known = list_segments(table, [tb.bucket])[tb.bucket]
            self._segments[tb] = known
        return known

    def prepare(self, positions: Mapping[TableBucket, int]) -> None:
        """Index the segments of every bucket whose known segments do not hold its position,
        one pipelined listing per table (a first poll of many buckets lists them together)."""
        stale: dict[str, list[int]] = {}
        for tb, offset in positions.items():
            self._table(tb.table)
            known = self._segments.get(tb)
            if known is None or find_segment(known, offset) is None:
                stale.setdefault(tb.table, []).append(tb.bucket)
        for name, buckets in stale.items():
            for bucket, segments in list_segments(self._table(name), buckets).items():
                self._segments[TableBucket(name, bucket)] = segments

    def read(self, tb: TableBucket, position: int, max_records: int) -> pa.Table | None:
        """Records from ``position`` (at most ``max_records``, within one segment); None when
        no stored segment holds ``position``.

        Raises:
            SegmentGone: its file was deleted with its metadata (retention deletes the metadata
                first, then the file).
            DataFileMissingError: its file is missing while the metadata still lists it.
        """
        segment = find_segment(self.segments(tb, position), position)
        if segment is None:
            return None
        reader = self._readers[tb.table][1]
        try:
            data = reader.read(segment, position, max_records)
        except SegmentGone:
            self._segments.pop(tb, None)
            if segment in self.segments(tb, position):  # listed afresh: not retention's doing
                raise lost_file(segment) from None
            raise
        after = find_segment(self._segments.get(tb, []), segment.end_offset)
        if after is not None:  # a reader catching up goes on there: decode it meanwhile
            reader.ahead(after, after.base_offset)
        return data

    def close(self) -> None:
        self.unwatch(list(self._watches))
        for watches in self._data_watches.values():
            watches.close()
        self._data_watches.clear()
        for _, reader in self._readers.values():
            reader.close()


def _bounds(path: str, node: Node | None) -> Bounds:
    """The bounds a bucket state gives; empty while it does not exist.

    Raises:
        CorruptMetadataError: the bytes are not a bucket state.
    """
    if node is None:
        return Bounds(0, 0)
    state = BucketState.decode(node, path)
    return Bounds(state.begin, state.end, state.sealed)
