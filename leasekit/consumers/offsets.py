"""Committed offsets of consumer groups (C2, C3, C4): one znode per (group, table, bucket)
with the offset, the committer's metadata and the last commits with the log end at each.

A commit reads the stored records, the buckets' log ends and the ZooKeeper clock in one
pipelined round trip and writes every changed offset in one transaction while that fits
ZooKeeper's request limit (several beyond it, each bucket's offset still written whole);
offsets that did not change are not written. ``fence`` checks (the group generation of a
member, say) go into every one of those transactions.

A commit from outside the group (``outside``: a manual assignment, an offset reset) is refused
with ``GroupNotEmptyError`` while the group has live members (C13), checked inside each
transaction: a member joins by creating its znode and bumping the data version of the
``members`` znode in one transaction, and the commit checks that version (ZooKeeper's Check
compares data versions only, never child versions), and the assignment's, as read together
with an empty member list.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import (
    CommitFailedError,
    CorruptMetadataError,
    GroupNotEmptyError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    TableNotFoundError,
)
from ..structs import OffsetAndMetadata, TableBucket
from ..validate import check_id, check_int
from ..zk import (
    Check,
    ConflictReason,
    Create,
    Op,
    SetData,
    TxnConflict,
    touch,
)
from ..zk.formats import BucketState, OffsetRecord, TableRecord
from .commit_chunks import fenced_chunks

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = [
    "MAX_METADATA_BYTES",
    "OFFSET_LIMIT",
    "check_offset",
    "decode",
    "check_group_id",
    "check_offsets",
    "fetch",
    "fetch_group",
    "commit",
    "log_ends",
]

MAX_METADATA_BYTES = 4096
OFFSET_LIMIT = 2**63
"""Offsets and epoch-ms timestamps are int64: every one is below this (docs/security.md)."""
MAX_TIME_MS = 253402300799999
"""The last millisecond of year 9999: the latest commit time a datetime shows."""
ATTEMPTS = 50


def check_group_id(value: object) -> str:
    """``value`` if it follows the id rule of leases (L1), else ``InvalidArgumentError``."""
    return check_id(value, what="group id", error=InvalidArgumentError)


def check_offsets(offsets: object) -> dict[TableBucket, OffsetAndMetadata]:
    """Offsets to commit, checked (C2, C3): a non-empty mapping of TableBucket to an int >= 0 or
    an OffsetAndMetadata whose metadata is a str of at most 4096 UTF-8 bytes."""
    if not isinstance(offsets, Mapping):
        raise InvalidTypeError(
            f"offsets must be a mapping of TableBucket to offset, not {type(offsets).__name__}"
        )
    if not offsets:
        raise InvalidArgumentError("no offsets to commit: give at least one bucket")
    out: dict[TableBucket, OffsetAndMetadata] = {}
    for tb, value in offsets.items():
        if type(tb) is not TableBucket and not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"offset keys must be TableBucket, not {type(tb).__name__}")
        if type(value) is int and 0 <= value < OFFSET_LIMIT:  # the common case, checked
            out[tb] = OffsetAndMetadata(value, "")
            continue
        value = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(value)
        offset, metadata = value
        offset = check_offset(offset, f"offset of {tb}")
        if not isinstance(metadata, str):
            raise InvalidTypeError(f"metadata of {tb} must be a str, not {type(metadata).__name__}")
        if len(metadata) * 4 > MAX_METADATA_BYTES and (
            len(metadata.encode("utf-8", "surrogatepass")) > MAX_METADATA_BYTES
        ):
            raise InvalidArgumentError(f"metadata of {tb} exceeds {MAX_METADATA_BYTES} UTF-8 bytes")
        out[tb] = OffsetAndMetadata(offset, metadata)
    return out


def check_offset(value: object, what: str) -> int:
    """``value`` if it is an int in [0, 2**63); else ``InvalidTypeError`` or
    ``InvalidArgumentError`` naming ``what``."""
    value = check_int(value, what, minimum=0)
    if value >= OFFSET_LIMIT:
        raise InvalidArgumentError(f"{what} is out of range: {value} is not below 2**63")
    return value


class _Decoded:
    """Records decoded before, by their stored bytes (the oldest dropped past ``limit``): a
    member commits the same buckets again and again, and reads back each time the records it
    wrote the time before, so a commit of 1,000 offsets need not decode 1,000 histories.
    Equal bytes are an equal record; only the znode's stat differs, and it is set again."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._records: dict[bytes, Any] = {}
        self._lock = threading.Lock()

    def get(self, data: bytes) -> Any:
        return self._records.get(data)

    def put(self, data: bytes, record: Any) -> None:
        with self._lock:
            self._records[data] = record
            while len(self._records) > self._limit:
                del self._records[next(iter(self._records))]


