"""Committed offsets of consumer groups (C2, C3, C4): one znode per (group, table, bucket)
with the offset, the committer's metadata and the last commits with the log end at each.

A commit reads the stored records, the buckets' log ends and the ZooKeeper clock in one
pipelined round trip and writes every changed offset in one transaction while that fits
ZooKeeper's request limit (several beyond it, each bucket's offset still written whole);
offsets that did not change are not written. ``fence`` checks (the group generation of a
member, say) go into every one of those transactions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..durations import check_id
from ..errors import IllegalStateError, InvalidArgumentError, InvalidTypeError, TableNotFoundError
from ..records import OffsetAndMetadata, TableBucket
from ..zk import (
    MAX_TXN_BYTES,
    MAX_TXN_OPS,
    Check,
    Create,
    Op,
    SetData,
    TxnConflict,
    chunk_ops,
    op_size,
)
from ..zk.formats import BucketState, OffsetRecord, TableRecord

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["MAX_METADATA_BYTES", "check_group_id", "check_offsets", "fetch", "fetch_group", "commit", "log_ends"]

MAX_METADATA_BYTES = 4096
ATTEMPTS = 50


def check_group_id(value: object) -> str:
    """``value`` if it follows the id rule of leases (L1), else ``InvalidArgumentError``."""
    return check_id(value, what="group id", error=InvalidArgumentError)


def check_offsets(offsets: object) -> dict[TableBucket, OffsetAndMetadata]:
    """Offsets to commit, checked (C2, C3): a non-empty mapping of TableBucket to an int >= 0 or
    an OffsetAndMetadata whose metadata is a str of at most 4096 UTF-8 bytes."""
    if not isinstance(offsets, Mapping):
        raise InvalidTypeError(f"offsets must be a mapping of TableBucket to offset, not {type(offsets).__name__}")
    if not offsets:
        raise InvalidArgumentError("no offsets to commit: give at least one bucket")
    out: dict[TableBucket, OffsetAndMetadata] = {}
    for tb, value in offsets.items():
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"offset keys must be TableBucket, not {type(tb).__name__}")
        value = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        offset, metadata = value
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidTypeError(f"offset of {tb} must be an int, not {type(offset).__name__}")
        if offset < 0:
            raise InvalidArgumentError(f"offset of {tb} must be >= 0, got {offset}")
        if not isinstance(metadata, str):
            raise InvalidTypeError(f"metadata of {tb} must be a str, not {type(metadata).__name__}")
        if len(metadata.encode("utf-8", "surrogatepass")) > MAX_METADATA_BYTES:
            raise InvalidArgumentError(f"metadata of {tb} exceeds {MAX_METADATA_BYTES} UTF-8 bytes")
        out[tb] = OffsetAndMetadata(offset, metadata)
    return out


def _decode(path: str, node: Any) -> OffsetRecord | None:
    return None if node is None else OffsetRecord.decode(node, path)


def fetch(ctx: Context, group_id: str, tables: Mapping[str, TableInfo],
          buckets: Iterable[TableBucket]) -> dict[TableBucket, OffsetRecord]:
    """The group's committed offsets of ``buckets`` (tables by name in ``tables``), read
    pipelined; buckets without a commit are absent."""
    keys = list(buckets)
    paths = [ctx.paths.offset(group_id, tables[tb.table].table_id, tb.bucket) for tb in keys]
    out = {}
    for tb, path, node in zip(keys, paths, ctx.store.get_many(paths)):
        record = _decode(path, node)
        if record is not None:
            out[tb] = record
    return out


def fetch_group(ctx: Context, group_id: str) -> dict[tuple[str, int], OffsetRecord]:
    """Every committed offset of the group, keyed (table_id, bucket)."""
    parent = ctx.paths.group_offsets(group_id)
    names = [n for n in ctx.store.children(parent) or [] if not n.startswith(".")]
    paths = [f"{parent}/{n}" for n in names]
    out = {}
    for name, path, node in zip(names, paths, ctx.store.get_many(paths)):
        record = _decode(path, node)
        if record is not None:
            out[ctx.paths.parse_offset(name)] = record
    return out


def log_ends(states: Sequence[Any], paths: Sequence[str]) -> list[int]:
    """Log end offsets from bucket-state nodes (0 for a bucket never written)."""
    return [0 if node is None else BucketState.decode(node, path).end for node, path in zip(states, paths)]


class _Dropped(Exception):
    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self.names = names


def commit(ctx: Context, group_id: str, offsets: Mapping[TableBucket, int | OffsetAndMetadata],
           tables: Mapping[str, TableInfo], *, fence: Sequence[Check] = (),
           skip_dropped: bool = False) -> dict[TableBucket, OffsetRecord]:
    """Commit ``offsets`` (checked) for the group; the records written, by bucket (unchanged
    offsets are left out: nothing is written for them). Every transaction checks that the
    tables are still the ones named (C17): offsets of a dropped table's buckets raise
    ``TableNotFoundError`` before anything is written, or with ``skip_dropped`` are left out."""
    pending = check_offsets(offsets)
    written: dict[TableBucket, OffsetRecord] = {}
    for _ in range(ATTEMPTS):
        if not pending:
            return written
        try:
            written.update(_commit_once(ctx, group_id, pending, tables, fence, written))
            return written
        except _Dropped as exc:
            if not skip_dropped:
                first = min(tb for tb in pending if tb.table in exc.names)
                raise TableNotFoundError(
                    f"table {first.table!r} was dropped: the offset of {first} cannot be committed for group "
                    f"{group_id}; no offset of its buckets was written") from None
            pending = {tb: o for tb, o in pending.items() if tb.table not in exc.names}
        except TxnConflict as exc:
            if exc.reason not in ("version", "exists", "nonode") or any(op == exc.op for op in fence):
                raise
            for tb in written:
                pending.pop(tb, None)
    raise IllegalStateError(f"commit for group {group_id}: gave up after {ATTEMPTS} conflicting concurrent commits")


def _commit_once(ctx: Context, group_id: str, pending: Mapping[TableBucket, OffsetAndMetadata],
                 tables: Mapping[str, TableInfo], fence: Sequence[Check],
                 written: dict[TableBucket, OffsetRecord]) -> dict[TableBucket, OffsetRecord]:
    paths = ctx.paths
    keys = list(pending)
    names = sorted({tb.table for tb in keys})
    offset_paths = [paths.offset(group_id, tables[tb.table].table_id, tb.bucket) for tb in keys]
    state_paths = [paths.bucket(tables[tb.table].table_id, tb.bucket) for tb in keys]
    now, nodes = ctx.read_with_clock([paths.group(group_id), paths.group_offsets(group_id),
                                      *offset_paths, *state_paths, *(paths.table(n) for n in names)])
    group_node, parent_node = nodes[0], nodes[1]
    stored = nodes[2:2 + len(keys)]
    ends = log_ends(nodes[2 + len(keys):2 + 2 * len(keys)], state_paths)
    guard = list(fence)
    dropped = []
    for name, node in zip(names, nodes[2 + 2 * len(keys):]):
        if node is None or TableRecord.decode(node.data, paths.table(name)).table_id != tables[name].table_id:
            dropped.append(name)  # (a table of that name created since is another table)
        else:
            guard.append(Check(paths.table(name), node.stat.version))  # not dropped while committing
    if dropped:
        raise _Dropped(dropped)
    ops: list[Op] = []
    if group_node is None:
        ops.append(Create(paths.group(group_id)))
    if parent_node is None:
        ops.append(Create(paths.group_offsets(group_id)))
    records: dict[str, tuple[TableBucket, OffsetRecord]] = {}
    for tb, path, node, end in zip(keys, offset_paths, stored, ends):
        offset, metadata = pending[tb]
        old = _decode(path, node)
        if old is not None and (old.offset, old.metadata) == (offset, metadata):
            continue  # C3: unchanged offsets are not written
        base = old if old is not None else OffsetRecord.empty(tb.table)
        record = base.committed(offset, metadata, tb.table, now, end)
        records[path] = (tb, record)
        ops.append(Create(path, record.encode()) if old is None or old.stat is None
                   else SetData(path, record.encode(), old.stat.version))
    if not records:
        if fence:
            ctx.store.commit(list(fence))  # C11: a fenced member is refused even when nothing changes
        return {}
    guard_bytes = sum(op_size(op) for op in guard)
    for chunk in chunk_ops(ops, MAX_TXN_OPS - len(guard), MAX_TXN_BYTES - guard_bytes):
        ctx.store.commit([*guard, *chunk])
        for op in chunk:
            if op.path in records:
                tb, record = records[op.path]
                written[tb] = record
    return {tb: record for tb, record in records.values()}
