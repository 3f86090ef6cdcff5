"""The bytes each lease holds (M4): ``pinned`` sums the snapshots it pins; ``exclusive`` is
what retention's own planner would delete if the lease were gone and keeps while it lives,
so a file another lease or a retention rule (newest snapshots, log retention, consumers)
keeps never counts.

Retention decides each bucket on its own, and a pin changes a bucket's plan only when nothing
else keeps its snapshot: not among the newest of its bucket, pinned by no lease that outlives
this pass, by no pin of an unreadable lease. A survey of the pinned snapshots finds those
buckets; only they are read in full and planned twice per lease: held (as if valid now,
though expired) and dropped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...durations import to_ms
from ...errors import CorruptMetadataError
from ...retention.gather import gather_table, stray_pins
from ...retention.meta import LeaseMeta, Metadata, TableMeta
from ...retention.planner import plan
from ...tables.catalog import load_tables
from ...zk.formats import LIVE
from .bucket_meta import PinnedSnapshot, gather_buckets, survey_pins
from .lease_book import LeaseBook, LeaseEntry

if TYPE_CHECKING:
    from ...context import Context
    from ...tables.info import TableInfo

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


def _pinned_tables(ctx: Context, book: LeaseBook) -> dict[str, TableInfo]:
    """Every table a lease pins, by table id (a table dropped, or dropped and created again,
    since it was pinned is left out)."""
    names = sorted({name for e in book.leases for name in e.tables.values()})
    wanted = {tid for e in book.leases for tid in e.tables}
    return {t.table_id: t for t in load_tables(ctx, names).values() if t.table_id in wanted}


def _gather(
    ctx: Context,
    tables: dict[str, TableInfo],
    pins: dict[str, dict[Pin, None]],
    skipped: list[str],
) -> dict[str, TableMeta]:
    """The retention metadata of the buckets ``pins`` (per lease) pin, by table id: read
    for those buckets alone, or for the whole table when retention waits for consumers (then
    it needs every group's offsets, as retention gathers them)."""
    buckets: dict[str, set[int]] = {}
    for lease_pins in pins.values():
        for tid, bucket, _ in lease_pins:
            buckets.setdefault(tid, set()).add(bucket)
    out: dict[str, TableMeta] = {}
    for tid, chosen in sorted(buckets.items()):
        table = tables[tid]
        try:
            if table.properties["log.retention.respect-consumers"]:
                out[tid] = gather_table(ctx, table, skipped)
            else:
                out[tid] = gather_buckets(ctx, table, chosen, skipped)
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


def lease_bytes(ctx: Context, book: LeaseBook) -> dict[str, tuple[int, int]]:
    """(pinned_bytes, exclusive_bytes) of every live lease of ``book``, by lease id.

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
        CorruptMetadataError: the namespace's settings are unreadable.
    """
    skipped: list[str] = []
    tables = _pinned_tables(ctx, book)
    settings = ctx.settings()
    base = Metadata(
        book.now_ms,
        [],
        [_meta(e) for e in book.leases],
        [],
        to_ms(settings["lease.expiry-grace"]),
        to_ms(settings["orphan.min-age"]),
        skipped,
        (),
    )
    live = [(e, m) for e, m in zip(book.leases, base.leases) if e.live]
    survey = survey_pins(ctx, tables, (pin for e, _ in live for pin in e.pins), skipped)
    base = base._replace(
        stray_pins=stray_pins(ctx, {p: s.pins for p, s in survey.items()}, base.leases)
    )
    contested = _contested(base, live, survey, tables)
    gathered = _gather(ctx, tables, contested, skipped)
    by_bucket: dict[tuple[str, int], list[tuple[str, Pin]]] = {}
    for m in base.leases:
        for pin in m.pins:
            by_bucket.setdefault(pin[:2], []).append((m.lease_id, pin))
    out: dict[str, tuple[int, int]] = {}
    for entry, meta in live:
        pinned = sum(survey[pin].size_bytes for pin in entry.pins if pin in survey)
        own = contested[entry.lease_id]
        exclusive = _exclusive(base, meta._replace(pins=own), gathered, by_bucket) if own else 0
        out[entry.lease_id] = (pinned, exclusive)
    return out


def _contested(
    base: Metadata,
    live: list[tuple[LeaseEntry, LeaseMeta]],
    survey: dict[Pin, PinnedSnapshot],
    tables: dict[str, TableInfo],
) -> dict[str, dict[Pin, None]]:
    """Per live lease, its pins whose snapshot nothing else keeps (R1, L5): not among the
    ``kv.snapshot.num-retained`` newest of its bucket, pinned by no other lease that outlives
    this pass (R5, L11) and by no pin of an unreadable lease (a pin of no lease at all keeps
    nothing: retention reclaims it). In any other bucket its plan is the
    same with the lease and without it."""
    ending = {
        m.lease_id
        for m in base.leases
        if m.state != LIVE or base.now_ms > m.expires_ms + base.grace_ms
    }
    holders: dict[Pin, list[str]] = {}
    for m in base.leases:
        for pin in m.pins:
            holders.setdefault(pin, []).append(m.lease_id)
    stray: dict[Pin, int] = {}  # pins of no lease: retention reclaims them (L5)
    for keys in base.stray_pins.values():
        for pin in keys:
            stray[pin] = stray.get(pin, 0) + 1
    out: dict[str, dict[Pin, None]] = {}
    for entry, meta in live:
        out[entry.lease_id] = {}
        for pin in meta.pins:
            found = survey.get(pin)
            if found is None:
                continue  # no snapshot retention would plan: nothing to free
            retained = tables[pin[0]].properties["kv.snapshot.num-retained"]
            others = [i for i in holders[pin] if i != meta.lease_id]
            if (
                found.newer >= retained
                and all(i in ending for i in others)
                and found.pins - stray.get(pin, 0) <= len(holders[pin])
            ):
                out[entry.lease_id][pin] = None
    return out


def _exclusive(
    base: Metadata,
    meta: LeaseMeta,
    tables: dict[str, TableMeta],
    by_bucket: dict[tuple[str, int], list[tuple[str, Pin]]],
) -> int:
    """The bytes the plan deletes once ``meta`` (with its contested pins) is dropped and keeps
    while it is held, over the buckets it pins."""
    own = [
        _pinned_buckets(tables[tid], meta.pins)
        for tid in sorted({pin[0] for pin in meta.pins})
        if tid in tables
    ]
    if not own:
        return 0
    others = _others(base.leases, meta, by_bucket)
    forever = meta._replace(expires_ms=max(meta.expires_ms, base.now_ms), state=LIVE)
    held = _deleted(base._replace(tables=own, leases=[*others, forever]))
    gone = [_without(tm, meta.pins) for tm in own]
    freed = _deleted(base._replace(tables=gone, leases=others))
    return sum(size for item, size in freed.items() if item not in held)


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
    return [
        m._replace(pins=pins.get(m.lease_id, {})) for m in leases if m.lease_id != meta.lease_id
    ]
