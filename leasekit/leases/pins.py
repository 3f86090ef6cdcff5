"""A lease's pins as stored: its pin arrays (one znode per chunk of a table's buckets) read
back and changed, the leases pinning a table, and forgetting a dropped table's arrays."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..structs import TableBucket
from ..zk import Delete, Op, SetData, TxnConflict, touch
from ..zk.formats import EMPTY_PIN, LIVE, LeaseRecord, PinChunk

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = [
    "read_pin_chunks",
    "pins_of",
    "pin_deletes",
    "unpin_ops",
    "forget_missing_pins",
    "leases_pinning",
    "forget_table",
]


def read_pin_chunks(ctx: Context, lease_id: str) -> list[tuple[str, PinChunk]]:
    """Every pin array of the lease, with its path."""
    names = ctx.store.children(ctx.paths.lease_pins(lease_id)) or []
    chunk_paths = [f"{ctx.paths.lease_pins(lease_id)}/{n}" for n in names]
    out = []
    for name, path, node in zip(names, chunk_paths, ctx.store.get_many(chunk_paths)):
        if node is None:
            continue
        table_id, chunk = ctx.paths.parse_lease_chunk(name)
        out.append((path, PinChunk.decode(node, path, table_id, chunk)))
    return out


def pins_of(ctx: Context, lease_id: str, table: TableInfo | None = None) -> dict[TableBucket, int]:
    """The lease's pins (of one table, if given): snapshot id 0 for a bucket pinned as empty."""
    out: dict[TableBucket, int] = {}
    for _, ch in read_pin_chunks(ctx, lease_id):
        if table is None or ch.table_id == table.table_id:
            out.update({TableBucket(ch.table, b): max(sid, 0) for b, sid in ch.array.items()})
    return out


def pin_deletes(ctx: Context, lease_id: str, ch: PinChunk) -> list[Op]:
    """Deletes of the pin znodes of every bucket the array pins (none for one pinned empty)."""
    pin = ctx.paths.pin
    return [
        Delete(pin(ch.table_id, b, sid, lease_id))
        for b, sid in ch.array.items()
        if sid != EMPTY_PIN
    ]


def _array_write(path: str, ch: PinChunk, ids: list[int]) -> Op:
    """The op storing ``ids`` as the array at ``path`` (removing it once it pins nothing)."""
    version = ch.stat.version if ch.stat is not None else -1
    if any(ids):
        return SetData(path, ch._replace(ids=ids).encode(), version)
    return Delete(path, version)


def unpin_ops(
    ctx: Context, lease_id: str, table: TableInfo, chunk: int, buckets: Iterable[int]
) -> list[Op]:
    """Ops unpinning ``buckets`` (all of ``chunk``) from a fresh read of the array: each pin's
    delete and the array's update; none if the lease pins none of them."""
    path = ctx.paths.lease_chunk(lease_id, table.table_id, chunk)
    node = ctx.store.get(path)
    if node is None:
        return []
    ch = PinChunk.decode(node, path, table.table_id, chunk)
    pinned = {b: sid for b in buckets if (sid := ch.array.get(b))}
    if not pinned:
        return []
    ops: list[Op] = [
        Delete(ctx.paths.pin(table.table_id, b, sid, lease_id))
        for b, sid in pinned.items()
        if sid != EMPTY_PIN
    ]
    ops.append(_array_write(path, ch, ch.array.updated(dict.fromkeys(pinned, 0)).ids))
    return [*ops, touch(ctx.paths.leases)]  # live views hear of it on the leases' marker


def forget_missing_pins(ctx: Context, lease_id: str) -> None:
    """Clear array entries whose pin znode is gone (its table was force-dropped)."""
    for path, ch in read_pin_chunks(ctx, lease_id):
        targets = [(b, sid) for b, sid in ch.array.items() if sid != EMPTY_PIN]
        nodes = ctx.store.get_many(
            [ctx.paths.pin(ch.table_id, b, sid, lease_id) for b, sid in targets]
        )
        gone = {b: 0 for (b, _), node in zip(targets, nodes) if node is None}
        if gone and ch.stat is not None:
            try:
                ctx.store.commit([_array_write(path, ch, ch.array.updated(gone).ids)])
            except TxnConflict:
                pass


def leases_pinning(ctx: Context, table_id: str) -> list[str]:
    """Ids of live, unexpired leases that pin any bucket of the table."""
    ids = ctx.store.children(ctx.paths.leases) or []
    kids = ctx.store.children_many([ctx.paths.lease_pins(i) for i in ids])
    candidates = [
        i
        for i, names in zip(ids, kids)
        if names and any(ctx.paths.parse_lease_chunk(n)[0] == table_id for n in names)
    ]
    paths = [ctx.paths.lease(i) for i in candidates]
    now, nodes = ctx.read_with_clock(paths)
    out = []
    for lease_id, path, node in zip(candidates, paths, nodes):
        if node is None:
            continue
        record = LeaseRecord.decode(node, path)
        if record.state == LIVE and ctx.clock(now) <= record.expires_ms:
            out.append(lease_id)
    return out


def forget_table(ctx: Context, table_id: str) -> list[str]:
    """Remove a dropped table's pin arrays from every lease (its pin znodes go with its data);
    returns the ids of the leases whose arrays were removed. The leases stay, maybe empty."""
    ids = ctx.store.children(ctx.paths.leases) or []
    kids = ctx.store.children_many([ctx.paths.lease_pins(i) for i in ids])
    ops = [
        (i, Delete(f"{ctx.paths.lease_pins(i)}/{n}"))
        for i, names in zip(ids, kids)
        for n in (names or [])
        if ctx.paths.parse_lease_chunk(n)[0] == table_id
    ]
    forgotten: list[str] = []
    for lease_id, op in ops:
        try:
            ctx.store.commit([op])
        except TxnConflict:
            continue  # the lease went away meanwhile
        if lease_id not in forgotten:
            forgotten.append(lease_id)
    return forgotten
