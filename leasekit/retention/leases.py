"""Leases in a retention plan (R5, L5, L11): which end in this pass — expired past their
grace, being dropped, or gone and leaving pins behind — and which snapshots the others pin."""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache

from ..durations import human_duration
from ..structs import RetentionItem
from ..zk import to_datetime
from .meta import LeaseMeta, Metadata, SnapshotMeta

__all__ = ["plan_leases", "holders_of", "pinned_by", "when"]


@lru_cache(maxsize=4096)
def when(ms: int) -> str:
    """A ZooKeeper time (ms) as reasons show it."""
    return to_datetime(ms).strftime("%Y-%m-%d %H:%M:%S UTC")


def plan_leases(meta: Metadata) -> tuple[list[RetentionItem], set[str]]:
    """An item per lease, and per lease id that no longer exists but left pins; also the ids
    of those that end in this pass (R5, L11, L5)."""
    items, ending = [], set()
    grace = human_duration(timedelta(milliseconds=meta.grace_ms))
    for lease in sorted(meta.leases, key=lambda x: x.lease_id):
        if lease.state != "live":
            action, reason = "delete", "being dropped: finishing the drop"
        elif meta.now_ms > lease.expires_ms + meta.grace_ms:
            action, reason = (
                "delete",
                f"lease expired at {when(lease.expires_ms)} (+{grace} grace)",
            )
        elif meta.now_ms > lease.expires_ms:
            action, reason = (
                "keep",
                (
                    f"expired at {when(lease.expires_ms)}; reclaimed after the {grace} grace, "
                    f"at {when(lease.expires_ms + meta.grace_ms)}"
                ),
            )
        else:
            action, reason = "keep", f"valid until {when(lease.expires_ms)}"
        if action == "delete":
            ending.add(lease.lease_id)
        items.append(RetentionItem("lease", None, lease.lease_id, action, reason, 0))
    names = {tm.table.table_id: tm.table.name for tm in meta.tables}
    for lease_id, keys in sorted(meta.stray_pins.items()):  # L5: they protect nothing
        where = ", ".join(f"{names.get(t, t)}/{b} snapshot {sid}" for t, b, sid in sorted(keys))
        reason = f"pins of lease {lease_id}, which no longer exists: {where}"
        ending.add(lease_id)
        items.append(RetentionItem("lease", None, lease_id, "delete", reason, 0))
    return items, ending


def holders_of(meta: Metadata) -> dict[tuple[str, int, int], list[LeaseMeta]]:
    """The leases pinning each snapshot, keyed (table_id, bucket, snapshot_id); a pin of a
    lease that no longer exists counts as one of a lease ending in this pass."""
    holders: dict[tuple[str, int, int], list[LeaseMeta]] = {}
    for lease in meta.leases:
        for key in lease.pins:
            holders.setdefault(key, []).append(lease)
    for lease_id, keys in meta.stray_pins.items():
        gone = LeaseMeta(lease_id, 0, "gone", -1, dict.fromkeys(keys))
        for key in keys:
            holders.setdefault(key, []).append(gone)
    return holders


def pinned_by(
    key: tuple[str, int, int],
    snap: SnapshotMeta,
    holders: dict[tuple[str, int, int], list[LeaseMeta]],
    ending: set[str],
) -> str | None:
    """Why a snapshot beyond the newest of its bucket is kept (R2, L5): pinned by a lease that
    does not end in this pass (``ending``), or by pins of no known lease; None: it is not."""
    leases = holders.get(key)
    if not leases:
        return f"pinned by {snap.pins} pin(s) of no known lease" if snap.pins > 0 else None
    live = [x for x in leases if x.lease_id not in ending]
    if live:
        return "pinned by " + ", ".join(
            f"lease {x.lease_id} until {when(x.expires_ms)}" for x in live
        )
    unknown = snap.pins - len(leases)
    return f"pinned by {unknown} pin(s) of no known lease" if unknown > 0 else None
