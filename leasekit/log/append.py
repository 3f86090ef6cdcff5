"""Appends to the log: segment files per bucket first, then their offsets committed.

A bucket's znode holds its offsets; each segment is a child znode named by its base
offset. Records carry no offsets on disk: ``_offset`` is base offset + row index and
``_timestamp`` the segment's commit time on the ZooKeeper clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import (
    LeasekitError,
    PartialAppendError,
    TableNotFoundError,
    ZooKeeperUnavailableError,
)
from ..structs import OffsetRange, TableBucket
from ..tables import schema as schemas
from ..tables.bucketing import murmur3_hash
from ..zk import (
    MAX_REQUEST_BYTES,
    MAX_TXN_OPS,
    ConflictReason,
    Create,
    Op,
    SetData,
    TxnConflict,
    op_size,
    touch,
)
from ..zk.formats import BucketState, SegmentRecord
from .batch_marks import BatchMark, mark_bytes, mark_ops
from .markers import claimed_error, guard, in_flight, lost, lost_error
from .segments import OP_COLUMN, ROW_GROUP_RECORDS, log_schema
from .state import read_states

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["SegmentFile", "append", "commit_segments", "write_pieces"]

APPEND_TXN_BYTES = int(MAX_REQUEST_BYTES * 0.9)
"""Budget of one append transaction; ``_bucket_bytes`` bounds each bucket's ops from above."""
_BIG = 2**62
"""Stands in for every offset, size and time when a bucket's ops are sized before its state is
read."""


class SegmentFile(NamedTuple):
    """A complete segment file waiting to be committed."""

    bucket: int
    rel: str
    rows: int
    size: int


def append(table: TableInfo, rows: Any, op: str) -> dict[TableBucket, OffsetRange]:
    """Write ``rows`` as segment files per bucket, then commit their offsets (W1, W2); rows of a
    bucket a rescale sealed meanwhile are routed again by the new layout (K1)."""
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
    ids = table.layout.route(murmur3_hash(data, table.primary_key))
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    data = data.take(pa.array(order))

    with in_flight(table.context) as token:
        files = write_pieces(table, data, sorted_ids, token)

        def rest(buckets: Sequence[int]) -> pa.Table:
            """The rows of ``buckets`` as the same operation takes them again."""
            rows = data.filter(
                pa.array(np.isin(sorted_ids, np.asarray(buckets, dtype=sorted_ids.dtype)))
            )
            return _user_rows(table, rows, keys_only)

        return commit_segments(table, files, token, rest=rest, operation=op)


def write_pieces(
    table: TableInfo, data: pa.Table, sorted_ids: np.ndarray, token: str
) -> list[SegmentFile]:
    """Write log rows ``data``, sorted by their buckets ``sorted_ids``, as segment files of the
    write ``token``: one or more per bucket (``log.segment.max-rows`` each)."""
    max_rows = table.properties["log.segment.max-rows"]
    bounds = np.flatnonzero(np.diff(sorted_ids)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(sorted_ids)]))
    pieces: list[tuple[int, int, int]] = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        for chunk in range(start, end, max_rows):
            pieces.append((int(sorted_ids[start]), chunk, min(chunk + max_rows, end)))
    warehouse = table.context.warehouse

    def write(piece: tuple[int, int, int]) -> SegmentFile:
        bucket, start, end = piece
        rel = f"{table.data_dir}/log/{bucket}/{token}-{uuid.uuid4().hex[:8]}.parquet"
        size = warehouse.write_parquet(rel, data.slice(start, end - start), ROW_GROUP_RECORDS)
        return SegmentFile(bucket, rel, end - start, size)

    if len(pieces) == 1:
        return [write(pieces[0])]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(write, pieces))


def _user_rows(table: TableInfo, rows: pa.Table, keys_only: bool) -> pa.Table:
    """Log rows as the user passes them: the table's columns (its key columns for deletes)."""
    wanted = [f for f in table.schema if not keys_only or f.name in table.primary_key]
    return pa.Table.from_arrays([rows.column(f.name) for f in wanted], schema=pa.schema(wanted))


