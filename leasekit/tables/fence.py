"""The drop fence: a table's data znode, marked "dropping" while ``drop_table`` decides, so that
a drop and an acquire of the same table exclude each other (docs/security.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import IllegalStateError
from ..zk import Check, ConflictReason, Create, Delete, Node, SetData, TxnConflict
from ..zk.formats import DropMark

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["STALE_MARK_MS", "is_marked", "mark", "unmark", "fence_check"]

STALE_MARK_MS = 15_000
"""A mark this old (ZooKeeper clock) belongs to a dropper that died between marking and deciding;
an acquire may clear it. Clearing a live dropper's mark only makes its drop start over."""


def is_marked(node: Node) -> bool:
    return DropMark.is_marked(node)


def mark(ctx: Context, table_id: str, version: int) -> int:
    """Mark the table's data znode if it still has ``version``; its new version.

    Raises ``TxnConflict`` ("version": someone else marked or unmarked it; "nonode": dropped)."""
    return ctx.store.set(ctx.paths.table_data(table_id), DropMark().encode(), version).version


def unmark(ctx: Context, table_id: str, version: int) -> bool:
    """Clear a mark of ``version``, unless the drop committed meanwhile; whether it was cleared.

    Creating and deleting the drop marker in the same transaction fails if a drop committed
    (its marker exists until the data is gone), so a committed drop always stays fenced."""
    marker = ctx.paths.dropped_table(table_id)
    try:
        ctx.store.commit(
            [Create(marker), Delete(marker), SetData(ctx.paths.table_data(table_id), b"", version)]
        )
    except TxnConflict as exc:
        if exc.index == 0 and exc.reason == ConflictReason.NONODE:
            raise IllegalStateError(
                f"cannot clear the drop fence of table {table_id}: {ctx.paths.dropped} is missing "
                f"from namespace {ctx.namespace!r}; connect again to recreate the namespace's "
                "znodes"
            ) from None
        return False
    return True


def fence_check(ctx: Context, table_id: str, version: int) -> Check:
    """Transaction op of an acquire: fails if the table was marked or dropped since it was read."""
    return Check(ctx.paths.table_data(table_id), version)
