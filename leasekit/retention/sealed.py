"""Retention of sealed buckets (K7): what holds a split or merged bucket's files — a new bucket
built from it without a snapshot of its own, a group that has not consumed it to its seal — the
plan of a sealed bucket that nothing holds (every snapshot goes but what a lease pins, and its
log once ``log.retention`` lets it go), and deleting such a snapshot, its newest included:
metadata first, with the table's latest-snapshot array in the same transaction, files after;
refused while pinned (R2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import IllegalStateError, SnapshotNotFoundError
from ..snapshots.catalog import decode_snapshot, delete_refused
from ..structs import RetentionItem, TableBucket
from ..zk import Delete, SetData, TxnConflict, touch
from ..zk.chunked import ChunkArray, chunk_of
from ..zk.formats import BucketState, LatestChunk
from .gather import gather_table
from .meta import SnapshotMeta, TableMeta

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from ..zk.ops import Op

__all__ = [
    "hold",
    "in_use",
    "free_reason",
    "plan_free",
    "relabel_held",
    "delete_sealed_snapshot",
]


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
        snaps = tm.snapshots.get(bucket) or []
        start = max((s.log_offset for s in snaps), default=0)
        return f"sealed bucket {bucket}: {_lacking_text(lacking)}", start
    behind = _behind(tm, bucket, sealed_at) if respect else None
    if behind is not None:
        group, at = behind
        return (
            f"sealed bucket {bucket}: group {group} has not consumed it to its seal at {sealed_at}",
            max(at, 0),
        )
    return None


def _lacking_text(lacking: list[int]) -> str:
    names = ", ".join(map(str, lacking))
    if len(lacking) == 1:
        return f"child {names} has no snapshot of its own yet"
    return f"children {names} have no snapshot of their own yet"


def in_use(ctx: Context, table: TableInfo) -> dict[int, tuple[str, ...]]:
    """Why each sealed bucket of ``table`` is still in use, read now: the groups that have not
    consumed it to its seal (K5, K6), the buckets built from it without a snapshot of their
    own and the leases pinning its snapshots (K7). A sealed bucket left out is drained and out
    of use: no group has to read it, and retention may delete it.

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
    """
    tm = gather_table(ctx, table, [], groups=True)
    layout, out = table.layout, {}
    for bucket in range(layout.count):
        sealed_at = layout.sealed_at(bucket)
        if sealed_at is None:
            continue
        why = [
            f"group {group} has not consumed it to its seal "
            + (f"(committed {offset:,} of {sealed_at:,})" if offset >= 0 else "(committed nothing)")
            for group, offset in sorted(tm.committed.get(bucket, {}).items())
            if max(offset, 0) < sealed_at
        ]
        lacking = sorted(set(_lacking(tm, bucket, set())))
        if lacking and (sealed_at > 0 or tm.snapshots.get(bucket)):  # sealed empty: holds nothing
            why.append(_lacking_text(lacking))
        pinned = sorted(s.snapshot_id for s in tm.snapshots.get(bucket, ()) if s.pins)
        if pinned:
            ids = ", ".join(map(str, pinned))
            why.append(f"a lease pins snapshot{'s' if len(pinned) > 1 else ''} {ids}")
        if why:
            out[bucket] = tuple(why)
    return out


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


def delete_sealed_snapshot(table: TableInfo, bucket: int, snapshot_id: int) -> None:
    """Delete snapshot ``snapshot_id`` of sealed ``bucket``, the newest too: a sealed bucket
    takes no snapshot again, and the buckets built from it have snapshots of their own (the
    plan checked). The latest-snapshot array forgets it in the same transaction, so
    ``latest_snapshots()`` no longer names it; the bucket's state stays (lineage, offsets).

    Raises:
        SnapshotNotFoundError: it is gone (an earlier pass deleted it).
        IllegalStateError: a lease pins it (ZooKeeper will not delete a znode with children:
            atomic with respect to acquire, L3), or the bucket is not sealed.
    """
    ctx, paths, tid = table.context, table.context.paths, table.table_id
    path = paths.snapshot(tid, bucket, snapshot_id)
    found: list[bytes] = []

    def build() -> list[Op]:
        chunk_path = paths.latest_chunk(tid, chunk_of(bucket))
        node, state_node, chunk = ctx.store.get_many([path, paths.bucket(tid, bucket), chunk_path])
        if node is None:
            raise SnapshotNotFoundError(
                f"table {table.name!r}: no bucket {bucket} snapshot {snapshot_id}"
            )
        if (
            state_node is None
            or not BucketState.decode(state_node, paths.bucket(tid, bucket)).sealed
        ):
            raise IllegalStateError(f"bucket {bucket} of {table.name!r} is not sealed")
        decode_snapshot(table, node.data, path)  # its files checked before anything is deleted
        found[:] = [node.data]
        ops: list[Op] = [Delete(path, node.stat.version)]
        if chunk is not None:
            array = ChunkArray(chunk_of(bucket), LatestChunk.decode(chunk.data, chunk_path).ids)
            if array.get(bucket) == snapshot_id:
                value = LatestChunk(array.updated({bucket: 0}).ids).encode()
                ops.append(SetData(chunk_path, value, chunk.stat.version))
        return [*ops, touch(paths.table_changes(tid))]

    try:
        ctx.store.commit_retrying(build, what=f"delete snapshot {snapshot_id} of bucket {bucket}")
    except TxnConflict as exc:
        refused = delete_refused(table, bucket, snapshot_id, exc)
        if refused is not None:
            raise refused from None
        raise
    ctx.warehouse.delete_files(decode_snapshot(table, found[0], path).files)
