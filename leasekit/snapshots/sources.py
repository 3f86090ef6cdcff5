"""Where a bucket's state comes from across rescales (K3): its newest snapshot at or below an
offset plus its log tail, or, without one, its parents' states at their seals restricted to its
keys, then its own log. Reads of several buckets share an ancestor, read once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import lcm
from typing import TYPE_CHECKING, NamedTuple

from ..errors import InvalidArgumentError, OffsetOutOfRangeError
from ..log.state import read_states
from ..structs import Snapshot
from ..tables.layout import BucketLayout, ResidueClass
from .catalog import find_snapshots, list_snapshots

if TYPE_CHECKING:
    from ..tables.info import TableInfo
    from ..zk.formats import BucketState

__all__ = [
    "Source",
    "depths",
    "ancestors",
    "narrower",
    "within",
    "check_no_ancestor",
    "has_history",
    "plan_read",
]


class Source(NamedTuple):
    """What one bucket adds to a read: a snapshot's rows, then log records ``[start, end)``."""

    bucket: int
    """The bucket whose files these are."""
    depth: int
    """Its depth in the lineage: per key, records of a deeper bucket win (K2)."""
    snapshot: Snapshot | None
    """The snapshot the rows start from; None: the bucket's own state starts empty."""
    start: int
    """First log offset applied (the snapshot's offset, or 0)."""
    end: int
    """Log offset reached (exclusive)."""
    within: tuple[ResidueClass, ...] | None
    """Only rows whose key hashes into one of these classes count; None: every row."""


def depths(layout: BucketLayout) -> list[int]:
    """Each bucket's depth in the lineage, by id: 0 for the table's first buckets."""
    if not layout.rescaled:  # no bucket has parents
        return [0] * layout.count
    out: list[int] = []
    for b in range(layout.count):  # parents always have lower ids than their children
        out.append(1 + max((out[p] for p in layout.parents(b)), default=-1))
    return out


def ancestors(layout: BucketLayout, bucket: int) -> set[int]:
    """Every bucket ``bucket`` descends from."""
    out: set[int] = set()
    todo = list(layout.parents(bucket))
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(layout.parents(p))
    return out


def narrower(a: ResidueClass, b: ResidueClass) -> ResidueClass | None:
    """The intersection of two classes of one lineage (nested or disjoint); None if disjoint."""
    small, big = (a, b) if a.modulus >= b.modulus else (b, a)
    return small if small.residue % big.modulus == big.residue else None


def within(wanted: Iterable[ResidueClass], own: ResidueClass) -> tuple[ResidueClass, ...] | None:
    """The restriction of a bucket owning ``own`` to the disjoint sub-classes ``wanted``; None
    when they cover it all (reading the bucket once, unrestricted)."""
    classes = set(wanted)
    if own in classes:  # the bucket's own keys: all of them, whatever else is wanted
        return None
    # Whether the shares 1/modulus of the classes add up to the bucket's, in integers: each
    # class's share of ``whole`` hashes is ``whole // modulus`` exactly.
    whole = lcm(own.modulus, *(c.modulus for c in classes))
    if sum(whole // c.modulus for c in classes) >= whole // own.modulus:
        return None
    return tuple(sorted(classes))


def check_no_ancestor(layout: BucketLayout, buckets: Iterable[int]) -> None:
    """``InvalidArgumentError`` when one of ``buckets`` descends from another (its state would
    count twice)."""
    named = set(buckets)
    for b in sorted(named):
        both = ancestors(layout, b) & named
        if both:
            raise InvalidArgumentError(
                f"bucket {b} descends from bucket {min(both)}: name one of them (a sealed "
                "bucket's offset reads its keys as of then, in place of its descendants)"
            )


def has_history(layout: BucketLayout, bucket: int) -> bool:
    """Whether some ancestor of ``bucket`` had records before its seal (so ``bucket``'s state
    may hold keys before its own first record)."""
    return any((layout.sealed_at(p) or 0) > 0 for p in ancestors(layout, bucket))


def plan_read(table: TableInfo, targets: Mapping[int, int]) -> list[Source]:
    """The sources of the state of each bucket of ``targets`` at its offset (K3).

    A bucket with a snapshot at or below its offset reads it and its log tail; one without
    reads its parents' states at their seals (recursively), restricted to its keys, then its
    own log from 0. The deepest buckets are planned first, so an ancestor shared by several
    reads is planned once, restricted to the union of their keys (none when they cover it).

    Raises:
        OffsetOutOfRangeError: a bucket's log below its offset is deleted and no snapshot
            covers the offset.
    """
    layout = table.layout
    depth = depths(layout)
    offsets = dict(targets)
    wants: dict[int, set[ResidueClass]] = {b: {layout.residue_class(b)} for b in offsets}
    out: list[Source] = []
    while wants:
        deepest = max(depth[b] for b in wants)
        level = sorted(b for b in wants if depth[b] == deepest)
        found = _bases(table, level, offsets)
        for b in level:
            wanted = wants.pop(b)
            snap, state = found[b]
            start = snap.log_offset if snap is not None else 0
            _check_range(b, start, offsets[b], state, layout)
            rows = within(wanted, layout.residue_class(b))
            out.append(Source(b, depth[b], snap, start, offsets[b], rows))
            if snap is not None:
                continue
            for p in layout.parents(b):
                owns = layout.residue_class(p)
                shares = {narrower(owns, w) for w in wanted}
                wants.setdefault(p, set()).update(c for c in shares if c is not None)
                offsets[p] = layout.sealed_at(p) or 0
    return out


def _check_range(
    bucket: int, start: int, target: int, state: BucketState | None, layout: BucketLayout
) -> None:
    begin = state.begin if state is not None else 0
    if start < begin and start < target:
        what = "" if layout.is_active(bucket) else f" (sealed at {layout.sealed_at(bucket)})"
        raise OffsetOutOfRangeError(
            f"bucket {bucket}{what}: the log before offset {begin} is deleted and no snapshot "
            f"covers offset {target}"
        )


def _bases(
    table: TableInfo, buckets: list[int], offsets: Mapping[int, int]
) -> dict[int, tuple[Snapshot | None, BucketState | None]]:
    """Each bucket's state and newest snapshot at or below its offset: the newest one by
    id when it qualifies (one read), else from the bucket's listed snapshots."""
    states = dict(zip(buckets, read_states(table, buckets)))
    newest = {
        b: s.latest_snapshot
        for b, s in states.items()
        if s is not None and s.latest_snapshot is not None and s.latest_offset <= offsets[b]
    }
    got = find_snapshots(table, newest)
    listed = [
        b
        for b, s in states.items()
        if b not in got and s is not None and s.latest_snapshot is not None
    ]
    by_bucket: dict[int, list[Snapshot]] = {}
    for snap in list_snapshots(table, listed):
        by_bucket.setdefault(snap.table_bucket.bucket, []).append(snap)
    out: dict[int, tuple[Snapshot | None, BucketState | None]] = {}
    for b in buckets:
        usable = [s for s in by_bucket.get(b, []) if s.log_offset <= offsets[b]]
        best = max(usable, key=lambda s: (s.log_offset, s.snapshot_id), default=None)
        out[b] = (got.get(b, best), states[b])
    return out
