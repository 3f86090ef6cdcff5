"""The per-bucket log: appends (files first, offsets committed second) and segment lookup.

A bucket's znode holds its offsets; each segment is a child znode named by its base
offset. Records carry no offsets on disk: ``_offset`` is base offset + row index and
``_timestamp`` the segment's commit time on the ZooKeeper clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import CorruptMetadataError, TableNotFoundError, ZooKeeperUnavailableError
from ..records import LogSegment, OffsetRange, TableBucket
from ..tables import schema as schemas
from ..tables.bucketing import bucket_ids
from ..zk import Create, Delete, Node, Op, SetData, Stat, TxnConflict, decode, encode
from .markers import guard, in_flight, lost, lost_error

if TYPE_CHECKING:
    from ..tables.catalog import Table

__all__ = ["BucketState", "read_states", "append", "commit_segments", "list_segments", "log_schema"]

OP_COLUMN = "_op"
BUCKETS_PER_TXN = 200


class BucketState(NamedTuple):
    """A bucket's offsets and snapshot counters, with the znode stat for compare-and-set."""

    end: int
    """Next offset to assign."""
    begin: int
    """First offset still stored."""
    ts_floor: int
    """Lower bound for the next segment's timestamp (keeps _timestamp non-decreasing)."""
    next_snapshot: int
    """Id the next snapshot gets."""
    latest_snapshot: int | None
    """Id of the newest snapshot, if any."""
    latest_offset: int
    """Log offset of the newest snapshot (0 when none)."""
    stat: Stat
    """The znode's stat: ``version`` for compare-and-set, ``mtime_ms`` = last commit time."""

    def encode(self, **changes: Any) -> bytes:
        """The stored value with ``changes``; the floor always absorbs the last commit time."""
        s = self._replace(**changes)
        latest = None if s.latest_snapshot is None else [s.latest_snapshot, s.latest_offset]
        floor = max(s.ts_floor, self.stat.mtime_ms)
        return encode({"e": s.end, "b": s.begin, "t": floor, "s": s.next_snapshot, "l": latest})


def _state(value: dict[str, Any], stat: Stat) -> BucketState:
    latest = value.get("l")
    return BucketState(
        value["e"], value["b"], value["t"], value["s"],
        latest[0] if latest else None, latest[1] if latest else 0, stat,
    )


def bucket_state(node: Node, path: str) -> BucketState:
    """Decode a bucket znode read elsewhere (for example in a pipelined batch)."""
    try:
        return _state(decode(node.data, path), node.stat)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CorruptMetadataError(f"bucket metadata at {path} is invalid: {exc!r}", path) from None


def new_state_value(end: int, ts_floor: int) -> bytes:
    return encode({"e": end, "b": 0, "t": ts_floor, "s": 1, "l": None})


def read_states(table: Table, buckets: Iterable[int]) -> list[BucketState | None]:
    """Bucket states, pipelined; None for buckets never written."""
    paths = [table.connection.paths.bucket(table.table_id, b) for b in buckets]
    nodes = table.connection.store.get_many(paths)
    return [None if n is None else bucket_state(n, p) for p, n in zip(paths, nodes)]


def log_schema(table: Table) -> pa.Schema:
    """Schema of segment files: the table's columns (non-key ones nullable, for deletes) and ``_op``."""
    fields = [f if f.name in table.primary_key else f.with_nullable(True) for f in table.schema]
    return pa.schema([*fields, pa.field(OP_COLUMN, pa.string(), nullable=False)])


class SegmentFile(NamedTuple):
    """A complete segment file waiting to be committed."""

    bucket: int
    rel: str
    rows: int
    size: int


def append(table: Table, rows: Any, op: str) -> dict[TableBucket, OffsetRange]:
    """Write ``rows`` as segment files per bucket, then commit their offsets (W1, W2)."""
    keys_only = op == "delete"
    data = schemas.conform(rows, table.schema, key_columns=table.primary_key, keys_only=keys_only)
    if data.num_rows == 0:
        return {}
    target = log_schema(table)
    columns = [
        data.column(f.name) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
        for f in target
        if f.name != OP_COLUMN
    ]
    columns.append(pa.array(np.full(data.num_rows, op, dtype=object), pa.string()))
    data = pa.Table.from_arrays(columns, schema=target)
    ids = bucket_ids(data, table.primary_key, table.num_buckets)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    data = data.take(pa.array(order))
    max_rows = table.properties["log.segment.max-rows"]
    bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(sorted_ids)]))
    pieces: list[tuple[int, int, int]] = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        for chunk in range(start, end, max_rows):
            pieces.append((int(sorted_ids[start]), chunk, min(chunk + max_rows, end)))
    warehouse = table.connection.warehouse

    with in_flight(table.connection) as token:

        def write(piece: tuple[int, int, int]) -> SegmentFile:
            bucket, start, end = piece
            rel = f"{table.data_dir}/log/{bucket}/{token}-{uuid.uuid4().hex[:8]}.parquet"
            size = warehouse.write_parquet(rel, data.slice(start, end - start))
            return SegmentFile(bucket, rel, end - start, size)

        if len(pieces) == 1:
            files = [write(pieces[0])]
        else:
            with ThreadPoolExecutor(max_workers=4) as pool:
                files = list(pool.map(write, pieces))
        return commit_segments(table, files, token)


