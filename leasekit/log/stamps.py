"""Record timestamps read from merged segment files (R8): a merged segment's records keep their
own ``_timestamp`` in a column of its file, where an appended segment's all carry its commit
time. The readers that need one record's timestamp, or the first offset at or after a time,
read only the row groups holding them (a search picks its row group by the column's
statistics), through a small cache: merged files never change, and each has a name of its own.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa

from ..errors import IllegalStateError
from ..structs import LogSegment
from ..zk.formats import SegmentRecord
from .reader import SegmentGone
from .segments import STAMP_COLUMN, lost_file

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from ..warehouse import Warehouse

__all__ = [
    "CACHE_BYTES",
    "record_stamps",
    "first_at_or_after",
    "merged_stamps",
    "offset_for_time",
    "clear_cache",
]

CACHE_BYTES = 16 * 2**20
"""Bytes of decoded timestamp row groups kept, least recently used first out (a row group of
65,536 records takes 512 KiB)."""
MAX_LAYOUTS = 4096
"""Merged files whose row-group layout is kept."""

K = TypeVar("K", bound=Hashable)


class _Layout(NamedTuple):
    """A merged file's row groups: where each starts, and the largest timestamp each holds."""

    starts: list[int]
    """Row index of each row group's first row, and the row count at the end."""
    maxima: list[int | None]
    """Each row group's largest timestamp by the file's statistics (None: not recorded)."""


_layouts: OrderedDict[str, _Layout] = OrderedDict()
_groups: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
_cached = 0
_lock = threading.Lock()


def clear_cache() -> None:
    """Forget every cached layout and row group."""
    global _cached
    with _lock:
        _layouts.clear()
        _groups.clear()
        _cached = 0


def record_stamps(warehouse: Warehouse, file: str, rows: Sequence[int]) -> list[int]:
    """The ``_timestamp`` (ms) of the records at row indexes ``rows`` of the merged segment
    file ``file`` (warehouse-relative), in their order.

    Raises:
        SegmentGone: the file is gone (retention deleted it).
        IllegalStateError: the file cannot be read, holds no timestamps, or has no such row.
    """
    with _Reading(warehouse, file) as reading:
        return [reading.stamp(row) for row in rows]


def first_at_or_after(warehouse: Warehouse, file: str, time_ms: int, start: int = 0) -> int | None:
    """The first row index at or after ``start`` of the merged segment file ``file`` whose
    timestamp is at least ``time_ms`` (timestamps do not go down, W3); None when there is none.

    Raises:
        SegmentGone: the file is gone (retention deleted it).
        IllegalStateError: the file cannot be read or holds no timestamps.
    """
    with _Reading(warehouse, file) as reading:
        return reading.search(time_ms, start)


def merged_stamps(
    warehouse: Warehouse, wanted: Mapping[K, tuple[SegmentRecord, int]]
) -> dict[K, int]:
    """The timestamp of the record at each key's (merged segment's record, row index): a first
    or last record's, or any of a segment whose records all have one, from its record; the
    others read from its file, each file opened once. Where a file is gone (retention deleted
    it, or it is lost: the caller's look-up of the files tells), its segment's first timestamp,
    the earliest its records have.

    Raises:
        IllegalStateError: a record is not a merged segment's, or a file cannot be read, holds
            no timestamps, or has no such row.
    """
    out: dict[K, int] = {}
    by_file: dict[str, list[tuple[K, int, int]]] = {}
    for key, (rec, row) in wanted.items():
        if rec.stamps is None:
            raise IllegalStateError(f"segment {rec.file} is not a merged one")
        first, last = rec.stamps
        if row == 0 or first == last:
            out[key] = first
        elif row == rec.rows - 1:
            out[key] = last
        else:
            by_file.setdefault(rec.file, []).append((key, row, first))
    for file, reads in by_file.items():
        try:
            stamps = record_stamps(warehouse, file, [row for _, row, _ in reads])
        except SegmentGone:
            stamps = [first for _, _, first in reads]
        out.update(zip([key for key, _, _ in reads], stamps))
    return out


class _Gone(Exception):
    """The file of a merged segment went while it was searched."""

    def __init__(self, segment: LogSegment) -> None:
        super().__init__(segment.file)
        self.segment = segment


def offset_for_time(
    warehouse: Warehouse,
    segments: Sequence[LogSegment],
    time_ms: int,
    begin: int,
    relist: Callable[[], list[LogSegment]],
) -> int | None:
    """The earliest offset at or after ``begin`` of a bucket's ``segments`` (sorted by base
    offset) whose record's timestamp is at least ``time_ms`` (C7); None when there is none.

    An appended segment answers from its metadata alone; a merged one whose records start
    before ``time_ms`` and end at or after it is searched in its file. When that file is gone,
    ``relist()`` gives the bucket's segments afresh and the search is made again over them.

    Raises:
        DataFileMissingError: the file is missing while the metadata still lists its segment.
        SegmentGone: a file went again under the second search.
        IllegalStateError: a file cannot be read.
    """
    try:
        return _search(warehouse, segments, time_ms, begin)
    except _Gone as gone:
        lost = gone.segment
    fresh = relist()
    if lost in fresh:  # still listed: not retention's doing
        raise lost_file(lost)
    try:
        return _search(warehouse, fresh, time_ms, begin)
    except _Gone as gone:
        raise SegmentGone(f"segment file {gone.segment.file} was deleted (retention)") from None