class _Sealed(Exception):
    """Buckets of a pending commit were sealed by a rescale: their rows go elsewhere now."""

    def __init__(self, buckets: list[int]) -> None:
        super().__init__(f"buckets {buckets} are sealed")
        self.buckets = buckets


def _reroute(table: TableInfo, files: Sequence[SegmentFile], token: str) -> list[SegmentFile]:
    """The rows of ``files`` (of sealed buckets) written again by the table's layout now, and
    ``files`` deleted (nothing references them)."""
    warehouse = table.context.warehouse
    table.refresh()
    data = pa.concat_tables([warehouse.read_parquet(f.rel) for f in files])
    ids = table.layout.route(murmur3_hash(data, table.primary_key))
    order = np.argsort(ids, kind="stable")
    moved = write_pieces(table, data.take(pa.array(order)), ids[order], token)
    warehouse.delete_files([f.rel for f in files])
    return moved


def commit_segments(
    table: TableInfo,
    files: Sequence[SegmentFile],
    token: str,
    *,
    rest: Callable[[list[int]], Any] | None = None,
    operation: str = "upsert",
    mark: BatchMark | None = None,
    held: Sequence[str] = (),
) -> dict[TableBucket, OffsetRange]:
    """Register complete segment files of the in-flight write ``token`` (and of the held writes
    ``held``: Spark tasks' files), assigning dense offsets per bucket.

    Buckets commit in as few transactions as ZooKeeper's request limit allows (usually
    one), each guarded by the bucket znodes' versions, so concurrent appenders never
    duplicate or skip an offset, and by the write markers, so files orphan cleanup may have
    taken are never committed. A bucket found sealed by a rescale has its rows written again
    for the buckets that own them now, and the transaction is retried (K1). When a later
    transaction fails after earlier ones committed, ``PartialAppendError`` says exactly what is
    visible and carries the rows that are not (``rest`` of the uncommitted buckets) for a retry.
    With ``mark``, every transaction also records in the batch's marker what it committed.
    """
    pending: dict[int, list[SegmentFile]] = {}
    for f in files:
        pending.setdefault(f.bucket, []).append(f)
    extra = mark_bytes(mark, len(pending)) if mark else 0
    groups = _groups(table, pending, extra, len(held))
    result: dict[TableBucket, OffsetRange] = {}
    rerouted = False
    while groups:
        group = groups.pop(0)
        try:
            batch = {b: pending[b] for b in group}
            result.update(_commit_group(table, batch, (token, *held), mark, final=not groups))
        except _Sealed as sealed:
            moved = _reroute(table, [f for b in sealed.buckets for f in pending.pop(b)], token)
            for f in moved:
                pending.setdefault(f.bucket, []).append(f)
            left = {b for g in [group, *groups] for b in g} | {f.bucket for f in moved}
            extra = mark_bytes(mark, len(pending)) if mark else 0
            groups = _groups(table, {b: pending[b] for b in left if b in pending}, extra, len(held))
            rerouted = True
            continue
        except LeasekitError as exc:
            if not result:
                raise  # nothing is visible: the plain error ("nothing was committed; retry") holds
            unknown = group if isinstance(exc, ZooKeeperUnavailableError) else []
            left = [b for g in [group, *groups] for b in g if b not in unknown]
            remaining = _remaining(table, pending, left, rest, rerouted, operation)
            raise _partial(table, result, left, unknown, exc, remaining, operation) from exc
        for b in group:
            pending.pop(b, None)
    return result


