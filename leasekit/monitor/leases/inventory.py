"""The lease inventory (M4): every lease with its owner, its state (active, expiring,
orphaned, expired) and the bytes it pins and alone keeps (``lease_book`` reads and judges the
leases, ``lease_bytes`` sizes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...zk import to_datetime
from .lease_book import lease_state, read_leases
from .lease_bytes import lease_bytes

if TYPE_CHECKING:
    import pandas as pd

    from ...context import Context

__all__ = ["INVENTORY_COLUMNS", "lease_inventory"]

INVENTORY_COLUMNS = [
    "lease_id",
    "owner",
    "host",
    "state",
    "pinned_buckets",
    "tables",
    "pinned_bytes",
    "exclusive_bytes",
    "created_at",
    "renewed_at",
    "expires_at",
]


def lease_inventory(ctx: Context) -> pd.DataFrame:
    """Every lease with its owner, state and bytes (M4).

    Arguments:
        ctx: the connection's context.

    Returns:
        One row per lease, by lease id (INVENTORY_COLUMNS): ``tables`` lists the names of the
        tables it pins; ``pinned_bytes`` sums the snapshots it pins, ``exclusive_bytes`` what
        retention would delete if it were dropped (files no other lease or retention rule
        keeps). ``attrs["measured_at"]`` is the time the states were decided at.

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
        CorruptMetadataError: a table's or the settings' metadata is unreadable.
    """
    import pandas as pd

    book = read_leases(ctx)
    sizes = lease_bytes(ctx, book)
    rows = []
    for entry in book.leases:
        if not entry.live:
            continue
        record, stat = entry.record, entry.record.stat
        pinned, exclusive = sizes.get(entry.lease_id, (0, 0))
        rows.append(
            {
                "lease_id": entry.lease_id,
                "owner": entry.owner,
                "host": entry.host,
                "state": lease_state(entry, book.now_ms),
                "pinned_buckets": len(entry.pins),
                "tables": sorted(set(entry.tables.values())),
                "pinned_bytes": pinned,
                "exclusive_bytes": exclusive,
                "created_at": to_datetime(stat.ctime_ms) if stat else None,
                "renewed_at": to_datetime(stat.mtime_ms) if stat else None,
                "expires_at": to_datetime(record.expires_ms),
            }
        )
    frame = pd.DataFrame(rows, columns=INVENTORY_COLUMNS)
    for column in ("pinned_buckets", "pinned_bytes", "exclusive_bytes"):
        frame[column] = pd.array([row[column] for row in rows], dtype="Int64")
    for column in ("created_at", "renewed_at", "expires_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    for column in ("lease_id", "owner", "host", "state"):
        frame[column] = frame[column].astype("string")
    frame.attrs["measured_at"] = to_datetime(book.now_ms)
    return frame
