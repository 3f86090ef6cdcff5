"""The lease store's upkeep and read-back: release, drop, remove and expire leases with their
pins; lease info and listings, the leases pinning a table, forgetting a dropped table's pins."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from ..durations import to_ms
from ..errors import CorruptMetadataError, LeaseNotFoundError
from ..structs import LeaseInfo, TableBucket
from ..validate import check_id
from ..zk import (
    MAX_TXN_OPS,
    Check,
    ConflictReason,
    Delete,
    Node,
    Op,
    SetData,
    TxnConflict,
    chunk_ops,
    to_datetime,
)
from ..zk.formats import DROPPING, LIVE, LeaseRecord, PinChunk
from ..zk.paths import CHUNK

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = [
    "release",
    "drop",
    "remove",
    "expire",
    "info",
    "list_leases",
    "pins_of",
    "leases_pinning",
    "forget_table",
    "read_pin_chunks",
]


log = logging.getLogger("leasekit.leases")  # expire's warnings keep the leases API's logger name


# -- release, drop, expire ---------------------------------------------------------------


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
    """The lease's pins (of one table, if given)."""
    out: dict[TableBucket, int] = {}
    for _, ch in read_pin_chunks(ctx, lease_id):
        if table is not None and ch.table_id != table.table_id:
            continue
        for i, sid in enumerate(ch.ids):
            if sid:
                out[TableBucket(ch.table, ch.chunk * CHUNK + i)] = sid
    return out


