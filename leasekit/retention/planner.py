"""The retention planner: a pure function from gathered metadata and the ZooKeeper time to a
plan that gives every lease, snapshot, segment, file a merge replaced and orphan file a keep or
delete and a reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple

from ..durations import format_duration, human_duration, to_ms
from ..structs import RetentionItem, RetentionPlan, TableBucket
from ..validate import LAG_HISTORY_TABLE
from ..zk import to_datetime
from . import sealed
from .leases import holders_of, pinned_by, plan_leases, when
from .meta import LeaseMeta, Metadata, SegmentMeta, SnapshotMeta, TableMeta
from .references import referenced_files, unreferenced

if TYPE_CHECKING:
    from ..warehouse import Warehouse

__all__ = ["plan", "uris"]


def _age(ms: int) -> str:
    # Whole seconds: plans read within the same second give the same reasons.
    return _seconds(max(0, ms) // 1000)


@lru_cache(maxsize=65536)  # many segments share an age in seconds: one formatting each
def _seconds(seconds: int) -> str:
    return human_duration(seconds) if seconds else "0s"


class _Policy(NamedTuple):
    """A table's retention properties, read and formatted once per plan."""

    retained: int
    retention_ms: int
    retention: str
    limit: int | None
    respect: bool
    newest: str
    """Why the newest snapshots of a bucket are kept."""

    @classmethod
    def of(cls, props: dict[str, Any]) -> _Policy:
        retained = props["kv.snapshot.num-retained"]
        return cls(
            retained,
            to_ms(props["log.retention"]),
            human_duration(props["log.retention"]),
            props["log.retention.bytes"],
            props["log.retention.respect-consumers"],
            f"newest {retained} of bucket",
        )


def _plan_snapshots(
    tm: TableMeta,
    tb: TableBucket,
    holders: dict[tuple[str, int, int], list[LeaseMeta]],
    ending: set[str],
    policy: _Policy,
) -> tuple[list[RetentionItem], SnapshotMeta | None]:
    """Keep the newest ``kv.snapshot.num-retained`` snapshots of the bucket and every pinned one,
    delete the rest (R1); and the kept snapshot with the lowest log offset."""
    items, oldest = [], None
    tid, bucket, retained = tm.table.table_id, tb.bucket, policy.retained
    snaps = sorted(tm.snapshots.get(bucket, ()), key=_newest_first)
    for rank, snap in enumerate(snaps):
        key = (tid, bucket, snap.snapshot_id)
        reason = policy.newest if rank < retained else pinned_by(key, snap, holders, ending)
        if reason is None:
            ending_leases = holders.get(key)
            gone = (
                f"; its lease(s) {', '.join(x.lease_id for x in ending_leases)} expire in this pass"
                if ending_leases
                else ""
            )
            reason = f"older than the newest {retained} of bucket, not pinned{gone}"
            items.append(
                RetentionItem("snapshot", tb, snap.snapshot_id, "delete", reason, snap.size_bytes)
            )
            continue
        if oldest is None or snap.log_offset < oldest.log_offset:
            oldest = snap
        items.append(
            RetentionItem("snapshot", tb, snap.snapshot_id, "keep", reason, snap.size_bytes)
        )
    return items, oldest


def _newest_first(snap: SnapshotMeta) -> int:
    return -snap.snapshot_id


def _plan_segments(
    meta: Metadata, tm: TableMeta, tb: TableBucket, oldest: SnapshotMeta | None, policy: _Policy
) -> list[RetentionItem]:
    """An active bucket's segments (R3): those wholly below its oldest kept snapshot go once
    past log.retention (or over log.retention.bytes), oldest first."""
    if oldest is None:
        return _segment_rules(meta, tm, tb, policy, 0, "needed: no snapshot covers it yet", "")
    needed = f"needed: log tail of kept snapshot {oldest.snapshot_id}"
    below = f"below log start of snapshot {oldest.snapshot_id}"
    return _segment_rules(meta, tm, tb, policy, oldest.log_offset, needed, below)


def _segment_rules(
    meta: Metadata,
    tm: TableMeta,
    tb: TableBucket,
    policy: _Policy,
    cover: int,
    needed: str,
    below: str,
) -> list[RetentionItem]:
    """Segments ending past ``cover`` are kept (``needed``); those wholly below it go by R3,
    oldest first, their reason starting with ``below``; the log stays contiguous."""
    segments = sorted(tm.segments.get(tb.bucket, []), key=lambda s: s.base_offset)
    remaining = sum(s.size_bytes for s in segments)
    deleting = True
    items = []
    for seg in segments:
        if seg.end_offset > cover:
            reason = needed
        elif not deleting:
            reason = "after a kept segment (the log stays contiguous)"
        else:
            reason, why = _covered_segment(meta, tm, tb.bucket, seg, remaining, policy)
            if why is not None:
                why = f"{below}; {why}"
                items.append(
                    RetentionItem("segment", tb, seg.base_offset, "delete", why, seg.size_bytes)
                )
                remaining -= seg.size_bytes
                continue
        deleting = False
        items.append(RetentionItem("segment", tb, seg.base_offset, "keep", reason, seg.size_bytes))
    return items


