"""Retention planning: ``gather`` reads metadata and files, ``plan`` decides what to keep and
delete and why. ``plan`` is a pure function of what was gathered and the ZooKeeper time.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from ..durations import format_duration, to_ms
from ..errors import CorruptMetadataError, LeasekitError
from ..log.markers import live_tokens
from ..records import RetentionItem, RetentionPlan, TableBucket
from ..warehouse import FileEntry
from ..zk import decode, to_datetime
from ..zk.paths import CHUNK

if TYPE_CHECKING:
    from ..connection import Connection
    from ..tables.catalog import Table

__all__ = ["Metadata", "gather", "plan", "retention_plan"]


class SnapshotMeta(NamedTuple):
    snapshot_id: int
    log_offset: int
    size_bytes: int
    files: tuple[str, ...]
    """Warehouse-relative paths."""
    pins: int
    """Pin znodes under the snapshot (from its stat)."""


class SegmentMeta(NamedTuple):
    base_offset: int
    end_offset: int
    size_bytes: int
    timestamp_ms: int
    file: str
    """Warehouse-relative path."""


class TableMeta(NamedTuple):
    table: Table
    begin: dict[int, int]
    """Beginning offset per written bucket."""
    snapshots: dict[int, list[SnapshotMeta]]
    segments: dict[int, list[SegmentMeta]]
    committed: dict[int, dict[str, int]]
    """Committed offset per consumer group, per bucket (for log.retention.respect-consumers)."""


class LeaseMeta(NamedTuple):
    lease_id: str
    expires_ms: int
    state: str
    version: int
    pins: dict[tuple[str, int, int], None]
    """(table_id, bucket, snapshot_id) of every pin."""


class Metadata(NamedTuple):
    """Everything a plan is computed from."""

    now_ms: int
    tables: list[TableMeta]
    leases: list[LeaseMeta]
    files: list[FileEntry]
    grace_ms: int
    orphan_min_age_ms: int
    skipped: list[str]
    protected_dirs: tuple[str, ...]
    """Warehouse directories whose files are never orphans (tables whose metadata was unreadable)."""
    in_flight: frozenset[str] = frozenset()
    """Tokens of writes in progress: files carrying one are not orphans yet."""


# -- gathering ----------------------------------------------------------------------------


def _gather_table(conn: Connection, table: Table, skipped: list[str]) -> TableMeta:
    from ..log.append import bucket_state

    store, paths, tid = conn.store, conn.paths, table.table_id
    buckets = list(range(table.num_buckets))
    state_paths = [paths.bucket(tid, b) for b in buckets]
    begin: dict[int, int] = {}
    for b, path, node in zip(buckets, state_paths, store.get_many(state_paths)):
        if node is not None:
            try:
                begin[b] = bucket_state(node, path).begin
            except CorruptMetadataError as exc:
                skipped.append(str(exc))
    written = sorted(begin)
    snap_names = store.children_many([paths.snapshots(tid, b) for b in written])
    seg_names = store.children_many([paths.log(tid, b) for b in written])
    snap_keys = [(b, int(n)) for b, names in zip(written, snap_names) for n in (names or [])]
    seg_keys = [(b, int(n)) for b, names in zip(written, seg_names) for n in (names or [])]
    snap_paths = [paths.snapshot(tid, b, i) for b, i in snap_keys]
    seg_paths = [paths.segment(tid, b, o) for b, o in seg_keys]
    nodes = store.get_many(snap_paths + seg_paths)
    snapshots: dict[int, list[SnapshotMeta]] = {b: [] for b in written}
    segments: dict[int, list[SegmentMeta]] = {b: [] for b in written}
    for (b, sid), path, node in zip(snap_keys, snap_paths, nodes[:len(snap_paths)]):
        if node is None:
            continue
        try:
            v = decode(node.data, path)
            snapshots[b].append(SnapshotMeta(sid, v["o"], v["s"], tuple(v["f"]), node.stat.num_children))
        except (CorruptMetadataError, KeyError, TypeError) as exc:
            skipped.append(str(exc) if isinstance(exc, LeasekitError) else f"snapshot metadata at {path} is incomplete")
    for (b, base), path, node in zip(seg_keys, seg_paths, nodes[len(snap_paths):]):
        if node is None:
            continue
        try:
            v = decode(node.data, path)
            segments[b].append(SegmentMeta(base, base + v["n"], v["s"], max(node.stat.ctime_ms, v["t"]), v["f"]))
        except (CorruptMetadataError, KeyError, TypeError) as exc:
            skipped.append(str(exc) if isinstance(exc, LeasekitError) else f"segment metadata at {path} is incomplete")
    return TableMeta(table, begin, snapshots, segments, {})


def _gather_leases(conn: Connection, skipped: list[str]) -> list[LeaseMeta]:
    from ..leases.store import _record

    store, paths = conn.store, conn.paths
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
            table_id, _, chunk = name.partition(".")
            for i, sid in enumerate(decode(node.data, path)["a"]):
                if sid:
                    pins[lease_id][(table_id, int(chunk) * CHUNK + i, sid)] = None
        except (CorruptMetadataError, KeyError, TypeError, ValueError) as exc:
            skipped.append(str(exc) if isinstance(exc, LeasekitError) else f"lease pins at {path} are unreadable")
    out = []
    for lease_id, node in zip(ids, records):
        if node is None:
            continue
        try:
            record = _record(node, paths.lease(lease_id))
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
            continue
        out.append(LeaseMeta(lease_id, record.expires_ms, record.state, node.stat.version, pins[lease_id]))
    return out


def gather(conn: Connection, table: str | Table | None = None) -> Metadata:
    """Read what a retention plan needs: tables (or one), every lease, the warehouse files."""
    from ..tables.catalog import list_tables, load_table

    skipped: list[str] = []
    protected: list[str] = []
    names = [table] if table is not None else list_tables(conn)
    tables: list[TableMeta] = []
    for name in names:
        try:
            tables.append(_gather_table(conn, load_table(conn, name), skipped))
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
            protected.append(f"tables/{name}/")
    leases = _gather_leases(conn, skipped)
    in_flight = live_tokens(conn)  # before listing files: a newer write's files are young anyway
    settings = conn.settings()
    files = conn.warehouse.list(f"tables/{tables[0].table.name}" if table is not None and tables else "tables")
    now = conn.now_ms()
    return Metadata(now, tables, leases, files, to_ms(settings["lease.expiry-grace"]),
                    to_ms(settings["orphan.min-age"]), skipped, tuple(protected), in_flight)


def retention_plan(conn: Connection, table: str | Table | None = None) -> RetentionPlan:
    """The retention plan for one table (or all), leases included; changes nothing."""
    result = plan(gather(conn, table))
    return dataclasses.replace(result, items=uris(result.items, conn))


# -- planning -----------------------------------------------------------------------------


def _when(ms: int) -> str:
    return to_datetime(ms).strftime("%Y-%m-%d %H:%M:%S UTC")


def _age(ms: int) -> str:
    seconds = max(0, ms) // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _plan_leases(meta: Metadata) -> tuple[list[RetentionItem], set[str]]:
    items, ending = [], set()
    grace = format_duration(timedelta(milliseconds=meta.grace_ms))
    for lease in sorted(meta.leases, key=lambda x: x.lease_id):
        if lease.state != "live":
            action, reason = "delete", "being dropped: finishing the drop"
        elif meta.now_ms > lease.expires_ms + meta.grace_ms:
            action, reason = "delete", f"lease expired at {_when(lease.expires_ms)} (+{grace} grace)"
        elif meta.now_ms > lease.expires_ms:
            action, reason = "keep", (f"expired at {_when(lease.expires_ms)}; reclaimed after the {grace} grace, "
                                      f"at {_when(lease.expires_ms + meta.grace_ms)}")
        else:
            action, reason = "keep", f"valid until {_when(lease.expires_ms)}"
        if action == "delete":
            ending.add(lease.lease_id)
        items.append(RetentionItem("lease", None, lease.lease_id, action, reason, 0))
    return items, ending


def _plan_snapshots(tm: TableMeta, bucket: int, holders: dict[tuple[str, int, int], list[LeaseMeta]],
                    ending: set[str]) -> tuple[list[RetentionItem], SnapshotMeta | None]:
    retained = tm.table.properties["kv.snapshot.num-retained"]
    tb = TableBucket(tm.table.name, bucket)
    items, kept = [], []
    for rank, snap in enumerate(sorted(tm.snapshots.get(bucket, []), key=lambda s: -s.snapshot_id)):
        leases = holders.get((tm.table.table_id, bucket, snap.snapshot_id), [])
        live = [x for x in leases if x.lease_id not in ending]
        unknown = snap.pins - len(leases)
        if rank < retained:
            reason = f"newest {retained} of bucket"
        elif live:
            reason = "pinned by " + ", ".join(f"lease {x.lease_id} until {_when(x.expires_ms)}" for x in live)
        elif unknown > 0:
            reason = f"pinned by {unknown} pin(s) of no known lease"
        else:
            gone = f"; its lease(s) {', '.join(x.lease_id for x in leases)} expire in this pass" if leases else ""
            items.append(RetentionItem("snapshot", tb, snap.snapshot_id, "delete",
                                       f"older than the newest {retained} of bucket, not pinned{gone}", snap.size_bytes))
            continue
        kept.append(snap)
        items.append(RetentionItem("snapshot", tb, snap.snapshot_id, "keep", reason, snap.size_bytes))
    return items, min(kept, key=lambda s: s.log_offset, default=None)


def _plan_segments(meta: Metadata, tm: TableMeta, bucket: int, oldest: SnapshotMeta | None) -> list[RetentionItem]:
    props = tm.table.properties
    retention_ms = to_ms(props["log.retention"])
    limit = props["log.retention.bytes"]
    respect = props["log.retention.respect-consumers"]
    tb = TableBucket(tm.table.name, bucket)
    segments = sorted(tm.segments.get(bucket, []), key=lambda s: s.base_offset)
    remaining = sum(s.size_bytes for s in segments)
    cover = oldest.log_offset if oldest else 0
    deleting = True
    items = []
    for seg in segments:
        reason = None
        if seg.end_offset > cover:
            reason = (f"needed: log tail of kept snapshot {oldest.snapshot_id}" if oldest
                      else "needed: no snapshot covers it yet")
        elif not deleting:
            reason = "after a kept segment (the log stays contiguous)"
        else:
            age = meta.now_ms - seg.timestamp_ms
            old = age > retention_ms
            over = limit is not None and remaining > limit
            behind = sorted((g, o) for g, o in tm.committed.get(bucket, {}).items() if o < seg.end_offset)
            if not (old or over):
                reason = f"within log.retention {format_duration(props['log.retention'])} (age {_age(age)})"
            elif respect and behind:
                reason = f"consumer group {behind[0][0]} has not committed past it (at offset {behind[0][1]})"
            else:
                why = (f"older than log.retention {format_duration(props['log.retention'])} (age {_age(age)})"
                       if old else f"log over log.retention.bytes {limit}")
                items.append(RetentionItem("segment", tb, seg.base_offset, "delete",
                                           f"below log start of snapshot {oldest.snapshot_id}; {why}", seg.size_bytes))
                remaining -= seg.size_bytes
                continue
            deleting = False
        items.append(RetentionItem("segment", tb, seg.base_offset, "keep", reason, seg.size_bytes))
    return items


def _companion_of(path: str, referenced: set[str], dirs: set[str]) -> bool:
    """Spark's side files of referenced data files: checksums and job markers."""
    directory, name = posixpath.split(path)
    if name.startswith(".") and name.endswith(".crc"):
        target = posixpath.join(directory, name[1:-4])
        return target in referenced or _companion_of(target, referenced, dirs)
    return name == "_SUCCESS" and any(d == directory or d.startswith(directory + "/") for d in dirs)


