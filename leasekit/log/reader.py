"""Reading the log by offset range: records ``[start, start + n)`` of a bucket from its segment
files, reading only the row groups that hold them, with a bounded cache of open files."""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import IllegalStateError
from ..structs import LogSegment
from .segments import OP_COLUMN, STAMP_COLUMN, log_schema

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from ..tables.info import TableInfo

__all__ = ["SegmentGone", "SegmentReader", "record_schema", "find_segment", "OFFSET", "TIMESTAMP"]

OFFSET, TIMESTAMP = "_offset", "_timestamp"
_TIMESTAMP = pa.timestamp("ms", tz="UTC")
MAX_OPEN = 32
"""Segment files a reader keeps open (least recently read closed first)."""
CACHE_BYTES = 256 * 1024 * 1024
"""Decoded row groups a reader keeps, in bytes (a poll usually continues where the last one
ended, one group per bucket it reads): the least recently read go first, and a group read
to its end is dropped at once."""


AHEAD = 2
"""Segment files a reader decodes ahead of its reads at one time, at most (``ahead``)."""


class SegmentGone(IllegalStateError):
    """A segment's file or metadata is gone (retention deleted it under the reader)."""


class _Open(NamedTuple):
    file: pq.ParquetFile
    starts: list[int]
    """Row index of each row group's first row, and the row count at the end."""
    columns: list[str]
    """The columns read: the log's, and the record timestamps of a merged segment's file."""


def record_schema(table: TableInfo) -> pa.Schema:
    """Schema of records read from the log: ``_offset``, ``_timestamp`` (ms, UTC), ``_op``, then
    the table's columns."""
    columns = [f for f in log_schema(table) if f.name != OP_COLUMN]
    return pa.schema(
        [
            pa.field(OFFSET, pa.int64(), nullable=False),
            pa.field(TIMESTAMP, _TIMESTAMP, nullable=False),
            pa.field(OP_COLUMN, pa.string(), nullable=False),
            *columns,
        ]
    )


def find_segment(segments: list[LogSegment], offset: int) -> LogSegment | None:
    """The segment of ``segments`` (sorted by base offset) holding ``offset``, if any."""
    i = bisect.bisect_right(segments, offset, key=_base) - 1
    if i >= 0 and segments[i].base_offset <= offset < segments[i].end_offset:
        return segments[i]
    return None


def _base(segment: LogSegment) -> int:
    return segment.base_offset