def _covered_segment(
    meta: Metadata,
    tm: TableMeta,
    bucket: int,
    seg: SegmentMeta,
    remaining: int,
    policy: _Policy,
) -> tuple[str | None, str | None]:
    """Whether a segment below the oldest kept snapshot goes: (why it is kept, None), or
    (None, why it is deleted) — by age, by the bytes over the limit, and the groups behind."""
    retention, limit = policy.retention, policy.limit
    age = meta.now_ms - seg.timestamp_ms
    old = age > policy.retention_ms
    over = limit is not None and remaining > limit
    if not (old or over):
        return f"within log.retention {retention} (age {_age(age)})", None
    behind = _first_behind(tm, bucket, seg) if policy.respect else None
    if behind is not None:
        group, at = behind
        live = " (live members)" if group in tm.live_groups else ""
        return (
            f"consumer group {group} has not committed past it (at offset {at})"
            if at >= 0
            else f"consumer group {group}{live} has committed no offset for this bucket"
        ), None
    why = (
        f"older than log.retention {retention} (age {_age(age)})"
        if old
        else f"log over log.retention.bytes {limit}"
    )
    if policy.respect and not tm.committed:  # no group holds the log: say so
        why += (
            "; log.retention.respect-consumers: no consumer group has committed offsets for "
            "this table"
        )
    return None, why


def _first_behind(tm: TableMeta, bucket: int, seg: SegmentMeta) -> tuple[str, int] | None:
    """The first group (by name) that has not committed past ``seg``, with its offset."""
    return min(
        ((g, o) for g, o in tm.committed.get(bucket, {}).items() if o < seg.end_offset),
        default=None,
    )


def _plan_sealed(
    meta: Metadata,
    tm: TableMeta,
    tb: TableBucket,
    holders: dict[tuple[str, int, int], list[LeaseMeta]],
    ending: set[str],
    policy: _Policy,
) -> list[RetentionItem]:
    """A sealed bucket (K7): while a bucket built from it lacks a snapshot of its own, or a
    group has not consumed it to its seal, the rules of an active bucket with the held log kept
    and the hold as the reason; once nothing holds it, every snapshot but what a lease pins,
    and its log by the rules of every bucket (R3: log.retention still holds it)."""
    held = sealed.hold(tm, tb.bucket, policy.respect)
    if held is None:
        tid = tm.table.table_id
        pinned = {
            s.snapshot_id: pinned_by((tid, tb.bucket, s.snapshot_id), s, holders, ending)
            for s in tm.snapshots.get(tb.bucket, ())
        }
        free = sealed.free_reason(tm, tb.bucket, policy.respect)
        items, oldest = sealed.plan_free(tm, tb, pinned, free)
        if oldest is None:  # the whole log is below the children's snapshots: R3 decides
            cover, needed = tm.table.layout.sealed_at(tb.bucket) or 0, ""
        else:
            cover = oldest.log_offset
            needed = f"needed: log tail of pinned snapshot {oldest.snapshot_id}"
        return items + _segment_rules(meta, tm, tb, policy, cover, needed, free)
    reason, start = held
    snap_items, oldest = _plan_snapshots(tm, tb, holders, ending, policy._replace(newest=reason))
    segments = _plan_segments(meta, tm, tb, oldest, policy)
    return snap_items + sealed.relabel_held(tm, tb.bucket, segments, reason, start)


def _plan_history(meta: Metadata, tm: TableMeta, tb: TableBucket) -> list[RetentionItem]:
    """Segments of the lag history (M1): each sample is written once and never compacted, so
    its segments need no snapshot; those older than ``monitor.retention`` go, oldest first."""
    keep = format_duration(timedelta(milliseconds=meta.monitor_retention_ms))
    deleting = True
    items = []
    for seg in sorted(tm.segments.get(tb.bucket, []), key=lambda s: s.base_offset):
        age = meta.now_ms - seg.timestamp_ms
        if deleting and age > meta.monitor_retention_ms:
            reason = f"lag history older than monitor.retention {keep} (age {_age(age)})"
            items.append(
                RetentionItem("segment", tb, seg.base_offset, "delete", reason, seg.size_bytes)
            )
            continue
        deleting = False
        reason = f"lag history within monitor.retention {keep} (age {_age(age)})"
        items.append(RetentionItem("segment", tb, seg.base_offset, "keep", reason, seg.size_bytes))
    return items