_OFFSETS = _Decoded(16_384)
_ENDS = _Decoded(16_384)


def decode(node: Any, path: str) -> OffsetRecord:
    """The committed offset stored at ``path``; ``CorruptMetadataError`` naming the path for
    garbage, and for numbers no int64 holds (an older version's or a hostile client's)."""
    known = _OFFSETS.get(node.data)
    if known is not None:
        return known._replace(stat=node.stat)
    record = OffsetRecord.decode(node, path)
    numbers = [record.offset, *(n for c in record.history for n in (c.offset, c.log_end))]
    if any(not 0 <= n < OFFSET_LIMIT for n in numbers) or any(
        not 0 <= c.time_ms <= MAX_TIME_MS for c in record.history
    ):
        raise CorruptMetadataError(f"committed offset at {path} holds a number out of range", path)
    _OFFSETS.put(node.data, record._replace(stat=None))
    return record


def _decode(path: str, node: Any) -> OffsetRecord | None:
    return None if node is None else decode(node, path)


def fetch(
    ctx: Context, group_id: str, tables: Mapping[str, TableInfo], buckets: Iterable[TableBucket]
) -> dict[TableBucket, OffsetRecord]:
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
    ends = []
    for node, path in zip(states, paths):
        if node is None:
            ends.append(0)
            continue
        end = _ENDS.get(node.data)
        if end is None:
            end = BucketState.decode(node, path).end
            _ENDS.put(node.data, end)
        ends.append(end)
    return ends


_RETRIED = (ConflictReason.VERSION, ConflictReason.EXISTS, ConflictReason.NONODE)
"""Conflicts a commit retries (unless a fence check failed)."""


class _How(NamedTuple):
    """How ``commit`` writes: its ``outside``, ``expected`` and ``reset`` arguments."""

    outside: bool
    expected: Mapping[TableBucket, int | None] | None
    reset: bool


class _Dropped(Exception):
    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self.names = names


def commit(
    ctx: Context,
    group_id: str,
    offsets: Mapping[TableBucket, int | OffsetAndMetadata],
    tables: Mapping[str, TableInfo],
    *,
    fence: Sequence[Check] = (),
    skip_dropped: bool = False,
    outside: bool = False,
    expected: Mapping[TableBucket, int | None] | None = None,
    reset: bool = False,
) -> dict[TableBucket, OffsetRecord]:
    """Commit ``offsets`` (checked) for the group; the records written, by bucket (unchanged
    offsets are left out: nothing is written for them).

    Arguments:
        fence: checks put into every transaction (a member's liveness and ownership, C11).
        skip_dropped: leave out the offsets of dropped tables' buckets instead of raising.
        outside: the committer is not a member: refused while the group has live members.
        expected: the offset each bucket must still hold (None: none), checked in the transaction.
        reset: the offsets are seals where the reset policy put a member (``OffsetRecord.reset``).

    Returns:
        The records written, by bucket.

    Raises:
        TableNotFoundError: a table was dropped (C17); nothing of it written.
        GroupNotEmptyError: ``outside`` and the group has live members, read before the write
            or found joined by the transaction's check; nothing was written.
        CommitFailedError: an offset is not as ``expected`` (named); nothing more was written.
        InvalidArgumentError, InvalidTypeError: bad offsets, before any I/O.
    """
    pending = check_offsets(offsets)
    written: dict[TableBucket, OffsetRecord] = {}
    for _ in range(ATTEMPTS):
        if not pending:
            return written
        try:
            how = _How(outside, expected, reset)
            written.update(_commit_once(ctx, group_id, pending, tables, fence, written, how))
            return written
        except _Dropped as exc:
            if not skip_dropped:
                first = min(tb for tb in pending if tb.table in exc.names)
                raise TableNotFoundError(
                    f"table {first.table!r} was dropped: the offset of {first} cannot be "
                    f"committed for group {group_id}; no offset of its buckets was written"
                ) from None
            pending = {tb: o for tb, o in pending.items() if tb.table not in exc.names}
        except TxnConflict as exc:
            if exc.reason not in _RETRIED or any(op == exc.op for op in fence):
                raise
            for tb in written:
                pending.pop(tb, None)
    raise IllegalStateError(
        f"commit for group {group_id}: gave up after {ATTEMPTS} conflicting concurrent commits"
    )


