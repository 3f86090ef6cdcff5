"""Which buckets of a rescaled table a consumer reads now (K5, K6): every active bucket and every
sealed one not drained yet, a new bucket only once its parents are drained (parent first).

A sealed bucket is drained once the consumer got to its seal: a group's committed offset, or a
consumer's position without a group, is at least ``sealed_at`` (a bucket sealed empty is drained
from the start). A new bucket is read from its beginning only by a consumer that consumed one of
its parents (``from_beginning``); one that never did (the reset policy put it at the seal, or it
had no offset at all) starts it by its reset policy (K6, C5). Pure functions of a table's
``BucketLayout`` and those offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..snapshots.sources import ancestors

if TYPE_CHECKING:
    from ..tables.layout import BucketLayout

__all__ = ["ancestors", "drained", "from_beginning", "ready", "sealed", "to_read", "undrained"]


def sealed(layout: BucketLayout) -> tuple[int, ...]:
    """The sealed buckets of ``layout``, ascending (those whose offsets decide what is read)."""
    if not layout.rescaled:
        return ()
    return tuple(b for b in range(layout.count) if not layout.is_active(b))


def drained(layout: BucketLayout, bucket: int, offset: int | None) -> bool:
    """Whether ``bucket`` is sealed and ``offset`` (committed or reached; None: none) is at its
    seal; a bucket sealed with an empty log needs no offset."""
    sealed = layout.sealed_at(bucket)
    return sealed is not None and (sealed == 0 or (offset is not None and offset >= sealed))


def ready(layout: BucketLayout, bucket: int, offsets: Mapping[int, int | None]) -> bool:
    """Whether every ancestor of ``bucket`` is drained (``offsets``: bucket -> offset): parent
    first lets a consumer read it (K5). A parent sealed empty counts only once its own parents
    are drained."""
    stack, seen = list(layout.parents(bucket)), set()
    while stack:
        parent = stack.pop()
        if parent in seen:
            continue
        seen.add(parent)
        if not drained(layout, parent, offsets.get(parent)):
            return False
        stack.extend(layout.parents(parent))
    return True


def to_read(
    layout: BucketLayout, offsets: Mapping[int, int | None], *, parent_first: bool = True
) -> tuple[int, ...]:
    """The buckets a consumer reads now, ascending: the active ones and the sealed ones not
    drained, with ``parent_first`` only those whose ancestors are all drained (K5)."""
    if not layout.rescaled:
        return layout.active
    return tuple(
        b
        for b in range(layout.count)
        if (layout.is_active(b) or not drained(layout, b, offsets.get(b)))
        and (not parent_first or ready(layout, b, offsets))
    )


def undrained(layout: BucketLayout, offsets: Mapping[int, int | None]) -> tuple[int, ...]:
    """The sealed buckets not drained yet, ascending (describe_group and lag cover them, K6)."""
    return tuple(b for b in sealed(layout) if not drained(layout, b, offsets.get(b)))


def from_beginning(
    layout: BucketLayout, bucket: int, consumed: Callable[[int], bool | None], default: bool
) -> bool:
    """Whether a consumer without an offset for ``bucket`` reads it from its beginning: it was
    made by a rescale and the consumer consumed one of its parents (K6; merged buckets: one
    parent is enough, so no record of a key it was reading is skipped). ``consumed(parent)``:
    True (read or committed up to or into it), False (never: the reset policy put it at the
    seal), None (no offset); a parent sealed empty without one stands for its own parents, and
    one the table was created with gives ``default``. Otherwise the reset policy applies."""
    stack, seen = list(layout.parents(bucket)), set()
    if not stack:
        return False
    while stack:
        parent = stack.pop()
        if parent in seen:
            continue
        seen.add(parent)
        verdict = consumed(parent)
        if verdict is None and layout.sealed_at(parent) == 0:
            grand = layout.parents(parent)
            if not grand and default:
                return True
            stack.extend(grand)
        elif verdict:
            return True
    return False
