"""The table catalog: create, look up, list and drop tables, and finish interrupted drops.

A table's znode holds its schema, primary key, bucket count, properties and id; its
buckets, log and snapshots live under ``data/<id>`` (see ``zk.paths``).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import (
    CorruptMetadataError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    LeasekitError,
    TableExistsError,
    TableNotFoundError,
)
from ..leases.pins import forget_table, leases_pinning
from ..properties import TABLE_PROPERTIES, parse_properties
from ..validate import check_table_name
from ..warehouse import contained
from ..zk import Check, ConflictReason, Create, Delete, TxnConflict
from ..zk.formats import DroppedTable, TableRecord
from . import fence
from . import schema as schemas
from .table import Table

if TYPE_CHECKING:
    from ..context import Context
    from .info import TableInfo

__all__ = [
    "create_table",
    "load_table",
    "load_tables",
    "list_tables",
    "drop_table",
    "finish_drop",
    "pending_drops",
    "MAX_BUCKETS",
]

MAX_BUCKETS = 1_000_000

log = logging.getLogger(__name__)


def _check_buckets(buckets: object) -> int:
    if isinstance(buckets, bool) or not isinstance(buckets, int):
        raise InvalidTypeError(f"buckets must be an int, not {type(buckets).__name__}")
    if not 1 <= buckets <= MAX_BUCKETS:
        raise InvalidArgumentError(f"buckets must be between 1 and {MAX_BUCKETS}, got {buckets}")
    return buckets


def create_table(
    ctx: Context,
    name: str,
    schema: str | pa.Schema,
    primary_key: str | Sequence[str],
    buckets: int = 4,
    properties: Mapping[str, Any] | None = None,
) -> Table:
    check_table_name(name)
    arrow_schema = schemas.parse_schema(schema)
    key = schemas.check_primary_key(arrow_schema, primary_key)
    arrow_schema = schemas.with_primary_key(arrow_schema, key)
    num_buckets = _check_buckets(buckets)
    props = parse_properties(properties, TABLE_PROPERTIES, what="table property")
    table_id = uuid.uuid4().hex
    record = TableRecord(table_id, schemas.serialize_schema(arrow_schema), key, num_buckets, props)
    paths = ctx.paths
    try:
        ctx.store.commit(
            [
                Create(paths.table(name), record.encode()),
                Create(paths.table_data(table_id)),
                Create(paths.latest(table_id)),
            ]
        )
    except TxnConflict as exc:
        if exc.reason == ConflictReason.EXISTS:
            raise TableExistsError(f"table {name!r} exists already") from None
        raise _namespace_incomplete(ctx, f"create table {name!r}", exc) from None
    return load_table(ctx, name)


def load_table(ctx: Context, name: object) -> Table:
    if not isinstance(name, str) and hasattr(name, "table_id"):
        name = name.name  # a Table object
    check_table_name(name)
    path = ctx.paths.table(name)
    node = ctx.store.get(path)
    if node is None:
        raise TableNotFoundError(f"table {name!r} does not exist")
    record = TableRecord.decode(node.data, path)
    try:
        return Table(ctx, name, record, node.stat.ctime_ms)
    except LeasekitError as exc:  # an undecodable schema
        raise CorruptMetadataError(f"table metadata at {path} is invalid: {exc}", path) from None


def load_tables(ctx: Context, names: Sequence[str]) -> dict[str, Table]:
    """The tables named, read in one pipelined round trip, by name; names that are not valid
    table names, or whose table does not exist (or cannot be read), are left out."""
    valid = []
    for name in names:
        with contextlib.suppress(LeasekitError):
            valid.append(check_table_name(name))
    out = {}
    for name, node in zip(valid, ctx.store.get_many([ctx.paths.table(n) for n in valid])):
        if node is None:
            continue
        try:
            out[name] = Table(
                ctx, name, TableRecord.decode(node.data, ctx.paths.table(name)), node.stat.ctime_ms
            )
        except LeasekitError:
            continue  # unreadable: as if missing (load_table reports it)
    return out


def list_tables(ctx: Context) -> list[str]:
    return ctx.store.children(ctx.paths.tables) or []


def drop_table(ctx: Context, name: object, *, force: bool = False) -> None:
    """Remove the table: its znode and a drop marker in one step, then the leases' pins of it,
    its data metadata, then its files (``finish_drop``).

    The table's data znode is marked first and the pinning leases read after, so an acquire
    either committed before the mark (and is seen here) or fails its fence check (DESIGN §9).

    Arguments:
        ctx: the namespace.
        name: the table's name or a Table.
        force: drop it even while live leases pin it: their pins of it are removed (a WARNING
            names those leases), the leases stay.

    Raises:
        TableNotFoundError: no such table.
        IllegalStateError: live leases pin it and ``force`` is False (the message names them).
        CorruptMetadataError: the drop marker is unreadable or names another directory.
    """
    delay = 0.002
    for _ in range(_DROP_ATTEMPTS):
        table = load_table(ctx, name)
        pinned_by = _mark_and_drop(ctx, table, force)
        if pinned_by is not None:
            break
        time.sleep(random.uniform(0, delay))
        delay = min(delay * 2, 0.05)
    else:
        raise IllegalStateError(
            f"drop of table {table.name!r}: gave up after {_DROP_ATTEMPTS} concurrent changes"
        )
    finish_drop(ctx, table.table_id)


_DROP_ATTEMPTS = 1000


def _mark_and_drop(ctx: Context, table: TableInfo, force: bool) -> list[str] | None:
    """One attempt: mark the fence, check the pinning leases, commit the drop or unmark and
    refuse. Returns the leases pinning the table, or None when the attempt must be retried."""
    data_path = ctx.paths.table_data(table.table_id)
    now, (node,) = ctx.read_with_clock([data_path])
    if node is None:
        raise TableNotFoundError(f"table {table.name!r} does not exist")
    if fence.is_marked(node) and ctx.clock(now) - node.stat.mtime_ms <= fence.STALE_MARK_MS:
        return None  # another dropper is deciding: wait for it
    try:
        marked = fence.mark(ctx, table.table_id, node.stat.version)
    except TxnConflict:
        return None
    try:
        pinned_by = leases_pinning(ctx, table.table_id)
        if pinned_by and not force:
            raise IllegalStateError(
                f"table {table.name!r} is pinned by lease(s) {', '.join(pinned_by)}; drop or release them, "
                "or pass force=True"
            )
        marker = DroppedTable(table.name, table.data_dir).encode()
        ctx.store.commit(
            [
                Check(data_path, marked),
                Delete(ctx.paths.table(table.name)),
                Create(ctx.paths.dropped_table(table.table_id), marker),
            ]
        )
    except TxnConflict as exc:
        with contextlib.suppress(LeasekitError):
            fence.unmark(ctx, table.table_id, marked)
        if (
            exc.index == 2
        ):  # the drop marker's parent is missing (the fence stays until it is stale)
            raise _namespace_incomplete(ctx, f"drop table {table.name!r}", exc) from None
        return None  # the fence moved or the table went: start over
    except BaseException:
        with contextlib.suppress(LeasekitError):
            fence.unmark(ctx, table.table_id, marked)
        raise
    return pinned_by


def _namespace_incomplete(ctx: Context, what: str, exc: TxnConflict) -> IllegalStateError:
    parent = exc.op.path.rsplit("/", 1)[0]
    return IllegalStateError(
        f"cannot {what}: {parent} is missing from namespace {ctx.namespace!r} (was it deleted?); "
        "connect again to recreate the namespace's znodes"
    )


def finish_drop(ctx: Context, table_id: str) -> None:
    """Complete a drop recorded by its marker: the leases' pins of the table, then its other
    metadata, its files, and the marker last (so a pass cut short is finished by the next).

    Logs a WARNING naming the leases whose pins of the table it removed (a forced drop's, or
    expired ones'); those leases stay, maybe with no pin left.

    Arguments:
        ctx: the namespace.
        table_id: the dropped table's id (the name of its drop marker).

    Raises:
        CorruptMetadataError: naming the marker, when it cannot be decoded or names another
            directory than the table's own; nothing is deleted then (DESIGN §9 Containment).
    """
    marker_path = ctx.paths.dropped_table(table_id)
    node = ctx.store.get(marker_path)
    if node is None:
        return
    marker = DroppedTable.decode(node.data, marker_path)
    data_dir = _marked_dir(ctx, table_id, marker, marker_path)
    forgotten = forget_table(ctx, table_id)
    if forgotten:
        log.warning(
            "dropped table %r: removed its pins from lease(s) %s; the leases stay",
            marker.name,
            ", ".join(sorted(forgotten)),
        )
    ctx.store.delete_tree(ctx.paths.table_data(table_id))
    ctx.store.check_fence()  # a janitor that no longer leads deletes no directory
    ctx.warehouse.delete_dir(data_dir)
    ctx.store.delete_tree(marker_path)


def _marked_dir(ctx: Context, table_id: str, marker: DroppedTable, marker_path: str) -> str:
    """The directory a drop marker names, if it is the dropped table's own directory in the
    namespace (``<tables dir>/<name>/<table id>``); ``CorruptMetadataError`` naming the marker
    otherwise, before anything is deleted (DESIGN §9 Containment)."""
    data_dir = contained(marker.data_dir, ctx.tables_dir, marker_path)
    if "/" in marker.name or data_dir != f"{ctx.tables_dir}/{marker.name}/{table_id}":
        raise CorruptMetadataError(
            f"drop marker at {marker_path} names {marker.data_dir!r:.200}, not the directory of "
            f"table {marker.name!r:.200} ({ctx.tables_dir}/<name>/{table_id}); nothing is deleted",
            marker_path,
        )
    return data_dir


def pending_drops(ctx: Context) -> list[str]:
    """Ids of dropped tables whose data is not yet removed (a dropper died half way)."""
    return ctx.store.children(ctx.paths.dropped) or []
