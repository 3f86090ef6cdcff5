"""What a lease read reads (L12, K4): the lease checked live, then the pinned snapshots standing
for the table's active buckets, each restricted to the keys it counts for, as read sources."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import NotPinnedError
from ..snapshots.catalog import get_snapshots
from ..snapshots.cover import cover
from ..snapshots.sources import Source
from . import acquire, pins

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["lease_sources"]


def lease_sources(
    ctx: Context, lease_id: str, table: TableInfo, *, allow_partial: bool = False
) -> list[Source]:
    """The sources of a read of ``table`` through lease ``lease_id``: each active bucket's
    pinned snapshot or, for one not pinned itself, its pinned ancestors' snapshots restricted
    to its keys. No key is in two of them, so they need no order (all at depth 0).

    Arguments:
        ctx: the connection's context.
        lease_id: the lease.
        table: the table read.
        allow_partial: leave out active buckets that no pin covers instead of refusing.

    Returns:
        The sources, snapshots only (no log tail).

    Raises:
        InvalidLeaseIdError: ``lease_id`` breaks the id rule.
        LeaseNotFoundError: the lease does not exist (never acquired, dropped or reclaimed).
        LeaseExpiredError: the lease expired or is being dropped.
        NotPinnedError: some active buckets are not covered and ``allow_partial`` is False.
        SnapshotNotFoundError: a pinned snapshot is gone.
        ZooKeeperUnavailableError: ZooKeeper did not answer.
    """
    acquire.validity(ctx, lease_id)
    pinned = {tb.bucket: sid for tb, sid in pins.pins_of(ctx, lease_id, table).items()}
    used = cover(table.layout, pinned)
    if used.uncovered and not allow_partial:
        shown = ", ".join(map(str, used.uncovered[:10]))
        more = " ..." if len(used.uncovered) > 10 else ""
        raise NotPinnedError(
            f"lease {lease_id!r} does not pin {len(used.uncovered)} of "
            f"{table.num_buckets} buckets of {table.name!r} (buckets {shown}{more}), nor "
            "their ancestors; acquire them (a bucket with records but no snapshot has nothing "
            "to pin: take one with table.snapshot(spark)) or pass allow_partial=True"
        )
    # A bucket pinned as empty (id 0, L15) has no rows: no source.
    snaps = get_snapshots(table, {b: pinned[b] for b in used.used if pinned[b] > 0})
    return [
        Source(b, 0, s, s.log_offset, s.log_offset, used.used[b])
        for b, s in ((s.table_bucket.bucket, s) for s in snaps)
    ]