def release(ctx: Context, lease_id: str, buckets: Mapping[TableInfo, Iterable[int]]) -> None:
    """Unpin these buckets; idempotent, buckets the lease does not pin are ignored (L9)."""
    check_id(lease_id)
    paths = ctx.paths
    if ctx.store.exists(paths.lease(lease_id)) is None:
        raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
    for table, wanted in buckets.items():
        by_chunk: dict[int, set[int]] = {}
        for b in wanted:
            by_chunk.setdefault(b // CHUNK, set()).add(b)
        for chunk, members in sorted(by_chunk.items()):
            path = paths.lease_chunk(lease_id, table.table_id, chunk)

            def build(
                path: str = path,
                chunk: int = chunk,
                members: set[int] = members,
                table: TableInfo = table,
            ) -> list[Op]:
                node = ctx.store.get(path)
                if node is None:
                    return []
                ch = PinChunk.decode(node, path, table.table_id, chunk)
                ids = list(ch.ids)
                ops: list[Op] = []
                for b in sorted(members):
                    if ids[b % CHUNK]:
                        ops.append(Delete(paths.pin(table.table_id, b, ids[b % CHUNK], lease_id)))
                        ids[b % CHUNK] = 0
                if not ops:
                    return []
                ops.append(
                    SetData(path, ch._replace(ids=ids).encode(), node.stat.version)
                    if any(ids)
                    else Delete(path, node.stat.version)
                )
                return ops

            try:
                ctx.store.commit_retrying(build, what=f"release from lease {lease_id}")
            except TxnConflict as exc:
                if exc.reason != ConflictReason.NONODE:
                    raise
                forget_missing_pins(ctx, lease_id)
                ctx.store.commit_retrying(build, what=f"release from lease {lease_id}")


def forget_missing_pins(ctx: Context, lease_id: str) -> None:
    """Clear array entries whose pin znode is gone (its table was force-dropped)."""
    for path, ch in read_pin_chunks(ctx, lease_id):
        targets = [(i, sid) for i, sid in enumerate(ch.ids) if sid]
        nodes = ctx.store.get_many(
            [ctx.paths.pin(ch.table_id, ch.chunk * CHUNK + i, sid, lease_id) for i, sid in targets]
        )
        ids = list(ch.ids)
        for (i, _), node in zip(targets, nodes):
            if node is None:
                ids[i] = 0
        if ids != ch.ids and ch.stat is not None:
            try:
                ctx.store.commit(
                    [
                        SetData(path, ch._replace(ids=ids).encode(), ch.stat.version)
                        if any(ids)
                        else Delete(path, ch.stat.version)
                    ]
                )
            except TxnConflict:
                pass


def drop(ctx: Context, lease_id: str) -> bool:
    """Remove the lease and all its pins; False if it does not exist (L10)."""
    check_id(lease_id)
    return remove(ctx, lease_id)


def remove(
    ctx: Context, lease_id: str, *, created: int | None = None, version: int | None = None
) -> bool:
    """Delete a lease with its pins.

    Arguments:
        created: the lease's creation id (its znode's czxid) as a plan read it: only that same
            lease is removed, never one dropped and acquired again under its id since.
        version: the lease's version as a plan read it: only if nobody renewed it since.

    Returns:
        True when it was removed; False when it does not exist, or is not the lease expected.

    Every removal bumps the data version of the leases' parent znode, and a removal with
    ``created`` checks that version inside each of its transactions after reading it before
    the lease: no lease was deleted (so none re-created) between that read and the commit,
    so the lease read is the one deleted. (ZooKeeper's multi checks data versions only; the
    lease's own version repeats across instances.)

    Small leases go in one transaction. Large ones are first marked as dropping (invisible
    to users, still protecting their snapshots), then emptied chunk by chunk.
    """
    paths, store = ctx.paths, ctx.store
    rec_path = paths.lease(lease_id)
    bump = SetData(paths.leases, b"", -1)
    while True:
        guard: list[Op] = []
        if created is not None:
            parent = store.exists(paths.leases)  # read before the lease: see above
            guard = [] if parent is None else [Check(paths.leases, parent.version)]
        node = store.get(rec_path)
        if node is None:
            return False
        current = node.stat.version
        if created is not None and node.stat.czxid != created:
            return False  # another lease under the same id
        if (
            version is not None
            and current != version
            and LeaseRecord.decode(node, rec_path).state == LIVE
        ):
            return False  # renewed since
        chunks = read_pin_chunks(ctx, lease_id)
        pin_ops: list[Op] = []
        for path, ch in chunks:
            pin_ops += [
                Delete(paths.pin(ch.table_id, ch.chunk * CHUNK + i, sid, lease_id))
                for i, sid in enumerate(ch.ids)
                if sid
            ]
            pin_ops.append(Delete(path, ch.stat.version if ch.stat else -1))
        try:
            if len(pin_ops) + 4 <= MAX_TXN_OPS:
                store.commit(
                    [
                        *guard,
                        *pin_ops,
                        Delete(paths.lease_pins(lease_id)),
                        Delete(rec_path, current),
                        bump,
                    ]
                )
                return True
            record = LeaseRecord.decode(node, rec_path)
            if record.state == LIVE:
                dropping = record.renewed(record.duration_ms, record.owner, DROPPING)
                store.commit([*guard, SetData(rec_path, dropping.encode(), current)])
            for batch in chunk_ops(pin_ops, max_ops=MAX_TXN_OPS - 2):
                store.commit([*guard, *batch])
            store.commit([*guard, Delete(paths.lease_pins(lease_id)), Delete(rec_path), bump])
            return True
        except TxnConflict as exc:
            if exc.op.path == rec_path and exc.reason == ConflictReason.NONODE:
                return False
            if exc.reason == ConflictReason.NONODE and "/pins/" not in exc.op.path:
                forget_missing_pins(ctx, lease_id)  # a pin went with a force-dropped table


def expire(ctx: Context) -> list[str]:
    """Reclaim every lease past expires_at + lease.expiry-grace; returns their ids (L11)."""
    ids = ctx.store.children(ctx.paths.leases) or []
    paths = [ctx.paths.lease(i) for i in ids]
    now, nodes = ctx.read_with_clock(paths)
    now = ctx.clock(now)
    grace = to_ms(ctx.settings()["lease.expiry-grace"])
    reclaimed = []
    for lease_id, path, node in zip(ids, paths, nodes):
        if node is None:
            continue
        try:
            record = LeaseRecord.decode(node, path)
        except CorruptMetadataError as exc:
            log.warning("skipping lease %s: %s", lease_id, exc)
            continue
        if record.state == DROPPING or now > record.expires_ms + grace:
            if remove(ctx, lease_id, created=node.stat.czxid, version=node.stat.version):
                reclaimed.append(lease_id)
    return reclaimed


# -- reading ------------------------------------------------------------------------------


def _info(ctx: Context, lease_id: str, node: Node) -> LeaseInfo | None:
    path = ctx.paths.lease(lease_id)
    record = LeaseRecord.decode(node, path)
    if record.state != LIVE:
        return None
    return LeaseInfo(
        lease_id,
        pins_of(ctx, lease_id),
        timedelta(milliseconds=record.duration_ms),
        to_datetime(node.stat.ctime_ms),
        to_datetime(node.stat.mtime_ms),
        to_datetime(record.expires_ms),
        record.owner,
    )


def info(ctx: Context, lease_id: str) -> LeaseInfo:
    """The lease as stored; ``LeaseNotFoundError`` if it does not exist."""
    check_id(lease_id)
    node = ctx.store.get(ctx.paths.lease(lease_id))
    result = None if node is None else _info(ctx, lease_id, node)
    if result is None:
        raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
    return result


def list_leases(ctx: Context) -> list[LeaseInfo]:
    """Every lease of the namespace (expired ones too, until reclaimed), by id."""
    ids = ctx.store.children(ctx.paths.leases) or []
    nodes = ctx.store.get_many([ctx.paths.lease(i) for i in ids])
    out = []
    for lease_id, node in zip(ids, nodes):
        if node is not None:
            item = _info(ctx, lease_id, node)
            if item is not None:
                out.append(item)
    return out


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
