"""KV snapshots: listing, lookup, and taking new ones (Spark compaction, then registration).

A snapshot's znode is a child of its bucket's ``snapshots`` znode, named by its id; the
files are written completely before the znode appears (S2).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import IllegalStateError, SnapshotNotFoundError, TableNotFoundError
from ..log.append import BucketState, bucket_state, list_segments, read_states
from ..log.markers import guard, in_flight, lost, lost_error
from ..records import Snapshot, TableBucket
from ..zk import Create, Delete, Node, Op, SetData, Stat, TxnConflict, decode, encode, to_datetime
from ..zk.paths import CHUNK

if TYPE_CHECKING:
    from ..tables.catalog import Table

__all__ = ["list_snapshots", "get_snapshots", "take_snapshots", "read_latest", "delete_snapshot"]



def _snapshot(table: Table, bucket: int, snapshot_id: int, path: str, node: Node) -> Snapshot:
    value = decode(node.data, path)
    uri = table.connection.warehouse.uri
    return Snapshot(
        TableBucket(table.name, bucket), snapshot_id, value["o"], value["n"], value["s"],
        to_datetime(node.stat.ctime_ms), tuple(uri(f) for f in value["f"]),
    )


def list_snapshots(table: Table, buckets: Iterable[int]) -> list[Snapshot]:
    """Stored snapshots of ``buckets``, oldest first."""
    store, paths, tid = table.connection.store, table.connection.paths, table.table_id
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


def get_snapshots(table: Table, wanted: Mapping[int, int]) -> list[Snapshot]:
    """The snapshots ``{bucket: id}``; ``SnapshotNotFoundError`` naming every missing one."""
    paths, tid = table.connection.paths, table.table_id
    items = list(wanted.items())
    snap_paths = [paths.snapshot(tid, b, i) for b, i in items]
    nodes = table.connection.store.get_many(snap_paths)
    missing = [f"bucket {b} snapshot {i}" for (b, i), node in zip(items, nodes) if node is None]
    if missing:
        raise SnapshotNotFoundError(f"table {table.name!r}: no {', '.join(missing)}")
    return [_snapshot(table, b, i, p, n) for (b, i), p, n in zip(items, snap_paths, nodes) if n is not None]


class _Written(NamedTuple):
    log_offset: int
    files: list[str]
    rows: int
    size: int


def take_snapshots(table: Table, spark: Any = None) -> dict[TableBucket, Snapshot]:
    """Compact every advanced bucket (previous snapshot + log tail) and register the results."""
    from tqdm.auto import tqdm

    from .. import spark as lks

    spark = lks.session(spark)
    states = read_states(table, range(table.num_buckets))
    advanced = {
        b: s for b, s in enumerate(states)
        if s is not None and s.end > (s.latest_offset if s.latest_snapshot is not None else 0)
    }
    if not advanced:
        return {}
    bar = tqdm(total=3, desc=f"snapshot {table.name}", unit="step", disable=None, leave=False)
    try:
        bases = get_snapshots(table, {b: s.latest_snapshot for b, s in advanced.items() if s.latest_snapshot})
        starts = {b: s.latest_offset if s.latest_snapshot else 0 for b, s in advanced.items()}
        ranges = {b: (starts[b], s.end) for b, s in advanced.items()}
        segments = list_segments(table, ranges)
        bar.update(1)
        warehouse = table.connection.warehouse
        with in_flight(table.connection) as token:
            rel = f"{table.data_dir}/snapshots/{token}"
            with lks.spark_errors(f"snapshot {table.name}"), lks.micros_timestamps(spark):
                state = lks.kv_state(
                    table,
                    lks.files_frame(spark, table, [f for s in bases for f in s.files]),
                    lks.log_frame(spark, table, segments, ranges),
                    by_bucket=True,
                )
                state.write.partitionBy("_bucket").parquet(warehouse.to_spark(warehouse.uri(rel)))
            bar.update(1)
            written = {b: _Written(s.end, [], 0, 0) for b, s in advanced.items()}
            for entry in warehouse.list(rel):
                bucket = lks.bucket_of_path(entry.path)
                if bucket is None or bucket not in written:
                    continue
                w = written[bucket]
                rows = warehouse.parquet_metadata(entry.path).num_rows
                written[bucket] = w._replace(files=[*w.files, entry.path], rows=w.rows + rows,
                                             size=w.size + entry.size)
            result = register(table, written, token)
        bar.update(1)
    finally:
        bar.close()
    return result


def read_latest(table: Table, buckets: Iterable[int] | None = None) -> dict[int, int]:
    """Newest snapshot id per bucket from the table's latest-snapshot arrays (one read per chunk)."""
    paths, tid = table.connection.paths, table.table_id
    wanted = range(table.num_buckets) if buckets is None else sorted(set(buckets))
    chunks = sorted({b // CHUNK for b in wanted})
    chunk_paths = [paths.latest_chunk(tid, c) for c in chunks]
    arrays = {
        c: decode(node.data, p)["a"] if node is not None else []
        for c, p, node in zip(chunks, chunk_paths, table.connection.store.get_many(chunk_paths))
    }
    out = {}
    for b in wanted:
        array = arrays[b // CHUNK]
        i = b % CHUNK
        if i < len(array) and array[i] > 0:
            out[b] = array[i]
    return out


def register(table: Table, written: Mapping[int, _Written], token: str) -> dict[TableBucket, Snapshot]:
    """Register complete snapshot files: a new id per bucket, committed with the bucket state
    and the table's latest-snapshot array in one transaction per chunk of buckets (S2).

    A bucket whose latest snapshot already reaches the same offset (a concurrent snapshot
    won) is skipped and its files are deleted.
    """
    conn = table.connection
    paths, tid = conn.paths, table.table_id
    out: dict[TableBucket, Snapshot] = {}
    stale: list[str] = []
    by_chunk: dict[int, list[int]] = {}
    for bucket in sorted(written):
        by_chunk.setdefault(bucket // CHUNK, []).append(bucket)
    for chunk, group in by_chunk.items():
        chosen: dict[int, int] = {}

        def build(chunk: int = chunk, group: list[int] = group, chosen: dict[int, int] = chosen) -> list[Op]:
            chosen.clear()
            summary_path = paths.latest_chunk(tid, chunk)
            nodes = conn.store.get_many([*(paths.bucket(tid, b) for b in group), summary_path])
            summary = nodes[-1]
            array = list(decode(summary.data, summary_path)["a"]) if summary is not None else []
            ops: list[Op] = [guard(conn, token)]
            for bucket, node in zip(group, nodes[:-1]):
                if node is None:
                    raise TableNotFoundError(f"table {table.name!r} was dropped")
                state = bucket_state(node, paths.bucket(tid, bucket))
                w = written[bucket]
                if state.latest_snapshot is not None and state.latest_offset >= w.log_offset:
                    continue
                sid = state.next_snapshot
                value = encode({"o": w.log_offset, "n": w.rows, "s": w.size, "f": w.files})
                ops.append(Create(paths.snapshot(tid, bucket, sid), value))
                ops.append(_advance(paths.bucket(tid, bucket), state, sid, w.log_offset))
                chosen[bucket] = sid
                array.extend([0] * (bucket % CHUNK + 1 - len(array)))
                array[bucket % CHUNK] = sid
            if not chosen:
                return []
            if chosen:
                value = encode({"a": array})
                ops.append(SetData(summary_path, value, summary.stat.version) if summary is not None
                           else Create(summary_path, value))
            return ops

        try:
            results = conn.store.commit_retrying(build, what=f"register snapshots of {table.name}")
        except TxnConflict as exc:
            if lost(conn, exc, token):
                raise lost_error(token) from None
            if exc.reason == "nonode":
                raise TableNotFoundError(f"table {table.name!r} was dropped") from None
            raise
        stats = iter(r for r in results if isinstance(r, Stat))
        for bucket in group:
            if bucket in chosen:
                w = written[bucket]
                created = next(stats).mtime_ms
                tb = TableBucket(table.name, bucket)
                uri = conn.warehouse.uri
                out[tb] = Snapshot(tb, chosen[bucket], w.log_offset, w.rows, w.size, to_datetime(created),
                                   tuple(uri(f) for f in w.files))
            else:
                stale.extend(written[bucket].files)
    conn.warehouse.delete_files(stale)
    return out


def delete_snapshot(table: Table, bucket: int, snapshot_id: int) -> Snapshot:
    """Delete one snapshot: metadata first, files after (R1, R2).

    Refused with ``IllegalStateError`` while a lease pins it (ZooKeeper will not delete a
    znode with children, so this is atomic with respect to acquire) or when it is the
    bucket's newest snapshot.
    """
    conn = table.connection
    bucket = table.bucket_number(bucket)
    path = conn.paths.snapshot(table.table_id, bucket, snapshot_id)
    state_path = conn.paths.bucket(table.table_id, bucket)
    node, state_node = conn.store.get_many([path, state_path])
    if node is None:
        raise SnapshotNotFoundError(f"table {table.name!r}: no bucket {bucket} snapshot {snapshot_id}")
    snap = _snapshot(table, bucket, snapshot_id, path, node)
    if state_node is not None and bucket_state(state_node, state_path).latest_snapshot == snapshot_id:
        raise IllegalStateError(f"snapshot {snapshot_id} is the newest of {snap.table_bucket}; it is never deleted")
    try:
        conn.store.commit([Delete(path, node.stat.version)])
    except TxnConflict as exc:
        if exc.reason == "notempty":
            holders = conn.store.children(path) or []
            raise IllegalStateError(
                f"snapshot {snapshot_id} of {snap.table_bucket} is pinned by lease(s) {', '.join(holders)}"
            ) from None
        if exc.reason == "nonode":
            raise SnapshotNotFoundError(f"table {table.name!r}: no bucket {bucket} snapshot {snapshot_id}") from None
        raise
    conn.warehouse.delete_files(decode(node.data, path)["f"])
    return snap


def _advance(path: str, state: BucketState, sid: int, log_offset: int) -> SetData:
    return SetData(path, state.encode(next_snapshot=sid + 1, latest_snapshot=sid, latest_offset=log_offset),
                   state.stat.version)