def _commit_once(
    ctx: Context,
    group_id: str,
    pending: Mapping[TableBucket, OffsetAndMetadata],
    tables: Mapping[str, TableInfo],
    fence: Sequence[Check],
    written: dict[TableBucket, OffsetRecord],
    how: _How,
) -> dict[TableBucket, OffsetRecord]:
    paths, (outside, expected, reset) = ctx.paths, how
    keys = list(pending)
    names = sorted({tb.table for tb in keys})
    offset_paths = [paths.offset(group_id, tables[tb.table].table_id, tb.bucket) for tb in keys]
    state_paths = [paths.bucket(tables[tb.table].table_id, tb.bucket) for tb in keys]
    # (the assignment is read before the members: read in this order, one pipeline, in order)
    empty = [paths.group_assignment(group_id), paths.group_members(group_id)] if outside else []
    now, nodes = ctx.read_with_clock(
        [
            paths.group(group_id),
            paths.group_offsets(group_id),
            *offset_paths,
            *state_paths,
            *(paths.table(n) for n in names),
            *empty,
        ]
    )
    group_node, parent_node, stored = nodes[0], nodes[1], nodes[2 : 2 + len(keys)]
    ends = log_ends(nodes[2 + len(keys) : 2 + 2 * len(keys)], state_paths)
    guard = list(fence)
    ops: list[Op] = []
    if group_node is None:
        ops.append(Create(paths.group(group_id)))
    if outside:
        guard += _no_members(ctx, group_id, nodes[len(nodes) - 2], nodes[-1], ops)
    guard += _tables_kept(ctx, names, nodes[2 + 2 * len(keys) :], tables)
    if parent_node is None:
        ops.append(Create(paths.group_offsets(group_id)))
    olds = [_decode(path, node) for path, node in zip(offset_paths, stored)]
    ops += _as_expected(group_id, pending, keys, offset_paths, olds, expected, len(written))
    records: dict[str, tuple[TableBucket, OffsetRecord]] = {}
    for tb, path, old, end in zip(keys, offset_paths, olds, ends):
        offset, metadata = pending[tb]
        if old is not None and (old.offset, old.metadata) == (offset, metadata):
            continue  # C3: unchanged offsets are not written
        base = old if old is not None else OffsetRecord.empty(tb.table)
        record = base.committed(offset, metadata, tb.table, now, end, reset=reset)
        records[path] = (tb, record)
        data = record.encode()
        _OFFSETS.put(data, record)  # what the next commit of this bucket reads back
        ops.append(
            Create(path, data)
            if old is None or old.stat is None
            else SetData(path, data, old.stat.version)
        )
    if not records:
        if fence:  # C11: a fenced member is refused even when nothing changes
            ctx.store.commit(list(fence))
        return {}
    _write(ctx, guard, ops, records, written, touch(paths.group_changes(group_id)))
    return {tb: record for tb, record in records.values()}


