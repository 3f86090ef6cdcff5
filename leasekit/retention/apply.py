"""The retention entry points: the plan users see, and its application — expire leases, then
delete snapshots, log segments and orphan files, metadata first and files after, and the files
merges replaced once their grace is over, files first and their record after (the record is
what keeps them). Every step is atomic on its own, so a pass killed half way leaves consistent
metadata and the next pass finishes the work (R7).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..errors import (
    CorruptMetadataError,
    InvalidArgumentError,
    LeadershipLostError,
    LeasekitError,
    TableNotFoundError,
)
from ..leases import upkeep as lease_upkeep
from ..log.markers import claim_stale, live_tokens
from ..log.segments import delete_segments
from ..memory import collector_paused
from ..snapshots.catalog import delete_snapshot
from ..structs import RetentionItem, RetentionPlan, RetentionReport
from ..tables.catalog import load_table
from ..zk import ConflictReason, Delete, TxnConflict, touch
from .gather import gather, gather_table
from .meta import Metadata, RetiredMeta, TableMeta
from .planner import plan, uris
from .references import referenced_files, unreferenced
from .sealed import delete_sealed_snapshot

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["retention_plan", "run_retention"]

log = logging.getLogger(__name__)

_ORPHAN_BATCH = 100
"""Orphan files deleted after one fence check (in a janitor)."""


def retention_plan(ctx: Context, table: str | TableInfo | None = None) -> RetentionPlan:
    """The retention plan for one table (or all), leases included; changes nothing (R6)."""
    with collector_paused():
        result = plan(gather(ctx, table))
        return dataclasses.replace(result, items=uris(result.items, ctx.warehouse))


def run_retention(
    ctx: Context,
    table: str | TableInfo | None = None,
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> RetentionReport:
    """Plan, then delete what the plan deletes (R1-R5); ``dry_run`` changes nothing.

    Returns:
        What was deleted and freed, and an error per item kept against the plan.

    Raises:
        LeadershipLostError: in a janitor's fenced pass that no longer leads (docs/security.md,
            "Fencing"): it stops at once, deleting nothing more.
    """
    with collector_paused():
        meta = gather(ctx, table)
        result = plan(meta)
    if dry_run:
        return RetentionReport(
            uris(result.deletes, ctx.warehouse),
            result.reclaimable_bytes,
            list(result.skipped),
            True,
        )
    # access and ownership (docs/security.md): refused before any deletion
    ctx.ensure_writable("run retention")
    applied = _Applied(errors=list(result.skipped), step=progress or (lambda n: None))
    _expire_leases(ctx, meta, result.deletes, applied)
    refused = _delete_snapshots(meta, result.deletes, applied)
    _delete_segments(meta, result.deletes, refused, applied)
    rest = _delete_retired(ctx, meta, result.deletes, applied)
    _delete_orphans(ctx, meta.orphan_min_age_ms, rest, applied)
    done, errors = applied.done, applied.errors
    freed = sum(i.size_bytes for i in done)
    log.info(
        "retention: deleted %d items, freed %d bytes, %d errors", len(done), freed, len(errors)
    )
    return RetentionReport(uris(done, ctx.warehouse), freed, errors, False)


@dataclasses.dataclass
class _Applied:
    """What a retention pass deleted so far, the errors of what it kept, and its progress."""

    done: list[RetentionItem] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    step: Callable[[int], None] = lambda n: None


def _expire_leases(
    ctx: Context, meta: Metadata, deletes: list[RetentionItem], applied: _Applied
) -> None:
    """R5: leases first, so the snapshots they alone pinned go in this same pass.
    Fencing (docs/security.md): only the lease the plan saw (its creation id), not renewed since."""
    seen = {x.lease_id: x for x in meta.leases}
    for item in (i for i in deletes if i.kind == "lease"):
        if str(item.item_id) not in seen:
            _reclaim_pins(
                ctx, str(item.item_id), meta.stray_pins.get(str(item.item_id), []), item, applied
            )
            continue
        lease = seen[str(item.item_id)]
        try:
            if lease_upkeep.remove(
                ctx, lease.lease_id, created=lease.created, version=lease.version
            ):
                applied.done.append(item)
            else:
                applied.errors.append(
                    f"lease {item.item_id}: renewed, replaced or gone since the plan; kept"
                )
        except LeadershipLostError:
            raise
        except LeasekitError as exc:
            applied.errors.append(f"lease {item.item_id}: {exc}")
        applied.step(1)


def _reclaim_pins(
    ctx: Context,
    lease_id: str,
    keys: list[tuple[str, int, int]],
    item: RetentionItem,
    applied: _Applied,
) -> None:
    """L5: delete the pins of ``lease_id``, a lease that no longer exists, each only while no
    lease of that id exists (checked in its transaction)."""
    try:
        for key in keys:
            lease_upkeep.reclaim_pin(ctx, lease_id, *key)
        applied.done.append(item)
    except LeadershipLostError:
        raise
    except LeasekitError as exc:
        applied.errors.append(f"pins of lease {lease_id}: {exc}")
    applied.step(1)


def _delete_snapshots(
    meta: Metadata, deletes: list[RetentionItem], applied: _Applied
) -> set[tuple[str, int]]:
    """Delete the planned snapshots; the (table, bucket) pairs where one was refused."""
    tables = {tm.table.name: tm for tm in meta.tables}
    refused: set[tuple[str, int]] = set()
    for item in (i for i in deletes if i.kind == "snapshot"):
        tb = item.table_bucket
        table = tables[tb.table].table
        sealed = table.layout.sealed_at(tb.bucket) is not None
        try:  # K7: a sealed bucket's newest snapshot goes too
            (delete_sealed_snapshot if sealed else delete_snapshot)(
                table, tb.bucket, int(item.item_id)
            )
            applied.done.append(item)
        except LeadershipLostError:
            raise
        except LeasekitError as exc:
            refused.add((tb.table, tb.bucket))
            applied.errors.append(f"snapshot {item.item_id} of {tb.table}/{tb.bucket}: {exc}")
        applied.step(1)
    return refused


def _delete_segments(
    meta: Metadata,
    deletes: list[RetentionItem],
    refused: set[tuple[str, int]],
    applied: _Applied,
) -> None:
    """Delete the planned log segments, per bucket; where a snapshot deletion was refused,
    only the segments still below every remaining snapshot."""
    tables = {tm.table.name: tm for tm in meta.tables}
    by_bucket: dict[tuple[str, int], list[RetentionItem]] = {}
    for item in (i for i in deletes if i.kind == "segment"):
        by_bucket.setdefault((item.table_bucket.table, item.table_bucket.bucket), []).append(item)
    for (name, bucket), items in by_bucket.items():
        tm = tables[name]
        if (name, bucket) in refused:
            items = _still_below_kept(meta, tm.table, bucket, items, applied.done)
        seen = {s.base_offset: s for s in tm.segments.get(bucket, [])}
        planned = {int(i.item_id) for i in items}
        try:  # R8: a segment a merge replaced since the plan stays, and the log after it
            files, _ = delete_segments(
                tm.table,
                bucket,
                {b: (s.end_offset, s.file) for b, s in seen.items() if b in planned},
            )
            gone = set(files)
            applied.done += [i for i in items if seen[int(i.item_id)].file in gone]
            applied.errors += [
                f"segment {i.item_id} of {name}/{bucket}: kept, as it or one before it was "
                "replaced by a merge or deleted since the plan"
                for i in items
                if seen[int(i.item_id)].file not in gone
            ]
        except LeadershipLostError:
            raise
        except LeasekitError as exc:
            applied.errors.append(f"segments of {name}/{bucket}: {exc}")
        applied.step(len(items))


def _delete_retired(
    ctx: Context, meta: Metadata, deletes: list[RetentionItem], applied: _Applied
) -> list[RetentionItem]:
    """R8: delete the files of the merges whose grace the plan found over (one item per merge,
    named by its first file), then each one's record (at the version read; gone already is
    fine). Files first: the record is what keeps them, so a pass killed in between leaves the
    record, and the next pass deletes its files again (a missing file is fine) and then it.
    Returns the other ``deletes``."""
    records: dict[str, tuple[TableInfo, RetiredMeta]] = {}
    for tm in meta.tables:
        for rec in (r for recs in tm.retired.values() for r in recs if r.files):
            records[rec.files[0]] = (tm.table, rec)
    rest = []
    for item in deletes:
        found = records.get(str(item.item_id)) if item.kind == "orphan" else None
        if found is None:
            rest.append(item)
            continue
        table, rec = found
        try:
            for start in range(0, len(rec.files), _ORPHAN_BATCH):
                # Fencing (docs/security.md): files have no transaction of their own
                ctx.store.check_fence()
                ctx.warehouse.delete_files(rec.files[start : start + _ORPHAN_BATCH])
            _forget_retired(ctx, table, rec)
            applied.done.append(item)
        except LeadershipLostError:
            raise
        except LeasekitError as exc:
            applied.errors.append(f"files replaced by the merge recorded at {rec.path}: {exc}")
        applied.step(1)
    return rest


def _forget_retired(ctx: Context, table: TableInfo, rec: RetiredMeta) -> None:
    """Delete a retired record whose files are gone (fenced, version-checked; gone is fine)."""
    try:
        ctx.store.commit(
            [Delete(rec.path, rec.version), touch(ctx.paths.table_changes(table.table_id))]
        )
    except TxnConflict as exc:
        if exc.reason != ConflictReason.NONODE:
            raise


def _delete_orphans(
    ctx: Context, min_age_ms: int, deletes: list[RetentionItem], applied: _Applied
) -> None:
    """Claim the held writes older than ``min_age_ms``, then delete the planned orphan files
    that are orphans still, in fenced batches."""
    try:
        # R4, W2: a Spark task's marker outlives no orphan.min-age; deleting it (fenced) makes
        # a later commit of its files fail on its check, so its files are orphans for good
        claim_stale(ctx, min_age_ms)
    except LeadershipLostError:
        raise
    except LeasekitError as exc:  # the markers left keep their files (still_orphans)
        applied.errors.append(f"orphans: could not claim stale write markers: {exc}")
    orphans = [i for i in deletes if i.kind == "orphan"]
    if orphans:
        # R4, W2: the plan read markers, metadata and files one after another; a write may
        # have committed in between. Only files that are orphans still are deleted.
        try:
            current = still_orphans(ctx, (str(i.item_id) for i in orphans))
        except LeadershipLostError:
            raise
        except LeasekitError as exc:
            applied.errors.append(f"orphans: could not re-check them before deleting, kept: {exc}")
            current = set()
        applied.step(len(orphans) - len([i for i in orphans if str(i.item_id) in current]))
        orphans = [i for i in orphans if str(i.item_id) in current]
    for start in range(0, len(orphans), _ORPHAN_BATCH):
        # Fencing (docs/security.md): files have no transaction of their own; a janitor checks
        # that it still leads just before each batch (a no-op outside a janitor).
        ctx.store.check_fence()
        for item in orphans[start : start + _ORPHAN_BATCH]:
            try:
                ctx.warehouse.delete_files([str(item.item_id)])
                applied.done.append(item)
            except LeasekitError as exc:
                applied.errors.append(f"orphan {item.item_id}: {exc}")
            applied.step(1)


def still_orphans(ctx: Context, paths: Iterable[str]) -> set[str]:
    """Of ``paths`` (orphans in a plan), those that are orphans still: read again just before
    they are deleted, write markers first, then the metadata of the tables they belong to.

    Closes the window between a plan's reads: a write that committed after the plan read
    its table is referenced now, and one still in progress carries a live marker (R4, W2).
    And the window after this re-check: every commit checks its write's marker, markers are
    read here first and never come back, so a file this returns can never be committed.
    """
    paths = sorted(set(paths))
    if not paths:
        return set()
    in_flight = live_tokens(ctx)
    skipped: list[str] = []
    metas: list[TableMeta] = []
    protected: list[str] = []
    root = ctx.tables_dir + "/"
    for name in sorted(
        {
            p[len(root) :].split("/")[0]
            for p in paths
            if p.startswith(root) and "/" in p[len(root) :]
        }
    ):
        try:
            metas.append(gather_table(ctx, load_table(ctx, name, internal=True), skipped))
        except (TableNotFoundError, InvalidArgumentError):
            continue  # no such table (any more): nothing references its files
        except CorruptMetadataError:
            protected.append(f"{root}{name}/")
            continue
        if skipped:  # part of the table's metadata is unreadable: it may reference any file
            protected.append(f"{root}{name}/")
            skipped.clear()
    return {
        p
        for p in unreferenced(paths, referenced_files(metas))
        if not p.startswith(tuple(protected)) and not any(t in p for t in in_flight)
    }


def _still_below_kept(
    meta: Metadata,
    table: TableInfo,
    bucket: int,
    items: list[RetentionItem],
    done: list[RetentionItem],
) -> list[RetentionItem]:
    """Segments still wholly below every remaining snapshot after some deletions were refused."""
    deleted = {
        int(i.item_id)
        for i in done
        if i.kind == "snapshot"
        and i.table_bucket
        and i.table_bucket.table == table.name
        and i.table_bucket.bucket == bucket
    }
    tm = next(t for t in meta.tables if t.table.table_id == table.table_id)
    remaining = [s.log_offset for s in tm.snapshots.get(bucket, []) if s.snapshot_id not in deleted]
    cover = min(remaining, default=0)
    ends = {s.base_offset: s.end_offset for s in tm.segments.get(bucket, [])}
    return [i for i in items if ends.get(int(i.item_id), cover + 1) <= cover]
