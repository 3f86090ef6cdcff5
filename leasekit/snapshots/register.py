"""Registering snapshots: complete snapshot files of a bucket get a new id, committed with the
bucket state and the table's latest-snapshot array (S2). Spark writes the files (``spark/``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from ..errors import IllegalStateError, TableNotFoundError
from ..log.markers import guard, lost, lost_error
from ..structs import Snapshot, TableBucket
from ..zk import ConflictReason, Create, Op, SetData, Stat, TxnConflict, to_datetime, touch
from ..zk.chunked import ChunkArray, group_by_chunk
from ..zk.formats import BucketState, LatestChunk, SnapshotRecord

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["register", "Written"]


class Written(NamedTuple):
    """Complete snapshot files of one bucket, waiting to be registered."""

    log_offset: int
    """The log offset the files reach (exclusive)."""
    files: list[str]
    """Warehouse-relative paths of the files."""
    rows: int
    """Rows in the files."""
    size: int
    """Bytes of the files."""


def register(
    table: TableInfo, written: Mapping[int, Written], token: str
) -> dict[TableBucket, Snapshot]:
    """Register complete snapshot files: a new id per bucket, committed with the bucket state
    and the table's latest-snapshot array in one transaction per chunk of buckets (S2).

    A bucket whose latest snapshot already reaches the same offset (a concurrent snapshot
    won) is skipped and its files are deleted.

    Arguments:
        table: the table.
        written: the files written, by bucket number.
        token: the in-flight token the files were written under (``log.markers.in_flight``).

    Returns:
        The new snapshots, per bucket registered.

    Raises:
        TableNotFoundError: the table was dropped.
        IllegalStateError: the in-flight token was lost, or the commit failed otherwise.
    """
    ctx = table.context
    out: dict[TableBucket, Snapshot] = {}
    stale: list[str] = []
    for chunk, group in group_by_chunk(written).items():
        chosen: dict[int, int] = {}

        def build(
            chunk: int = chunk, group: list[int] = group, chosen: dict[int, int] = chosen
        ) -> list[Op]:
            return _chunk_ops(table, written, token, chunk, group, chosen)

        try:
            results = ctx.store.commit_retrying(build, what=f"register snapshots of {table.name}")
        except TxnConflict as exc:
            if lost(ctx, exc, token):
                raise lost_error(token) from None
            if exc.reason == ConflictReason.NONODE:
                raise TableNotFoundError(f"table {table.name!r} was dropped") from None
            raise IllegalStateError(f"cannot register snapshots of {table.name!r}: {exc}") from None
        stats = iter(r for r in results if isinstance(r, Stat))
        for bucket in group:
            if bucket in chosen:
                tb = TableBucket(table.name, bucket)
                out[tb] = _snapshot(table, tb, chosen[bucket], written[bucket], next(stats))
            else:
                stale.extend(written[bucket].files)
    ctx.warehouse.delete_files(stale)
    return out


def _chunk_ops(
    table: TableInfo,
    written: Mapping[int, Written],
    token: str,
    chunk: int,
    group: list[int],
    chosen: dict[int, int],
) -> list[Op]:
    """The transaction registering the buckets of ``group`` (one chunk of the latest-snapshot
    array); fills ``chosen`` with the id each bucket gets. Empty when no bucket needs one."""
    ctx, paths, tid = table.context, table.context.paths, table.table_id
    chosen.clear()
    summary_path = paths.latest_chunk(tid, chunk)
    nodes = ctx.store.get_many([*(paths.bucket(tid, b) for b in group), summary_path])
    summary = nodes[-1]
    array = ChunkArray(
        chunk, LatestChunk.decode(summary.data, summary_path).ids if summary is not None else []
    )
    ops: list[Op] = [guard(ctx, token)]
    for bucket, node in zip(group, nodes[:-1]):
        w = written[bucket]
        value = SnapshotRecord(w.log_offset, w.rows, w.size, tuple(w.files)).encode()
        if node is None:  # a bucket a rescale made, no record yet: its first snapshot (K3);
            # were the table dropped, these creates fail for want of its data znode
            sid = 1
            state = BucketState.new(0, 0)._replace(next_snapshot=2, latest_snapshot=1)
            ops += [
                Create(paths.bucket(tid, bucket), state.encode()),
                Create(paths.log(tid, bucket)),
                Create(paths.snapshots(tid, bucket)),
                Create(paths.snapshot(tid, bucket, sid), value),
            ]
            chosen[bucket] = sid
            continue
        state = BucketState.decode(node, paths.bucket(tid, bucket))
        if state.latest_snapshot is not None and state.latest_offset >= w.log_offset:
            continue
        sid = state.next_snapshot
        ops.append(Create(paths.snapshot(tid, bucket, sid), value))
        ops.append(_advance(paths.bucket(tid, bucket), state, sid, w.log_offset))
        chosen[bucket] = sid
    if not chosen:
        return []
    value = LatestChunk(array.updated(chosen).ids).encode()
    ops.append(
        SetData(summary_path, value, summary.stat.version)
        if summary is not None
        else Create(summary_path, value)
    )
    return [*ops, touch(paths.table_changes(tid))]  # last: its Stat follows the snapshots'


def _snapshot(table: TableInfo, tb: TableBucket, sid: int, w: Written, created: Stat) -> Snapshot:
    uri = table.context.warehouse.uri
    return Snapshot(
        tb,
        sid,
        w.log_offset,
        w.rows,
        w.size,
        to_datetime(created.mtime_ms),
        tuple(uri(f) for f in w.files),
    )


def _advance(path: str, state: BucketState, sid: int, log_offset: int) -> SetData:
    return SetData(
        path,
        state.encode(next_snapshot=sid + 1, latest_snapshot=sid, latest_offset=log_offset),
        state.stat.version,
    )
