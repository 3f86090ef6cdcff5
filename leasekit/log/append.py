"""Appends to the log: segment files per bucket first, then their offsets committed.

A bucket's znode holds its offsets; each segment is a child znode named by its base
offset. Records carry no offsets on disk: ``_offset`` is base offset + row index and
``_timestamp`` the segment's commit time on the ZooKeeper clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import TableNotFoundError, ZooKeeperUnavailableError
from ..records import OffsetRange, TableBucket
from ..tables import schema as schemas
from ..tables.bucketing import bucket_ids
from ..zk import Create, Op, SetData, TxnConflict
from ..zk.formats import BucketState, SegmentRecord
from .markers import guard, in_flight, lost, lost_error
from .segments import OP_COLUMN, log_schema
from .state import read_states

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["SegmentFile", "append", "commit_segments"]

BUCKETS_PER_TXN = 200


class SegmentFile(NamedTuple):
    """A complete segment file waiting to be committed."""

    bucket: int
    rel: str
    rows: int
    size: int


def append(table: TableInfo, rows: Any, op: str) -> dict[TableBucket, OffsetRange]:
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


def commit_segments(table: TableInfo, files: Sequence[SegmentFile], token: str) -> dict[TableBucket, OffsetRange]:
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


def _commit_group(table: TableInfo, files: dict[int, list[SegmentFile]], token: str) -> dict[TableBucket, OffsetRange]:
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
                value = SegmentRecord(seg.rel, seg.rows, seg.size, floor).encode()
                seg_ops.append(Create(paths.segment(tid, bucket, offset), value))
                offset += seg.rows
            if state is None:
                ops += [Create(paths.bucket(tid, bucket), BucketState.new(offset, floor).encode()),
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


def _committed(table: TableInfo, planned: dict[TableBucket, OffsetRange], files: dict[int, list[SegmentFile]]) -> bool:
    """Whether an append whose commit outcome is unknown did commit (one txn: all or nothing)."""
    if not planned:
        return False
    tb, rng = next(iter(planned.items()))
    path = table.connection.paths.segment(table.table_id, tb.bucket, rng.start)
    try:
        node = table.connection.store.get(path)
    except ZooKeeperUnavailableError:
        return False
    return node is not None and SegmentRecord.decode(node.data, path).file == files[tb.bucket][0].rel