def _remaining(
    table: TableInfo,
    pending: dict[int, list[SegmentFile]],
    left: list[int],
    rest: Callable[[list[int]], Any] | None,
    rerouted: bool,
    operation: str,
) -> Any:
    """The rows of the uncommitted buckets ``left``: by ``rest``, or read back from their files
    once a rescale routed some rows again (``rest`` knows only the first routing)."""
    if not rerouted:
        return rest(left) if rest else None
    read = table.context.warehouse.read_parquet
    rows = [read(f.rel) for b in left for f in pending.get(b, [])]
    if not rows:
        return None
    return _user_rows(table, pa.concat_tables(rows), operation == "delete")


def _bucket_bytes(table: TableInfo, bucket: int, segs: Sequence[SegmentFile]) -> int:
    """An upper bound of the bytes a bucket's ops take in an append transaction."""
    paths, tid = table.context.paths, table.table_id
    state = BucketState(_BIG, _BIG, _BIG, _BIG, _BIG, _BIG).encode()
    first = (
        op_size(Create(paths.bucket(tid, bucket), state))
        + op_size(Create(paths.log(tid, bucket)))
        + op_size(Create(paths.snapshots(tid, bucket)))
    )
    size = max(first, op_size(SetData(paths.bucket(tid, bucket), state)))
    for seg in segs:
        value = SegmentRecord(seg.rel, _BIG, _BIG, _BIG).encode()
        size += op_size(Create(paths.segment(tid, bucket, _BIG), value))
    return size


def _groups(
    table: TableInfo, by_bucket: dict[int, list[SegmentFile]], extra: int = 0, held: int = 0
) -> list[list[int]]:
    """Buckets in order, split into transactions of at most APPEND_TXN_BYTES, each with
    ``extra`` bytes of other ops and ``held`` more write guards (a bucket whose ops alone
    exceed it goes alone, and ZooKeeper's limit then refuses it)."""
    paths = table.context.paths
    # each transaction also holds the write guard and the table's change marker
    guard_bytes = op_size(guard(table.context, "0" * 32)) * (1 + held)
    guard_bytes += op_size(touch(paths.table_changes(table.table_id))) + extra
    groups: list[list[int]] = []
    group: list[int] = []
    size = ops = 0
    for bucket in sorted(by_bucket):
        segs = by_bucket[bucket]
        bucket_bytes, bucket_ops = _bucket_bytes(table, bucket, segs), 3 + len(segs)
        if group and (size + bucket_bytes > APPEND_TXN_BYTES or ops + bucket_ops > MAX_TXN_OPS):
            groups.append(group)
            group, size, ops = [], 0, 0
        if not group:
            size, ops = guard_bytes, (4 if extra else 2) + held
        group.append(bucket)
        size += bucket_bytes
        ops += bucket_ops
    if group:
        groups.append(group)
    return groups


def _partial(
    table: TableInfo,
    committed: dict[TableBucket, OffsetRange],
    left: list[int],
    unknown: list[int],
    cause: LeasekitError,
    remaining: Any,
    operation: str,
) -> PartialAppendError:
    shown = ", ".join(f"{tb.bucket} [{r.start}, {r.end})" for tb, r in list(committed.items())[:20])
    more = f" and {len(committed) - 20} more" if len(committed) > 20 else ""
    retry = (
        "table.delete(exc.remaining)" if operation == "delete" else "table.append(exc.remaining)"
    )
    if remaining is not None and not isinstance(remaining, pa.Table):
        retry = "leasekit.spark.write(exc.remaining, table)"  # a Spark DataFrame
    doubt = (
        f"; the outcome for bucket(s) {', '.join(map(str, unknown))} is unknown "
        "(ZooKeeper unreachable): "
        "compare their end offsets (exc.unknown) before writing their rows again"
        if unknown
        else ""
    )
    message = (
        f"append to {table.name!r} committed only part of its buckets: a later transaction failed "
        f"({type(cause).__name__}, see exc.__cause__); "
        f"bucket(s) {shown}{more} are committed and visible (exc.committed); bucket(s) "
        f"{', '.join(map(str, left)) or 'none'} are not (exc.uncommitted){doubt}. "
        f"Do not retry the whole write: retry with {retry}, which holds exactly the rows not "
        "committed"
    )
    return PartialAppendError(
        message,
        dict(committed),
        [TableBucket(table.name, b) for b in left],
        remaining,
        operation,
        [TableBucket(table.name, b) for b in unknown],
    )