class SegmentReader:
    """Reads records of one table's segments by offset; thread-safe, files kept open up to
    ``max_open``."""

    def __init__(self, table: TableInfo, max_open: int = MAX_OPEN) -> None:
        self._table = table
        self._schema = record_schema(table)
        self._columns = [f.name for f in log_schema(table)]
        self._max_open = max_open
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._groups: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self._cached_bytes = 0
        self._lock = threading.Lock()
        self._ahead: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[None]] = {}
        """Files whose next row group is being decoded ahead, by path."""
        self._closed = False

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    def read(self, segment: LogSegment, start: int, max_records: int) -> pa.Table:
        """Records ``[start, min(segment end, start + max_records))`` of ``segment``."""
        if not segment.base_offset <= start < segment.end_offset:
            raise IllegalStateError(
                f"offset {start} is not in segment [{segment.base_offset}, {segment.end_offset})"
            )
        first = start - segment.base_offset
        last = min(segment.end_offset, start + max_records) - segment.base_offset
        with self._lock:
            pending = self._pending.get(segment.file)
        if pending is not None:  # decoded ahead now: wait for it rather than decode it twice
            pending.result()
        handle = self._file(segment)
        groups = range(
            bisect.bisect_right(handle.starts, first) - 1, bisect.bisect_left(handle.starts, last)
        )
        parts = [self._group(segment.file, handle, g) for g in groups]
        data = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        data = data.slice(first - handle.starts[groups[0]], last - first)
        done = [g for g in groups if handle.starts[g + 1] <= last]
        if done:  # groups read to their end: a reader going on does not need them again
            self._drop(segment.file, done)
        n = data.num_rows
        offsets = pa.array(np.arange(start, start + n, dtype=np.int64))
        if segment.first_timestamp_ms is None:  # an appended segment: one commit time
            stamps = pa.array(np.full(n, segment.timestamp_ms, dtype=np.int64)).view(_TIMESTAMP)
        else:  # a merged one keeps each record's own (R8)
            stamps = data.column(STAMP_COLUMN).combine_chunks().view(_TIMESTAMP)
        columns = [
            offsets,
            stamps,
            data.column(OP_COLUMN),
            *(data.column(name) for name in self._schema.names[3:]),
        ]
        return pa.Table.from_arrays(columns, schema=self._schema)

    def ahead(self, segment: LogSegment, offset: int) -> None:
        """Decode the row group of ``segment`` holding ``offset`` on a thread of the reader's
        own, so that the read coming to it finds it decoded: the next segment of a bucket a
        consumer is reading. Decoding releases the interpreter, so it overlaps whatever the
        caller does meanwhile (reading other buckets, handling records). At most ``AHEAD``
        files at a time; a failure is left for the read itself to meet."""
        file = segment.file
        with self._lock:
            if self._closed or file in self._pending or len(self._pending) >= AHEAD:
                return
            handle = self._open.get(file)
            if handle is not None:
                group = bisect.bisect_right(handle.starts, offset - segment.base_offset) - 1
                if (file, group) in self._groups:
                    return
            if self._ahead is None:
                self._ahead = ThreadPoolExecutor(1, thread_name_prefix="leasekit-read-ahead")
            done: Future[None] = Future()
            self._pending[file] = done

        def decode() -> None:
            try:
                opened = self._file(segment)
                at = bisect.bisect_right(opened.starts, offset - segment.base_offset) - 1
                if 0 <= at < len(opened.starts) - 1:
                    self._group(file, opened, at)
            except Exception:  # noqa: BLE001 - the read itself meets it, typed
                pass
            finally:
                with self._lock:
                    self._pending.pop(file, None)
                done.set_result(None)

        self._ahead.submit(decode)

    def _group(self, file: str, handle: _Open, group: int) -> pa.Table:
        """One decoded row group; the last few stay cached, so consecutive reads of a group
        decode it once."""
        key = (file, group)
        with self._lock:
            data = self._groups.get(key)
            if data is not None:
                self._groups.move_to_end(key)
                return data
        try:
            data = handle.file.read_row_group(group, columns=handle.columns)
        except (OSError, pa.ArrowException) as exc:
            self._forget(file)
            raise IllegalStateError(f"read {file}: {exc}") from None
        with self._lock:
            if key in self._groups:  # another thread decoded it meanwhile
                return self._groups[key]
            self._groups[key] = data
            self._cached_bytes += data.nbytes
            while self._cached_bytes > CACHE_BYTES and len(self._groups) > 1:
                _, old = self._groups.popitem(last=False)
                self._cached_bytes -= old.nbytes
        return data

    def _file(self, segment: LogSegment) -> _Open:
        with self._lock:
            handle = self._open.get(segment.file)
            if handle is not None:
                self._open.move_to_end(segment.file)
                return handle
        warehouse = self._table.context.warehouse
        try:
            file = warehouse.open_parquet(warehouse.relative(segment.file))
        except FileNotFoundError:
            raise SegmentGone(f"segment file {segment.file} was deleted (retention)") from None
        meta = file.metadata
        starts = [0]
        for i in range(meta.num_row_groups):
            starts.append(starts[-1] + meta.row_group(i).num_rows)
        if starts[-1] != segment.end_offset - segment.base_offset:
            raise IllegalStateError(
                f"segment {segment.file} holds {starts[-1]} records, its metadata says "
                f"{segment.end_offset - segment.base_offset}"
            )
        merged = segment.first_timestamp_ms is not None
        handle = _Open(file, starts, [*self._columns, STAMP_COLUMN] if merged else self._columns)
        with self._lock:
            self._open[segment.file] = handle
            while len(self._open) > self._max_open:
                _, old = self._open.popitem(last=False)
                old.file.close()
        return handle

    def _drop(self, file: str, groups: list[int]) -> None:
        with self._lock:
            for g in groups:
                old = self._groups.pop((file, g), None)
                if old is not None:
                    self._cached_bytes -= old.nbytes

    def _forget(self, file: str) -> None:
        with self._lock:
            handle = self._open.pop(file, None)
            for key in [k for k in self._groups if k[0] == file]:
                self._cached_bytes -= self._groups.pop(key).nbytes
        if handle is not None:
            handle.file.close()

    def close(self) -> None:
        """Close every open file (after a decode ahead under way has ended)."""
        with self._lock:
            self._closed = True
            ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for done in self._pending.values():  # cancelled before they ran
                done.set_result(None)
            self._pending.clear()
            handles, self._open = list(self._open.values()), OrderedDict()
            self._groups.clear()
            self._cached_bytes = 0
        for handle in handles:
            handle.file.close()
