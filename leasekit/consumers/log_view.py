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
from ..log.segments import list_segments
from ..structs import LogSegment, TableBucket
from ..zk import Node
from ..zk.formats import BucketState

if TYPE_CHECKING:
    from ..tables.info import TableInfo
    from ..zk import Stat, Watch
    from .subscription import SubscriptionState

__all__ = ["Bounds", "LogView", "MAX_WAIT", "SegmentGone"]

MAX_WAIT = 3600.0
"""Longest single wait on the condition (a longer timeout waits in turns: any float is fine)."""


class Bounds(NamedTuple):
    """A bucket's log bounds: records [begin, end) are stored."""

    begin: int
    end: int


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
        self._watches: dict[TableBucket, Watch] = {}
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
        """Keep the bounds of ``buckets`` current (the first values are read now; buckets
        already watched cost nothing)."""
        new = [tb for tb in buckets if tb not in self._watches]
        for tb in new:
            table = self._table(tb.table)
            ctx = table.context
            path = ctx.paths.bucket(table.table_id, tb.bucket)

            def update(
                data: bytes | None, stat: Stat | None, tb: TableBucket = tb, path: str = path
            ) -> None:
                bounds = Bounds(0, 0)
                if data is not None and stat is not None:
                    try:
                        state = BucketState.decode(Node(data, stat), path)
                        bounds = Bounds(state.begin, state.end)
                    except LeasekitError:
                        return  # keep the last good bounds; reads report the corrupt znode
                with self._changed:
                    self._bounds[tb] = bounds
                    self._version += 1
                    self._changed.notify_all()

            self._bounds.setdefault(tb, Bounds(0, 0))
            self._watches[tb] = ctx.store.watch(path, update)
        if new:
            self.refresh_bounds(new)

    def watched(self) -> list[TableBucket]:
        return list(self._watches)

    def unwatch(self, buckets: Iterable[TableBucket]) -> None:
        for tb in buckets:
            watch = self._watches.pop(tb, None)
            if watch is not None:
                watch.remove()
            self._segments.pop(tb, None)
            with self._changed:
                self._bounds.pop(tb, None)

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
                    out[tb] = Bounds(state.begin, state.end)
        with self._changed:
            for tb, bounds in out.items():
                if tb in self._watches or tb in self._bounds:
                    old = self._bounds.get(tb)
                    if old is None or bounds.end >= old.end:
                        self._bounds[tb] = bounds
        return out

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
        """The earliest stored offset (>= ``begin``) whose timestamp is >= ``timestamp_ms`` (C7)."""
        segments = self.segments(tb, begin)
        found = next(
            (s for s in segments if s.end_offset > begin and s.timestamp_ms >= timestamp_ms), None
        )
        return None if found is None else max(found.base_offset, begin)

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
        no stored segment holds ``position``. ``SegmentGone`` when its file was deleted."""
        segment = find_segment(self.segments(tb, position), position)
        if segment is None:
            return None
        try:
            return self._readers[tb.table][1].read(segment, position, max_records)
        except SegmentGone:
            self._segments.pop(tb, None)
            raise

    def close(self) -> None:
        self.unwatch(list(self._watches))
        for _, reader in self._readers.values():
            reader.close()
