"""The fetcher of a consumer: log ends and beginnings kept current from ZooKeeper watches on
the bucket states, an index of segments per bucket refreshed when a read needs it, reads of
the records at given positions, and the records read but not yet handed out (as aiokafka's
fetcher keeps them: positions move only when a record is handed out, C1)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import pyarrow as pa

from ..errors import LeasekitError, NoOffsetForBucketError, OffsetOutOfRangeError
from ..log.reader import OFFSET, TIMESTAMP, SegmentGone, SegmentReader, find_segment
from ..log.segments import OP_COLUMN, list_segments
from ..structs import LogSegment, Record, TableBucket
from ..zk import Node
from ..zk.formats import BucketState

if TYPE_CHECKING:
    from ..tables.info import TableInfo
    from ..zk import Stat, Watch

__all__ = ["Bounds", "Buffered", "Fetcher", "SegmentGone", "to_records"]

MAX_WAIT = 3600.0
"""Longest single wait on the condition (a longer timeout waits in turns: any float is fine)."""


class Bounds(NamedTuple):
    """A bucket's log bounds: records [begin, end) are stored."""

    begin: int
    end: int


class Buffered:
    """Records of one bucket read and not yet handed out: rows ``taken:`` of ``data``, whose
    first row is offset ``start``."""

    __slots__ = ("data", "start", "taken", "_records")

    def __init__(self, data: pa.Table, start: int) -> None:
        self.data, self.start, self.taken = data, start, 0
        self._records: list[Record] | None = None

    @property
    def next_offset(self) -> int:
        """Offset of the first record not handed out."""
        return self.start + self.taken

    @property
    def left(self) -> int:
        return self.data.num_rows - self.taken

    def table(self, n: int) -> pa.Table:
        """Hand out the next ``n`` records (fewer when fewer are left) as a table."""
        out = self.data.slice(self.taken, min(n, self.left))  # n may be any int (max_records)
        self.taken += out.num_rows
        return out

    def record(self, tb: TableBucket) -> Record:
        """Hand out the next record (the batch is converted to records once, on the first call)."""
        if self._records is None:
            self._records = list(to_records(tb, self.data))
        record = self._records[self.taken]
        self.taken += 1
        return record


