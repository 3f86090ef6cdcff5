"""The consumer: reads assigned buckets from their positions (C1), commits offsets for its
group (C2, C3, C8), seeks (C6), answers offset queries without moving (C7) and applies its
reset policy when a position has no offset or falls outside the log (C5)."""

from __future__ import annotations

import itertools
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..durations import parse_duration
from ..errors import (
    IllegalOperationError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    NoOffsetForBucketError,
    OffsetOutOfRangeError,
)
from ..log.reader import OFFSET, TIMESTAMP
from ..log.segments import OP_COLUMN
from ..records import OffsetAndMetadata, Record, TableBucket
from ..tables.catalog import load_table
from ..zk import Create, Delete, TxnConflict
from ..zk.formats import MemberRecord
from . import offsets as stored
from .fetcher import Fetcher, SegmentGone

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["Consumer", "RESET_POLICIES"]

RESET_POLICIES = ("earliest", "latest", "none")
ASSIGNORS = ("sticky", "roundrobin", "range")


class Consumer:
    """Reads buckets of tables by offset; built by ``Connection.consumer``."""

    def __init__(self, ctx: Context, tables: Iterable[TableInfo], *, group_id: str | None = None,
                 auto_offset_reset: str = "latest", enable_auto_commit: bool = True,
                 auto_commit_interval: Any = "5s", session_timeout: Any = "10s", assignor: str = "sticky",
                 listener: Any = None, max_poll_records: int = 10_000, max_poll_interval: Any = "5m") -> None:
        if auto_offset_reset not in RESET_POLICIES:  # C5: refused, never a silent fallback
            raise InvalidArgumentError(f"auto_offset_reset must be one of {', '.join(RESET_POLICIES)}, "
                                       f"not {auto_offset_reset!r}")
        if not isinstance(enable_auto_commit, bool):
            raise InvalidTypeError("enable_auto_commit must be a bool")
        if assignor not in ASSIGNORS:
            raise InvalidArgumentError(f"assignor must be one of {', '.join(ASSIGNORS)}, not {assignor!r}")
        if listener is not None and not all(callable(getattr(listener, m, None))
                                            for m in ("on_buckets_revoked", "on_buckets_assigned")):
            raise InvalidTypeError("listener must have on_buckets_revoked and on_buckets_assigned methods")
        self._session_timeout = parse_duration(session_timeout, what="session_timeout").total_seconds()
        self._max_poll_interval = parse_duration(max_poll_interval, what="max_poll_interval").total_seconds()
        self._assignor, self._listener = assignor, listener
        self._max_poll_records = _positive_int(max_poll_records, "max_poll_records")
        self._ctx = ctx
        self._group = None if group_id is None else stored.check_group_id(group_id)
        self._reset = auto_offset_reset
        self._auto_commit = enable_auto_commit and group_id is not None
        self._interval = parse_duration(auto_commit_interval, what="auto_commit_interval").total_seconds()
        self._next_auto_commit = time.monotonic() + self._interval
        self._fetcher = Fetcher({})
        self._tables: dict[str, TableInfo] = {}
        self._assignment: dict[TableBucket, None] = {}
        self._mode: str | None = None
        self._positions: dict[TableBucket, int] = {}
        self._paused: set[TableBucket] = set()
        self._committed: dict[TableBucket, OffsetAndMetadata] = {}
        """Offsets this consumer knows stored: a commit that would not change them writes nothing."""
        self._highwater: dict[TableBucket, int] = {}
        self._last_poll: dict[TableBucket, int] = {}
        self._records: deque[Record] = deque()
        self._turn = itertools.count()
        self._closed = False
        self._member_id: str | None = None
        self._member_tables: tuple[str, ...] = ()
        tables = list(tables)
        if tables:
            self._set_tables(tables, "subscribed")

    # -- assignment ---------------------------------------------------------------------------

    def _set_tables(self, tables: list[TableInfo], mode: str) -> None:
        for table in tables:
            self._tables[table.name] = table
            self._fetcher.add_table(table)
        self._set_assignment([TableBucket(t.name, b) for t in tables for b in range(t.num_buckets)], mode)

    def _set_assignment(self, buckets: list[TableBucket], mode: str | None) -> None:
        gone = [tb for tb in self._assignment if tb not in set(buckets)]
        self._fetcher.unwatch(gone)
        for tb in gone:
            self._positions.pop(tb, None)
            self._paused.discard(tb)
        self._records = deque(r for r in self._records if r.table_bucket in set(buckets))
        self._assignment = dict.fromkeys(buckets)
        self._mode = mode if buckets or mode == "assigned" else None
        self._fetcher.wake()

    def subscribe(self, tables: Iterable[Any] = (), *, pattern: str | None = None, listener: Any = None) -> None:
        """Consume every bucket of ``tables`` (names or Table objects)."""
        self._check_open()
        if pattern is not None:
            raise IllegalOperationError("subscription by pattern is not available yet")
        if self._mode == "assigned":
            raise IllegalStateError("subscribe after assign: call unsubscribe() first")
        if isinstance(tables, (str, bytes)):
            raise InvalidTypeError("tables must be a list of table names, not a str")
        resolved = [self._load(t) for t in tables]
        if not resolved:
            raise InvalidArgumentError("subscribe needs at least one table")
        self._set_tables(resolved, "subscribed")

    def assign(self, buckets: Iterable[TableBucket]) -> None:
        """Consume exactly ``buckets`` (no group membership; commits still go to the group)."""
        self._check_open()
        if self._mode == "subscribed":
            raise IllegalStateError("assign after subscribe: call unsubscribe() first")
        if isinstance(buckets, (str, bytes, TableBucket)) or not isinstance(buckets, Iterable):
            raise InvalidTypeError("buckets must be a collection of TableBucket")
        wanted = []
        for tb in buckets:
            self._table_of(tb, assigned=False)
            wanted.append(tb)
        self._set_assignment(list(dict.fromkeys(wanted)), "assigned")

    def unsubscribe(self) -> None:
        """Stop consuming every bucket (and leave the group)."""
        self._check_open()
        self._set_assignment([], None)
        self._leave()

    def assignment(self) -> set[TableBucket]:
        return set(self._assignment)

    # -- polling -----------------------------------------------------------------------------

    def poll(self, timeout: Any = "0s", max_records: int | None = None) -> dict[TableBucket, pa.Table]:
        """Records from the positions of the assigned, unpaused buckets (only buckets that have
        some); waits up to ``timeout`` for new ones."""
        self._check_open()
        wait = parse_duration(timeout, what="timeout").total_seconds()
        limit = self._max_poll_records if max_records is None else _positive_int(max_records, "max_records")
        self._maybe_auto_commit()
        deadline = time.monotonic() + wait
        while True:
            out = self._fetch(limit)
            left = deadline - time.monotonic()
            if out or left <= 0 or self._closed:
                return out
            self._fetcher.wait(left, self._has_news)

    def getone(self, timeout: Any = None) -> Record | None:
        """The next record of any assigned bucket; None after ``timeout`` (None: wait forever)."""
        self._check_open()
        wait = None if timeout is None else parse_duration(timeout, what="timeout").total_seconds()
        deadline = None if wait is None else time.monotonic() + wait
        while not self._records:
            left = 3600.0 if deadline is None else deadline - time.monotonic()
            if left < 0 or self._closed:
                return None
            for tb, table in self.poll(timeout=max(left, 0.0)).items():
                self._records.extend(_records(tb, table))
            if deadline is not None and not self._records and time.monotonic() >= deadline:
                return None
        record = self._records.popleft()
        return record

    def __iter__(self) -> Iterator[Record]:
        while not self._closed:
            record = self.getone()
            if record is not None:
                yield record

    def _has_news(self) -> bool:
        for tb in self._assignment:
            if tb in self._paused or self._closed:
                continue
            bounds = self._fetcher.bounds(tb)
            position = self._positions.get(tb)
            if bounds is not None and (position is None or position != bounds.end):
                return True
        return self._closed

    def _join(self) -> None:
        """A subscribed group consumer is a live member of its group (an ephemeral znode that
        ends with its session), which owns every bucket of its tables."""
        if self._group is None or self._mode != "subscribed":
            return
        paths = self._ctx.paths
        tables = tuple(sorted({tb.table for tb in self._assignment}))
        record = MemberRecord(self._ctx.owner, tables)
        if self._member_id is None:
            self._member_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self._ctx.store.ensure_path(paths.group_members(self._group))
            self._ctx.store.commit([Create(paths.member(self._group, self._member_id), record.encode(), True)])
            self._member_tables = tables
        elif tables != self._member_tables:
            self._ctx.store.set(paths.member(self._group, self._member_id), record.encode())
            self._member_tables = tables

    def _leave(self) -> None:
        if self._member_id is not None and self._group is not None:
            try:
                self._ctx.store.commit([Delete(self._ctx.paths.member(self._group, self._member_id))])
            except TxnConflict:
                pass  # the session ended first: the member is gone already
            self._member_id = None

    def _fetch(self, limit: int) -> dict[TableBucket, pa.Table]:
        self._join()
        buckets = [tb for tb in self._assignment if tb not in self._paused]
        if not buckets:
            return {}
        self._fetcher.watch(buckets)
        self._ensure_positions(buckets)
        readable = {}
        for tb in buckets:
            bounds, position = self._fetcher.bounds(tb), self._positions[tb]
            if bounds is not None and bounds.begin <= position < bounds.end:
                readable[tb] = position
        self._fetcher.prepare(readable)
        start = next(self._turn) % len(buckets)
        out: dict[TableBucket, pa.Table] = {}
        now = int(time.time() * 1000)
        buffered = {r.table_bucket for r in self._records}
        for tb in buckets[start:] + buckets[:start]:
            if limit <= 0:
                break
            if tb in buffered:  # getone's records come first: never twice, never skipped
                continue
            bounds = self._fetcher.bounds(tb)
            bounds_now = bounds if bounds is not None else self._fetcher.refresh_bounds([tb])[tb]
            self._highwater[tb] = bounds_now.end
            self._last_poll[tb] = now
            position = self._positions[tb]
            if not bounds_now.begin <= position <= bounds_now.end:
                bounds_now = self._fetcher.refresh_bounds([tb])[tb]
                if not bounds_now.begin <= position <= bounds_now.end:
                    position = self._out_of_range(tb, position, bounds_now.begin, bounds_now.end)
            if position >= bounds_now.end:
                continue
            try:
                data = self._fetcher.read(tb, position, limit)
            except SegmentGone:
                data = None
            if data is None:  # retention deleted the segment under us (C5)
                fresh = self._fetcher.refresh_bounds([tb])[tb]
                if position < fresh.begin:
                    self._out_of_range(tb, position, fresh.begin, fresh.end)
                continue
            out[tb] = data
            self._positions[tb] = position + data.num_rows  # C1
            limit -= data.num_rows
        return out

    # -- positions ------------------------------------------------------------------------

    def _ensure_positions(self, buckets: list[TableBucket]) -> None:
        missing = [tb for tb in buckets if tb not in self._positions]
        if not missing:
            return
        committed = self._fetch_committed(missing) if self._group is not None else {}
        known = {tb: self._fetcher.bounds(tb) for tb in missing}  # watched: current already
        bounds = {tb: b for tb, b in known.items() if b is not None}
        bounds.update(self._fetcher.refresh_bounds([tb for tb in missing if tb not in bounds]))
        for tb in missing:
            record = committed.get(tb)
            if record is not None:
                self._positions[tb] = record.offset
                self._committed[tb] = OffsetAndMetadata(record.offset, record.metadata)
            elif self._reset == "none":
                raise NoOffsetForBucketError(f"{tb} has no committed offset and auto_offset_reset is 'none'")
            else:
                b = bounds[tb]
                self._positions[tb] = b.begin if self._reset == "earliest" else b.end

    def _out_of_range(self, tb: TableBucket, position: int, begin: int, end: int) -> int:
        if self._reset == "none":
            raise OffsetOutOfRangeError(f"position {position} of {tb} is outside its log [{begin}, {end}]")
        self._positions[tb] = begin if self._reset == "earliest" else end
        return self._positions[tb]

    def _fetch_committed(self, buckets: list[TableBucket]) -> dict[TableBucket, Any]:
        assert_group = self._require_group()
        tables = {}
        for tb in buckets:
            table = self._table_of(tb, assigned=False)
            tables[table.name] = table
        return stored.fetch(self._ctx, assert_group, tables, buckets)

    def position(self, tb: TableBucket) -> int:
        """Offset of the next record to return (C1)."""
        self._check_assigned(tb)
        self._ensure_positions([tb])
        return self._positions[tb]

    def seek(self, tb: TableBucket, offset: int) -> None:
        """Make ``offset`` the next to return (C6)."""
        self._check_assigned(tb)
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidTypeError(f"offset must be an int, not {type(offset).__name__}")
        if offset < 0:
            raise InvalidArgumentError(f"offset must be >= 0, got {offset}")
        self._move(tb, offset)

    def seek_to_beginning(self, *tbs: TableBucket) -> None:
        for tb, bounds in self._fetcher.refresh_bounds(self._targets(tbs)).items():
            self._move(tb, bounds.begin)

    def seek_to_end(self, *tbs: TableBucket) -> None:
        for tb, bounds in self._fetcher.refresh_bounds(self._targets(tbs)).items():
            self._move(tb, bounds.end)

    def seek_to_committed(self, *tbs: TableBucket) -> dict[TableBucket, int | None]:
        """Move to the committed offsets (a committed 0 included, C6); buckets without one get
        the reset policy. Returns the committed offsets."""
        targets = self._targets(tbs)
        committed = self._fetch_committed(targets)
        for tb in targets:
            if tb in committed:
                self._move(tb, committed[tb].offset)
            else:
                self._positions.pop(tb, None)
                self._ensure_positions([tb])
        return {tb: committed[tb].offset if tb in committed else None for tb in targets}

    def _move(self, tb: TableBucket, offset: int) -> None:
        self._positions[tb] = offset
        self._records = deque(r for r in self._records if r.table_bucket != tb)
        self._fetcher.wake()

    def _targets(self, tbs: tuple[TableBucket, ...]) -> list[TableBucket]:
        self._check_open()
        for tb in tbs:
            self._check_assigned(tb)
        return list(tbs) if tbs else list(self._assignment)

    # -- offsets without moving (C7) ------------------------------------------------------

    def beginning_offsets(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, int]:
        return {tb: b.begin for tb, b in self._bounds_now(tbs).items()}

    def end_offsets(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, int]:
        return {tb: b.end for tb, b in self._bounds_now(tbs).items()}

    def _bounds_now(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, Any]:
        self._check_open()
        if isinstance(tbs, TableBucket) or not isinstance(tbs, Iterable):
            raise InvalidTypeError("give a collection of TableBucket")
        wanted = list(tbs)
        for tb in wanted:
            self._fetcher.add_table(self._table_of(tb, assigned=False))
        return self._fetcher.refresh_bounds(wanted)

    def offsets_for_times(self, timestamps: Mapping[TableBucket, int]) -> dict[TableBucket, int | None]:
        """Per bucket, the earliest offset whose timestamp is >= the given epoch ms; None if none."""
        self._check_open()
        if not isinstance(timestamps, Mapping):
            raise InvalidTypeError("timestamps must be a mapping of TableBucket to epoch ms")
        for tb, ts in timestamps.items():
            self._table_of(tb, assigned=False)
            if isinstance(ts, bool) or not isinstance(ts, int):
                raise InvalidTypeError(f"timestamp of {tb} must be an int (epoch ms)")
            if ts < 0:
                raise InvalidArgumentError(f"timestamp of {tb} must be >= 0, got {ts}")
        bounds = self._bounds_now(timestamps)
        out: dict[TableBucket, int | None] = {}
        for tb, ts in timestamps.items():
            segments = self._fetcher.segments(tb, bounds[tb].begin)
            found = next((s for s in segments if s.end_offset > bounds[tb].begin and s.timestamp_ms >= ts), None)
            out[tb] = None if found is None else max(found.base_offset, bounds[tb].begin)
        return out

    def highwater(self, tb: TableBucket) -> int | None:
        """The bucket's log end offset as of the last poll; None before one."""
        self._check_assigned(tb)
        return self._highwater.get(tb)

    def last_poll_timestamp(self, tb: TableBucket) -> int | None:
        """Epoch ms of the last poll that looked at the bucket; None before one."""
        self._check_assigned(tb)
        return self._last_poll.get(tb)

    # -- pausing ----------------------------------------------------------------------------

    def pause(self, *tbs: TableBucket) -> None:
        for tb in tbs:
            self._check_assigned(tb)
            self._paused.add(tb)

    def resume(self, *tbs: TableBucket) -> None:
        for tb in tbs:
            self._check_assigned(tb)
            self._paused.discard(tb)
        self._fetcher.wake()

    def paused(self) -> set[TableBucket]:
        return set(self._paused)

    # -- commits ----------------------------------------------------------------------------

    @property
    def group_id(self) -> str | None:
        return self._group

    @property
    def member_id(self) -> str | None:
        """Its id in the group once it polled as a subscribed group member; else None."""
        return self._member_id

    @property
    def generation(self) -> int | None:
        return None

    def commit(self, offsets: Mapping[TableBucket, int | OffsetAndMetadata] | None = None) -> None:
        """Commit the positions of the assignment, or exactly ``offsets`` (C3); offsets that
        did not change are not written."""
        self._check_open()
        group = self._require_group()
        if offsets is None:
            wanted = {tb: OffsetAndMetadata(p) for tb, p in self._positions.items() if tb in self._assignment}
            if not wanted:
                return
        else:
            wanted = stored.check_offsets(offsets)
            for tb in wanted:
                if tb not in self._assignment:
                    raise IllegalStateError(f"{tb} is not assigned to this consumer")
        changed = {tb: o for tb, o in wanted.items() if self._committed.get(tb) != o}
        if not changed:
            return
        tables = {tb.table: self._tables[tb.table] for tb in changed}
        stored.commit(self._ctx, group, changed, tables)
        self._committed.update(changed)

    def committed(self, tb: TableBucket) -> int | None:
        """The group's committed offset of ``tb`` (read now); None before any commit (C2)."""
        self._check_open()
        self._require_group()
        record = self._fetch_committed([tb]).get(tb)
        return None if record is None else record.offset

    def _maybe_auto_commit(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self.commit()
            self._next_auto_commit = time.monotonic() + self._interval

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Commit the positions (with auto-commit, C8), then stop; closing twice does nothing."""
        if self._closed:
            return
        try:
            if self._auto_commit:
                self.commit()
        finally:
            self._closed = True
            self._fetcher.wake()
            self._fetcher.close()
            self._leave()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checks -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _require_group(self) -> str:
        if self._group is None:
            raise IllegalOperationError("this consumer has no group_id: offsets cannot be committed or read")
        return self._group

    def _check_assigned(self, tb: object) -> None:
        self._check_open()
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"expected a TableBucket, not {type(tb).__name__}")
        if tb not in self._assignment:
            raise IllegalStateError(f"{tb} is not assigned to this consumer")

    def _table_of(self, tb: object, *, assigned: bool) -> TableInfo:
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"expected a TableBucket, not {type(tb).__name__}")
        if assigned:
            self._check_assigned(tb)
        table = self._tables.get(tb.table) if isinstance(tb.table, str) else None
        if table is None:
            table = self._load(tb.table)
        table.bucket_number(tb.bucket)
        return table

    def _load(self, table: Any) -> TableInfo:
        info = load_table(self._ctx, table)
        self._tables.setdefault(info.name, info)
        self._fetcher.add_table(info)
        return self._tables[info.name]


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 1:
        raise InvalidArgumentError(f"{what} must be >= 1, got {value}")
    return value


def _records(tb: TableBucket, table: pa.Table) -> Iterator[Record]:
    columns = [n for n in table.column_names if n not in (OFFSET, TIMESTAMP, OP_COLUMN)]
    offsets = table.column(OFFSET).to_pylist()
    stamps = table.column(TIMESTAMP).cast(pa.int64()).to_pylist()
    ops = table.column(OP_COLUMN).to_pylist()
    values = table.select(columns).to_pylist()
    for offset, ts, op, value in zip(offsets, stamps, ops, values):
        yield Record(tb, offset, ts, op, value)
