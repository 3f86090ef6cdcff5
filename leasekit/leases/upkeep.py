"""The lease store's upkeep and read-back: release, drop, remove and expire leases with their
pins; lease info and listings, the leases pinning a table, forgetting a dropped table's pins."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING

from ..durations import to_ms
from ..errors import CorruptMetadataError, IllegalStateError, LeasekitError, LeaseNotFoundError
from ..structs import LeaseInfo
from ..validate import check_id
from ..zk import (
    MAX_TXN_OPS,
    Check,
    ConflictReason,
    Create,
    Delete,
    Node,
    Op,
    SetData,
    TxnConflict,
    chunk_ops,
    to_datetime,
)
from ..zk.chunked import group_by_chunk
from ..zk.formats import DROPPING, LIVE, LeaseRecord
from .pins import forget_missing_pins, pin_deletes, pins_of, read_pin_chunks, unpin_ops

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["release", "drop", "remove", "expire", "info", "list_leases", "reclaim_pin"]


log = logging.getLogger("leasekit.leases")  # expire's warnings keep the leases API's logger name


# -- release, drop, expire ---------------------------------------------------------------


def release(ctx: Context, lease_id: str, buckets: Mapping[TableInfo, Iterable[int]]) -> None:
    """Unpin these buckets; idempotent, buckets the lease does not pin are ignored (L9)."""
    check_id(lease_id)
    if ctx.store.exists(ctx.paths.lease(lease_id)) is None:
        raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
    what = f"release from lease {lease_id}"
    for table, wanted in buckets.items():
        for chunk, members in group_by_chunk(wanted).items():

            def build(
                table: TableInfo = table, chunk: int = chunk, members: list[int] = members
            ) -> list[Op]:
                return unpin_ops(ctx, lease_id, table, chunk, members)

            try:
                ctx.store.commit_retrying(build, what=what)
            except TxnConflict as exc:
                if exc.reason != ConflictReason.NONODE:
                    raise
                forget_missing_pins(ctx, lease_id)
                ctx.store.commit_retrying(build, what=what)


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
    rec_path = ctx.paths.lease(lease_id)
    while True:
        guard: list[Op] = []
        if created is not None:
            parent = ctx.store.exists(ctx.paths.leases)  # read before the lease: see above
            guard = [] if parent is None else [Check(ctx.paths.leases, parent.version)]
        node = ctx.store.get(rec_path)
        if node is None or not _expected(node, rec_path, created, version):
            return False
        try:
            _delete(ctx, lease_id, node, guard)
            return True
        except TxnConflict as exc:
            if exc.op.path == rec_path and exc.reason == ConflictReason.NONODE:
                return False
            if exc.reason == ConflictReason.NONODE and "/pins/" not in exc.op.path:
                forget_missing_pins(ctx, lease_id)  # a pin went with a force-dropped table


def _expected(node: Node, path: str, created: int | None, version: int | None) -> bool:
    """Whether the lease read is the one ``remove`` was asked to remove."""
    if created is not None and node.stat.czxid != created:
        return False  # another lease under the same id
    renewed = version is not None and node.stat.version != version
    return not (renewed and LeaseRecord.decode(node, path).state == LIVE)


def _delete(ctx: Context, lease_id: str, node: Node, guard: list[Op]) -> None:
    """Delete the lease read as ``node`` with its pins, ``guard`` in every transaction."""
    paths, store = ctx.paths, ctx.store
    rec_path = paths.lease(lease_id)
    bump = SetData(paths.leases, b"", -1)
    pin_ops: list[Op] = []
    for path, ch in read_pin_chunks(ctx, lease_id):
        pin_ops += pin_deletes(ctx, lease_id, ch)
        pin_ops.append(Delete(path, ch.stat.version if ch.stat else -1))
    if len(pin_ops) + 4 <= MAX_TXN_OPS:
        tail = [Delete(paths.lease_pins(lease_id)), Delete(rec_path, node.stat.version), bump]
        store.commit([*guard, *pin_ops, *tail])
        return
    record = LeaseRecord.decode(node, rec_path)
    if record.state == LIVE:
        dropping = record.renewed(record.duration_ms, record.owner, DROPPING)
        store.commit([*guard, SetData(rec_path, dropping.encode(), node.stat.version)])
    for batch in chunk_ops(pin_ops, max_ops=MAX_TXN_OPS - 2):
        store.commit([*guard, *batch])
    store.commit([*guard, Delete(paths.lease_pins(lease_id)), Delete(rec_path), bump])


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


def read_leases(ctx: Context) -> tuple[list[LeaseInfo], dict[str, CorruptMetadataError]]:
    """Every lease of the namespace (expired ones too, until reclaimed), by id, and the error of
    each lease whose stored record or pins cannot be read (a listing shows it and goes on)."""
    ids = ctx.store.children(ctx.paths.leases) or []
    nodes = ctx.store.get_many([ctx.paths.lease(i) for i in ids])
    out = []
    corrupt: dict[str, CorruptMetadataError] = {}
    for lease_id, node in zip(ids, nodes):
        if node is None:
            continue
        try:
            item = _info(ctx, lease_id, node)
        except CorruptMetadataError as exc:
            corrupt[lease_id] = exc
            continue
        if item is not None:
            out.append(item)
    return out, corrupt


def list_leases(ctx: Context) -> list[LeaseInfo]:
    """Every lease of the namespace (expired ones too, until reclaimed), by id;
    ``CorruptMetadataError`` naming the first lease that cannot be read."""
    out, corrupt = read_leases(ctx)
    for exc in corrupt.values():
        raise exc
    return out


def reclaim_pin(ctx: Context, lease_id: str, table_id: str, bucket: int, snapshot_id: int) -> bool:
    """Delete the pin of ``lease_id`` on a snapshot while no lease of that id exists (L5: a pin
    whose lease is gone protects nothing). The absence is checked inside the deleting
    transaction (the lease created and deleted again in it), so a lease acquired under that id
    meanwhile keeps the pin.

    Returns:
        True when the pin was deleted; False when it was already gone.

    Raises:
        IllegalStateError: a lease of that id exists (again).
        LeadershipLostError: in a fenced janitor pass that no longer leads.
    """
    pin = ctx.paths.pin(table_id, bucket, snapshot_id, lease_id)
    try:
        check_id(lease_id)
    except LeasekitError:  # no lease can ever have this id: nothing to check
        guard: list[Op] = []
    else:
        lease = ctx.paths.lease(lease_id)
        guard = [Create(lease), Delete(lease)]
    try:
        ctx.store.commit([*guard, Delete(pin)])
    except TxnConflict as exc:
        if exc.op.path == pin and exc.reason == ConflictReason.NONODE:
            return False
        if guard and exc.op.path == guard[0].path and exc.reason == ConflictReason.EXISTS:
            raise IllegalStateError(
                f"lease {lease_id!r} exists again: its pin on snapshot {snapshot_id} is kept"
            ) from None
        raise
    return True
