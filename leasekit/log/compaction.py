"""Log compaction (R8): runs of adjacent small segments of a bucket merged into one segment that
holds every record with its offset, timestamp and op, in order.

A merge writes its file first, under a write-in-progress marker, then swaps it in with one
transaction that deletes the run's segment znodes (each at the version read), creates the
merged segment at the run's base offset, records the replaced files (``RetiredRecord``) and
writes the bucket's state at the version read. So it loses cleanly: against an append, which
also writes the state (the merge rebuilds its transaction and tries again), and against
retention, a drop or another merge, which delete or replace a segment of the run (the merge is
given up and its file deleted). A seal does not touch the run: a sealed log is merged like any
other. Readers that listed the replaced segments may still read their files, which stay until
the retired record is older than ``orphan.min-age`` (retention then deletes them).

Merged files keep each record's timestamp in a ``_timestamp`` column (int64, ms): an appended
segment's records all carry its commit time, so a merge of many appends needs one per record.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa

from ..errors import (
    LeadershipLostError,
    LeasekitError,
    SessionLostError,
    TableNotFoundError,
)
from ..structs import LogCompaction, LogSegment, TableBucket
from ..zk import ConflictReason, Create, Delete, Op, SetData, TxnConflict, touch
from ..zk.formats import BucketState, RetiredRecord, SegmentRecord
from .markers import guard, in_flight, lost, lost_error
from .segments import ROW_GROUP_RECORDS, STAMP_COLUMN, list_segments, log_schema, merged_schema

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["MAX_RUN", "plan_runs", "compact_log"]

MAX_RUN = 1000
"""Segments one merge replaces at most: its transaction deletes each one's znode, and its
retired record names each one's file, well inside ZooKeeper's request limit."""
READ_AHEAD = 8
"""Segment files of a run read ahead of the one being written."""
READERS = 4
"""Threads reading them: decoding releases the interpreter, so they use every core (and hide
an object store's latency)."""


def plan_runs(
    segments: Sequence[LogSegment], target_bytes: int, min_merge: int, max_run: int = MAX_RUN
) -> list[list[LogSegment]]:
    """The runs worth merging among a bucket's ``segments`` (sorted by base offset); pure.

    A run is adjacent segments each below ``target_bytes``, together at most ``target_bytes``,
    at least ``min_merge`` of them, at most ``max_run``, none larger than all the others
    together. That last rule keeps a grown segment from being rewritten for a few small ones:
    a record is rewritten only into a segment at least twice as large as the one it was in, so
    at most log2(target / smallest) times in all.
    """
    runs: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        window = _window(segments, i, target_bytes, max_run)
        if not window:
            i += 1
            continue
        sizes = [s.size_bytes for s in window]
        big = int(np.argmax(sizes))
        if sizes[big] * 2 > sum(sizes):  # the largest outweighs the rest: not worth it
            window = window[:big] if big > 0 else []
            sizes = sizes[: len(window)]
        if len(window) >= min_merge and max(sizes) * 2 <= sum(sizes):
            runs.append(window)
            i += len(window)
        else:
            i += 1
    return runs


def _window(
    segments: Sequence[LogSegment], start: int, target_bytes: int, max_run: int
) -> list[LogSegment]:
    """The longest run of adjacent small segments from ``start`` within the byte target."""
    window: list[LogSegment] = []
    total = 0
    for seg in segments[start : start + max_run]:
        if seg.size_bytes >= target_bytes or total + seg.size_bytes > target_bytes:
            break
        if window and seg.base_offset != window[-1].end_offset:
            break  # not adjacent (never expected: a bucket's offsets are dense)
        window.append(seg)
        total += seg.size_bytes
    return window


class _Merge(NamedTuple):
    """What one committed merge did."""

    replaced: int
    records: int
    bytes_read: int
    bytes_written: int


class _Lost(Exception):
    """A segment of the run changed or went while the merge was written."""


def compact_log(table: TableInfo, buckets: Iterable[int] | None = None) -> LogCompaction:
    """Merge the runs of small segments of ``buckets`` (default: every bucket the table has
    had, sealed ones too), by the table's ``log.segment.target-bytes`` and
    ``log.segment.min-merge``.

    Raises:
        TableNotFoundError: the table was dropped meanwhile.
        SessionLostError: this client's ZooKeeper session ended during a merge (nothing of that
            merge was committed).
        LeadershipLostError: run fenced (by the janitor) after its leadership ended.
        ZooKeeperUnavailableError: ZooKeeper did not answer.
    """
    props = table.properties
    target, min_merge = props["log.segment.target-bytes"], props["log.segment.min-merge"]
    counts = _segment_counts(table, range(table.layout.count) if buckets is None else buckets)
    wanted = [b for b, n in counts.items() if n >= min_merge]
    listed = list_segments(table, wanted)
    done: list[_Merge] = []
    lost_runs = 0
    for bucket in wanted:
        counts[bucket] = len(listed[bucket])
        for run in plan_runs(listed[bucket], target, min_merge):
            try:
                done.append(_merge(table, bucket, run))
            except _Lost:
                lost_runs += 1
                continue
            counts[bucket] -= len(run) - 1
    after = {TableBucket(table.name, b): n for b, n in counts.items()}
    return LogCompaction(
        table.name,
        sum(m.replaced for m in done),
        len(done),
        sum(m.records for m in done),
        sum(m.bytes_read for m in done),
        sum(m.bytes_written for m in done),
        lost_runs,
        after,
    )


def _segment_counts(table: TableInfo, buckets: Iterable[int]) -> dict[int, int]:
    """Segments of each of ``buckets`` that was ever written, by the child counts of their log
    directories (one pipelined read): a pass lists the segments of no bucket holding fewer than
    ``log.segment.min-merge``."""
    ctx = table.context
    wanted = sorted(set(buckets))
    nodes = ctx.store.get_many([ctx.paths.log(table.table_id, b) for b in wanted])
    return {b: n.stat.num_children for b, n in zip(wanted, nodes) if n is not None}


def _merge(table: TableInfo, bucket: int, run: list[LogSegment]) -> _Merge:
    """Write ``run`` as one file and swap it in (``_Lost`` when the run changed meanwhile)."""
    ctx = table.context
    warehouse = ctx.warehouse
    with in_flight(ctx) as token:
        rel = f"{table.data_dir}/log/{bucket}/{token}-{uuid.uuid4().hex[:8]}.parquet"
        try:
            with _parts(table, run) as parts:
                size = warehouse.write_parquet_parts(
                    rel, merged_schema(table), parts, ROW_GROUP_RECORDS
                )
        except _Lost:  # a segment's file went: retention took it meanwhile
            warehouse.delete_files([rel])
            raise
        rows = sum(s.end_offset - s.base_offset for s in run)
        first = run[0].first_timestamp_ms
        stamps = (run[0].timestamp_ms if first is None else first, run[-1].timestamp_ms)
        record = SegmentRecord(rel, rows, size, stamps[1], stamps)
        try:
            _swap(table, bucket, run, record, token)
        except (_Lost, TxnConflict, SessionLostError, LeadershipLostError, TableNotFoundError):
            with contextlib.suppress(LeasekitError):  # surely not committed: its file goes
                warehouse.delete_files([rel])
            raise
        # Any other error (ZooKeeper unreachable mid-commit) may have come after the commit:
        # the file stays, referenced if it was committed, else taken by orphan cleanup (R4).
    return _Merge(len(run), rows, sum(s.size_bytes for s in run), size)


@contextlib.contextmanager
def _parts(table: TableInfo, run: list[LogSegment]) -> Iterator[Iterator[pa.Table]]:
    """The records of ``run`` in order with their timestamps, in pieces of about a row group
    each (one column of timestamps built per piece, not per file), the files read a few ahead
    on threads."""
    warehouse = table.context.warehouse
    columns = [f.name for f in log_schema(table)]
    schema = merged_schema(table)
    plain = log_schema(table)

    def read(seg: LogSegment) -> tuple[pa.Table, np.ndarray]:
        rel = warehouse.relative(seg.file)
        stored = columns if seg.first_timestamp_ms is None else [*columns, STAMP_COLUMN]
        try:
            data = warehouse.open_parquet(rel).read(columns=stored)
        except FileNotFoundError:  # an OSError: the writer would report it as an I/O error
            raise _Lost from None
        if seg.first_timestamp_ms is None:
            return data, np.full(data.num_rows, seg.timestamp_ms, dtype=np.int64)
        stamps = data.column(STAMP_COLUMN).to_numpy()
        return data.drop_columns([STAMP_COLUMN]), stamps

    def piece(held: list[tuple[pa.Table, np.ndarray]]) -> pa.Table:
        data = pa.concat_tables([d if d.schema.equals(plain) else d.cast(plain) for d, _ in held])
        stamps = pa.array(np.concatenate([t for _, t in held]))
        return data.append_column(schema.field(STAMP_COLUMN), stamps)

    def pieces(tables: Iterator[tuple[pa.Table, np.ndarray]]) -> Iterator[pa.Table]:
        held: list[tuple[pa.Table, np.ndarray]] = []
        rows = 0
        for data, stamps in tables:
            held.append((data, stamps))
            rows += data.num_rows
            if rows >= ROW_GROUP_RECORDS:
                yield piece(held)
                held, rows = [], 0
        if held:
            yield piece(held)

    pool = ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="leasekit-merge")

    def ordered() -> Iterator[tuple[pa.Table, np.ndarray]]:
        pending = [pool.submit(read, seg) for seg in run[:READ_AHEAD]]
        for i in range(len(run)):
            data = pending[i].result()
            if i + READ_AHEAD < len(run):
                pending.append(pool.submit(read, run[i + READ_AHEAD]))
            pending[i] = None  # type: ignore[call-overload]  # let it be collected
            yield data

    try:
        yield pieces(ordered())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _swap(
    table: TableInfo, bucket: int, run: list[LogSegment], record: SegmentRecord, token: str
) -> None:
    """Replace ``run`` by ``record`` in one transaction, rebuilt while only appends conflict."""
    ctx = table.context
    paths, tid = ctx.paths, table.table_id
    seg_paths = [paths.segment(tid, bucket, s.base_offset) for s in run]
    files = tuple(ctx.warehouse.relative(s.file) for s in run)
    retired = RetiredRecord(files, sum(s.size_bytes for s in run), run[0].base_offset,
                            run[-1].end_offset, record.file)  # fmt: skip

    def build() -> list[Op]:
        state_path = paths.bucket(tid, bucket)
        nodes = ctx.store.get_many([state_path, paths.retired(tid, bucket), *seg_paths])
        if nodes[0] is None:
            raise _Lost
        state = BucketState.decode(nodes[0], state_path)
        ops: list[Op] = [guard(ctx, token)]
        for path, node, file in zip(seg_paths, nodes[2:], files):
            if node is None or SegmentRecord.decode(node.data, path).file != file:
                raise _Lost  # retention, a drop or another merge took it
            ops.append(Delete(path, node.stat.version))
        ops.append(Create(seg_paths[0], record.encode()))
        ops.append(SetData(state_path, state.encode(), state.stat.version))
        if nodes[1] is None:
            ops.append(Create(paths.retired(tid, bucket)))
        retired_path = paths.retired_run(tid, bucket, run[0].base_offset, token)
        ops.append(Create(retired_path, retired.encode()))
        return [*ops, touch(paths.table_changes(tid))]

    try:
        ctx.store.commit_retrying(build, what=f"merge segments of {table.name} bucket {bucket}")
    except TxnConflict as exc:
        if lost(ctx, exc, token):
            raise lost_error(token) from None  # the session ended: nothing was committed
        if exc.reason == ConflictReason.NONODE:
            if ctx.store.exists(paths.table_data(tid)) is None:
                raise TableNotFoundError(f"table {table.name!r} was dropped") from None
            raise _Lost from None
        raise
