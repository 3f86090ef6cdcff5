"""A consumer's subscription state: the tables it subscribes to or the buckets it was assigned,
and per assigned bucket its position (C1), pause flag and what its last poll saw."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..errors import IllegalStateError, InvalidTypeError
from ..structs import TableBucket

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["BucketState", "SubscriptionState", "SUBSCRIBED", "ASSIGNED"]

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
    assignment) or buckets assigned by hand, never both (§6.5)."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.tables: dict[str, TableInfo] = {}
        """Subscribed tables, by name (empty with a manual assignment)."""
        self.listener: Any = None
        self.changes = 0
        """Bumped by every subscribe and unsubscribe: a coordinator compares it with the last
        subscription it acted on."""
        self.assignments = 0
        """Bumped by every change of the assignment."""
        self._buckets: dict[TableBucket, BucketState] = {}

    def subscribe(self, tables: list[TableInfo], listener: Any = None) -> None:
        if self.mode == ASSIGNED:
            raise IllegalStateError("subscribe after assign: call unsubscribe() first")
        if listener is not None:
            check_listener(listener)
            self.listener = listener
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

    def subscribed_buckets(self) -> list[TableBucket]:
        """Every bucket of the subscribed tables."""
        return [TableBucket(t.name, b) for t in self.tables.values() for b in range(t.num_buckets)]

    def set_assignment(self, buckets: Iterable[TableBucket]) -> set[TableBucket]:
        """Make ``buckets`` the assignment; buckets kept keep their state. Returns the buckets
        that left it."""
        old = self._buckets
        self._buckets = {tb: old.get(tb) or BucketState() for tb in dict.fromkeys(buckets)}
        if list(old) != list(self._buckets):
            self.assignments += 1
        return set(old) - set(self._buckets)

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

    def fetchable(self) -> list[TableBucket]:
        """Assigned buckets that are not paused, in assignment order."""
        return [tb for tb, s in self._buckets.items() if not s.paused]

    def paused(self) -> set[TableBucket]:
        return {tb for tb, s in self._buckets.items() if s.paused}

    def positions(self) -> dict[TableBucket, int]:
        """Known positions of the assignment."""
        return {tb: s.position for tb, s in self._buckets.items() if s.position is not None}

    def without_position(self, buckets: Iterable[TableBucket]) -> list[TableBucket]:
        return [tb for tb in buckets if self._buckets[tb].position is None]


def check_listener(listener: Any) -> None:
    if not all(
        callable(getattr(listener, m, None)) for m in ("on_buckets_revoked", "on_buckets_assigned")
    ):
        raise InvalidTypeError(
            "listener must have on_buckets_revoked and on_buckets_assigned methods"
        )
