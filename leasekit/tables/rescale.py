"""Rescaling a table online: a split or merge is one ZooKeeper transaction that writes the new
layout into the table's record and seals the parent buckets at their end offsets (K1).

Appends read a bucket's state before committing and version-check it in their transaction, so
an append racing a seal either commits before it (into the parent, below ``sealed_at``) or
fails its check, finds the parent sealed and routes its rows again by the new layout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import IllegalStateError, TableNotFoundError, ZooKeeperUnavailableError
from ..structs import TableBucket
from ..zk import Check, ConflictReason, Create, Op, SetData, TxnConflict, touch
from ..zk.formats import BucketState, TableRecord
from . import fence
from .layout import BucketLayout

if TYPE_CHECKING:
    from ..zk.paths import Paths
    from .info import TableInfo

__all__ = ["split_bucket", "merge_buckets"]

_ATTEMPTS = 200
"""Seal attempts before giving up on appends that keep moving the parents' end offsets."""

Change = Callable[[BucketLayout, Sequence[int]], tuple[BucketLayout, tuple[int, ...]]]
"""The new layout and the new buckets, from the current layout and the parents' ends."""


def split_bucket(table: TableInfo, bucket: object) -> tuple[TableBucket, TableBucket]:
    """Seal the active ``bucket`` at its end offset and open two new buckets, each owning half
    of its keys (K1, K2). No file is copied (K3).

    Raises:
        BucketNotFoundError: the table never had ``bucket`` (K8).
        IllegalStateError: it is sealed, another rescale of the table committed meanwhile, or
            the table is being dropped (K8).
        TableNotFoundError: the table was dropped.
    """
    table.refresh()
    b = table.bucket_number(bucket)
    table.layout.split(b, 0)  # refusals before any write

    def change(layout: BucketLayout, ends: Sequence[int]) -> tuple[BucketLayout, tuple[int, ...]]:
        return layout.split(b, ends[0])

    c1, c2 = _rescale(table, [b], change)
    return TableBucket(table.name, c1), TableBucket(table.name, c2)


def merge_buckets(table: TableInfo, bucket_a: object, bucket_b: object) -> TableBucket:
    """Seal two active siblings (the buckets one split made) at their end offsets and open one
    new bucket owning the keys of both (K1).

    Raises:
        BucketNotFoundError: the table never had one of them (K8).
        InvalidArgumentError: they are one bucket, or not siblings (K8).
        IllegalStateError: one is sealed, another rescale of the table committed meanwhile, or
            the table is being dropped (K8).
        TableNotFoundError: the table was dropped.
    """
    table.refresh()
    a, b = table.bucket_number(bucket_a), table.bucket_number(bucket_b)
    table.layout.merge(a, b, 0, 0)  # refusals before any write

    def change(layout: BucketLayout, ends: Sequence[int]) -> tuple[BucketLayout, tuple[int, ...]]:
        merged, c = layout.merge(a, b, ends[0], ends[1])
        return merged, (c,)

    (c,) = _rescale(table, [a, b], change)
    return TableBucket(table.name, c)


def _rescale(table: TableInfo, parents: list[int], change: Change) -> tuple[int, ...]:
    """Commit ``change`` of the layout read with ``table``, sealing ``parents`` (K1)."""
    ctx, tid = table.context, table.table_id
    record, version = table.record
    state_paths = [ctx.paths.bucket(tid, b) for b in parents]
    data_path = ctx.paths.table_data(tid)
    stamps = _stamps(record.rescaled_ms, len(record.rescales), ctx.server_time_ms())
    for _ in range(_ATTEMPTS):
        nodes = ctx.store.get_many([data_path, *state_paths])
        data_node = nodes[0]
        if data_node is None:
            raise TableNotFoundError(f"table {table.name!r} was dropped")
        if fence.is_marked(data_node):
            raise IllegalStateError(f"table {table.name!r} is being dropped: it is not rescaled")
        states = [
            None if n is None else BucketState.decode(n, p) for p, n in zip(state_paths, nodes[1:])
        ]
        layout, created = change(table.layout, [s.end if s else 0 for s in states])
        new_record = record._replace(rescales=layout.record.operations, rescaled_ms=stamps)
        ops: list[Op] = [
            SetData(ctx.paths.table(table.name), new_record.encode(), version),
            Check(data_path, data_node.stat.version),
        ]
        for b, state in zip(parents, states):
            ops += _seal_ops(ctx.paths, tid, b, state)
        ops.append(touch(ctx.paths.table_changes(tid)))
        try:
            ctx.store.commit(ops)
        except TxnConflict as exc:
            _refuse(table, exc)
            time.sleep(0.002)
            continue  # an append moved a parent's end: seal at the new end
        except ZooKeeperUnavailableError:
            if not _committed(table, new_record):
                raise
        table.adopt(new_record, version + 1)
        return created
    raise IllegalStateError(
        f"rescale of table {table.name!r}: gave up after {_ATTEMPTS} concurrent appends"
    )


def _stamps(stamps: tuple[int, ...], count: int, now_ms: int) -> tuple[int, ...]:
    """The rescale times with this one's, ``now_ms``, last: one per rescale, 0 for those of an
    older version that recorded none."""
    return (*stamps[:count], *(0,) * (count - len(stamps)), now_ms)


def _seal_ops(paths: Paths, tid: str, bucket: int, state: BucketState | None) -> list[Op]:
    """The ops sealing one parent at its end offset; a bucket never written gets its znodes."""
    path = paths.bucket(tid, bucket)
    if state is not None:
        if state.stat is None:
            raise IllegalStateError(f"the state of bucket {bucket} was not read from its znode")
        return [SetData(path, state.encode(sealed=True), state.stat.version)]
    sealed = BucketState.new(0, 0)._replace(sealed=True).encode()
    return [
        Create(path, sealed),
        Create(paths.log(tid, bucket)),
        Create(paths.snapshots(tid, bucket)),
    ]


def _refuse(table: TableInfo, exc: TxnConflict) -> None:
    """Raise the refusal a failed seal means; return when appends only moved a parent."""
    if exc.index == 0:
        if exc.reason == ConflictReason.NONODE:
            raise TableNotFoundError(f"table {table.name!r} was dropped") from None
        raise IllegalStateError(
            f"another rescale of table {table.name!r} committed while this one was prepared: "
            "read table.lineage() and try again"
        ) from None
    if exc.index == 1:
        if exc.reason == ConflictReason.NONODE:
            raise TableNotFoundError(f"table {table.name!r} was dropped") from None
        raise IllegalStateError(
            f"table {table.name!r} is being dropped: it is not rescaled"
        ) from None
    if exc.reason not in (ConflictReason.VERSION, ConflictReason.EXISTS):
        raise exc


def _committed(table: TableInfo, new_record: TableRecord) -> bool:
    """Whether a seal whose outcome is unknown (ZooKeeper unreachable) committed."""
    deadline = time.monotonic() + table.context.store.timeout * 3
    while time.monotonic() < deadline:
        try:
            node = table.context.store.get(table.context.paths.table(table.name))
        except ZooKeeperUnavailableError:
            time.sleep(0.5)
            continue
        return node is not None and node.data == new_record.encode()
    return False
