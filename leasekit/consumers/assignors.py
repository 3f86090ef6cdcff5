"""Assignors of consumer groups (C9): pure functions from a group's members, their subscriptions
and the current assignment to a new assignment; "sticky" (the default), "range" and "roundrobin"."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping, Set
from typing import Protocol

from ..errors import InvalidArgumentError
from ..structs import TableBucket

__all__ = [
    "Assignor",
    "StickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "ASSIGNORS",
    "get_assignor",
]

Members = Mapping[str, frozenset[str]]
"""Member id -> names of the tables it subscribes to."""
Tables = Mapping[str, Collection[int]]
"""Table name -> the ids of the buckets to assign (after a rescale: the active ones and the
sealed ones not drained yet, K5; ids need not be contiguous)."""
Assignment = dict[str, set[TableBucket]]
"""Member id -> the buckets assigned to it."""


class Assignor(Protocol):
    """Computes a group's assignment. Every assignor returns an entry for every member (possibly
    empty), gives each bucket of each table some member subscribes to to exactly one member that
    subscribes to its table, never gives a member a bucket of another table, and is deterministic:
    equal inputs give equal outputs whatever the iteration order of the mappings and sets."""

    name: str
    """The name a consumer selects the assignor by (``conn.consumer(..., assignor=name)``)."""

    def assign(
        self, members: Members, tables: Tables, current: Mapping[str, Set[TableBucket]]
    ) -> Assignment:
        """The new assignment. ``tables`` gives the bucket ids to assign of every subscribed
        table (a table missing from it has none); ``current`` is the assignment now, possibly
        naming members that left or buckets that are not to be assigned any more."""
        ...


def _bucket_ids(tables: Tables) -> dict[str, tuple[int, ...]]:
    """Each table's bucket ids, checked (ints >= 0), ascending and without repeats."""
    out = {}
    for table, ids in tables.items():
        if isinstance(ids, (str, bytes, int)) or not isinstance(ids, Collection):
            raise InvalidArgumentError(
                f"buckets of table {table!r} must be a collection of bucket ids, not {ids!r}"
            )
        for b in ids:
            if isinstance(b, bool) or not isinstance(b, int) or b < 0:
                raise InvalidArgumentError(
                    f"bucket ids of table {table!r} must be ints >= 0, not {b!r}"
                )
        out[table] = tuple(sorted(set(ids)))
    return out


def _subscribers(members: Members, tables: Mapping[str, object]) -> dict[str, list[str]]:
    """Table name -> the sorted ids of its subscribers, for every subscribed table, by name."""
    by_table: dict[str, list[str]] = {}
    for member in sorted(members):
        for table in members[member]:
            if table in tables:
                by_table.setdefault(table, []).append(member)
    return {table: by_table[table] for table in sorted(by_table)}