def _bucket_ops(
    table: TableInfo, bucket: int, segs: Sequence[SegmentFile], state: BucketState | None
) -> tuple[list[Op], OffsetRange]:
    """A bucket's ops appending ``segs`` after ``state``, and the offsets they take."""
    paths, tid = table.context.paths, table.table_id
    start = 0 if state is None else state.end
    floor = 0 if state is None else max(state.ts_floor, state.stat.mtime_ms)
    offset = start
    seg_ops: list[Op] = []
    for seg in segs:
        value = SegmentRecord(seg.rel, seg.rows, seg.size, floor).encode()
        seg_ops.append(Create(paths.segment(tid, bucket, offset), value))
        offset += seg.rows
    if state is None:
        new = BucketState.new(offset, floor).encode()
        ops: list[Op] = [Create(paths.bucket(tid, bucket), new), Create(paths.log(tid, bucket))]
        ops.append(Create(paths.snapshots(tid, bucket)))
    else:
        value = state.encode(end=offset, ts_floor=floor)
        ops = [SetData(paths.bucket(tid, bucket), value, state.stat.version)]
    return ops + seg_ops, OffsetRange(start, offset)


def _commit_group(
    table: TableInfo,
    files: dict[int, list[SegmentFile]],
    tokens: tuple[str, ...],
    mark: BatchMark | None = None,
    final: bool = True,
) -> dict[TableBucket, OffsetRange]:
    ctx = table.context
    paths = ctx.paths
    tid = table.table_id
    planned: dict[TableBucket, OffsetRange] = {}

    def build() -> list[Op]:
        states = read_states(table, files)
        sealed = [b for b, state in zip(files, states) if state is not None and state.sealed]
        if sealed:
            raise _Sealed(sealed)
        ops: list[Op] = [guard(ctx, t) for t in tokens]
        planned.clear()
        for (bucket, segs), state in zip(files.items(), states):
            bucket_ops, planned[TableBucket(table.name, bucket)] = _bucket_ops(
                table, bucket, segs, state
            )
            ops += bucket_ops
        if mark:
            ops += mark_ops(ctx, mark, list(files), final)
        return [*ops, touch(paths.table_changes(tid))]  # live views hear of it (one watch)

    deadline = time.monotonic() + ctx.store.timeout * 3
    while True:
        try:
            ctx.store.commit_retrying(build, what=f"append to {table.name}")
            return dict(planned)
        except TxnConflict as exc:
            gone = [t for t in tokens if lost(ctx, exc, t)]
            if gone:  # this write's session ended, or orphan cleanup claimed a held write
                raise (lost_error if gone[0] == tokens[0] else claimed_error)(gone[0]) from None
            if exc.reason == ConflictReason.NONODE:
                raise TableNotFoundError(f"table {table.name!r} was dropped") from None
            raise
        except ZooKeeperUnavailableError:
            # The outcome is unknown: the transaction may have committed before the loss.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
            if _committed(table, planned, files):
                return dict(planned)


def _committed(
    table: TableInfo, planned: dict[TableBucket, OffsetRange], files: dict[int, list[SegmentFile]]
) -> bool:
    """Whether a group whose commit outcome is unknown did commit: its transaction is all or
    nothing, so its first bucket decides for the group (never for other groups)."""
    if not planned:
        return False
    tb, rng = next(iter(planned.items()))
    path = table.context.paths.segment(table.table_id, tb.bucket, rng.start)
    try:
        node = table.context.store.get(path)
    except ZooKeeperUnavailableError:
        return False
    return (
        node is not None and SegmentRecord.decode(node.data, path).file == files[tb.bucket][0].rel
    )
