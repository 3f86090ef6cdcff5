"""A group member at the seals of sealed buckets (K5, K6, C5): which new buckets the group
reads from their beginning, and the commits of the seals where the reset policy put the member.

A member whose reset policy puts it at the seal of a sealed bucket (it had no offset for it, or
its offset left the log) commits that seal at once, with auto-commit or not: no record below it
was handed out, so nothing the caller still processes is committed, and the leader, which
assigns new buckets once their parents are committed to their seals, moves on (K5). The commit
is an ordinary fenced commit, durable and checked against ownership, so it holds whatever
rebalance follows; one refused leaves the bucket to its next owner, who resets it again. When
the member had no offset at all, the record is marked as a reset (``OffsetRecord.reset``): the
group did not consume the bucket, and its new buckets start by the reset policy, not from 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING

from ..errors import CommitFailedError
from ..structs import OffsetAndMetadata, TableBucket
from . import lineage
from . import offsets as stored

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from .subscription import SubscriptionState

__all__ = ["SealCommits", "from_beginning"]

log = logging.getLogger("leasekit.consumers")


def from_beginning(
    ctx: Context, group_id: str, tables: Mapping[str, TableInfo], buckets: list[TableBucket]
) -> set[TableBucket]:
    """Of ``buckets`` (made by rescales, without committed offsets; tables by name in
    ``tables``), those the group reads from their beginning: it consumed one of their parents
    (K6), as its committed offsets of their ancestors say (one pipelined read), an offset the
    reset policy put at a seal (``OffsetRecord.reset``) not counting. A parent sealed empty
    the group never committed stands for its own parents; one the table was created with
    counts as consumed when the group has consumed any bucket of the table (it was reading
    the table then). The others start by the reset policy (C5)."""
    wanted = {
        TableBucket(tb.table, b)
        for tb in buckets
        for b in lineage.ancestors(tables[tb.table].layout, tb.bucket)
    }
    records = stored.fetch(ctx, group_id, tables, wanted)
    reading: dict[str, bool] = {}

    def was_reading(name: str) -> bool:
        if name not in reading:
            every = [TableBucket(name, b) for b in range(tables[name].layout.count)]
            found = stored.fetch(ctx, group_id, tables, every)
            reading[name] = any(not r.reset for r in found.values())
        return reading[name]

    out = set()
    for tb in buckets:
        layout = tables[tb.table].layout

        def consumed(b: int, name: str = tb.table) -> bool | None:
            record = records.get(TableBucket(name, b))
            return None if record is None else not record.reset

        empty = any(
            not layout.parents(b) and layout.sealed_at(b) == 0
            for b in lineage.ancestors(layout, tb.bucket)
        )
        default = empty and was_reading(tb.table)
        if lineage.from_beginning(layout, tb.bucket, consumed, default=default):
            out.add(tb)
    return out


class SealCommits:
    """A member's seals to commit, and what it reads from 0, for group ``group_id``."""

    def __init__(self, ctx: Context, group_id: str, subscription: SubscriptionState) -> None:
        self._ctx, self._group, self._sub = ctx, group_id, subscription
        self._due: dict[TableBucket, tuple[int, bool]] = {}
        """Bucket -> its seal, and whether to mark it as a reset."""

    def from_beginning(self, buckets: list[TableBucket]) -> set[TableBucket]:
        """Of ``buckets`` (made by rescales, without committed offsets), those the group reads
        from their beginning (``from_beginning``)."""
        tables = {tb.table: self._sub.table_of(tb) for tb in buckets}
        return from_beginning(self._ctx, self._group, tables, buckets)

    def add(self, tb: TableBucket, seal: int, consumed: bool) -> None:
        """The reset policy put the member at ``seal``, the seal of ``tb``; ``consumed``: it
        was inside the bucket before (its offset left the log), so no reset mark."""
        self._due[tb] = (seal, not consumed)

    def commit(self, commit: Callable[..., None], owned: Collection[TableBucket]) -> bool:
        """Commit the seals due through the member's ``commit`` (those of buckets not
        ``owned`` any more are dropped); False when a commit was refused (the member was
        fenced: it rejoins, and the bucket's next owner resets it again)."""
        for tb, (seal, reset) in list(self._due.items()):
            try:
                if tb in owned:
                    commit({tb: OffsetAndMetadata(seal)}, skip_dropped=True, reset=reset)
            except CommitFailedError as exc:
                log.warning("group %s: seal of %s not committed: %s", self._group, tb, exc)
                self._due.clear()
                return False
            del self._due[tb]
        return True