def _bucket_of_file(path: str, tables: dict[str, str]) -> TableBucket | None:
    parts = path.split("/")
    if len(parts) < 4 or tables.get(parts[2]) != parts[1]:
        return None
    for part, following in zip(parts[3:], parts[4:]):
        if part == "log" and following.isdigit():
            return TableBucket(parts[1], int(following))
        if part.startswith("_bucket=") and part[8:].isdigit():
            return TableBucket(parts[1], int(part[8:]))
    return None


def _plan_orphans(meta: Metadata) -> list[RetentionItem]:
    referenced = {f for tm in meta.tables for snaps in tm.snapshots.values() for s in snaps for f in s.files}
    referenced |= {s.file for tm in meta.tables for segs in tm.segments.values() for s in segs}
    dirs = {posixpath.dirname(f) for f in referenced}
    ids = {tm.table.table_id: tm.table.name for tm in meta.tables}
    min_age = format_duration(timedelta(milliseconds=meta.orphan_min_age_ms))
    items = []
    for entry in sorted(meta.files, key=lambda e: e.path):
        if entry.path in referenced or _companion_of(entry.path, referenced, dirs):
            continue
        if entry.path.startswith(meta.protected_dirs):
            continue
        age = meta.now_ms - entry.mtime_ms
        tb = _bucket_of_file(entry.path, ids)
        writer = next((t for t in meta.in_flight if t in entry.path), None)
        if writer is not None:
            items.append(RetentionItem("orphan", tb, entry.path, "keep",
                                       f"unreferenced for {_age(age)}: write {writer[:8]} still in progress",
                                       entry.size))
            continue
        if age >= meta.orphan_min_age_ms:
            items.append(RetentionItem("orphan", tb, entry.path, "delete",
                                       f"orphan, {_age(age)} old: no metadata references it", entry.size))
        else:
            items.append(RetentionItem("orphan", tb, entry.path, "keep",
                                       f"unreferenced for {_age(age)} (orphan.min-age {min_age}): may be a write "
                                       "in progress", entry.size))
    return items


def plan(meta: Metadata) -> RetentionPlan:
    """Decide every keep and delete (R1, R3, R4, R5, R6): a pure function of ``meta``."""
    items, ending = _plan_leases(meta)
    holders: dict[tuple[str, int, int], list[LeaseMeta]] = {}
    for lease in meta.leases:
        for key in lease.pins:
            holders.setdefault(key, []).append(lease)
    for tm in meta.tables:
        for bucket in sorted(set(tm.snapshots) | set(tm.segments)):
            snap_items, oldest = _plan_snapshots(tm, bucket, holders, ending)
            items += snap_items
            items += _plan_segments(meta, tm, bucket, oldest)
    items += _plan_orphans(meta)
    return RetentionPlan(items, to_datetime(meta.now_ms), list(meta.skipped))


def uris(items: Iterable[RetentionItem], conn: Connection) -> list[RetentionItem]:
    """Items with orphan ids as full URIs (the public form of item_id)."""
    return [i._replace(item_id=conn.warehouse.uri(i.item_id)) if i.kind == "orphan" else i for i in items]
