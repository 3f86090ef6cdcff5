"""Batch markers of idempotent appends: a writer that numbers its batches (a Spark stream sink)
commits each with a marker saying which batch, so a batch replayed after a failure is skipped."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from ..errors import IllegalStateError
from ..zk import Create, Op, SetData, op_size
from ..zk.formats import SinkMarkRecord

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["BatchMark", "read_mark", "mark_ops", "mark_bytes"]


class BatchMark(NamedTuple):
    """The batch an append commits, and the marker that records it."""

    path: str
    """The marker znode (``Paths.sink``); its parent is created with it."""
    batch: int
    """The batch number (Spark's batch id); batches commit in increasing order."""


def read_mark(ctx: Context, path: str) -> SinkMarkRecord | None:
    """The marker at ``path``; None when the writer has committed nothing yet."""
    node = ctx.store.get(path)
    return None if node is None else SinkMarkRecord.decode(node.data, path)


def mark_ops(ctx: Context, mark: BatchMark, buckets: Sequence[int], final: bool) -> list[Op]:
    """Ops recording, in the transaction that commits ``buckets`` of ``mark.batch``, that they
    are committed (``final``: the batch is whole now), version-checked against a concurrent
    commit of the same writer.

    Raises:
        IllegalStateError: the marker says these buckets of the batch are committed already.
    """
    parent = mark.path.rsplit("/", 1)[0]
    parent_node, node = ctx.store.get_many([parent, mark.path])
    old = SinkMarkRecord(-1) if node is None else SinkMarkRecord.decode(node.data, mark.path)
    done = set(old.buckets) if old.pending == mark.batch else set()
    if old.batch >= mark.batch or done & set(buckets):
        raise IllegalStateError(
            f"batch {mark.batch} was committed meanwhile by another writer of the same query "
            f"({mark.path}); nothing more is committed"
        )
    new = (
        SinkMarkRecord(mark.batch)
        if final
        else SinkMarkRecord(old.batch, mark.batch, tuple(sorted(done | set(buckets))))
    )
    if node is not None:
        return [SetData(mark.path, new.encode(), node.stat.version)]
    return [*([] if parent_node else [Create(parent)]), Create(mark.path, new.encode())]


def mark_bytes(mark: BatchMark, buckets: int) -> int:
    """An upper bound of the bytes ``mark_ops`` takes for a batch of ``buckets`` buckets."""
    big = SinkMarkRecord(2**62, 2**62, tuple(range(2**31, 2**31 + buckets))).encode()
    return op_size(Create(mark.path.rsplit("/", 1)[0])) + op_size(Create(mark.path, big))
