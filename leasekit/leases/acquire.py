"""The lease store's writes that pin: acquire and renew, and the validity check of reads (a pin
is a child znode of the pinned snapshot's znode, so pinning and deleting exclude each other)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..durations import parse_duration, to_ms
from ..errors import (
    InvalidArgumentError,
    InvalidDurationError,
    InvalidTypeError,
    LeaseExpiredError,
    LeaseNotFoundError,
    TableNotFoundError,
)
from ..structs import AcquireResult, TableBucket
from ..tables import fence
from ..tables.catalog import load_table
from ..validate import check_id
from ..zk import (
    MAX_REQUEST_BYTES,
    MAX_TXN_OPS,
    ConflictReason,
    Create,
    Delete,
    Node,
    Op,
    SetData,
    Stat,
    TxnConflict,
    op_size,
    to_datetime,
)
from ..zk.formats import LIVE, LeaseRecord, PinChunk
from ..zk.paths import CHUNK

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

ACQUIRE_TXN_BYTES = int(MAX_REQUEST_BYTES * 0.9)
"""Acquire transactions may fill most of a request: ``op_size`` already bounds each op from above."""

__all__ = [
    "acquire",
    "acquire_at",
    "renew",
    "renew_at",
    "validity",
    "lease_duration_ms",
    "check_snapshot_ids",
]


def lease_duration_ms(ctx: Context, duration: Any) -> int:
    """L2: a duration > 0 and <= the namespace's lease.max-duration, in ms (no I/O)."""
    value = parse_duration(duration, what="lease duration")
    if value <= timedelta(0):
        raise InvalidDurationError(f"lease duration must be greater than 0, got {duration!r}")
    limit = ctx.cached_settings()["lease.max-duration"]
    if value > limit:
        raise InvalidDurationError(
            f"lease duration {duration!r} exceeds lease.max-duration ({limit})"
        )
    return to_ms(value)


# -- acquire ------------------------------------------------------------------------------


def acquire(
    ctx: Context,
    lease_id: str,
    wanted: Mapping[TableInfo, Mapping[int, int]],
    duration_ms: int,
    *,
    refresh: Callable[[TableInfo, list[int]], dict[int, int]] | None = None,
) -> AcquireResult:
    """Pin ``{table: {bucket: snapshot_id}}`` for the lease (see ``acquire_at``)."""
    return acquire_at(ctx, lease_id, wanted, duration_ms, refresh=refresh)[0]


