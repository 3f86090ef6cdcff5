"""Retention of sealed buckets (K7): what holds a split or merged bucket's files — a new bucket
built from it without a snapshot of its own, a group that has not consumed it to its seal — and
the plan of a sealed bucket that nothing holds: every snapshot goes but what a lease pins, and
its log once ``log.retention`` lets it go."""

from __future__ import annotations

from collections.abc import Mapping

from ..structs import RetentionItem, TableBucket
from .meta import SnapshotMeta, TableMeta

__all__ = ["hold", "free_reason", "plan_free", "relabel_held"]


def _lacking(tm: TableMeta, bucket: int, seen: set[int]) -> list[int]:
    """The buckets built from ``bucket`` that have no snapshot of their own and need its state:
    its children, and the children of a sealed child with no snapshot, recursively."""
    layout, out = tm.table.layout, []
    for child in layout.children(bucket):
        if child in seen:
            continue  # reached through both parents of a merge
        seen.add(child)
        if tm.snapshots.get(child):
            continue
        if layout.sealed_at(child) is None:
            out.append(child)
        else:  # its state at its seal is built from ours: its children decide
            out += _lacking(tm, child, seen)
    return out


def _behind(tm: TableMeta, bucket: int, sealed_at: int) -> tuple[str, int] | None:
    """The first group (by name) that has not committed ``bucket`` up to its seal, with the
    offset it committed (-1: none)."""
    return min(
        ((g, o) for g, o in tm.committed.get(bucket, {}).items() if max(o, 0) < sealed_at),
        default=None,
    )


def hold(tm: TableMeta, bucket: int, respect: bool) -> tuple[str, int] | None:
    """What holds sealed ``bucket``'s files (K7), with the offset from which its log is held;
    None when nothing does (leases aside: they hold the snapshots they pin).

    A bucket built from it without a snapshot of its own holds its newest snapshot and the log
    from there to the seal; with ``log.retention.respect-consumers``, a group that has not
    committed it up to its seal holds the log from its committed offset."""
    sealed_at = tm.table.layout.sealed_at(bucket)
    if sealed_at is None:
        return None
    lacking = sorted(set(_lacking(tm, bucket, set())))
    if lacking:
        names = ", ".join(map(str, lacking))
        what = (
            f"child {names} has no snapshot of its own"
            if len(lacking) == 1
            else f"children {names} have no snapshot of their own"
        )
        snaps = tm.snapshots.get(bucket) or []
        start = max((s.log_offset for s in snaps), default=0)
        return f"sealed bucket {bucket}: {what} yet", start
    behind = _behind(tm, bucket, sealed_at) if respect else None
    if behind is not None:
        group, at = behind
        return (
            f"sealed bucket {bucket}: group {group} has not consumed it to its seal at {sealed_at}",
            max(at, 0),
        )
    return None


def free_reason(tm: TableMeta, bucket: int, respect: bool) -> str:
    """Why the files of sealed ``bucket``, held by nothing, go."""
    reason = f"sealed bucket {bucket}: its children have snapshots of their own"
    if respect and tm.committed.get(bucket):
        reason += "; every group has consumed it to its seal"
    return reason


def plan_free(
    tm: TableMeta, tb: TableBucket, pinned: Mapping[int, str | None], reason: str
) -> tuple[list[RetentionItem], SnapshotMeta | None]:
    """The snapshots of a sealed bucket that nothing but leases holds: every one goes, the
    newest too, but those pinned (``pinned``: snapshot id -> why, None when not pinned); also
    the kept one with the lowest log offset (its log tail stays, R2, K4), None when none is.
    Its segments follow the log rules of every bucket (R3): ``log.retention`` still holds them.
    """
    items = []
    kept: list[SnapshotMeta] = []
    for snap in sorted(tm.snapshots.get(tb.bucket, ()), key=lambda s: -s.snapshot_id):
        why = pinned.get(snap.snapshot_id)
        if why is None:
            items.append(
                RetentionItem("snapshot", tb, snap.snapshot_id, "delete", reason, snap.size_bytes)
            )
        else:
            kept.append(snap)
            items.append(
                RetentionItem("snapshot", tb, snap.snapshot_id, "keep", why, snap.size_bytes)
            )
    return items, min(kept, key=lambda s: s.log_offset, default=None)


def relabel_held(
    tm: TableMeta, bucket: int, items: list[RetentionItem], reason: str, start: int
) -> list[RetentionItem]:
    """``bucket``'s segment items as the rules planned them, each segment that reaches past
    ``start`` (where the held log begins) kept for ``reason``. The rules delete a prefix of
    the log below its oldest kept snapshot, so what stays is contiguous still."""
    ends = {s.base_offset: s.end_offset for s in tm.segments.get(bucket, ())}
    return [
        i._replace(action="keep", reason=reason)
        if i.kind == "segment" and ends.get(int(i.item_id), 0) > start
        else i
        for i in items
    ]