def _write(
    ctx: Context,
    guard: list[Check],
    ops: list[Op],
    records: Mapping[str, tuple[TableBucket, OffsetRecord]],
    written: dict[TableBucket, OffsetRecord],
    marker: Op,
) -> None:
    """Run ``ops`` in as few transactions as fit ZooKeeper's request limit, each after the
    ``guard`` checks that concern it (those of its buckets' owners, and every other one) and
    ending with ``marker`` (the group's change marker); each offset record written goes into
    ``written`` as its transaction succeeds."""
    under = f"{marker.path}/owners/"  # the marker is the group's znode
    owners = {g.path[len(under) :]: g for g in guard if g.path.startswith(under)}
    common = [g for g in guard if not g.path.startswith(under)]
    for chunk in fenced_chunks(ops, owners, [*common, marker]):
        checks = [owners[name] for op in chunk if (name := op.path.rsplit("/", 1)[1]) in owners]
        ctx.store.commit([*common, *checks, *chunk, marker])
        for op in chunk:
            if op.path in records:
                tb, record = records[op.path]
                written[tb] = record


def _tables_kept(
    ctx: Context, names: list[str], nodes: Sequence[Any], tables: Mapping[str, TableInfo]
) -> list[Check]:
    """Checks that the tables ``names`` (their znodes read in ``nodes``) are not dropped while
    committing; ``_Dropped`` naming those dropped already (a table of that name created since
    is another table)."""
    dropped, checks = [], []
    for name, node in zip(names, nodes):
        path = ctx.paths.table(name)
        if node is None or TableRecord.decode(node.data, path).table_id != tables[name].table_id:
            dropped.append(name)
        else:
            checks.append(Check(path, node.stat.version))
    if dropped:
        raise _Dropped(dropped)
    return checks


def _as_expected(
    group_id: str,
    pending: Mapping[TableBucket, OffsetAndMetadata],
    keys: list[TableBucket],
    paths: list[str],
    olds: list[OffsetRecord | None],
    expected: Mapping[TableBucket, int | None] | None,
    written: int,
) -> list[Check]:
    """With ``expected``: ``CommitFailedError`` naming every bucket whose offset read is not
    the one expected, else checks that the offsets left unchanged are still those read when
    the transaction runs (the written ones carry their version themselves)."""
    if expected is None:
        return []
    changed = [
        f"{tb.table}/{tb.bucket} (planned from {expected.get(tb)}, now {now})"
        for tb, old in zip(keys, olds)
        if (now := None if old is None else old.offset) != expected.get(tb)
    ]
    if changed:
        more = f" and {len(changed) - 10} more" if len(changed) > 10 else ""
        partly = f" ({written} offsets of earlier transactions were written)" if written else ""
        raise CommitFailedError(
            f"the committed offsets of group {group_id} changed since the plan was made: "
            f"{', '.join(changed[:10])}{more}; nothing was written{partly}"
        )
    return [
        Check(path, old.stat.version)
        for tb, path, old in zip(keys, paths, olds)
        if old is not None and old.stat is not None and (old.offset, old.metadata) == pending[tb]
    ]


def _no_members(
    ctx: Context, group_id: str, assignment: Any, members: Any, ops: list[Op]
) -> list[Check]:
    """The checks that keep a commit from outside the group out of a group with live members:
    ``GroupNotEmptyError`` now if the members read have any; else checks that fail once a
    member joined since (a join bumps the ``members`` znode's data version; an assignment
    published since names a member too). A missing ``members`` znode is created by the
    commit (``ops``), which fails if a member created it meanwhile."""
    if members is not None and members.stat.num_children:
        raise GroupNotEmptyError(
            f"group {group_id} has {members.stat.num_children} live member(s): a consumer outside "
            "it cannot commit its offsets (stop them first); nothing was written"
        )
    checks = (
        []
        if assignment is None
        else [Check(ctx.paths.group_assignment(group_id), assignment.stat.version)]
    )
    if members is None:
        ops.append(Create(ctx.paths.group_members(group_id)))
    else:
        checks.append(Check(ctx.paths.group_members(group_id), members.stat.version))
    return checks
