"""Gathering for retention: read, in pipelined batches, what a plan is computed from — the
tables' snapshots and segments, every lease with its pins, writes in progress, the files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..durations import to_ms
from ..errors import CorruptMetadataError
from ..log.markers import live_tokens
from ..tables.catalog import list_tables, load_table
from ..validate import check_table_name
from ..zk import GetChildren
from ..zk.formats import (
    EMPTY_PIN,
    LeaseRecord,
    MemberRecord,
    OffsetRecord,
    PinChunk,
)
from .listed import read_buckets
from .meta import LeaseMeta, Metadata, TableMeta
from .references import referenced_files, unreferenced

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["gather", "gather_table", "stray_pins"]

Pin = tuple[str, int, int]
"""(table_id, bucket, snapshot_id) of a pinned snapshot."""


def gather_table(
    ctx: Context, table: TableInfo, skipped: list[str], *, groups: bool = False
) -> TableMeta:
    """What retention needs of one table: its buckets' log starts, snapshots, segments and the
    files merges replaced, and the groups' committed offsets (with
    ``log.retention.respect-consumers`` or ``groups``); what cannot be read is left out and
    said in ``skipped``."""
    read = read_buckets(ctx, table, skipped)
    committed: dict[int, dict[str, int]] = {}
    live: frozenset[str] = frozenset()
    if groups or table.properties["log.retention.respect-consumers"]:
        committed, live = _committed(ctx, table, sorted(read.begin), skipped)
    return TableMeta(
        table, read.begin, read.snapshots, read.segments, committed, live, read.retired
    )


def _committed(
    ctx: Context, table: TableInfo, buckets: list[int], skipped: list[str]
) -> tuple[dict[int, dict[str, int]], frozenset[str]]:
    """Per bucket, the offset each group with offsets for ``table``, or with live members
    subscribed to it, committed (-1: none for that bucket, or unreadable); and the groups with
    live members subscribed to it. Read pipelined (R3): a live group that has not committed yet
    has committed nothing, and holds the log from its start."""
    store, paths = ctx.store, ctx.paths
    groups = store.children(paths.groups) or []
    prefix = f"{table.table_id}."
    listings = store.read_many(
        [
            *(GetChildren(paths.group_offsets(g)) for g in groups),
            *(GetChildren(paths.group_members(g)) for g in groups),
        ]
    )
    for result in listings:
        if result.error is not None:
            raise result.error
    listed = [r.value for r in listings[: len(groups)]]
    members = [r.value for r in listings[len(groups) :]]
    keys = [
        (g, name)
        for g, names in zip(groups, listed)
        for name in (names or [])
        if name.startswith(prefix)
    ]
    offset_paths = [f"{paths.group_offsets(g)}/{name}" for g, name in keys]
    member_keys = [(g, m) for g, names in zip(groups, members) for m in (names or [])]  # type: ignore[union-attr]
    member_paths = [paths.member(g, m) for g, m in member_keys]
    nodes = store.get_many(offset_paths + member_paths)
    live: set[str] = set()
    for (group, _), path, node in zip(member_keys, member_paths, nodes[len(offset_paths) :]):
        if node is None or group in live:
            continue  # the member left meanwhile
        try:
            if table.name in MemberRecord.decode(node, path).tables:
                live.add(group)
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
    found: dict[str, dict[int, int]] = {g: {} for g in sorted(live)}
    found.update({g: {} for g, _ in keys})
    for (group, name), path, node in zip(keys, offset_paths, nodes[: len(offset_paths)]):
        if node is None:
            continue
        try:
            bucket = paths.parse_offset(name)[1]
            found[group][bucket] = OffsetRecord.decode(node, path).offset
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
        except ValueError:
            skipped.append(f"unexpected znode {path}: not a table bucket's offset")
    if not found:
        return {}, frozenset()
    return {b: {g: offs.get(b, -1) for g, offs in found.items()} for b in buckets}, frozenset(live)


def _gather_leases(ctx: Context, skipped: list[str]) -> list[LeaseMeta]:
    store, paths = ctx.store, ctx.paths
    ids = store.children(paths.leases) or []
    records = store.get_many([paths.lease(i) for i in ids])
    chunk_names = store.children_many([paths.lease_pins(i) for i in ids])
    chunk_keys = [(i, n) for i, names in zip(ids, chunk_names) for n in (names or [])]
    chunk_paths = [f"{paths.lease_pins(i)}/{n}" for i, n in chunk_keys]
    pins: dict[str, dict[tuple[str, int, int], None]] = {i: {} for i in ids}
    for (lease_id, name), path, node in zip(chunk_keys, chunk_paths, store.get_many(chunk_paths)):
        if node is None:
            continue
        try:
            table_id, chunk = paths.parse_lease_chunk(name)
            pin_chunk = PinChunk.decode(node, path, table_id, chunk)
        except (CorruptMetadataError, ValueError) as exc:
            skipped.append(
                str(exc)
                if isinstance(exc, CorruptMetadataError)
                else f"lease pins at {path} are unreadable"
            )
            continue
        for bucket, sid in pin_chunk.array.items():
            if sid == EMPTY_PIN:
                continue  # pinned as empty: nothing to keep (L15)
            pins[lease_id][(table_id, bucket, sid)] = None
    out = []
    for lease_id, node in zip(ids, records):
        if node is None:
            continue
        try:
            record = LeaseRecord.decode(node, paths.lease(lease_id))
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
            continue
        out.append(
            LeaseMeta(
                lease_id,
                record.expires_ms,
                record.state,
                node.stat.version,
                pins[lease_id],
                node.stat.czxid,
            )
        )
    return out


def _stray_pins(
    ctx: Context, tables: list[TableMeta], leases: list[LeaseMeta]
) -> dict[str, list[tuple[str, int, int]]]:
    """Pins of no lease that exists among the snapshots of ``tables`` (see ``stray_pins``)."""
    counted = {
        (tm.table.table_id, b, snap.snapshot_id): snap.pins
        for tm in tables
        for b, snaps in tm.snapshots.items()
        for snap in snaps
    }
    return stray_pins(ctx, counted, leases)


def stray_pins(
    ctx: Context, counted: Mapping[Pin, int], leases: Iterable[LeaseMeta]
) -> dict[str, list[Pin]]:
    """Pins of no lease that exists, by the lease id they name (L5: such a pin protects
    nothing; a pin and its lease are written in one transaction, so one was left behind).

    ``counted``: the pin znodes under each snapshot, as read. Only a snapshot with more than
    the ``leases`` read pin it is listed; then the leases are listed again, so a lease that is
    unreadable, or acquired since, never has a stray pin (one dropped since shows as one, and
    deleting its pin then finds it gone)."""
    known: dict[Pin, int] = {}
    for lease in leases:
        for key in lease.pins:
            known[key] = known.get(key, 0) + 1
    suspects = [key for key, pins in counted.items() if pins > known.get(key, 0)]
    if not suspects:
        return {}
    names = ctx.store.children_many([ctx.paths.snapshot(*key) for key in suspects])
    ids = set(ctx.store.children(ctx.paths.leases) or ())
    out: dict[str, list[Pin]] = {}
    for key, children in zip(suspects, names):
        for name in children or ():
            if name not in ids:
                out.setdefault(name, []).append(key)
    return out


def gather(ctx: Context, table: str | TableInfo | None = None) -> Metadata:
    """Read what a retention plan needs: tables (or one), every lease, the warehouse files.

    The files are listed on a second thread while ZooKeeper is read (the listing and the
    reads wait on different things)."""
    # R4, W2: write markers first. A write that commits after its table's metadata was read
    # then still shows its marker here; one that starts later has files too young to be
    # orphans, or files that the applier re-checks before it deletes them
    # (``retention.apply.still_orphans``): a plan alone never deletes anything. Held markers
    # (Spark tasks') older than orphan.min-age are not in progress: a pass claims them first.
    settings = ctx.settings()
    in_flight = live_tokens(ctx, to_ms(settings["orphan.min-age"]))
    name = (
        None
        if table is None
        else check_table_name(table if isinstance(table, str) else getattr(table, "name", table))
    )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasekit-listing") as pool:
        root = ctx.tables_dir
        scan = pool.submit(ctx.warehouse.scan, root if name is None else f"{root}/{name}")
        skipped: list[str] = []
        protected: list[str] = []
        names = [table] if table is not None else list_tables(ctx, internal=True, skipped=skipped)
        tables: list[TableMeta] = []
        for each in names:
            before = len(skipped)
            try:
                tables.append(gather_table(ctx, load_table(ctx, each, internal=True), skipped))
            except CorruptMetadataError as exc:
                skipped.append(str(exc))
            if len(skipped) > before:  # R4: unreadable metadata may reference any of its files
                protected.append(f"{root}/{each}/")
        leases = _gather_leases(ctx, skipped)
        stray = _stray_pins(ctx, tables, leases)
        listing = scan.result()
        files = listing.entries(unreferenced(listing.paths, referenced_files(tables)))
    now = ctx.now_ms()
    return Metadata(
        now,
        tables,
        leases,
        files,
        to_ms(settings["lease.expiry-grace"]),
        to_ms(settings["orphan.min-age"]),
        skipped,
        tuple(protected),
        in_flight,
        to_ms(settings["monitor.retention"]),
        stray,
    )
