"""The lease store's writes that pin: acquire (read, plan transactions, apply them), acquire of
the latest snapshots, renew, and the validity check of reads (a pin is a child znode of the
pinned snapshot's znode, so pinning and deleting exclude each other)."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping
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
from ..log.state import read_states
from ..snapshots.catalog import read_latest
from ..snapshots.cover import cover
from ..structs import AcquireResult, TableBucket
from ..tables import fence
from ..tables.catalog import load_table
from ..tables.info import TableInfo
from ..validate import check_id, check_int
from ..zk import (
    ConflictReason,
    Create,
    Node,
    TxnConflict,
    to_datetime,
)
from ..zk.chunked import chunk_of, group_by_chunk
from ..zk.formats import EMPTY_PIN, LIVE, LeaseRecord, PinChunk
from .plan import Batch, Key, Pin, State, applied, lease_ops, plan_batch

if TYPE_CHECKING:
    from ..context import Context

__all__ = [
    "acquire",
    "acquire_with_time",
    "acquire_latest",
    "renew",
    "renew_with_time",
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


def acquire(ctx: Context, lease_id: str, snapshot_ids: object, duration: Any) -> AcquireResult:
    """Pin ``{TableBucket: snapshot_id}`` for the lease, creating it on first use (Fluss's
    shape): the id is checked first, then the duration and the snapshot ids (L1, L2)."""
    check_id(lease_id)
    duration_ms = lease_duration_ms(ctx, duration)
    return _pin(ctx, lease_id, check_snapshot_ids(ctx, snapshot_ids), duration_ms)[0]


def acquire_latest(
    ctx: Context, lease_id: str, tables: Any, duration_ms: int, *, holder: str = ""
) -> tuple[AcquireResult, int]:
    """Pin the newest snapshot of every active bucket of ``tables`` (L6), or, for one with none
    yet that a rescale made, the newest snapshots of the ancestors its state is built from (K4:
    ``acquired`` then holds sealed buckets); also the commit time (ms). An active bucket with
    neither is pinned as empty (id 0) when neither its log nor its ancestors' hold a record
    (L15), else unavailable with -1. A bucket whose newest snapshot goes while pinning is looked
    up again. ``holder``: as in ``acquire_with_time``."""
    check_id(lease_id)
    wanted: dict[TableInfo, dict[int, int]] = {}
    missing: dict[TableBucket, int] = {}
    for table in table_list(ctx, tables):
        latest = read_latest(table)
        used = cover(table.layout, latest)
        wanted[table] = {b: latest[b] for b in used.used}
        empty = empty_buckets(table, used.uncovered)
        wanted[table].update(dict.fromkeys(empty, EMPTY_PIN))
        missing.update({TableBucket(table.name, b): -1 for b in used.uncovered if b not in empty})
    result, committed_ms = _pin(ctx, lease_id, wanted, duration_ms, latest=True, holder=holder)
    acquired = {tb: max(sid, 0) for tb, sid in result.acquired.items()}
    return result._replace(acquired=acquired, unavailable={**missing, **result.unavailable}), (
        committed_ms
    )


def empty_buckets(table: TableInfo, buckets: Iterable[int]) -> set[int]:
    """Which of ``buckets`` (none with a snapshot standing for it) hold an empty state: nothing
    in their log, nor in their ancestors' logs (L15). One pipelined read of those logs."""
    todo, lineage = list(buckets), set()
    while todo:
        b = todo.pop()
        if b not in lineage:
            lineage.add(b)
            todo.extend(table.layout.parents(b))
    if not lineage:
        return set()
    order = sorted(lineage)
    ends = {b: (s.end if s else 0) for b, s in zip(order, read_states(table, order))}

    def empty(b: int) -> bool:
        return ends[b] == 0 and all(empty(p) for p in table.layout.parents(b))

    return {b for b in buckets if empty(b)}


def acquire_with_time(
    ctx: Context, lease_id: str, snapshot_ids: object, duration_ms: int, *, holder: str = ""
) -> tuple[AcquireResult, int]:
    """Pin ``{TableBucket: snapshot_id}`` for the lease, creating it on first use (L3, L4, L8);
    also returns the ZooKeeper time of the last commit. The id is checked first (L1).
    ``holder``: the token of the keepalive acquiring (recorded in the lease record for the
    inventory, M4), "" for none."""
    check_id(lease_id)
    return _pin(ctx, lease_id, check_snapshot_ids(ctx, snapshot_ids), duration_ms, holder=holder)


