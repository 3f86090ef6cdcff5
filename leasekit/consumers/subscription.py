"""A consumer's subscription state: the tables it subscribes to (by list or by pattern, C17) or
the buckets it was assigned, the tables it knows and those found dropped, and per assigned
bucket its position (C1), pause flag and what its last poll saw."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    BucketNotFoundError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    TableNotFoundError,
)
from ..structs import OffsetAndMetadata, TableBucket
from ..tables.catalog import list_tables, load_table, load_tables
from .offsets import check_offsets
from .pattern import TableWatch, compile_pattern

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from .listener import BucketRebalanceListener

__all__ = ["BucketState", "SubscriptionState", "SUBSCRIBED", "ASSIGNED", "check_listener"]

SUBSCRIBED, ASSIGNED = "subscribed", "assigned"


class BucketState:
    """An assigned bucket: the offset of the next record to return (None until known), whether
    it is paused, and the log end and time of the last poll that looked at it."""

    __slots__ = ("position", "paused", "highwater", "last_poll")

    def __init__(self) -> None:
        self.position: int | None = None
        self.paused = False
        self.highwater: int | None = None
        self.last_poll: int | None = None


class SubscriptionState:
    """What a consumer reads: tables it subscribes to (a coordinator turns them into an
    assignment) or buckets assigned by hand, never both (docs/consumers.md). The fetcher reads
    the tables it knows; the coordinator follows what it subscribes to."""

    def __init__(self, ctx: Context, listener: BucketRebalanceListener | None = None) -> None:
        if listener is not None:
            check_listener(listener)
        self._ctx = ctx
        self.mode: str | None = None
        self.tables: dict[str, TableInfo] = {}
        """Subscribed tables, by name (empty with a manual assignment)."""
        self.known: dict[str, TableInfo] = {}
        """Every table the consumer resolved (subscribed, assigned or asked about), by name."""
        self.listener: BucketRebalanceListener | None = listener
        self.changes = 0
        """Bumped by every subscribe and unsubscribe: a coordinator compares it with the last
        subscription it acted on."""
        self.assignments = 0
        """Bumped by every change of the assignment."""
        self._buckets: dict[TableBucket, BucketState] = {}
        self._pattern: TableWatch | None = None
        self._matched: dict[str, TableInfo] = {}
        """The tables the pattern matched at its newest change, by name."""
        self._recreated = False
        """Some matched table waits for the buckets of a dropped table of its name to go."""
        self._gone: set[str] = set()
        """Ids of tables found dropped while assigned: their buckets are not read or waited on."""

    # -- what is subscribed -----------------------------------------------------------------

    def subscribe(
        self, tables: list[TableInfo], listener: BucketRebalanceListener | None = None
    ) -> None:
        if self.mode == ASSIGNED:
            raise IllegalStateError("subscribe after assign: call unsubscribe() first")
        if listener is not None:
            check_listener(listener)
            self.listener = listener
        for table in tables:
            self.known.setdefault(table.name, table)
        self.mode = SUBSCRIBED
        self.tables = {t.name: t for t in tables}
        self.changes += 1

    def assign(self, buckets: list[TableBucket]) -> None:
        """A manual assignment (no group membership); an empty one is an unsubscribe."""
        if self.mode == SUBSCRIBED:
            raise IllegalStateError("assign after subscribe: call unsubscribe() first")
        self.mode = ASSIGNED if buckets else None
        self.set_assignment(buckets)

    def unsubscribe(self) -> None:
        self.mode = None
        self.tables = {}
        self.changes += 1
        self.set_assignment([])

    def set_assignment(self, buckets: Iterable[TableBucket]) -> set[TableBucket]:
        """Make ``buckets`` the assignment; buckets kept keep their state. Returns the buckets
        that left it."""
        old = self._buckets
        self._buckets = {tb: old.get(tb) or BucketState() for tb in dict.fromkeys(buckets)}
        if list(old) != list(self._buckets):
            self.assignments += 1
        return set(old) - set(self._buckets)

    def resolve(
        self, tables: object, pattern: object, listener: object, wake: Callable[[], None]
    ) -> list[TableInfo]:
        """The tables ``subscribe(tables, pattern=, listener=)`` subscribes to now, checked; with
        ``pattern``, it is followed from now on (``wake`` called when its tables change), else
        a pattern followed so far is not any more."""
        if isinstance(tables, (str, bytes)):
            raise InvalidTypeError("tables must be a list of table names, not a str")
        if not isinstance(tables, Iterable):
            raise InvalidTypeError(
                f"tables must be a list of table names, not {type(tables).__name__}"
            )
        if self.mode == ASSIGNED:
            raise IllegalStateError("subscribe after assign: call unsubscribe() first")
        tables = list(tables)
        if pattern is not None and tables:
            raise InvalidArgumentError("subscribe takes tables or a pattern, not both")
        if listener is not None:
            check_listener(listener)
        if pattern is not None:
            return self.subscribe_pattern(pattern, wake)
        resolved = [self.load(t) for t in tables]
        if not resolved:
            raise InvalidArgumentError("subscribe needs at least one table, or a pattern")
        self.stop_pattern()
        return resolved

    # -- subscription by pattern (C17) --------------------------------------------------------

    def subscribe_pattern(self, pattern: object, wake: Callable[[], None]) -> list[TableInfo]:
        """Follow the tables whose names ``pattern`` fully matches (``wake`` is called when
        they change); the tables to subscribe to now."""
        watch = TableWatch(self._ctx, compile_pattern(pattern), wake)
        try:  # listed after the watch is set: no table created meanwhile is missed
            matched = load_tables(self._ctx, watch.matching(list_tables(self._ctx)))
        except BaseException:
            watch.close()
            raise
        self.stop_pattern()
        self._pattern, self._matched = watch, matched
        return self._matched_tables()

    @property
    def pattern_changed(self) -> bool:
        """Whether the tables the pattern matches changed since the last ``follow_pattern``."""
        return self._pattern is not None and self._pattern.changed

    def follow_pattern(self) -> list[TableInfo] | None:
        """Inside poll: the tables the pattern matches now, when they are not the subscription
        any more (C17); else None."""
        watch = self._pattern
        if watch is None or self.mode != SUBSCRIBED:
            return None
        names = watch.take()
        if names is not None:
            self._matched = load_tables(self._ctx, names)
        elif not self._recreated:
            return None
        tables = self._matched_tables()
        if {t.name: t.table_id for t in tables} != {n: t.table_id for n, t in self.tables.items()}:
            return tables
        return None

    def _matched_tables(self) -> list[TableInfo]:
        """The matched tables this consumer can subscribe to now. A table dropped and created
        again under its name joins only once no bucket of the dropped one is assigned to this
        consumer any more (they are revoked first, with what they were)."""
        tables, self._recreated = [], False
        for name, table in self._matched.items():
            known = self.known.get(name)
            if known is not None and known.table_id != table.table_id:
                if any(tb.table == name for tb in self._buckets):
                    self._recreated = True
                    continue
                self.known[name] = table  # the fetcher reads the new table from now on
            tables.append(self.known.get(name, table))
        return tables

    def stop_pattern(self) -> None:
        watch, self._pattern = self._pattern, None
        self._matched, self._recreated = {}, False
        if watch is not None:
            watch.close()

    # -- known and dropped tables -------------------------------------------------------------

    def load(self, table: Any) -> TableInfo:
        """The table named (or given) by ``table``, as this consumer knows it."""
        info = load_table(self._ctx, table)
        return self.known.setdefault(info.name, info)

    def buckets(self, buckets: object) -> list[TableBucket]:
        """``buckets`` (a collection of TableBucket of existing tables), without repeats."""
        if isinstance(buckets, (str, bytes, TableBucket)) or not isinstance(buckets, Iterable):
            raise InvalidTypeError("buckets must be a collection of TableBucket")
        wanted = list(dict.fromkeys(buckets))
        for tb in wanted:
            self.table_of(tb)
        return wanted

    def table_of(self, tb: object) -> TableInfo:
        """The table of ``tb`` (any bucket of a table that exists, assigned or not)."""
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"expected a TableBucket, not {type(tb).__name__}")
        table = self.known.get(tb.table) if isinstance(tb.table, str) else None
        if table is None:
            table = self.load(tb.table)
        try:
            table.bucket_number(tb.bucket)
        except BucketNotFoundError:  # made by a rescale since the table was read?
            with contextlib.suppress(TableNotFoundError):
                table.refresh()
            table.bucket_number(tb.bucket)
        return table

    def made_by_rescale(self, tb: TableBucket) -> bool:
        """Whether ``tb`` was made by a split or merge (it has parents, K6)."""
        return bool(self.table_of(tb).layout.parents(tb.bucket))

    def dropped(self, name: str) -> bool:
        """Whether the table this consumer knows by ``name`` was dropped (read now)."""
        known = self.known.get(name)
        if known is None:
            return False
        now = load_tables(self._ctx, [name]).get(name)
        return now is None or now.table_id != known.table_id

    def check_not_dropped(self, tb: TableBucket, group_id: str | None) -> None:
        """``TableNotFoundError`` if the table this consumer knew as ``tb.table`` was dropped."""
        if self.dropped(tb.table):
            raise TableNotFoundError(
                f"table {tb.table!r} was dropped: the offset of {tb} cannot be committed "
                f"for group {group_id}; nothing was written"
            )

    def to_commit(
        self,
        offsets: Mapping[TableBucket, int | OffsetAndMetadata] | None,
        group_id: str | None,
    ) -> dict[TableBucket, OffsetAndMetadata]:
        """The offsets a ``commit(offsets)`` commits: the known positions when None, else
        ``offsets`` checked, each of an assigned bucket (``IllegalStateError``;
        ``TableNotFoundError`` when its table was dropped)."""
        if offsets is None:
            return {tb: OffsetAndMetadata(p) for tb, p in self.positions().items()}
        wanted = check_offsets(offsets)
        for tb in wanted:
            try:
                self.state(tb)
            except IllegalStateError:
                self.check_not_dropped(tb, group_id)  # a dropped table's bucket: say so
                raise
        return wanted

    def mark_gone(self, tb: TableBucket) -> None:
        """The table of ``tb`` was found dropped: its buckets are not read or waited on any
        more, and leave the subscription at a coming poll (C17)."""
        self._gone.add(self.known[tb.table].table_id)

    def is_gone(self, tb: TableBucket) -> bool:
        return bool(self._gone) and self.known[tb.table].table_id in self._gone

    # -- reading the state ----------------------------------------------------------------

    def assignment(self) -> list[TableBucket]:
        return list(self._buckets)

    def is_assigned(self, tb: TableBucket) -> bool:
        return tb in self._buckets

    def state(self, tb: object) -> BucketState:
        """The state of an assigned bucket; ``IllegalStateError`` for any other."""
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"expected a TableBucket, not {type(tb).__name__}")
        state = self._buckets.get(tb)
        if state is None:
            hint = (
                " (a group consumer is assigned its buckets by poll())"
                if self.mode == SUBSCRIBED
                else ""
            )
            raise IllegalStateError(f"{tb} is not assigned to this consumer{hint}")
        return state

    def pause(self, buckets: Iterable[TableBucket], paused: bool) -> None:
        """Pause (or resume) the assigned ``buckets``."""
        for tb in buckets:
            self.state(tb).paused = paused

    def fetchable(self) -> list[TableBucket]:
        """Assigned buckets that are not paused, of tables not found dropped, in assignment
        order."""
        buckets = [tb for tb, s in self._buckets.items() if not s.paused]
        if self._gone:
            buckets = [tb for tb in buckets if self.known[tb.table].table_id not in self._gone]
        return buckets

    def paused(self) -> set[TableBucket]:
        return {tb for tb, s in self._buckets.items() if s.paused}

    def positions(self) -> dict[TableBucket, int]:
        """Known positions of the assignment."""
        return {tb: s.position for tb, s in self._buckets.items() if s.position is not None}

    def without_position(self, buckets: Iterable[TableBucket]) -> list[TableBucket]:
        return [tb for tb in buckets if self._buckets[tb].position is None]


def check_listener(listener: object) -> None:
    if not all(
        callable(getattr(listener, m, None)) for m in ("on_buckets_revoked", "on_buckets_assigned")
    ):
        raise InvalidTypeError(
            "listener must have on_buckets_revoked and on_buckets_assigned methods"
        )