def _plan_retired(
    meta: Metadata, tm: TableMeta, tb: TableBucket, min_age: str
) -> list[RetentionItem]:
    """The files of segments merges replaced (R8): one "orphan" item per merge, named by its
    first file and holding the bytes of all of them, kept while readers that listed the
    segments before the merge may still read them, until the record is ``orphan.min-age``
    old; then deleted."""
    items = []
    for rec in tm.retired.get(tb.bucket, ()):
        if not rec.files:
            continue
        others = len(rec.files) - 1
        merged = (
            f"replaced by merged segment [{rec.base_offset:,}, {rec.end_offset:,}) "
            f"at {when(rec.ctime_ms)}, with {others:,} other file{'s' if others != 1 else ''} "
            "of that merge"
        )
        if meta.now_ms - rec.ctime_ms >= meta.orphan_min_age_ms:
            action, reason = "delete", f"{merged}; orphan.min-age {min_age} has passed"
        else:
            until = when(rec.ctime_ms + meta.orphan_min_age_ms)
            action = "keep"
            reason = (
                f"{merged}; kept until {until} for readers that listed them "
                f"(orphan.min-age {min_age})"
            )
        items.append(RetentionItem("orphan", tb, rec.files[0], action, reason, rec.size_bytes))
    return items


def _bucket_of_file(path: str, tables: dict[str, str]) -> TableBucket | None:
    """The bucket a file of ``<tables dir>/<name>/<table id>/...`` belongs to (``tables``:
    table id -> name), None when its path names none."""
    parts = path.split("/")
    at = next((k for k in range(1, len(parts) - 2) if tables.get(parts[k + 1]) == parts[k]), None)
    if at is None:
        return None
    name = parts[at]
    for part, following in zip(parts[at + 2 :], parts[at + 3 :]):
        if part == "log" and following.isdigit():
            return TableBucket(name, int(following))
        if part.startswith("_bucket=") and part[8:].isdigit():
            return TableBucket(name, int(part[8:]))
    return None


def _plan_orphans(meta: Metadata) -> list[RetentionItem]:
    if not meta.files:
        return []
    referenced = referenced_files(meta.tables)
    candidates = {e.path: e for e in meta.files}
    ids = {tm.table.table_id: tm.table.name for tm in meta.tables}
    min_age = human_duration(timedelta(milliseconds=meta.orphan_min_age_ms))
    items = []
    for entry in (candidates[p] for p in sorted(unreferenced(candidates, referenced))):
        if entry.path.startswith(meta.protected_dirs):
            continue
        age = meta.now_ms - entry.mtime_ms
        tb = _bucket_of_file(entry.path, ids)
        writer = next((t for t in meta.in_flight if t in entry.path), None)
        if writer is not None:
            items.append(
                RetentionItem(
                    "orphan",
                    tb,
                    entry.path,
                    "keep",
                    f"unreferenced for {_age(age)}: write {writer[:8]} still in progress",
                    entry.size,
                )
            )
            continue
        if age >= meta.orphan_min_age_ms:
            items.append(
                RetentionItem(
                    "orphan",
                    tb,
                    entry.path,
                    "delete",
                    f"orphan, {_age(age)} old: no metadata references it",
                    entry.size,
                )
            )
        else:
            items.append(
                RetentionItem(
                    "orphan",
                    tb,
                    entry.path,
                    "keep",
                    f"unreferenced for {_age(age)} (orphan.min-age {min_age}): may be a write "
                    "in progress",
                    entry.size,
                )
            )
    return items


def plan(meta: Metadata) -> RetentionPlan:
    """Decide every keep and delete (R1, R3, R4, R5, R6, R8, K7): a pure function of ``meta``."""
    items, ending = plan_leases(meta)
    holders = holders_of(meta)
    min_age = human_duration(timedelta(milliseconds=meta.orphan_min_age_ms))
    for tm in meta.tables:
        policy = _Policy.of(tm.table.properties)
        history = tm.table.name == LAG_HISTORY_TABLE
        layout = tm.table.layout
        rescaled = layout.rescaled  # only a split or merge seals a bucket
        for bucket in sorted(set(tm.snapshots) | set(tm.segments) | set(tm.retired)):
            tb = TableBucket(tm.table.name, bucket)
            if history:
                items += _plan_snapshots(tm, tb, holders, ending, policy)[0]
                items += _plan_history(meta, tm, tb)
            elif rescaled and layout.sealed_at(bucket) is not None:
                items += _plan_sealed(meta, tm, tb, holders, ending, policy)
            else:
                snap_items, oldest = _plan_snapshots(tm, tb, holders, ending, policy)
                items += snap_items + _plan_segments(meta, tm, tb, oldest, policy)
            if tm.retired:
                items += _plan_retired(meta, tm, tb, min_age)
    items += _plan_orphans(meta)
    return RetentionPlan(items, to_datetime(meta.now_ms), list(meta.skipped))


def uris(items: Iterable[RetentionItem], warehouse: Warehouse) -> list[RetentionItem]:
    """Items with orphan ids as full URIs (the public form of item_id)."""
    return [
        i._replace(item_id=warehouse.uri(i.item_id)) if i.kind == "orphan" else i for i in items
    ]