def _pin(
    ctx: Context,
    lease_id: str,
    wanted: Mapping[TableInfo, Mapping[int, int]],
    duration_ms: int,
    *,
    latest: bool = False,
    holder: str = "",
) -> tuple[AcquireResult, int]:
    """Pin ``{table: {bucket: snapshot_id}}`` for the lease whose id was checked; also the
    ZooKeeper time of the last commit.

    One pipelined read, then transactions as large as ZooKeeper takes, each carrying the pins
    of whole pin arrays together with those arrays and the lease record (whose mtime becomes
    the acquire time). A snapshot that is missing, or deleted while we pin, is reported
    unavailable; with ``latest`` (acquire_latest) its bucket's newest snapshot is looked up
    again (L6).
    """
    tables = {t.table_id: t for t in wanted}
    work: dict[Key, dict[int, int]] = {
        (table.table_id, chunk): {b: buckets[b] for b in group}
        for table, buckets in wanted.items()
        for chunk, group in group_by_chunk(buckets).items()
    }
    acquired: dict[TableBucket, int] = {}
    unavailable: dict[TableBucket, int] = {}
    pending = sorted(work)
    state: State | None = None
    ahead: Batch | None = None
    expires_ms = committed_ms = 0
    while pending or not committed_ms:
        if state is None:
            state, ahead = _read(ctx, lease_id, tables, pending), None
        head = lease_ops(ctx, lease_id, state, duration_ms, holder)
        if ahead is None:
            ahead = plan_batch(ctx, lease_id, state.chunks, pending, work, tables, head)
        batch, sent = ahead, ctx.store.submit(head + ahead.ops)
        done = set(batch.keys)
        pending = [k for k in pending if k not in done]
        # Plan the next transaction while ZooKeeper works; it is sent only once this one
        # committed, with the lease's ops of the state after it.
        ahead = plan_batch(ctx, lease_id, state.chunks, pending, work, tables, head)
        try:
            results = sent.result()
        except TxnConflict as exc:
            pins = {len(head) + i: pin for i, pin in batch.pins.items()}
            _resolve(ctx, exc, pins, work, tables, lease_id, unavailable, latest)
            state, pending = None, sorted({*pending, *batch.keys})
            continue
        state, committed_ms, expires_ms = applied(ctx, state, batch, results, duration_ms, holder)
        for key in batch.keys:
            name = tables[key[0]].name
            acquired.update({TableBucket(name, b): sid for b, sid in work[key].items()})
    return AcquireResult(acquired, unavailable, to_datetime(expires_ms)), committed_ms


def _read(ctx: Context, lease_id: str, tables: dict[str, TableInfo], pending: list[Key]) -> State:
    """The lease record, the tables' fences and the pending pin arrays, in one pipelined read
    (again, after a short back-off, while a drop of one of the tables is deciding)."""
    paths = ctx.paths
    rec_path = paths.lease(lease_id)
    tids = sorted({tid for tid, _ in pending})
    fence_paths = [p for tid in tids for p in (paths.table_data(tid), paths.dropped_table(tid))]
    chunk_paths = [paths.lease_chunk(lease_id, tid, c) for tid, c in pending]
    wait = 0.005
    while True:
        now, nodes = ctx.read_with_clock([rec_path, *fence_paths, *chunk_paths])
        record = _check_live(ctx, nodes[0], rec_path, now, creating=True)
        fenced = _fences(ctx, [tables[t] for t in tids], nodes[1 : 1 + len(fence_paths)], now)
        if fenced is not None:
            break
        time.sleep(random.uniform(0, wait))  # a drop is deciding: it may be refused, or not
        wait = min(wait * 2, 0.1)
    chunks = {
        key: PinChunk.empty(key[0], key[1], tables[key[0]].name)
        if n is None
        else PinChunk.decode(n, p, key[0], key[1])
        for key, p, n in zip(pending, chunk_paths, nodes[1 + len(fence_paths) :])
    }
    return State(record, fenced, chunks)


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
    pin_ops: dict[int, Pin],
    work: dict[Key, dict[int, int]],
    tables: dict[str, TableInfo],
    lease_id: str,
    unavailable: dict[TableBucket, int],
    latest: bool,
) -> None:
    """Adjust the work after a failed acquire transaction; the caller re-reads and retries."""
    if exc.index == 0 and exc.reason == ConflictReason.NONODE:
        raise LeaseExpiredError(f"lease {lease_id!r} was dropped or expired while acquiring")
    missing_pin = isinstance(exc.op, Create) and exc.reason == ConflictReason.NONODE
    if not (missing_pin and exc.index in pin_ops):
        return  # a concurrent change to the lease or a pin: re-read and rebuild
    # One pinned snapshot is gone; find every missing one of this batch in one pipelined read.
    targets = list(pin_ops.values())
    present = ctx.store.get_many([ctx.paths.snapshot(*target) for target in targets])
    retry: dict[TableInfo, list[int]] = {}
    for (tid, bucket, sid), node in zip(targets, present):
        if node is not None:
            continue
        table = tables[tid]
        _wanted(work, table, bucket).pop(bucket, None)
        unavailable[TableBucket(table.name, bucket)] = sid
        if latest:
            retry.setdefault(table, []).append(bucket)
    for table, buckets in retry.items():
        for bucket, sid in read_latest(table, buckets).items():
            tb = TableBucket(table.name, bucket)
            if sid != unavailable.get(tb):
                unavailable.pop(tb, None)
                _wanted(work, table, bucket)[bucket] = sid


