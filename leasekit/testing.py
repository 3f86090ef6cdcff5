"""What tests and benchmarks need of leasekit's inside: the context behind a connection, a clock
they can move, and seeding (table history registered straight in ZooKeeper, in the layout
leasekit itself writes, at scales where real writes and compactions would take hours). Not for
production use: nothing here is atomic overall.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .zk import Create, Op
from .zk.chunked import ChunkArray
from .zk.formats import BucketState, LatestChunk, SegmentRecord, SnapshotRecord
from .zk.ops import chunk_ops

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .connection import Connection
    from .context import Context
    from .structs import Snapshot, TableBucket
    from .tables.info import TableInfo

__all__ = ["context", "ShiftedClock", "seed_empty_snapshots", "seed_history", "register_copies"]


def context(conn: Connection) -> Context:
    """The context behind ``conn``: its ZooKeeper store, paths, warehouse and clocks."""
    from .connection import context_of

    return context_of(conn)


class ShiftedClock:
    """A clock for ``connect(..., clock=...)`` that runs ``offset`` ahead of the ZooKeeper
    clock; tests move it with ``advance`` to make leases expire or files age without waiting.
    """

    def __init__(self, offset: Any = 0) -> None:
        self._lock = threading.Lock()
        self._offset_ms = 0
        self.advance(offset)

    def advance(self, by: Any) -> None:
        """Move the clock forward by ``by`` (a ``timedelta`` or seconds; negative goes back)."""
        ms = by // timedelta(milliseconds=1) if isinstance(by, timedelta) else round(by * 1000)
        with self._lock:
            self._offset_ms += ms

    @property
    def offset(self) -> timedelta:
        """How far ahead of the ZooKeeper clock this clock runs."""
        return timedelta(milliseconds=self._offset_ms)

    def __call__(self, zookeeper_ms: int) -> int:
        return zookeeper_ms + self._offset_ms


def _latest_arrays(ctx: Context, table: TableInfo, snapshot_id: int) -> list[Op]:
    return [
        Create(ctx.paths.latest_chunk(table.table_id, a.chunk), LatestChunk(a.ids).encode())
        for a in ChunkArray.filled(table.layout.count, snapshot_id)
    ]


def seed_empty_snapshots(ctx: Context, table: TableInfo, snapshot_id: int = 1) -> None:
    """Give every bucket of a fresh table one empty snapshot (the state at offset 0, no files)
    with id ``snapshot_id``: what lease tests and benchmarks pin."""
    paths, tid = ctx.paths, table.table_id
    state = BucketState(0, 0, 0, snapshot_id + 1, snapshot_id, 0).encode()
    snapshot = SnapshotRecord(0, 0, 0, ()).encode()
    ops: list[Op] = []
    for b in table.active:
        ops += [
            Create(paths.bucket(tid, b), state),
            Create(paths.log(tid, b)),
            Create(paths.snapshots(tid, b)),
            Create(paths.snapshot(tid, b, snapshot_id), snapshot),
        ]
    ctx.store.commit_chunked([*ops, *_latest_arrays(ctx, table, snapshot_id)])


def register_copies(
    table: TableInfo, snapshots: Mapping[TableBucket, Snapshot]
) -> dict[TableBucket, Snapshot]:
    """Register copies of another table's ``snapshots`` (as its ``snapshot()`` returned them)
    as new snapshots of ``table``, the way ``snapshot()`` registers its own: the files copied
    under a write marker's token, then committed with the bucket states (S1, S2).

    The copies are what a compaction of ``table`` would write when both tables hold the same
    records in the same buckets: the same appends, in the same order, into the same schema and
    bucket count. Fixtures that need many such tables pay Spark's compaction once.

    Returns:
        The new snapshots, per bucket registered.
    """
    import pyarrow.fs as pafs

    from .log.markers import in_flight
    from .snapshots.register import Written, register

    warehouse = table.context.warehouse
    with in_flight(table.context) as token:
        rel = f"{table.data_dir}/snapshots/{token}"
        written = {}
        for tb, snapshot in snapshots.items():
            files = []
            for location in snapshot.files:
                source, path = pafs.FileSystem.from_uri(location)
                copy = f"{rel}/_bucket={tb.bucket}/{path.rsplit('/', 1)[-1]}"
                warehouse.fs.create_dir(warehouse.fs_path(copy).rsplit("/", 1)[0])
                pafs.copy_files(path, warehouse.fs_path(copy), source, warehouse.fs)
                files.append(copy)
            written[tb.bucket] = Written(
                snapshot.log_offset, files, snapshot.row_count, snapshot.size_bytes
            )
        return register(table, written, token)


def seed_history(
    ctx: Context,
    table: TableInfo,
    snapshots: int,
    segments: int,
    rows_per_segment: int,
    *,
    file_bytes: int | None = None,
) -> None:
    """Give every bucket of a fresh table ``segments`` log segments of ``rows_per_segment``
    records (timestamp 0) and ``snapshots`` snapshots, snapshot i at log offset
    i * rows_per_segment.

    With ``file_bytes``, a placeholder file of that size is written for every snapshot and
    segment (a local warehouse only; they are listed and deleted, never read as Parquet), so
    retention lists and deletes real files; without it, no file exists.
    """
    paths, tid, rows = ctx.paths, table.table_id, rows_per_segment
    end = segments * rows
    state = BucketState(end, 0, 0, snapshots + 1, snapshots, snapshots * rows).encode()
    size = file_bytes or 0
    files: list[str] = []
    ops: list[Op] = []
    for b in table.active:
        ops += [
            Create(paths.bucket(tid, b), state),
            Create(paths.log(tid, b)),
            Create(paths.snapshots(tid, b)),
        ]
        for s in range(1, snapshots + 1):
            rel = f"{table.data_dir}/snapshots/seed-{s}/_bucket={b}/part-0.parquet"
            files.append(rel)
            ops.append(
                Create(
                    paths.snapshot(tid, b, s), SnapshotRecord(s * rows, rows, size, (rel,)).encode()
                )
            )
        for g in range(segments):
            rel = f"{table.data_dir}/log/{b}/seed-{g}.parquet"
            files.append(rel)
            ops.append(
                Create(paths.segment(tid, b, g * rows), SegmentRecord(rel, rows, size, 0).encode())
            )
    if file_bytes is not None and not ctx.warehouse.is_local:
        raise ValueError("seed_history writes files into local warehouses only")
    payload = None if file_bytes is None else b"\0" * file_bytes
    _seed(ctx, [*ops, *_latest_arrays(ctx, table, snapshots)], files, payload, len(table.active))


def _seed(
    ctx: Context, ops: list[Op], files: list[str], payload: bytes | None, buckets: int
) -> None:
    """Commit ``ops`` and, with a ``payload``, write it to ``files`` (the same number per
    bucket, bucket by bucket) on threads of their own, beside the metadata: creating a file is
    the file system's work, with the interpreter lock released."""
    with ThreadPoolExecutor(_WRITERS, thread_name_prefix="leasekit-seed") as pool:
        writes = []
        if payload is not None and files:
            step = -(-buckets // _WRITERS) * (len(files) // buckets)  # whole buckets per writer
            writes = [
                pool.submit(
                    _write_placeholders, ctx.warehouse.location, files[i : i + step], payload
                )
                for i in range(0, len(files), step)
            ]
        _commit_pipelined(ctx, ops)
        for write in writes:
            write.result()


_WRITERS = 2
"""Threads writing placeholder files, each the files of its own buckets."""


_IN_FLIGHT = 16
"""Seeding transactions sent before the oldest one's answer is awaited."""


def _commit_pipelined(ctx: Context, ops: list[Op]) -> None:
    """``ops`` in as few transactions as ZooKeeper's limits allow, sent without waiting for
    each answer (one session's requests are applied in order, so a transaction creating
    children still follows the one creating their parents); the first failure raises."""
    pending: deque[Any] = deque()
    for chunk in chunk_ops(ops):
        pending.append(ctx.store.submit(chunk))
        if len(pending) >= _IN_FLIGHT:
            pending.popleft().result()
    while pending:
        pending.popleft().result()


def _write_placeholders(location: str, files: list[str], payload: bytes) -> None:
    """Write ``payload`` to every one of ``files`` (warehouse-relative), creating each
    directory once."""
    made: set[str] = set()
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    for rel in files:
        path = os.path.join(location, rel)
        directory = os.path.dirname(path)
        if directory not in made:
            parent = os.path.dirname(directory)
            if parent in made:  # one mkdir, where makedirs would first stat the parent
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory)
            else:
                os.makedirs(directory, exist_ok=True)
            made.update((directory, parent))
        fd = os.open(path, flags, 0o644)
        try:
            os.write(fd, payload)
        finally:
            os.close(fd)
