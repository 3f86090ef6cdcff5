"""The table catalog: create, look up and list tables; the steps of a drop (fence, commit,
removal), which the table handle's layer sequences with the leases that pin the table.

A table's znode holds its schema, primary key, bucket count, properties and id; its
buckets, log and snapshots live under ``data/<id>`` (see ``zk.paths``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import (
    CorruptMetadataError,
    IllegalStateError,
    LeasekitError,
    TableExistsError,
    TableNotFoundError,
)
from ..properties import TABLE_PROPERTIES, parse_properties
from ..validate import check_int, check_table_name, is_internal_table
from ..warehouse import contained
from ..zk import Check, ConflictReason, Create, Delete, TxnConflict
from ..zk.formats import DroppedTable, TableRecord
from . import fence
from . import schema as schemas
from .info import TableInfo

if TYPE_CHECKING:
    from ..context import Context

__all__ = [
    "create_table",
    "load_table",
    "load_tables",
    "list_tables",
    "valid_table_names",
    "DropFence",
    "mark_for_drop",
    "commit_drop",
    "unmark_drop",
    "PendingDrop",
    "read_drop",
    "remove_dropped",
    "pending_drops",
    "MAX_BUCKETS",
]

MAX_BUCKETS = 1_000_000

log = logging.getLogger(__name__)


def create_table(
    ctx: Context,
    name: str,
    schema: str | pa.Schema,
    primary_key: str | Sequence[str],
    buckets: int = 4,
    properties: Mapping[str, Any] | None = None,
    *,
    internal: bool = False,
) -> TableInfo:
    """Create a primary-key table: its znode with the definition, and its data znodes.

    Arguments:
        ctx: the namespace.
        name: the table's name.
        schema: a DDL string ("id BIGINT, v STRING") or a pyarrow schema.
        primary_key: the key column(s).
        buckets: the number of buckets, 1 to ``MAX_BUCKETS``.
        properties: table properties (see ``properties.TABLE_PROPERTIES``).
        internal: one of leasekit's internal tables (``validate.INTERNAL_TABLES``).

    Returns:
        The new table's ``TableInfo``.

    Raises:
        TableExistsError: the name is taken.
        InvalidArgumentError, InvalidTypeError: a bad name, schema, key, bucket count or
            property, before any write.
        IllegalStateError: the namespace misses the parent znode of tables.
    """
    check_table_name(name, internal=internal)
    arrow_schema = schemas.parse_schema(schema)
    key = schemas.check_primary_key(arrow_schema, primary_key)
    arrow_schema = schemas.with_primary_key(arrow_schema, key)
    num_buckets = check_int(buckets, "buckets", minimum=1, maximum=MAX_BUCKETS)
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
    return load_table(ctx, name, internal=internal)


def load_table(ctx: Context, name: object, *, internal: bool = False) -> TableInfo:
    """The table named (or the table of a ``TableInfo``, read again); ``internal`` accepts the
    names of leasekit's internal tables (never given for user input).

    Raises:
        TableNotFoundError: no such table.
        CorruptMetadataError: its znode cannot be decoded.
    """
    if not isinstance(name, str) and hasattr(name, "table_id"):
        name = name.name  # a Table object
    check_table_name(name, internal=internal)
    path = ctx.paths.table(name)
    node = ctx.store.get(path)
    if node is None:
        raise TableNotFoundError(f"table {name!r} does not exist")
    try:
        return TableInfo.from_node(ctx, name, node)
    except LeasekitError as exc:  # an undecodable schema
        raise CorruptMetadataError(f"table metadata at {path} is invalid: {exc}", path) from None


def load_tables(ctx: Context, names: Sequence[str]) -> dict[str, TableInfo]:
    """The tables named, read in one pipelined round trip, by name; names that are not valid
    table names (internal tables' included: no consumer subscribes to them), or whose table
    does not exist (or cannot be read), are left out."""
    valid = []
    for name in names:
        with contextlib.suppress(LeasekitError):
            valid.append(check_table_name(name))
    out = {}
    for name, node in zip(valid, ctx.store.get_many([ctx.paths.table(n) for n in valid])):
        if node is None:
            continue
        try:
            out[name] = TableInfo.from_node(ctx, name, node)
        except LeasekitError:
            continue  # unreadable: as if missing (load_table reports it)
    return out


def list_tables(
    ctx: Context, *, internal: bool = False, skipped: list[str] | None = None
) -> list[str]:
    """Names of every table of the namespace; leasekit's internal tables only with
    ``internal`` (retention covers them; listings for people leave them out).

    A child of the tables znode whose name breaks the table-name rule (anyone may create one
    on a namespace without ``auth``) is left out, said in ``skipped`` and logged once.
    """
    names = ctx.store.children(ctx.paths.tables) or []
    return valid_table_names(ctx, names, internal=internal, skipped=skipped)


_reported: set[str] = set()
_reported_lock = threading.Lock()
_REPORTED_MAX = 10_000
"""Invalid table znodes remembered so that each is logged once per process."""


def valid_table_names(
    ctx: Context, names: Sequence[str], *, internal: bool = False, skipped: list[str] | None = None
) -> list[str]:
    """The valid table names among ``names`` (children of the tables znode), in order.

    Internal tables' names are left out silently unless ``internal``; any other invalid name
    is left out, said in ``skipped`` and logged as a warning the first time it is seen.
    """
    out = []
    for name in names:
        if is_internal_table(name) and not internal:
            continue
        try:
            out.append(check_table_name(name, internal=internal))
        except LeasekitError as exc:
            reason = f"table znode under {ctx.paths.tables} skipped: {str(exc)[:300]}"
            if skipped is not None:
                skipped.append(reason)
            _report_once(f"{ctx.paths.tables}/{name}", reason)
    return out


def _report_once(path: str, reason: str) -> None:
    with _reported_lock:
        if path in _reported:
            return
        if len(_reported) >= _REPORTED_MAX:
            _reported.clear()
        _reported.add(path)
    log.warning("%s", reason)


@dataclass(frozen=True)
class DropFence:
    """A table whose data znode this dropper marked (at ``version``) while it decides."""

    table: TableInfo
    version: int


def mark_for_drop(ctx: Context, table: TableInfo) -> DropFence | None:
    """Mark the table's drop fence, so that acquires of it fail until the drop is decided.

    The caller reads the leases that pin the table only after this, then ``commit_drop`` (or
    ``unmark_drop`` if it cannot decide), so an acquire either committed before the mark and
    is seen, or fails its fence check (docs/security.md).

    Arguments:
        ctx: the namespace.
        table: the table, as loaded.

    Returns:
        The fence, or None when another dropper is deciding or the fence moved: retry.

    Raises:
        TableNotFoundError: the table's data is gone.
    """
    data_path = ctx.paths.table_data(table.table_id)
    now, (node,) = ctx.read_with_clock([data_path])
    if node is None:
        raise TableNotFoundError(f"table {table.name!r} does not exist")
    if fence.is_marked(node) and ctx.clock(now) - node.stat.mtime_ms <= fence.STALE_MARK_MS:
        return None  # another dropper is deciding: wait for it
    try:
        return DropFence(table, fence.mark(ctx, table.table_id, node.stat.version))
    except TxnConflict:
        return None


def unmark_drop(ctx: Context, fenced: DropFence) -> None:
    """Clear the fence of a drop that will not be committed (best effort)."""
    with contextlib.suppress(LeasekitError):
        fence.unmark(ctx, fenced.table.table_id, fenced.version)


def commit_drop(ctx: Context, fenced: DropFence, pinned_by: Sequence[str], *, force: bool) -> bool:
    """Commit a fenced drop: the table's znode goes and its drop marker comes, in one step;
    ``finish_drop`` of the layer above removes the rest. The fence is cleared if it does not.

    Arguments:
        ctx: the namespace.
        fenced: the fence from ``mark_for_drop``.
        pinned_by: the live leases that pin the table, read after the fence was marked.
        force: drop it even though ``pinned_by`` is not empty.

    Returns:
        Whether it committed; False when the fence moved or the table went: retry.

    Raises:
        IllegalStateError: ``pinned_by`` is not empty and ``force`` is False (the message names
            the leases), or the namespace misses the parent of drop markers.
    """
    table = fenced.table
    try:
        if pinned_by and not force:
            raise IllegalStateError(
                f"table {table.name!r} is pinned by lease(s) {', '.join(pinned_by)}; "
                "drop or release them, or pass force=True"
            )
        marker = DroppedTable(table.name, table.data_dir).encode()
        ctx.store.commit(
            [
                Check(ctx.paths.table_data(table.table_id), fenced.version),
                Delete(ctx.paths.table(table.name)),
                Create(ctx.paths.dropped_table(table.table_id), marker),
            ]
        )
    except TxnConflict as exc:
        unmark_drop(ctx, fenced)
        if exc.index == 2:  # the drop marker's parent is missing (the fence stays until stale)
            raise _namespace_incomplete(ctx, f"drop table {table.name!r}", exc) from None
        return False
    except BaseException:
        unmark_drop(ctx, fenced)
        raise
    return True


def _namespace_incomplete(ctx: Context, what: str, exc: TxnConflict) -> IllegalStateError:
    parent = exc.op.path.rsplit("/", 1)[0]
    return IllegalStateError(
        f"cannot {what}: {parent} is missing from namespace {ctx.namespace!r} (was it deleted?); "
        "connect again to recreate the namespace's znodes"
    )


@dataclass(frozen=True)
class PendingDrop:
    """A committed drop whose metadata and files are not yet all removed."""

    table_id: str
    name: str
    data_dir: str
    """The table's own directory, checked against the namespace (docs/security.md,
    "Containment")."""
    marker_path: str


def read_drop(ctx: Context, table_id: str) -> PendingDrop | None:
    """The drop recorded by the marker of ``table_id``; None when there is none.

    Raises:
        CorruptMetadataError: naming the marker, when it cannot be decoded or names another
            directory than the table's own; nothing is to be deleted then.
    """
    marker_path = ctx.paths.dropped_table(table_id)
    node = ctx.store.get(marker_path)
    if node is None:
        return None
    marker = DroppedTable.decode(node.data, marker_path)
    data_dir = _marked_dir(ctx, table_id, marker, marker_path)
    return PendingDrop(table_id, marker.name, data_dir, marker_path)


def remove_dropped(ctx: Context, dropped: PendingDrop) -> None:
    """Remove a dropped table's data metadata, then its files, and its marker last (so a pass
    cut short is finished by the next). The leases' pins of it must be removed before."""
    ctx.store.delete_tree(ctx.paths.table_data(dropped.table_id))
    ctx.store.check_fence()  # a janitor that no longer leads deletes no directory
    ctx.warehouse.delete_dir(dropped.data_dir)
    ctx.store.delete_tree(dropped.marker_path)


def _marked_dir(ctx: Context, table_id: str, marker: DroppedTable, marker_path: str) -> str:
    """The directory a drop marker names, if it is the dropped table's own directory in the
    namespace (``<tables dir>/<name>/<table id>``); ``CorruptMetadataError`` naming the marker
    otherwise, before anything is deleted (docs/security.md, "Containment")."""
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