def _search(
    warehouse: Warehouse, segments: Iterable[LogSegment], time_ms: int, begin: int
) -> int | None:
    for seg in segments:
        if seg.end_offset <= begin or seg.timestamp_ms < time_ms:
            continue  # every record of it is older (its last one is)
        start = max(seg.base_offset, begin)
        if seg.first_timestamp_ms is None or seg.first_timestamp_ms >= time_ms:
            return start  # an appended segment: one timestamp; or a merged one all recent
        try:
            row = first_at_or_after(
                warehouse, warehouse.relative(seg.file), time_ms, start - seg.base_offset
            )
        except SegmentGone:
            raise _Gone(seg) from None
        if row is not None:
            return seg.base_offset + row
    return None


class _Reading:
    """One merged file read: its layout and row groups from the cache, the file opened only
    when a row group is not there."""

    def __init__(self, warehouse: Warehouse, file: str) -> None:
        self._warehouse = warehouse
        self._rel = file
        self._key = warehouse.uri(file)
        self._file: pq.ParquetFile | None = None

    def __enter__(self) -> _Reading:
        with _lock:
            layout = _layouts.get(self._key)
            if layout is not None:
                _layouts.move_to_end(self._key)
        try:
            self.layout = layout if layout is not None else self._read_layout()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        if self._file is not None:
            self._file.close()

    def _open(self) -> pq.ParquetFile:
        if self._file is None:
            try:
                self._file = self._warehouse.open_parquet(self._rel)
            except FileNotFoundError:
                raise SegmentGone(f"segment file {self._key} was deleted (retention)") from None
        return self._file

    def _read_layout(self) -> _Layout:
        meta = self._open().metadata
        if meta.num_row_groups == 0:
            return _Layout([0], [])
        columns = [meta.row_group(0).column(i).path_in_schema for i in range(meta.num_columns)]
        if STAMP_COLUMN not in columns:
            raise IllegalStateError(f"merged segment {self._key} holds no {STAMP_COLUMN} column")
        at = columns.index(STAMP_COLUMN)
        starts, maxima = [0], []
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            starts.append(starts[-1] + group.num_rows)
            stats = group.column(at).statistics
            maxima.append(int(stats.max) if stats is not None and stats.has_min_max else None)
        layout = _Layout(starts, maxima)
        with _lock:
            _layouts[self._key] = layout
            while len(_layouts) > MAX_LAYOUTS:
                _layouts.popitem(last=False)
        return layout

    def group(self, g: int) -> np.ndarray:
        """The timestamps of row group ``g``."""
        key = (self._key, g)
        with _lock:
            found = _groups.get(key)
            if found is not None:
                _groups.move_to_end(key)
                return found
        try:
            data = self._open().read_row_group(g, columns=[STAMP_COLUMN], use_threads=False)
            stamps = data.column(0).to_numpy().astype(np.int64, copy=False)
        except (OSError, pa.ArrowException, KeyError) as exc:
            raise IllegalStateError(f"read {STAMP_COLUMN} of {self._key}: {exc}") from None
        _keep(key, stamps)
        return stamps

    def stamp(self, row: int) -> int:
        starts = self.layout.starts
        if not 0 <= row < starts[-1]:
            raise IllegalStateError(f"merged segment {self._key} has no row {row}")
        g = bisect.bisect_right(starts, row) - 1
        return int(self.group(g)[row - starts[g]])

    def search(self, time_ms: int, start: int) -> int | None:
        starts, maxima = self.layout.starts, self.layout.maxima
        first = max(bisect.bisect_right(starts, start) - 1, 0)
        for g in range(first, len(maxima)):
            top = maxima[g]
            if top is not None and top < time_ms:
                continue  # every record of the group is older
            stamps = self.group(g)
            skip = max(start - starts[g], 0)
            i = skip + int(np.searchsorted(stamps[skip:], time_ms, side="left"))
            if i < len(stamps):
                return starts[g] + i
        return None


def _keep(key: tuple[str, int], stamps: np.ndarray) -> None:
    global _cached
    with _lock:
        if key in _groups:
            return
        _groups[key] = stamps
        _cached += stamps.nbytes
        while _cached > CACHE_BYTES and len(_groups) > 1:
            _, old = _groups.popitem(last=False)
            _cached -= old.nbytes