def acquire_at(
    ctx: Context,
    lease_id: str,
    wanted: Mapping[TableInfo, Mapping[int, int]],
    duration_ms: int,
    *,
    refresh: Callable[[TableInfo, list[int]], dict[int, int]] | None = None,
) -> tuple[AcquireResult, int]:
    """Pin ``{table: {bucket: snapshot_id}}`` for the lease, creating it on first use (L3, L4, L8);
    also returns the ZooKeeper time of the last commit.

    One pipelined read, then transactions of up to MAX_TXN_OPS ops, each carrying the pins of
    whole chunks together with those chunks' arrays and the lease record (whose mtime becomes
    the acquire time). A snapshot that is missing, or deleted while we pin, is reported
    unavailable; with ``refresh`` (acquire_latest) its bucket is looked up again (L6).
    """
    check_id(lease_id)
    paths, store = ctx.paths, ctx.store
    rec_path = paths.lease(lease_id)
    tables = {t.table_id: t for t in wanted}
    work: dict[tuple[str, int], dict[int, int]] = {}
    for table, buckets in wanted.items():
        for bucket, sid in buckets.items():
            work.setdefault((table.table_id, bucket // CHUNK), {})[bucket] = sid
    acquired: dict[TableBucket, int] = {}
    unavailable: dict[TableBucket, int] = {}
    pending = sorted(work)
    expires_ms = committed_ms = 0
    stale = True
    record: LeaseRecord | None = None
    chunks: dict[tuple[str, int], PinChunk] = {}
    fences: dict[str, int] = {}
    first = True
    wait = 0.005
    while pending or first:
        if stale:
            tids = sorted({tid for tid, _ in pending})
            fence_paths = [
                p for tid in tids for p in (paths.table_data(tid), paths.dropped_table(tid))
            ]
            chunk_paths = [paths.lease_chunk(lease_id, tid, c) for tid, c in pending]
            now, nodes = ctx.read_with_clock([rec_path, *fence_paths, *chunk_paths])
            record = _check_live(ctx, nodes[0], rec_path, now, creating=True)
            fenced = _fences(
                ctx, [tables[tid] for tid in tids], nodes[1 : 1 + len(fence_paths)], now
            )
            if fenced is None:  # a drop is deciding: it may be refused, or the table goes
                time.sleep(random.uniform(0, wait))
                wait = min(wait * 2, 0.1)
                continue
            fences = fenced
            chunks = {
                key: PinChunk.empty(key[0], key[1], tables[key[0]].name)
                if n is None
                else PinChunk.decode(n, p, key[0], key[1])
                for key, p, n in zip(pending, chunk_paths, nodes[1 + len(fence_paths) :])
            }
            stale = False
        if record is None:  # the SetData gives the new record's stat: its mtime is the acquire time
            value = LeaseRecord(duration_ms, 0, ctx.owner, LIVE).encode()
            ops: list[Op] = [
                Create(rec_path, value),
                SetData(rec_path, value, 0),
                Create(paths.lease_pins(lease_id)),
            ]
        else:
            ops = [
                SetData(
                    rec_path, record.renewed(duration_ms, ctx.owner).encode(), record.stat.version
                )
            ]
        ops += [fence.fence_check(ctx, tid, version) for tid, version in fences.items()]
        pin_ops: dict[int, tuple[TableBucket, int]] = {}
        chunk_ops_at: dict[tuple[str, int], tuple[int, list[int]]] = {}
        batch: list[tuple[str, int]] = []
        txn_bytes = sum(op_size(op) for op in ops)
        for key in pending:
            ch, table = chunks[key], tables[key[0]]
            ids = list(ch.ids)
            new_ops: list[Op] = []
            new_pins: dict[int, tuple[TableBucket, int]] = {}
            for bucket, sid in sorted(work[key].items()):
                current = ids[bucket % CHUNK]
                if current == sid:
                    continue
                new_pins[len(ops) + len(new_ops)] = (TableBucket(table.name, bucket), sid)
                new_ops.append(Create(paths.pin(key[0], bucket, sid, lease_id)))
                if current:
                    new_ops.append(Delete(paths.pin(key[0], bucket, current, lease_id)))
                ids[bucket % CHUNK] = sid
            new_bytes = sum(op_size(op) for op in new_ops) + 2 * CHUNK * 8
            if batch and (
                len(ops) + len(new_ops) + 1 > MAX_TXN_OPS
                or txn_bytes + new_bytes > ACQUIRE_TXN_BYTES
            ):
                break
            txn_bytes += new_bytes
            batch.append(key)
            if ids != ch.ids:
                chunk_path = paths.lease_chunk(lease_id, key[0], key[1])
                value = ch._replace(table=table.name, ids=ids).encode()
                new_ops.append(
                    Create(chunk_path, value)
                    if ch.stat is None
                    else SetData(chunk_path, value, ch.stat.version)
                )
                chunk_ops_at[key] = (len(ops) + len(new_ops) - 1, ids)
            ops += new_ops
            pin_ops.update(new_pins)
        try:
            results = store.commit(ops)
        except TxnConflict as exc:
            _resolve(ctx, exc, pin_ops, work, tables, lease_id, unavailable, refresh)
            stale = True
            continue
        first = False
        stat = next(r for r in results if isinstance(r, Stat))
        committed_ms = stat.mtime_ms
        expires_ms = max(record.expires_ms if record else 0, stat.mtime_ms + duration_ms)
        record = LeaseRecord(duration_ms, record.expires_ms if record else 0, ctx.owner, LIVE, stat)
        for key in batch:
            if key in chunk_ops_at:
                index, ids = chunk_ops_at[key]
                version = results[index].version if isinstance(results[index], Stat) else 0
                old = chunks[key]
                chunks[key] = old._replace(
                    ids=ids, stat=(old.stat or stat)._replace(version=version)
                )
            table = tables[key[0]]
            for bucket, sid in work[key].items():
                acquired[TableBucket(table.name, bucket)] = sid
        pending = [k for k in pending if k not in batch]
    return AcquireResult(acquired, unavailable, to_datetime(expires_ms)), committed_ms


def _fences(
    ctx: Context, tables: list[TableInfo], nodes: list[Node | None], now: int
) -> dict[str, int] | None:
    """Data znode version per table for the acquire's fence checks; None while a drop is
    deciding; ``TableNotFoundError`` once a drop committed. ``nodes``: data znode and drop
    marker of each table."""
    out: dict[str, int] = {}
    waiting = False
    for table, data, dropped in zip(tables, nodes[::2], nodes[1::2]):
        if data is None or dropped is not None:
            raise TableNotFoundError(f"table {table.name!r} was dropped")
        if fence.is_marked(data):
            if ctx.clock(now) - data.stat.mtime_ms > fence.STALE_MARK_MS:
                fence.unmark(ctx, table.table_id, data.stat.version)  # its dropper died
            waiting = True
        out[table.table_id] = data.stat.version
    return None if waiting else out


def _check_live(
    ctx: Context, node: Node | None, path: str, now: int, *, creating: bool = False
) -> LeaseRecord | None:
    lease_id = path.rsplit("/", 1)[1]
    if node is None:
        if creating:
            return None
        raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
    record = LeaseRecord.decode(node, path)
    if record.state != LIVE:
        raise LeaseExpiredError(f"lease {lease_id!r} is being dropped")
    if ctx.clock(now) > record.expires_ms:
        raise LeaseExpiredError(
            f"lease {lease_id!r} expired at {to_datetime(record.expires_ms).isoformat()}"
        )
    return record


def _resolve(
    ctx: Context,
    exc: TxnConflict,
    pin_ops: dict[int, tuple[TableBucket, int]],
    work: dict[tuple[str, int], dict[int, int]],
    tables: dict[str, TableInfo],
    lease_id: str,
    unavailable: dict[TableBucket, int],
    refresh: Callable[[TableInfo, list[int]], dict[int, int]] | None,
) -> None:
    """Adjust the work after a failed acquire transaction; the caller re-reads and retries."""
    paths = ctx.paths
    if exc.index == 0 and exc.reason == ConflictReason.NONODE:
        raise LeaseExpiredError(f"lease {lease_id!r} was dropped or expired while acquiring")
    if not (
        isinstance(exc.op, Create) and exc.reason == ConflictReason.NONODE and exc.index in pin_ops
    ):
        return  # a concurrent change to the lease or a pin: re-read and rebuild
    # One pinned snapshot is gone; find every missing one of this batch in one pipelined read.
    by_id = {t.name: t for t in tables.values()}
    targets = list(pin_ops.values())
    snap_paths = [paths.snapshot(by_id[tb.table].table_id, tb.bucket, sid) for tb, sid in targets]
    present = ctx.store.get_many(snap_paths)
    missing = [(tb, sid) for (tb, sid), node in zip(targets, present) if node is None]
    retry: dict[TableInfo, list[int]] = {}
    for tb, sid in missing:
        table = by_id[tb.table]
        work[(table.table_id, tb.bucket // CHUNK)].pop(tb.bucket, None)
        unavailable[tb] = sid
        if refresh is not None:
            retry.setdefault(table, []).append(tb.bucket)
    for table, buckets in retry.items():
        for bucket, sid in refresh(table, buckets).items():
            tb = TableBucket(table.name, bucket)
            if sid != unavailable.get(tb):
                unavailable.pop(tb, None)
                work[(table.table_id, bucket // CHUNK)][bucket] = sid


# -- renew and validity -----------------------------------------------------------------


def renew(ctx: Context, lease_id: str, duration_ms: int | None) -> int:
    """Extend the lease; returns the new expiry (ms). Only extends, never shortens (L7, L8)."""
    return renew_at(ctx, lease_id, duration_ms)[0]


def renew_at(ctx: Context, lease_id: str, duration_ms: int | None) -> tuple[int, int]:
    """``renew``, also returning the ZooKeeper time of the renewal (ms)."""
    check_id(lease_id)
    path = ctx.paths.lease(lease_id)
    while True:
        now, (node,) = ctx.read_with_clock([path])
        record = _check_live(ctx, node, path, now)
        if record is None:  # pragma: no cover - _check_live raises for a missing lease
            raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
        duration = record.duration_ms if duration_ms is None else duration_ms
        try:
            stat = ctx.store.set(
                path, record.renewed(duration, ctx.owner).encode(), record.stat.version
            )
        except TxnConflict as exc:
            if exc.reason == ConflictReason.NONODE:
                raise LeaseExpiredError(
                    f"lease {lease_id!r} was dropped or expired while renewing"
                ) from None
            continue
        return max(record.expires_ms, stat.mtime_ms + duration), stat.mtime_ms


def validity(ctx: Context, lease_id: str) -> LeaseRecord:
    """The live, unexpired lease record; ``LeaseExpiredError`` otherwise (for reads, L12)."""
    check_id(lease_id)
    path = ctx.paths.lease(lease_id)
    now, (node,) = ctx.read_with_clock([path])
    if node is None:
        raise LeaseExpiredError(f"lease {lease_id!r} does not exist (expired or dropped)")
    record = _check_live(ctx, node, path, now)
    if record is None:  # pragma: no cover
        raise LeaseExpiredError(f"lease {lease_id!r} does not exist")
    return record


def check_snapshot_ids(ctx: Context, snapshot_ids: object) -> dict[TableInfo, dict[int, int]]:
    """Validate ``{TableBucket: snapshot_id}`` and group it by table (tables looked up once)."""
    if not isinstance(snapshot_ids, Mapping):
        raise InvalidTypeError("snapshot_ids must be a mapping of TableBucket to snapshot id")
    by_name: dict[str, dict[int, int]] = {}
    for tb, sid in snapshot_ids.items():
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(
                f"snapshot_ids keys must be TableBucket, not {type(tb).__name__}"
            )
        if isinstance(sid, bool) or not isinstance(sid, int):
            raise InvalidTypeError(f"snapshot id for {tb} must be an int, not {type(sid).__name__}")
        if sid < 1:
            raise InvalidArgumentError(f"snapshot ids start at 1, got {sid} for {tb}")
        by_name.setdefault(tb.table, {})[tb.bucket] = sid
    out: dict[TableInfo, dict[int, int]] = {}
    for name, wanted in by_name.items():
        table = load_table(ctx, name)
        out[table] = {table.bucket_number(b): sid for b, sid in wanted.items()}
    return out
