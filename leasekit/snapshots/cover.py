"""Which snapshots stand for the active buckets across rescales (K4), without I/O: a bucket's
own snapshot, or, where it has none, its ancestors' snapshots (its state is built from them),
each counted only for the keys of the descendants it stands in for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..tables.layout import BucketLayout, ResidueClass
from .sources import narrower, within

__all__ = ["Cover", "cover"]


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
    wants: dict[int, set[ResidueClass]] = {}
    uncovered = []
    for a in layout.active:
        if a in snapshots:
            wants.setdefault(a, set()).add(layout.residue_class(a))
        elif not _up(layout, a, layout.residue_class(a), snapshots, wants):
            uncovered.append(a)
    used = {b: within(classes, layout.residue_class(b)) for b, classes in sorted(wants.items())}
    return Cover(used, uncovered)


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