def commit_segments(table: Table, files: Sequence[SegmentFile], token: str) -> dict[TableBucket, OffsetRange]:
    """Register complete segment files of the in-flight write ``token``, assigning dense
    offsets per bucket.

    Each group of buckets commits in one transaction guarded by the bucket znodes'
    versions, so concurrent appenders never duplicate or skip an offset, and by the
    write's marker, so files orphan cleanup may have taken are never committed.
    """
    by_bucket: dict[int, list[SegmentFile]] = {}
    for f in files:
        by_bucket.setdefault(f.bucket, []).append(f)
    buckets = sorted(by_bucket)
    result: dict[TableBucket, OffsetRange] = {}
    for i in range(0, len(buckets), BUCKETS_PER_TXN):
        group = buckets[i:i + BUCKETS_PER_TXN]
        result.update(_commit_group(table, {b: by_bucket[b] for b in group}, token))
    return result


def _commit_group(table: Table, files: dict[int, list[SegmentFile]], token: str) -> dict[TableBucket, OffsetRange]:
    conn = table.connection
    paths = conn.paths
    tid = table.table_id
    planned: dict[TableBucket, OffsetRange] = {}

    def build() -> list[Op]:
        states = read_states(table, files)
        ops: list[Op] = [guard(conn, token)]
        planned.clear()
        for (bucket, segs), state in zip(files.items(), states):
            start = 0 if state is None else state.end
            floor = 0 if state is None else max(state.ts_floor, state.stat.mtime_ms)
            offset = start
            seg_ops = []
            for seg in segs:
                value = encode({"f": seg.rel, "n": seg.rows, "s": seg.size, "t": floor})
                seg_ops.append(Create(paths.segment(tid, bucket, offset), value))
                offset += seg.rows
            if state is None:
                ops += [Create(paths.bucket(tid, bucket), new_state_value(offset, floor)),
                        Create(paths.log(tid, bucket)), Create(paths.snapshots(tid, bucket))]
            else:
                ops.append(SetData(paths.bucket(tid, bucket), state.encode(end=offset, ts_floor=floor),
                                   state.stat.version))
            ops += seg_ops
            planned[TableBucket(table.name, bucket)] = OffsetRange(start, offset)
        return ops

    deadline = time.monotonic() + conn.store.timeout * 3
    while True:
        try:
            conn.store.commit_retrying(build, what=f"append to {table.name}")
            return dict(planned)
        except TxnConflict as exc:
            if lost(conn, exc, token):
                raise lost_error(token) from None
            if exc.reason == "nonode":
                raise TableNotFoundError(f"table {table.name!r} was dropped") from None
            raise
        except ZooKeeperUnavailableError:
            # The outcome is unknown: the transaction may have committed before the loss.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            if _committed(table, planned, files):
                return dict(planned)


def _committed(table: Table, planned: dict[TableBucket, OffsetRange], files: dict[int, list[SegmentFile]]) -> bool:
    """Whether an append whose commit outcome is unknown did commit (one txn: all or nothing)."""
    if not planned:
        return False
    tb, rng = next(iter(planned.items()))
    try:
        node = table.connection.store.get(table.connection.paths.segment(table.table_id, tb.bucket, rng.start))
    except ZooKeeperUnavailableError:
        return False
    return node is not None and decode(node.data, "segment")["f"] == files[tb.bucket][0].rel


def list_segments(table: Table, buckets: Iterable[int]) -> dict[int, list[LogSegment]]:
    """Every stored segment of each bucket, by base offset (children listed and read pipelined)."""
    store, paths, tid = table.connection.store, table.connection.paths, table.table_id
    buckets = list(buckets)
    names = store.children_many([paths.log(tid, b) for b in buckets])
    wanted = [(b, int(n)) for b, kids in zip(buckets, names) for n in (kids or [])]
    seg_paths = [paths.segment(tid, b, base) for b, base in wanted]
    nodes = store.get_many(seg_paths)
    out: dict[int, list[LogSegment]] = {b: [] for b in buckets}
    warehouse = table.connection.warehouse
    for (bucket, base), path, node in zip(wanted, seg_paths, nodes):
        if node is None:
            continue  # deleted by retention between listing and reading
        value = decode(node.data, path)
        out[bucket].append(LogSegment(
            TableBucket(table.name, bucket), base, base + value["n"],
            max(node.stat.ctime_ms, value["t"]), value["s"], warehouse.uri(value["f"]),
        ))
    for segs in out.values():
        segs.sort(key=lambda s: s.base_offset)
    return out



def delete_segments(table: Table, bucket: int, bases: Iterable[int]) -> tuple[list[str], int]:
    """Delete a prefix of a bucket's segments: znodes and the new beginning offset in one
    transaction, files after (R3). Returns the deleted files and their bytes.
    """
    conn = table.connection
    paths, tid = conn.paths, table.table_id
    wanted = sorted(set(bases))
    deleted: list[tuple[str, int]] = []

    def build() -> list[Op]:
        deleted.clear()
        seg_paths = [paths.segment(tid, bucket, b) for b in wanted]
        nodes = conn.store.get_many([paths.bucket(tid, bucket), *seg_paths])
        if nodes[0] is None:
            return []
        state = bucket_state(nodes[0], paths.bucket(tid, bucket))
        ops: list[Op] = []
        begin = state.begin
        for path, node in zip(seg_paths, nodes[1:]):
            if node is None:
                continue  # deleted by an earlier pass
            value = decode(node.data, path)
            ops.append(Delete(path, node.stat.version))
            deleted.append((value["f"], value["s"]))
            begin = max(begin, int(path.rsplit("/", 1)[1]) + value["n"])
        if not ops:
            return []
        ops.append(SetData(paths.bucket(tid, bucket), state.encode(begin=begin), state.stat.version))
        return ops

    conn.store.commit_retrying(build, what=f"delete segments of {table.name} bucket {bucket}")
    conn.warehouse.delete_files(f for f, _ in deleted)
    return [f for f, _ in deleted], sum(size for _, size in deleted)
