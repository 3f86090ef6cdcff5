"""The bytes each lease holds (M4): ``pinned`` sums the snapshots it pins; ``exclusive`` is
what retention's own planner would delete if the lease were gone and keeps while it lives,
so a file another lease or a retention rule (newest snapshots, log retention, consumers)
keeps never counts.

The tables the leases pin are gathered once, as retention gathers them; each lease is then
planned twice over the buckets it pins only (retention decides each bucket on its own):
held (as if valid now, though expired) and dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..durations import to_ms
from ..errors import CorruptMetadataError
from ..retention.gather import gather_table
from ..retention.meta import LeaseMeta, Metadata, TableMeta
from ..retention.planner import plan
from ..tables.catalog import load_tables
from ..zk.formats import LIVE
from .lease_book import LeaseBook, LeaseEntry

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["lease_bytes"]

Pin = tuple[str, int, int]
"""(table id, bucket, snapshot id)."""

_Item = tuple[str, object, object]
"""(kind, table bucket, item id) of a retention item."""


def _meta(entry: LeaseEntry) -> LeaseMeta:
    stat = entry.record.stat
    return LeaseMeta(
        entry.lease_id,
        entry.record.expires_ms,
        entry.record.state,
        stat.version if stat else 0,
        entry.pins,
        stat.czxid if stat else 0,
    )


def _gather(ctx: Context, book: LeaseBook, skipped: list[str]) -> dict[str, TableMeta]:
    """The retention metadata of every table a lease pins, by table id (a table dropped, or
    dropped and created again, since it was pinned is left out)."""
    names = sorted({name for e in book.leases for name in e.tables.values()})
    wanted = {tid for e in book.leases for tid in e.tables}
    out: dict[str, TableMeta] = {}
    for table in load_tables(ctx, names).values():
        if table.table_id in wanted:
            try:
                out[table.table_id] = gather_table(ctx, table, skipped)
            except CorruptMetadataError as exc:
                skipped.append(str(exc))
    return out


def _pinned_buckets(tm: TableMeta, pins: dict[tuple[str, int, int], None]) -> TableMeta:
    """``tm`` cut down to the buckets ``pins`` pin: retention decides each bucket on its own,
    so a lease frees nothing elsewhere (and planning stays proportional to its pins)."""
    tid = tm.table.table_id
    buckets = {b for t, b, _ in pins if t == tid}
    return tm._replace(
        begin={b: v for b, v in tm.begin.items() if b in buckets},
        snapshots={b: v for b, v in tm.snapshots.items() if b in buckets},
        segments={b: v for b, v in tm.segments.items() if b in buckets},
        committed={b: v for b, v in tm.committed.items() if b in buckets},
    )


def _without(tm: TableMeta, pins: dict[tuple[str, int, int], None]) -> TableMeta:
    """``tm`` as if ``pins`` were gone: their snapshots count one pin znode less each."""
    tid = tm.table.table_id
    snapshots = {
        bucket: [
            s._replace(pins=s.pins - 1) if (tid, bucket, s.snapshot_id) in pins else s
            for s in snaps
        ]
        for bucket, snaps in tm.snapshots.items()
    }
    return tm._replace(snapshots=snapshots)


def _deleted(meta: Metadata) -> dict[_Item, int]:
    """Size of every snapshot and segment the plan of ``meta`` deletes."""
    return {
        (i.kind, i.table_bucket, i.item_id): i.size_bytes
        for i in plan(meta).items
        if i.action == "delete" and i.kind in ("snapshot", "segment")
    }


def _sizes(tables: dict[str, TableMeta]) -> dict[tuple[str, int, int], int]:
    """Size of every snapshot of ``tables``, keyed like a pin."""
    return {
        (tid, bucket, s.snapshot_id): s.size_bytes
        for tid, tm in tables.items()
        for bucket, snaps in tm.snapshots.items()
        for s in snaps
    }


def lease_bytes(ctx: Context, book: LeaseBook) -> dict[str, tuple[int, int]]:
    """(pinned_bytes, exclusive_bytes) of every live lease of ``book``, by lease id.

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
        CorruptMetadataError: the namespace's settings are unreadable.
    """
    skipped: list[str] = []
    tables = _gather(ctx, book, skipped)
    settings = ctx.settings()
    leases = [_meta(e) for e in book.leases]
    sizes = _sizes(tables)
    base = Metadata(
        book.now_ms,
        [],
        leases,
        [],
        to_ms(settings["lease.expiry-grace"]),
        to_ms(settings["orphan.min-age"]),
        skipped,
        (),
    )
    by_bucket: dict[tuple[str, int], list[tuple[str, Pin]]] = {}
    for m in leases:
        for pin in m.pins:
            by_bucket.setdefault(pin[:2], []).append((m.lease_id, pin))
    out: dict[str, tuple[int, int]] = {}
    for entry, meta in zip(book.leases, leases):
        if not entry.live:
            continue
        own = [
            _pinned_buckets(tables[tid], entry.pins)
            for tid in sorted(entry.tables)
            if tid in tables
        ]
        if not own:
            out[entry.lease_id] = (0, 0)
            continue
        others = _others(leases, meta, by_bucket)
        forever = meta._replace(expires_ms=max(meta.expires_ms, book.now_ms), state=LIVE)
        held = _deleted(base._replace(tables=own, leases=[*others, forever]))
        gone = [_without(tm, entry.pins) for tm in own]
        freed = _deleted(base._replace(tables=gone, leases=others))
        exclusive = sum(size for item, size in freed.items() if item not in held)
        out[entry.lease_id] = (sum(sizes.get(pin, 0) for pin in entry.pins), exclusive)
    return out


def _others(
    leases: list[LeaseMeta],
    meta: LeaseMeta,
    by_bucket: dict[tuple[str, int], list[tuple[str, Pin]]],
) -> list[LeaseMeta]:
    """Every lease but ``meta``, each with only its pins in the buckets ``meta`` pins (the
    planner's work then grows with those buckets, not with every lease's pins)."""
    pins: dict[str, dict[Pin, None]] = {}
    for key in {pin[:2] for pin in meta.pins}:
        for lease_id, pin in by_bucket.get(key, ()):
            pins.setdefault(lease_id, {})[pin] = None
    return [m._replace(pins=pins.get(m.lease_id, {})) for m in leases if m is not meta]
