"""Deleting a snapshot of a sealed bucket, its newest included (K7): metadata first, with the
table's latest-snapshot array in the same transaction, files after; refused while pinned (R2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import IllegalStateError, SnapshotNotFoundError
from ..snapshots.catalog import decode_snapshot, delete_refused
from ..zk import Delete, SetData, TxnConflict, touch
from ..zk.chunked import ChunkArray, chunk_of
from ..zk.formats import BucketState, LatestChunk

if TYPE_CHECKING:
    from ..tables.info import TableInfo
    from ..zk.ops import Op

__all__ = ["delete_sealed_snapshot"]


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
