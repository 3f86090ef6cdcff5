"""The consumer: reads assigned buckets from their positions (C1), commits offsets for its
group (C2, C3, C8), seeks (C6), answers offset queries without moving (C7) and applies its
reset policy when a position has no offset or falls outside the log (C5).

Its parts, as in aiokafka: the subscription state (``subscription``), the fetcher (``fetcher``:
log bounds from watches, segment reads) and a coordinator (``coordinator``: a group's
membership and offsets, or none)."""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    TableNotFoundError,
)
from ..structs import OffsetAndMetadata, Record, TableBucket
from ..tables.catalog import list_tables, load_table, load_tables
from . import offsets as stored
from .assignors import get_assignor
from .coordinator import GroupCoordinator, NoGroupCoordinator
from .fetcher import Bounds, Fetcher, SegmentGone
from .options import RESET_POLICIES, consumer_options, positive_int
from .options import timeout as timeout_seconds
from .pattern import TableWatch, compile_pattern
from .subscription import ASSIGNED, SUBSCRIBED, SubscriptionState, check_listener

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["Consumer", "RESET_POLICIES"]


class Consumer:
    """Reads buckets of tables by offset; built by ``Connection.consumer``."""

    def __init__(
        self,
        ctx: Context,
        tables: Iterable[TableInfo],
        *,
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval: Any = "5s",
        session_timeout: Any = "10s",
        assignor: str = "sticky",
        listener: Any = None,
        max_poll_records: int = 10_000,
        max_poll_interval: Any = "5m",
    ) -> None:
        options = consumer_options(
            auto_offset_reset=auto_offset_reset,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval=auto_commit_interval,
            session_timeout=session_timeout,
            max_poll_interval=max_poll_interval,
            max_poll_records=max_poll_records,
        )
        self._assignor = get_assignor(assignor)
        if listener is not None:
            check_listener(listener)
        self._max_poll_records = options.max_poll_records
        self._ctx = ctx
        self._tables: dict[str, TableInfo] = {}
        self._sub = SubscriptionState()
        self._sub.listener = listener
        self._fetcher = Fetcher({}, reset=options.reset)
        self._coordinator: GroupCoordinator | NoGroupCoordinator
        if group_id is None:
            self._coordinator = NoGroupCoordinator(self._sub)
        else:
            self._coordinator = GroupCoordinator(
                ctx,
                stored.check_group_id(group_id),
                self._sub,
                self._tables,
                auto_commit=options.auto_commit,
                interval=options.auto_commit_interval,
                assignor=self._assignor,
                wake=self._fetcher.wake,
                session_timeout=options.session_timeout,
                max_poll_interval=options.max_poll_interval,
            )
        self._pattern: TableWatch | None = None
        self._matched: dict[str, TableInfo] = {}
        """The tables the pattern matched at its newest change, by name."""
        self._recreated = False
        """Some matched table waits for the buckets of a dropped table of its name to go."""
        self._gone: set[str] = set()
        """Ids of tables found dropped while assigned: their buckets are not read or waited on."""
        self._last: TableBucket | None = None
        """The bucket getone handed a record of last: the next comes from its buffer first."""
        self._seen_assignment = self._sub.assignments
        self._turn = itertools.count()
        self._closed = False
        tables = list(tables)
        if tables:
            self._subscribe(tables)

    # -- subscription and assignment ----------------------------------------------------------

    def subscribe(
        self, tables: Iterable[Any] = (), *, pattern: Any = None, listener: Any = None
    ) -> None:
        """Consume every bucket of ``tables`` (names or Table objects), or of every table whose
        name ``pattern`` fully matches, now or later (C17); with a group, the buckets are
        assigned by ``poll``. A new subscription replaces the last one."""
        self._check_open()
        if isinstance(tables, (str, bytes)):
            raise InvalidTypeError("tables must be a list of table names, not a str")
        if not isinstance(tables, Iterable):
            raise InvalidTypeError(
                f"tables must be a list of table names, not {type(tables).__name__}"
            )
        if self._sub.mode == ASSIGNED:
            raise IllegalStateError("subscribe after assign: call unsubscribe() first")
        tables = list(tables)
        if pattern is not None and tables:
            raise InvalidArgumentError("subscribe takes tables or a pattern, not both")
        if listener is not None:
            check_listener(listener)
        if pattern is None:
            resolved = [self._load(t) for t in tables]
            if not resolved:
                raise InvalidArgumentError("subscribe needs at least one table, or a pattern")
            self._stop_pattern()
            self._subscribe(resolved, listener)
            return
        watch = TableWatch(self._ctx, compile_pattern(pattern), self._fetcher.wake)
        try:  # listed after the watch is set: no table created meanwhile is missed
            matched = load_tables(self._ctx, watch.matching(list_tables(self._ctx)))
        except BaseException:
            watch.close()
            raise
        self._stop_pattern()
        self._pattern, self._matched = watch, matched
        self._subscribe(self._matched_tables(), listener)

    def _subscribe(
        self, tables: list[TableInfo], listener: Any = None, *, in_poll: bool = False
    ) -> None:
        for table in tables:
            self._tables.setdefault(table.name, table)
            self._fetcher.add_table(table)
        self._sub.subscribe(tables, listener)
        self._coordinator.subscription_changed(in_poll=in_poll)
        self._assignment_changed()

    def _follow_pattern(self) -> None:
        """Inside poll: make the tables the pattern matches now the subscription (C17)."""
        watch = self._pattern
        if watch is None or self._sub.mode != SUBSCRIBED:
            return
        names = watch.take()
        if names is not None:
            self._matched = load_tables(self._ctx, names)
        elif not self._recreated:
            return
        tables = self._matched_tables()
        if {t.name: t.table_id for t in tables} != {
            n: t.table_id for n, t in self._sub.tables.items()
        }:
            self._subscribe(tables, in_poll=True)

    def _matched_tables(self) -> list[TableInfo]:
        """The matched tables this consumer can subscribe to now. A table dropped and created
        again under its name joins only once no bucket of the dropped one is assigned to this
        consumer any more (they are revoked first, with what they were)."""
        tables, self._recreated = [], False
        for name, table in self._matched.items():
            known = self._tables.get(name)
            if known is not None and known.table_id != table.table_id:
                if any(tb.table == name for tb in self._sub.assignment()):
                    self._recreated = True
                    continue
                self._tables[name] = table
                self._fetcher.replace_table(table)
            tables.append(self._tables.get(name, table))
        return tables

    def _stop_pattern(self) -> None:
        watch, self._pattern = self._pattern, None
        self._matched, self._recreated = {}, False
        if watch is not None:
            watch.close()

    def assign(self, buckets: Iterable[TableBucket]) -> None:
        """Consume exactly ``buckets`` (no group membership; commits still go to the group)."""
        self._check_open()
        if isinstance(buckets, (str, bytes, TableBucket)) or not isinstance(buckets, Iterable):
            raise InvalidTypeError("buckets must be a collection of TableBucket")
        wanted = list(dict.fromkeys(buckets))
        for tb in wanted:
            self._table_of(tb)
        self._sub.assign(wanted)
        self._assignment_changed()

    def unsubscribe(self) -> None:
        """Stop consuming every bucket (and leave the group)."""
        self._check_open()
        self._stop_pattern()
        self._coordinator.unsubscribe()
        self._sub.unsubscribe()
        self._assignment_changed()

    def assignment(self) -> set[TableBucket]:
        return set(self._sub.assignment())

    def _assignment_changed(self) -> None:
        if self._seen_assignment == self._sub.assignments:
            return
        self._seen_assignment = self._sub.assignments
        assigned = set(self._sub.assignment())
        self._fetcher.retain(assigned)  # a revoked bucket's buffered records go (C1)
        self._fetcher.wake()

    # -- polling -----------------------------------------------------------------------------

    def poll(
        self, timeout: Any = "0s", max_records: int | None = None
    ) -> dict[TableBucket, pa.Table]:
        """Records from the positions of the assigned, unpaused buckets; records fetched and not
        yet handed out (by ``getone``) come first. Positions move past what is returned (C1).

        Arguments:
            timeout: how long to wait for records when none are there (a duration; huge
                values wait until records come).
            max_records: at most this many records (default ``max_poll_records``).

        Returns:
            The records of each bucket that has some (``{}`` when none), with the columns
            ``_offset``, ``_timestamp``, ``_op`` and the table's.

        Raises:
            IllegalStateError: the consumer is closed.
            InvalidDurationError, InvalidArgumentError, InvalidTypeError: bad arguments.
            NoOffsetForBucketError, OffsetOutOfRangeError: with ``auto_offset_reset="none"`` (C5).
        """
        self._check_open()
        wait = timeout_seconds(timeout)
        limit = (
            self._max_poll_records
            if max_records is None
            else positive_int(max_records, "max_records")
        )
        return self._poll(wait, lambda: self._fetch(limit), {})

    def getone(self, timeout: Any = None) -> Record | None:
        """The next record of any assigned, unpaused bucket; its position moves past it only.

        Arguments:
            timeout: how long to wait for a record (None, or a huge duration: until one comes).

        Returns:
            The record, or None when none came within ``timeout`` or the consumer was closed.

        Raises:
            As ``poll``.
        """
        self._check_open()
        wait = math.inf if timeout is None else timeout_seconds(timeout)
        return self._poll(wait, self._take_one, None)

    def __iter__(self) -> Iterator[Record]:
        while not self._closed:
            record = self.getone()
            if record is not None:
                yield record

    def _poll(self, wait: float, take: Callable[[], Any], empty: Any) -> Any:
        """Drive the group and take records until some come or ``wait`` seconds passed."""
        deadline = time.monotonic() + wait
        with self._coordinator.polling():  # max_poll_interval counts the time between polls
            while True:
                self._follow_pattern()
                self._coordinator.poll()
                self._assignment_changed()
                out = take() if not self._coordinator.suspended else empty
                left = deadline - time.monotonic()
                if out or left <= 0 or self._closed:
                    return out
                self._fetcher.wait(left, self._has_news)

    def _take_one(self) -> Record | None:
        """The next record of the bucket getone served last, while it has buffered ones; else
        of the next bucket with records."""
        tb = self._last
        if (
            tb is not None
            and self._sub.is_assigned(tb)
            and not self._sub.state(tb).paused
            and self._tables[tb.table].table_id not in self._gone
        ):  # (in O(1): no list of all)
            state = self._sub.state(tb)
            buffer = None if state.position is None else self._fetcher.buffered(tb, state.position)
            if buffer is not None:
                record = buffer.record(tb)
                state.position = record.offset + 1  # C1
                return record
        return self._fetch(1, one=True)

    def _has_news(self) -> bool:
        if (
            self._closed
            or self._coordinator.has_work
            or (self._pattern is not None and self._pattern.changed)
        ):
            return True
        for tb in self._fetchable():
            bounds = self._fetcher.bounds(tb)
            position = self._sub.state(tb).position
            if bounds is not None and (position is None or position != bounds.end):
                return True
        return False

    def _fetchable(self) -> list[TableBucket]:
        buckets = self._sub.fetchable()
        if self._gone:
            buckets = [tb for tb in buckets if self._tables[tb.table].table_id not in self._gone]
        return buckets

    def _fetch(self, limit: int, *, one: bool = False) -> Any:
        """Hand out up to ``limit`` records, buffered ones first, reading buckets whose buffer
        is empty (round robin); positions move past what is handed out only (C1). With
        ``one``: the next record, or None."""
        buckets = self._fetchable()
        if not buckets:
            return None if one else {}
        self._fetcher.watch(buckets)
        self._ensure_positions(buckets)
        states = {tb: self._sub.state(tb) for tb in buckets}
        readable = {}
        for tb, state in states.items():
            bounds = self._fetcher.bounds(tb)
            if bounds is not None and bounds.begin <= state.position < bounds.end:
                readable[tb] = state.position
        self._fetcher.prepare(readable)
        start = next(self._turn) % len(buckets)
        out: dict[TableBucket, pa.Table] = {}
        now = int(time.time() * 1000)
        for tb in buckets[start:] + buckets[:start]:
            if limit <= 0:
                break
            state = states[tb]
            buffer = self._fetcher.buffered(tb, state.position)
            if buffer is None:
                data = self._read(tb, state, self._max_poll_records if one else limit, now)
                if data is None:
                    continue
                buffer = self._fetcher.keep(tb, data, state.position)
            state.last_poll = now
            if one:
                self._last = tb
                record = buffer.record(tb)
                state.position = record.offset + 1  # C1
                return record
            out[tb] = data = buffer.table(limit)
            state.position += data.num_rows  # C1
            limit -= data.num_rows
        return None if one else out

    def _read(self, tb: TableBucket, state: Any, limit: int, now: int) -> pa.Table | None:
        bounds = self._fetcher.bounds(tb) or self._fetcher.refresh_bounds([tb])[tb]
        state.highwater, state.last_poll = bounds.end, now
        position = state.position
        if not bounds.begin <= position <= bounds.end:
            bounds = self._fetcher.refresh_bounds([tb])[tb]
            if bounds == (0, 0) and self._dropped(tb.table):  # no reset: its buckets leave the
                self._gone.add(
                    self._tables[tb.table].table_id
                )  # subscription at a coming poll (C17)
                return None
            if not bounds.begin <= position <= bounds.end:
                position = self._fetcher.reset_position(tb, state, bounds)
        if position >= bounds.end:
            return None
        try:
            data = self._fetcher.read(tb, position, limit)
        except SegmentGone:
            data = None
        if data is None:  # retention deleted the segment under us (C5)
            fresh = self._fetcher.refresh_bounds([tb])[tb]
            if position < fresh.begin:
                self._fetcher.reset_position(tb, state, fresh)
            return None
        return data  # from ``state.position`` (reset above when it was out of range)

    # -- positions ------------------------------------------------------------------------

    def _ensure_positions(self, buckets: list[TableBucket]) -> None:
        missing = self._sub.without_position(buckets)
        if missing:  # the committed offsets, else the reset policy (C5)
            self._fetcher.start_positions(
                {tb: self._sub.state(tb) for tb in missing},
                self._coordinator.starting_offsets(missing),
            )

    def position(self, tb: TableBucket) -> int:
        """Offset of the next record to return (C1)."""
        self._check_open()
        state = self._sub.state(tb)
        self._ensure_positions([tb])
        return state.position

    def seek(self, tb: TableBucket, offset: int) -> None:
        """Make ``offset`` the next to return (C6); the bucket's buffered records are dropped.

        Raises:
            IllegalStateError: ``tb`` is not assigned. InvalidTypeError: not an int.
            InvalidArgumentError: negative, or 2**63 or more.
        """
        self._check_open()
        self._sub.state(tb)
        self._move(tb, stored.check_offset(offset, "offset"))

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
        committed = self._coordinator.fetch_committed(targets)
        for tb in targets:
            if tb in committed:
                self._move(tb, committed[tb].offset)
            else:
                self._sub.state(tb).position = None
                self._ensure_positions([tb])
        return {tb: committed[tb].offset if tb in committed else None for tb in targets}

    def _move(self, tb: TableBucket, offset: int) -> None:
        self._sub.state(tb).position = offset
        self._fetcher.discard(tb)  # its buffered records are not the next any more
        self._fetcher.wake()

    def _targets(self, tbs: tuple[TableBucket, ...]) -> list[TableBucket]:
        self._check_open()
        for tb in tbs:
            self._sub.state(tb)
        return list(tbs) if tbs else self._sub.assignment()

    # -- offsets without moving (C7) ------------------------------------------------------

    def beginning_offsets(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, int]:
        return {tb: b.begin for tb, b in self._bounds_now(tbs).items()}

    def end_offsets(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, int]:
        return {tb: b.end for tb, b in self._bounds_now(tbs).items()}

    def _bounds_now(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, Bounds]:
        self._check_open()
        if isinstance(tbs, TableBucket) or not isinstance(tbs, Iterable):
            raise InvalidTypeError("give a collection of TableBucket")
        wanted = list(tbs)
        for tb in wanted:
            self._table_of(tb)
        return self._fetcher.refresh_bounds(wanted)

    def offsets_for_times(
        self, timestamps: Mapping[TableBucket, int]
    ) -> dict[TableBucket, int | None]:
        """Per bucket, the earliest offset whose timestamp is >= the given epoch ms; None if none."""
        self._check_open()
        if not isinstance(timestamps, Mapping):
            raise InvalidTypeError("timestamps must be a mapping of TableBucket to epoch ms")
        for tb, ts in timestamps.items():
            self._table_of(tb)
            stored.check_offset(ts, f"timestamp of {tb} (epoch ms)")
        bounds = self._bounds_now(timestamps)
        return {
            tb: self._fetcher.offset_for_time(tb, ts, bounds[tb].begin)
            for tb, ts in timestamps.items()
        }

    def highwater(self, tb: TableBucket) -> int | None:
        """The bucket's log end offset as of the last poll; None before one."""
        self._check_open()
        return self._sub.state(tb).highwater

    def last_poll_timestamp(self, tb: TableBucket) -> int | None:
        """Epoch ms of the last poll that looked at the bucket; None before one."""
        self._check_open()
        return self._sub.state(tb).last_poll

    # -- pausing ----------------------------------------------------------------------------

    def pause(self, *tbs: TableBucket) -> None:
        self._check_open()
        for tb in tbs:
            self._sub.state(tb).paused = True

    def resume(self, *tbs: TableBucket) -> None:
        self._check_open()
        for tb in tbs:
            self._sub.state(tb).paused = False
        self._fetcher.wake()

    def paused(self) -> set[TableBucket]:
        return self._sub.paused()

    # -- group and commits ----------------------------------------------------------------

    @property
    def group_id(self) -> str | None:
        return self._coordinator.group_id

    @property
    def member_id(self) -> str | None:
        """Its id in the group once it polled as a subscribed group member; else None."""
        return self._coordinator.member_id

    @property
    def generation(self) -> int | None:
        return self._coordinator.generation

    def commit(self, offsets: Mapping[TableBucket, int | OffsetAndMetadata] | None = None) -> None:
        """Commit the positions of the assignment (records handed out only), or exactly
        ``offsets`` (C3); offsets that did not change are not written.

        Arguments:
            offsets: None, or TableBucket -> offset (an int in [0, 2**63)) or OffsetAndMetadata.

        Raises:
            IllegalOperationError: no group_id. IllegalStateError: an unassigned bucket.
            InvalidArgumentError, InvalidTypeError: bad offsets, before anything is written.
            CommitFailedError: a member that no longer owns a bucket or left the group (C11).
            GroupNotEmptyError: a manual assignment commits into a group with live members (§6.5).
            TableNotFoundError: a bucket of a dropped table (C17).
        """
        self._check_open()
        self._coordinator.require_group()
        if offsets is None:  # the positions: those of a dropped table's buckets are left out (C17)
            wanted = {tb: OffsetAndMetadata(p) for tb, p in self._sub.positions().items()}
            self._coordinator.commit(wanted, skip_dropped=True)
            return
        wanted = stored.check_offsets(offsets)
        for tb in wanted:
            try:
                self._sub.state(tb)
            except IllegalStateError:
                self._check_not_dropped(tb)  # a dropped table's bucket: say so
                raise
        self._coordinator.commit(wanted)

    def committed(self, tb: TableBucket) -> int | None:
        """The group's committed offset of ``tb`` (read now); None before any commit (C2)."""
        self._check_open()
        self._coordinator.require_group()
        self._table_of(tb)
        record = self._coordinator.fetch_committed([tb]).get(tb)
        return None if record is None else record.offset

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Commit the positions (with auto-commit, C8), then stop; closing twice does nothing."""
        if self._closed:
            return
        try:
            self._stop_pattern()
            self._coordinator.close()
        finally:
            self._closed = True
            self._fetcher.wake()
            self._fetcher.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- checks -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _dropped(self, name: str) -> bool:
        """Whether the table this consumer knows by ``name`` was dropped (read now)."""
        known = self._tables.get(name)
        if known is None:
            return False
        now = load_tables(self._ctx, [name]).get(name)
        return now is None or now.table_id != known.table_id

    def _check_not_dropped(self, tb: TableBucket) -> None:
        """``TableNotFoundError`` if the table this consumer knew as ``tb.table`` was dropped."""
        if self._dropped(tb.table):
            raise TableNotFoundError(
                f"table {tb.table!r} was dropped: the offset of {tb} cannot be committed "
                f"for group {self.group_id}; nothing was written"
            )

    def _table_of(self, tb: object) -> TableInfo:
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"expected a TableBucket, not {type(tb).__name__}")
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