class RangeAssignor:
    """Kafka's RangeAssignor: per table independently, the table's buckets in order are split into
    contiguous ranges over its subscribers sorted by member id, the first ``n % m`` of them taking
    one extra. Per table, the counts of its subscribers differ by at most 1."""

    name = "range"

    def assign(
        self, members: Members, tables: Tables, current: Mapping[str, Set[TableBucket]]
    ) -> Assignment:
        ids = _bucket_ids(tables)
        result: Assignment = {member: set() for member in sorted(members)}
        for table, subscribers in _subscribers(members, ids).items():
            quota, extra = divmod(len(ids[table]), len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                end = start + quota + (1 if i < extra else 0)
                result[member].update(TableBucket(table, b) for b in ids[table][start:end])
                start = end
        return result


class RoundRobinAssignor:
    """Kafka's RoundRobinAssignor: all buckets sorted by (table, bucket) are dealt in turn over the
    members sorted by id, skipping members that do not subscribe to the bucket's table. With
    identical subscriptions, counts differ by at most 1."""

    name = "roundrobin"

    def assign(
        self, members: Members, tables: Tables, current: Mapping[str, Set[TableBucket]]
    ) -> Assignment:
        ids = _bucket_ids(tables)
        order = sorted(members)
        result: Assignment = {member: set() for member in order}
        turn = 0  # index in ``order`` of the next member to deal to: a circular iterator
        for table in _subscribers(members, ids):
            for bucket in ids[table]:
                while table not in members[order[turn]]:
                    turn = (turn + 1) % len(order)
                result[order[turn]].add(TableBucket(table, bucket))
                turn = (turn + 1) % len(order)
        return result


class StickyAssignor:
    """Kafka's StickyAssignor semantics.

    Balanced: with identical subscriptions counts differ by at most 1 (10 buckets over 3 members:
    4/3/3); otherwise no member holds a bucket of a table that a member with at least 2 fewer
    buckets subscribes to. Sticky: every member keeps its current valid buckets (still existing and
    subscribed) except those moved to balance, and an already balanced assignment is kept as it
    is; buckets without a valid owner go to the members with the fewest buckets. With identical
    subscriptions the number of moved buckets is the minimum, the sum over members of
    ``max(0, kept - quota)``, where quotas are ``ceil(N/M)`` for the members keeping the most
    buckets and ``floor(N/M)`` for the others.
    """

    name = "sticky"

    def assign(
        self, members: Members, tables: Tables, current: Mapping[str, Set[TableBucket]]
    ) -> Assignment:
        ids = _bucket_ids(tables)
        valid = {table: frozenset(buckets) for table, buckets in ids.items()}
        subscribers = _subscribers(members, ids)
        owned: Assignment = {member: set() for member in sorted(members)}
        # 1. Keep the valid current buckets. Should ``current`` name a bucket twice (it should
        # not), the member with the smallest id keeps it.
        taken: set[TableBucket] = set()
        for member, buckets in owned.items():
            for tb in sorted(current.get(member, ())):
                if (
                    tb.table in members[member]
                    and tb.table in subscribers
                    and tb.bucket in valid[tb.table]
                    and tb not in taken
                ):
                    buckets.add(tb)
                    taken.add(tb)
        # 2. Each bucket without a valid owner goes to a subscriber with the fewest buckets.
        for table, candidates in subscribers.items():
            for bucket in ids[table]:
                tb = TableBucket(table, bucket)
                if tb not in taken:
                    owned[min(candidates, key=lambda m: (len(owned[m]), m))].add(tb)
        # 3. Move one bucket at a time from a member to one with at least 2 fewer buckets that
        # can take it, fullest and emptiest first, until no such move is left. Each move lowers
        # the sum of squared counts, so this ends. With identical subscriptions a member that
        # received a bucket in step 2 was then among the emptiest, so it never gives one away
        # here: only kept buckets move, and only the minimum of them (see the class docstring).
        if len({frozenset(subscribers).intersection(members[m]) for m in owned}) == 1:
            _balance_identical(owned)  # the same moves, found in O(log members) each
        else:
            while (move := _next_move(members, owned)) is not None:
                donor, receiver, tb = move
                owned[donor].remove(tb)
                owned[receiver].add(tb)
        return owned


def _balance_identical(owned: Assignment) -> None:
    """Step 3 of ``StickyAssignor`` when every member subscribes to every assigned table: each
    move takes the largest bucket of the fullest member (smallest id first) to the emptiest one
    (smallest id first), exactly as ``_next_move`` picks it, with heaps instead of sorting every
    member for every move (51 members x 10,000 buckets: ~200 moves)."""
    fullest = [(-len(bs), m) for m, bs in owned.items()]
    emptiest = [(len(bs), m) for m, bs in owned.items()]
    heapq.heapify(fullest)
    heapq.heapify(emptiest)
    ordered: dict[str, list[TableBucket]] = {}  # a donor's buckets, ascending (built lazily)
    while fullest and emptiest:
        count, donor = -fullest[0][0], fullest[0][1]
        if count != len(owned[donor]):
            heapq.heappop(fullest)  # stale entry
            continue
        if emptiest[0][0] != len(owned[emptiest[0][1]]):
            heapq.heappop(emptiest)
            continue
        receiver = emptiest[0][1]
        if len(owned[receiver]) + 2 > count:
            return
        if donor not in ordered:
            ordered[donor] = sorted(owned[donor])
        tb = ordered[donor].pop()
        owned[donor].remove(tb)
        owned[receiver].add(tb)
        ordered.pop(receiver, None)
        heapq.heappush(fullest, (-len(owned[donor]), donor))
        heapq.heappush(emptiest, (len(owned[donor]), donor))
        heapq.heappush(fullest, (-len(owned[receiver]), receiver))
        heapq.heappush(emptiest, (len(owned[receiver]), receiver))


def _next_move(members: Members, owned: Assignment) -> tuple[str, str, TableBucket] | None:
    """A (donor, receiver, bucket) move that improves balance, or None when balanced."""
    donors = sorted(owned, key=lambda m: (-len(owned[m]), m))
    receivers = sorted(owned, key=lambda m: (len(owned[m]), m))
    for donor in donors:
        for receiver in receivers:
            if len(owned[receiver]) + 2 > len(owned[donor]):
                break  # receivers only get fuller from here on
            movable = [tb for tb in owned[donor] if tb.table in members[receiver]]
            if movable:
                return donor, receiver, max(movable)
    return None


ASSIGNORS: dict[str, Assignor] = {
    assignor.name: assignor
    for assignor in (StickyAssignor(), RangeAssignor(), RoundRobinAssignor())
}
"""The assignors by name; "sticky" is the default."""


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name``; ``InvalidArgumentError`` names the valid ones otherwise."""
    try:
        return ASSIGNORS[name]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"assignor must be one of {', '.join(ASSIGNORS)}, not {name!r}"
        ) from None