class Fetcher:
    """Reads records of watched buckets; ``wait`` blocks until a watched bucket's log grows."""

    def __init__(self, tables: Mapping[str, TableInfo], *, reset: str = "latest") -> None:
        self.reset = reset
        """The reset policy (C5): "earliest", "latest" or "none"."""
        self._tables = dict(tables)
        self._readers = {name: SegmentReader(t) for name, t in self._tables.items()}
        self._bounds: dict[TableBucket, Bounds] = {}
        self._segments: dict[TableBucket, list[LogSegment]] = {}
        self._watches: dict[TableBucket, Watch] = {}
        self._buffers: dict[TableBucket, Buffered] = {}
        self._changed = threading.Condition()
        self._version = 0

    def table(self, name: str) -> TableInfo:
        return self._tables[name]

    def add_table(self, table: TableInfo) -> None:
        if table.name not in self._tables:
            self._tables[table.name] = table
            self._readers[table.name] = SegmentReader(table)

    def replace_table(self, table: TableInfo) -> None:
        """Read ``table`` from now on for its name (a table created again under the name of a
        dropped one); the name's buckets must not be watched."""
        old = self._readers.pop(table.name, None)
        if old is not None:
            old.close()
        self._tables[table.name] = table
        self._readers[table.name] = SegmentReader(table)
        for tb in [tb for tb in self._segments if tb.table == table.name]:
            del self._segments[tb]

    # -- bucket bounds, from watches ------------------------------------------------------

    def watch(self, buckets: Iterable[TableBucket]) -> None:
        """Keep the bounds of ``buckets`` current (the first values are read now; buckets
        already watched cost nothing)."""
        new = [tb for tb in buckets if tb not in self._watches]
        for tb in new:
            table = self._tables[tb.table]
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

    def unwatch(self, buckets: Iterable[TableBucket]) -> None:
        for tb in buckets:
            self._buffers.pop(tb, None)
            watch = self._watches.pop(tb, None)
            if watch is not None:
                watch.remove()
            self._segments.pop(tb, None)
            with self._changed:
                self._bounds.pop(tb, None)

    def retain(self, buckets: set[TableBucket]) -> None:
        """Stop watching every bucket not in ``buckets``, and drop its buffered records (a
        revoked bucket's are never handed out)."""
        self.unwatch([tb for tb in {*self._watches, *self._buffers} if tb not in buckets])

    def refresh_bounds(self, buckets: list[TableBucket]) -> dict[TableBucket, Bounds]:
        """Read the bounds of ``buckets`` from ZooKeeper now (pipelined), and keep them."""
        by_table: dict[str, list[TableBucket]] = {}
        for tb in buckets:
            by_table.setdefault(tb.table, []).append(tb)
        out = {}
        for name, tbs in by_table.items():
            table = self._tables[name]
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

    # -- positions without an offset, or outside the log (C5) -------------------------------

    def start_positions(
        self, states: Mapping[TableBucket, Any], committed: Mapping[TableBucket, Any]
    ) -> None:
        """Give each of ``states`` (buckets without a position) its committed offset, or one by
        the reset policy; ``NoOffsetForBucketError`` with "none"."""
        known = {tb: self.bounds(tb) for tb in states}  # watched: current already
        bounds = {tb: b for tb, b in known.items() if b is not None}
        bounds.update(self.refresh_bounds([tb for tb in states if tb not in bounds]))
        for tb, state in states.items():
            record = committed.get(tb)
            if record is not None:
                state.position = record.offset
            elif self.reset == "none":
                raise NoOffsetForBucketError(
                    f"{tb} has no committed offset and auto_offset_reset is 'none'"
                )
            else:
                state.position = bounds[tb].begin if self.reset == "earliest" else bounds[tb].end

    def reset_position(self, tb: TableBucket, state: Any, bounds: Bounds) -> int:
        """Move ``state``, whose position ``bounds`` do not hold, by the reset policy; the new
        position. ``OffsetOutOfRangeError`` with "none"."""
        if self.reset == "none":
            raise OffsetOutOfRangeError(
                f"position {state.position} of {tb} is outside its log "
                f"[{bounds.begin}, {bounds.end}]"
            )
        state.position = bounds.begin if self.reset == "earliest" else bounds.end
        return state.position

    def offset_for_time(self, tb: TableBucket, timestamp_ms: int, begin: int) -> int | None:
        """The earliest stored offset (>= ``begin``) whose timestamp is >= ``timestamp_ms`` (C7)."""
        segments = self.segments(tb, begin)
        found = next(
            (s for s in segments if s.end_offset > begin and s.timestamp_ms >= timestamp_ms), None
        )
        return None if found is None else max(found.base_offset, begin)

    # -- records read, not handed out -------------------------------------------------------

    def buffered(self, tb: TableBucket, position: int) -> Buffered | None:
        """The bucket's buffered records if some are left and the first is at ``position``
        (a seek or a reset elsewhere makes them stale: they are dropped)."""
        buffer = self._buffers.get(tb)
        if buffer is not None and (buffer.left <= 0 or buffer.next_offset != position):
            del self._buffers[tb]
            return None
        return buffer

    def keep(self, tb: TableBucket, data: pa.Table, start: int) -> Buffered:
        """Buffer ``data``, the bucket's records from offset ``start``."""
        self._buffers[tb] = buffer = Buffered(data, start)
        return buffer

    def discard(self, tb: TableBucket) -> None:
        self._buffers.pop(tb, None)

    # -- segments and reads ---------------------------------------------------------------

    def segments(self, tb: TableBucket, offset: int) -> list[LogSegment]:
        """The bucket's segments, refreshed when none known holds ``offset``."""
        known = self._segments.get(tb)
        if known is None or find_segment(known, offset) is None:
            table = self._tables[tb.table]
            known = list_segments(table, [tb.bucket])[tb.bucket]
            self._segments[tb] = known
        return known

    def prepare(self, positions: Mapping[TableBucket, int]) -> None:
        """Index the segments of every bucket whose known segments do not hold its position,
        one pipelined listing per table (a first poll of many buckets lists them together)."""
        stale: dict[str, list[int]] = {}
        for tb, offset in positions.items():
            known = self._segments.get(tb)
            if known is None or find_segment(known, offset) is None:
                stale.setdefault(tb.table, []).append(tb.bucket)
        for name, buckets in stale.items():
            for bucket, segments in list_segments(self._tables[name], buckets).items():
                self._segments[TableBucket(name, bucket)] = segments

    def read(self, tb: TableBucket, position: int, max_records: int) -> pa.Table | None:
        """Records from ``position`` (at most ``max_records``, within one segment); None when
        no stored segment holds ``position``. ``SegmentGone`` when its file was deleted."""
        segment = find_segment(self.segments(tb, position), position)
        if segment is None:
            return None
        try:
            return self._readers[tb.table].read(segment, position, max_records)
        except SegmentGone:
            self._segments.pop(tb, None)
            raise

    def close(self) -> None:
        self.unwatch(list(self._watches))
        for reader in self._readers.values():
            reader.close()


def to_records(tb: TableBucket, table: pa.Table) -> Iterator[Record]:
    """The rows of a batch read from ``tb`` as records."""
    columns = [n for n in table.column_names if n not in (OFFSET, TIMESTAMP, OP_COLUMN)]
    offsets = table.column(OFFSET).to_pylist()
    stamps = table.column(TIMESTAMP).cast(pa.int64()).to_pylist()
    ops = table.column(OP_COLUMN).to_pylist()
    values = table.select(columns).to_pylist()
    for offset, ts, op, value in zip(offsets, stamps, ops, values):
        yield Record(tb, offset, ts, op, value)
