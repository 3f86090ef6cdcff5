"""The metadata a retention plan is computed from, as gathered: per table its buckets'
snapshots, segments and files replaced by merges, every lease with its pins, the unreferenced
warehouse files."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ..tables.info import TableInfo
    from ..warehouse import FileEntry

__all__ = ["Metadata", "TableMeta", "LeaseMeta", "SnapshotMeta", "SegmentMeta", "RetiredMeta"]


class SnapshotMeta(NamedTuple):
    snapshot_id: int
    log_offset: int
    size_bytes: int
    files: tuple[str, ...]
    """Warehouse-relative paths."""
    pins: int
    """Pin znodes under the snapshot (from its stat). Read at every plan for the snapshots
    beyond the newest ``kv.snapshot.num-retained`` of an active bucket and for every snapshot
    of a sealed one (K7); for an active bucket's newest ones, which are kept whatever pins
    them, it may be the count of an earlier read."""


class SegmentMeta(NamedTuple):
    base_offset: int
    end_offset: int
    size_bytes: int
    timestamp_ms: int
    file: str
    """Warehouse-relative path."""


class RetiredMeta(NamedTuple):
    """The files of segments one merge replaced (R8), as its record says: they stay for
    readers that listed the segments until the record is older than ``orphan.min-age``."""

    path: str
    """The record's znode."""
    version: int
    """Its version as read (a record is written once: deleted at this version)."""
    ctime_ms: int
    """When the merge committed (the znode's ctime, ZooKeeper clock)."""
    files: tuple[str, ...]
    """Warehouse-relative paths of the replaced files."""
    size_bytes: int
    """Their bytes."""
    base_offset: int
    """First offset of the merged segment."""
    end_offset: int
    """One past its last offset."""


class TableMeta(NamedTuple):
    table: TableInfo
    begin: dict[int, int]
    """Beginning offset per written bucket."""
    snapshots: dict[int, list[SnapshotMeta]]
    segments: dict[int, list[SegmentMeta]]
    committed: dict[int, dict[str, int]]
    """Committed offset per consumer group, per bucket (for log.retention.respect-consumers): every
    group with offsets for the table or live members subscribed to it, -1 where it committed none
    for the bucket."""
    live_groups: frozenset[str] = frozenset()
    """Groups with live members subscribed to the table (for log.retention.respect-consumers)."""
    retired: dict[int, list[RetiredMeta]] = {}
    """Per bucket, the records of files its merges replaced (R8), by base offset; a bucket that
    was never compacted has none."""


class LeaseMeta(NamedTuple):
    lease_id: str
    expires_ms: int
    state: str
    version: int
    pins: dict[tuple[str, int, int], None]
    """(table_id, bucket, snapshot_id) of every pin."""
    created: int = 0
    """Creation id (czxid) of the lease's znode: which lease under this id the plan saw."""


class Metadata(NamedTuple):
    """Everything a plan is computed from."""

    now_ms: int
    tables: list[TableMeta]
    leases: list[LeaseMeta]
    files: list[FileEntry]
    """The listed warehouse files that no metadata references, with their sizes and times (the
    others are listed, not statted)."""
    grace_ms: int
    orphan_min_age_ms: int
    skipped: list[str]
    protected_dirs: tuple[str, ...]
    """Warehouse directories whose files are never orphans (tables whose metadata was
    unreadable)."""
    in_flight: frozenset[str] = frozenset()
    """Tokens of writes in progress: files carrying one are not orphans yet."""
    monitor_retention_ms: int = 7 * 86_400_000
    """How long the lag history is kept (the namespace setting ``monitor.retention``)."""
    stray_pins: dict[str, list[tuple[str, int, int]]] = {}
    """Pins whose lease does not exist, by the lease id they name: (table_id, bucket,
    snapshot_id) of each."""