def _wanted(work: dict[Key, dict[int, int]], table: TableInfo, bucket: int) -> dict[int, int]:
    """The wanted snapshot ids of the pin array of ``table`` that holds ``bucket``."""
    return work[(table.table_id, chunk_of(bucket))]


def table_list(ctx: Context, tables: Any) -> list[TableInfo]:
    """Tables named by a name, a Table, or an iterable of those."""
    if isinstance(tables, (str, TableInfo)):
        tables = [tables]
    if not isinstance(tables, Iterable):
        raise InvalidTypeError("tables must be a table name or an iterable of table names")
    return [load_table(ctx, t) for t in tables]


# -- renew and validity -----------------------------------------------------------------


def renew(ctx: Context, lease_id: str, duration: Any) -> int:
    """Extend the lease by ``duration`` (Fluss's shape); returns the new expiry (ms). Only
    extends, never shortens (L7, L8). The id is checked first, then the duration (L1, L2)."""
    check_id(lease_id)
    return _renew(ctx, lease_id, lease_duration_ms(ctx, duration), "")[0]


def renew_with_time(
    ctx: Context, lease_id: str, duration_ms: int | None, *, holder: str = ""
) -> tuple[int, int]:
    """Extend the lease by ``duration_ms`` (None: its own duration); the new expiry and the
    ZooKeeper time of the renewal (ms). ``holder``: the token of the keepalive renewing, ""
    for none."""
    check_id(lease_id)
    return _renew(ctx, lease_id, duration_ms, holder)


def _renew(ctx: Context, lease_id: str, duration_ms: int | None, holder: str) -> tuple[int, int]:
    path = ctx.paths.lease(lease_id)
    while True:
        now, (node,) = ctx.read_with_clock([path])
        record = _check_live(ctx, node, path, now)
        if record is None:  # pragma: no cover - _check_live raises for a missing lease
            raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
        duration = record.duration_ms if duration_ms is None else duration_ms
        try:
            stat = ctx.store.set(
                path,
                record.renewed(duration, ctx.owner, holder=holder).encode(),
                record.stat.version,
            )
        except TxnConflict as exc:
            if exc.reason == ConflictReason.NONODE:
                raise LeaseExpiredError(
                    f"lease {lease_id!r} was dropped or expired while renewing"
                ) from None
            continue
        return max(record.expires_ms, stat.mtime_ms + duration), stat.mtime_ms


def validity(ctx: Context, lease_id: str) -> LeaseRecord:
    """The live, unexpired lease record (for reads, L12): ``LeaseNotFoundError`` when there is
    none (never acquired, or dropped, or reclaimed after it expired; L8), ``LeaseExpiredError``
    when it expired or is being dropped."""
    check_id(lease_id)
    path = ctx.paths.lease(lease_id)
    now, (node,) = ctx.read_with_clock([path])
    if node is None:
        raise LeaseNotFoundError(
            f"lease {lease_id!r} does not exist: it was never acquired, or it was dropped or "
            "reclaimed after it expired"
        )
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
        sid = check_int(sid, f"snapshot id for {tb}")
        if sid < 1:
            raise InvalidArgumentError(f"snapshot ids start at 1, got {sid} for {tb}")
        by_name.setdefault(tb.table, {})[tb.bucket] = sid
    out: dict[TableInfo, dict[int, int]] = {}
    for name, wanted in by_name.items():
        table = load_table(ctx, name)
        out[table] = {table.bucket_number(b): sid for b, sid in wanted.items()}
    return out
