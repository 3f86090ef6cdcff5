"""The snapshot catalog: list and look up snapshots, the newest per bucket, and delete one.

A snapshot's znode is a child of its bucket's ``snapshots`` znode, named by its id; lease
pins are its children, so a pinned snapshot cannot be deleted (R2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import (
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    LeasekitError,
    SnapshotNotFoundError,
)
from ..structs import Snapshot, TableBucket
from ..validate import check_int
from ..warehouse import contained
from ..zk import ConflictReason, Delete, Node, TxnConflict, to_datetime, touch
from ..zk.chunked import ChunkArray, group_by_chunk
from ..zk.formats import BucketState, LatestChunk, SnapshotRecord

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = [
    "snapshot_map",
    "decode_snapshot",
    "list_snapshots",
    "get_snapshots",
    "find_snapshots",
    "read_latest",
    "delete_snapshot",
    "delete_refused",
]


def snapshot_map(table: TableInfo, snapshot_ids: object) -> dict[int, int]:
    """``snapshot_ids`` (snapshot id per ``TableBucket`` or bucket number) checked: by bucket.

    Raises:
        InvalidTypeError: not a mapping, or an id that is not an int.
        InvalidArgumentError: a snapshot id below 1.
        BucketNotFoundError: the table never had such a bucket.
    """
    if not isinstance(snapshot_ids, Mapping):
        raise InvalidTypeError(
            "snapshot_ids must be a mapping of TableBucket (or bucket number) to snapshot id"
        )
    out: dict[int, int] = {}
    for tb, sid in snapshot_ids.items():
        bucket = table.bucket_number(tb)
        sid = check_int(sid, f"snapshot id for bucket {bucket}")
        if sid < 1:
            raise InvalidArgumentError(f"snapshot ids start at 1, got {sid} for bucket {bucket}")
        out[bucket] = sid
    return out


def decode_snapshot(table: TableInfo, data: bytes, path: str) -> SnapshotRecord:
    """The snapshot record stored at ``path``, its files resolved inside the table's directory.

    Raises:
        CorruptMetadataError: naming ``path``, when the value cannot be decoded or names a
            file outside the table's directory (docs/security.md, "Containment").
    """
    rec = SnapshotRecord.decode(data, path)
    return rec._replace(files=tuple(contained(f, table.data_dir, path) for f in rec.files))


def _snapshot(table: TableInfo, bucket: int, snapshot_id: int, path: str, node: Node) -> Snapshot:
    rec = decode_snapshot(table, node.data, path)
    uri = table.context.warehouse.uri
    return Snapshot(
        TableBucket(table.name, bucket),
        snapshot_id,
        rec.log_offset,
        rec.rows,
        rec.size,
        to_datetime(node.stat.ctime_ms),
        tuple(uri(f) for f in rec.files),
    )


def list_snapshots(table: TableInfo, buckets: Iterable[int]) -> list[Snapshot]:
    """Stored snapshots of ``buckets``, oldest first."""
    store, paths, tid = table.context.store, table.context.paths, table.table_id
    buckets = list(buckets)
    names = store.children_many([paths.snapshots(tid, b) for b in buckets])
    wanted = [(b, int(n)) for b, kids in zip(buckets, names) for n in (kids or [])]
    snap_paths = [paths.snapshot(tid, b, i) for b, i in wanted]
    nodes = store.get_many(snap_paths)
    out = [
        _snapshot(table, b, i, p, node)
        for (b, i), p, node in zip(wanted, snap_paths, nodes)
        if node is not None
    ]
    out.sort(key=lambda s: (s.created_at, s.table_bucket.bucket, s.snapshot_id))
    return out


def get_snapshots(table: TableInfo, wanted: Mapping[int, int]) -> list[Snapshot]:
    """The snapshots ``{bucket: id}``; ``SnapshotNotFoundError`` naming every missing one."""
    paths, tid = table.context.paths, table.table_id
    items = list(wanted.items())
    snap_paths = [paths.snapshot(tid, b, i) for b, i in items]
    nodes = table.context.store.get_many(snap_paths)
    missing = [f"bucket {b} snapshot {i}" for (b, i), node in zip(items, nodes) if node is None]
    if missing:
        raise SnapshotNotFoundError(f"table {table.name!r}: no {', '.join(missing)}")
    return [
        _snapshot(table, b, i, p, n)
        for (b, i), p, n in zip(items, snap_paths, nodes)
        if n is not None
    ]


def find_snapshots(table: TableInfo, wanted: Mapping[int, int]) -> dict[int, Snapshot]:
    """The snapshots ``{bucket: id}`` that exist, by bucket (one pipelined read)."""
    paths, tid = table.context.paths, table.table_id
    items = list(wanted.items())
    snap_paths = [paths.snapshot(tid, b, i) for b, i in items]
    nodes = table.context.store.get_many(snap_paths)
    return {
        b: _snapshot(table, b, i, p, n)
        for (b, i), p, n in zip(items, snap_paths, nodes)
        if n is not None
    }


def read_latest(table: TableInfo, buckets: Iterable[int] | None = None) -> dict[int, int]:
    """Newest snapshot id per bucket from the table's latest-snapshot arrays (one read per
    chunk)."""
    paths, tid = table.context.paths, table.table_id
    wanted = range(table.layout.count) if buckets is None else sorted(set(buckets))
    groups = group_by_chunk(wanted)
    chunk_paths = [paths.latest_chunk(tid, c) for c in groups]
    nodes = table.context.store.get_many(chunk_paths)
    out = {}
    for (c, group), p, node in zip(groups.items(), chunk_paths, nodes):
        array = ChunkArray(c, LatestChunk.decode(node.data, p).ids if node is not None else [])
        out.update(array.present(group))
    return out


def delete_refused(
    table: TableInfo, bucket: int, snapshot_id: int, exc: TxnConflict
) -> LeasekitError | None:
    """The error a snapshot delete that failed with ``exc`` means: ``IllegalStateError``
    naming the leases that pin it, ``SnapshotNotFoundError`` when it is gone; None for any
    other conflict."""
    if exc.reason == ConflictReason.NOTEMPTY:
        path = table.context.paths.snapshot(table.table_id, bucket, snapshot_id)
        holders = table.context.store.children(path) or []
        return IllegalStateError(
            f"snapshot {snapshot_id} of {table.name}/{bucket} is pinned by lease(s) "
            f"{', '.join(holders)}"
        )
    if exc.reason == ConflictReason.NONODE:
        return SnapshotNotFoundError(
            f"table {table.name!r}: no bucket {bucket} snapshot {snapshot_id}"
        )
    return None


def delete_snapshot(table: TableInfo, bucket: int, snapshot_id: int) -> Snapshot:
    """Delete one snapshot: metadata first, files after (R1, R2).

    Refused with ``IllegalStateError`` while a lease pins it (ZooKeeper will not delete a
    znode with children, so this is atomic with respect to acquire) or when it is the
    bucket's newest snapshot.
    """
    ctx = table.context
    bucket = table.bucket_number(bucket)
    path = ctx.paths.snapshot(table.table_id, bucket, snapshot_id)
    state_path = ctx.paths.bucket(table.table_id, bucket)
    node, state_node = ctx.store.get_many([path, state_path])
    if node is None:
        raise SnapshotNotFoundError(
            f"table {table.name!r}: no bucket {bucket} snapshot {snapshot_id}"
        )
    snap = _snapshot(table, bucket, snapshot_id, path, node)  # its files checked before any delete
    if (
        state_node is not None
        and BucketState.decode(state_node, state_path).latest_snapshot == snapshot_id
    ):
        raise IllegalStateError(
            f"snapshot {snapshot_id} is the newest of {snap.table_bucket}; it is never deleted"
        )
    try:
        ctx.store.commit(
            [Delete(path, node.stat.version), touch(ctx.paths.table_changes(table.table_id))]
        )
    except TxnConflict as exc:
        refused = delete_refused(table, bucket, snapshot_id, exc)
        if refused is not None:
            raise refused from None
        raise IllegalStateError(
            f"snapshot {snapshot_id} of {snap.table_bucket} changed while being deleted; try again"
        ) from None
    ctx.warehouse.delete_files(decode_snapshot(table, node.data, path).files)
    return snap
