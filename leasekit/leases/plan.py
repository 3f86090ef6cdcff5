"""Planning an acquire's transactions (no I/O): from what was read of the lease, its pin
arrays and the tables' fences, the next transaction of pins that fits one ZooKeeper request,
and what is known once it committed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..tables import fence
from ..zk import MAX_REQUEST_BYTES, MAX_TXN_OPS, Create, Delete, Op, SetData, Stat
from ..zk.formats import EMPTY_PIN, LIVE, LeaseRecord, PinChunk

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = [
    "Key",
    "Pin",
    "State",
    "Batch",
    "lease_ops",
    "plan_batch",
    "applied",
    "ACQUIRE_TXN_BYTES",
]

ACQUIRE_TXN_BYTES = int(MAX_REQUEST_BYTES * 0.9)
"""Acquire transactions may fill most of a request: ``op_size`` already bounds each op from
above."""
ACQUIRE_TXN_OPS = 2 * MAX_TXN_OPS
"""ZooKeeper bounds a request's bytes, not its ops: acquire transactions are sized by bytes."""

Key = tuple[str, int]
"""A pin array: (table id, chunk)."""
Pin = tuple[str, int, int]
"""A pin: (table id, bucket, snapshot id)."""


class State(NamedTuple):
    """What acquiring knows of ZooKeeper: the lease record (None before it exists), the data
    znode version of each table (its fence) and the lease's pin arrays being changed."""

    record: LeaseRecord | None
    fences: dict[str, int]
    chunks: dict[Key, PinChunk]


class Batch(NamedTuple):
    """The pins of one transaction: whole pin arrays, each with the creates (and deletes, for
    moved pins) of its pins, then its own write. Sent after the lease's ops (``lease_ops``):
    indices here count from the first op after them."""

    ops: list[Op]
    keys: list[Key]
    """The pin arrays the transaction brings up to date."""
    pins: dict[int, Pin]
    """The pin each pin create of ``ops`` (by index) makes."""
    arrays: dict[Key, tuple[int, list[int]]]
    """Index in ``ops`` of the write of each changed pin array, with its new ids."""


def lease_ops(
    ctx: Context, lease_id: str, state: State, duration_ms: int, holder: str = ""
) -> list[Op]:
    """The ops that write the lease record (creating it and its pins parent on first use) and
    check the fences: the first ops of every transaction of an acquire. ``holder``: the token
    of the keepalive acquiring, "" for none."""
    paths, record = ctx.paths, state.record
    rec_path = paths.lease(lease_id)
    if record is None:  # the SetData gives the new record's stat: its mtime is the acquire time
        value = LeaseRecord(duration_ms, 0, ctx.owner, LIVE, None, holder).encode()
        ops: list[Op] = [
            Create(rec_path, value),
            SetData(rec_path, value, 0),
            Create(paths.lease_pins(lease_id)),
        ]
    else:
        value = record.renewed(duration_ms, ctx.owner, holder=holder).encode()
        ops = [SetData(rec_path, value, record.stat.version if record.stat else -1)]
    return ops + [fence.fence_check(ctx, tid, v) for tid, v in state.fences.items()]


def plan_batch(
    ctx: Context,
    lease_id: str,
    chunks: dict[Key, PinChunk],
    pending: list[Key],
    work: dict[Key, dict[int, int]],
    tables: dict[str, TableInfo],
    head: list[Op],
) -> Batch:
    """The pins of the next transaction: as many pending pin arrays (in order) as fit one
    ZooKeeper request after the lease's ops ``head``; at least one."""
    size_of = ctx.store.ops_size
    batch = Batch([], [], {}, {})
    size = size_of(head)
    for key in pending:
        first = len(batch.ops)
        ops, pins, ids = _array_ops(ctx, lease_id, chunks[key], tables[key[0]].name, work[key])
        grown = size + size_of(ops)
        ops_count = len(head) + first + len(ops)
        if batch.keys and (grown > ACQUIRE_TXN_BYTES or ops_count > ACQUIRE_TXN_OPS):
            break
        size = grown
        batch.keys.append(key)
        batch.ops.extend(ops)
        batch.pins.update({first + i: pin for i, pin in pins.items()})
        if ids is not None:
            batch.arrays[key] = (len(batch.ops) - 1, ids)
    return batch


def _array_ops(
    ctx: Context, lease_id: str, ch: PinChunk, table: str, wanted: dict[int, int]
) -> tuple[list[Op], dict[int, Pin], list[int] | None]:
    """One pin array's ops: a create per new pin (and a delete of the pin it moves), then the
    array's write; the pin each create makes (by its index in the ops); the array's new ids
    (None when it does not change). A bucket pinned as empty has no pin znode (L15)."""
    pin, tid = ctx.paths.pin, ch.table_id
    pinned = ch.array.present(wanted)
    changed = {b: sid for b, sid in sorted(wanted.items()) if pinned.get(b, 0) != sid}
    if not changed:
        return [], {}, None
    ops: list[Op] = []
    pins: dict[int, Pin] = {}
    for bucket, sid in changed.items():
        if sid != EMPTY_PIN:
            pins[len(ops)] = (tid, bucket, sid)
            ops.append(Create(pin(tid, bucket, sid, lease_id)))
        current = pinned.get(bucket)
        if current and current != EMPTY_PIN:
            ops.append(Delete(pin(tid, bucket, current, lease_id)))
    ids = ch.array.updated(changed).ids
    path = ctx.paths.lease_chunk(lease_id, tid, ch.chunk)
    value = ch._replace(table=table, ids=ids).encode()
    ops.append(Create(path, value) if ch.stat is None else SetData(path, value, ch.stat.version))
    return ops, pins, ids


def applied(
    ctx: Context,
    state: State,
    batch: Batch,
    results: list[Any],
    duration_ms: int,
    holder: str = "",
) -> tuple[State, int, int]:
    """The state after ``batch`` committed after the lease's ops (``results``: of both), with
    the commit's ZooKeeper time and the lease's expiry (ms)."""
    old = state.record
    stat = results[0 if old is not None else 1]  # the lease record's SetData
    if not isinstance(stat, Stat):  # pragma: no cover - a SetData always answers a Stat
        raise TypeError(f"unexpected result {stat!r} of the lease record's write")
    floor = old.expires_ms if old is not None else 0
    expires_ms = max(floor, stat.mtime_ms + duration_ms)
    chunks = dict(state.chunks)
    offset = len(results) - len(batch.ops)  # the lease's ops came first
    for key, (index, ids) in batch.arrays.items():
        result = results[offset + index]
        version = result.version if isinstance(result, Stat) else 0
        ch = chunks[key]
        chunks[key] = ch._replace(ids=ids, stat=(ch.stat or stat)._replace(version=version))
    record = LeaseRecord(duration_ms, floor, ctx.owner, LIVE, stat, holder)
    return State(record, state.fences, chunks), stat.mtime_ms, expires_ms
