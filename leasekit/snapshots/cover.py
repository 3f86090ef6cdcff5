"""Which snapshots stand for the active buckets across rescales (K4), without I/O: a bucket's
own snapshot, or, where it has none, its ancestors' snapshots (its state is built from them),
each counted only for the keys of the descendants it stands in for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from ..errors import InvalidArgumentError
from ..tables.layout import BucketLayout, ResidueClass
from .catalog import get_snapshots, read_latest
from .sources import Source, narrower, within

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["Cover", "cover", "latest_cover", "snapshot_sources"]


class Cover(NamedTuple):
    """The buckets whose snapshots stand for the active buckets."""

    used: dict[int, tuple[ResidueClass, ...] | None]
    """Each bucket whose snapshot is read, with the classes it counts for (None: all its
    keys)."""
    uncovered: list[int]
    """Active buckets (some of) whose keys no snapshot stands for."""


def cover(layout: BucketLayout, snapshots: Mapping[int, int]) -> Cover:
    """The buckets of ``snapshots`` (a snapshot id per bucket, e.g. the newest or a lease's
    pins) that stand for the active buckets: an active bucket's own, else, recursively up its
    lineage, its parents' (each bucket at most once, for the union of the keys it stands for).
    """
    used: dict[int, tuple[ResidueClass, ...] | None] = {}
    wants: dict[int, set[ResidueClass]] = {}
    uncovered = []
    rescaled = layout.rescaled
    for a in layout.active:
        if a in snapshots:
            used[a] = None  # an active bucket's own snapshot stands for all its keys
        elif not (rescaled and _up(layout, a, layout.residue_class(a), snapshots, wants)):
            uncovered.append(a)  # none of its own, and no parents (or not all covered)
    if not wants:  # no rescale, or none that left a bucket without a snapshot of its own
        return Cover(used, uncovered)
    # Only sealed ancestors are wanted (a rescale sealed each): restrict each to its share.
    for b, classes in wants.items():
        used[b] = within(classes, layout.residue_class(b))
    return Cover(dict(sorted(used.items())), uncovered)


def _up(
    layout: BucketLayout,
    bucket: int,
    share: ResidueClass,
    snapshots: Mapping[int, int],
    wants: dict[int, set[ResidueClass]],
) -> bool:
    """Record in ``wants`` the ancestors' snapshots standing for ``share`` of ``bucket`` (which
    has none); False if some of ``share`` reaches a bucket of the table's first layout with
    none."""
    parents = layout.parents(bucket)
    whole = bool(parents)
    for p in parents:
        part = narrower(layout.residue_class(p), share)
        if part is None:
            continue
        if p in snapshots:
            wants.setdefault(p, set()).add(part)
        elif not _up(layout, p, part, snapshots, wants):
            whole = False
    return whole


def latest_cover(table: TableInfo) -> dict[int, int]:
    """The newest snapshots that stand for ``table``'s active buckets, by bucket: an active
    bucket's own newest, or, for one a rescale made that has none yet, its ancestors' newest
    (K3, K4). A sealed bucket whose descendants all have snapshots of their own is not named,
    nor is an active bucket whose keys no snapshot stands for."""
    latest = read_latest(table)
    return {b: latest[b] for b in cover(table.layout, latest).used}


def snapshot_sources(table: TableInfo, snapshot_ids: Mapping[int, int]) -> list[Source]:
    """The read sources of the snapshots ``{bucket: id}``: each counted only for the keys of the
    active buckets it stands for (a sealed bucket's snapshot for those of its descendants that
    have none named), so that no key is read twice (K3).

    Raises:
        InvalidArgumentError: a snapshot stands for no key, every bucket built from its
            bucket having a snapshot named too.
        SnapshotNotFoundError: a snapshot is gone.
    """
    used = cover(table.layout, snapshot_ids)
    idle = sorted(set(snapshot_ids) - set(used.used))
    if idle:
        names = ", ".join(map(str, idle))
        raise InvalidArgumentError(
            f"table {table.name!r}: the snapshot of sealed bucket{'s' if len(idle) > 1 else ''} "
            f"{names} would be read for no key, every bucket built from it having a snapshot "
            "named too: leave it out"
        )
    snaps = get_snapshots(table, snapshot_ids)
    return [
        Source(b, 0, s, s.log_offset, s.log_offset, used.used[b])
        for b, s in ((s.table_bucket.bucket, s) for s in snaps)
    ]
