"""Typed value records that cross module boundaries and reach users.

Every record is an immutable NamedTuple; each field is documented.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "TableBucket",
    "BucketLineage",
    "OffsetRange",
    "Snapshot",
    "LogSegment",
    "LogCompaction",
    "AcquireResult",
    "LeaseInfo",
    "RetentionItem",
    "RetentionPlan",
    "RetentionReport",
    "OffsetAndMetadata",
    "Record",
    "CommittedOffset",
    "GroupStatus",
    "MemberInfo",
    "GroupBoard",
    "DESCRIBE_COLUMNS",
]


class TableBucket(NamedTuple):
    """One bucket of one table."""

    table: str
    """Table name."""
    bucket: int
    """Bucket id in the table's layout, active or sealed: 0 <= bucket < the number of buckets
    the table has ever had (after a rescale the active ids need not be contiguous)."""


class BucketLineage(NamedTuple):
    """One bucket a table has had: where it came from and, once sealed, where it went (K1)."""

    table_bucket: TableBucket
    state: str
    """"active" (it takes appends) or "sealed" (split or merged; its log ends at ``sealed_at``)."""
    parents: tuple[int, ...]
    """The bucket it was split from, or the two it was merged from; empty for a bucket the
    table was created with."""
    children: tuple[int, ...]
    """The two buckets it was split into, or the one it was merged into; empty while active."""
    sealed_at: int | None
    """Its end offset when it was sealed; None while active."""


class OffsetRange(NamedTuple):
    """A half-open range of log offsets ``[start, end)``."""

    start: int
    """First offset in the range."""
    end: int
    """One past the last offset in the range."""

    def __len__(self) -> int:  # type: ignore[override]
        return self.end - self.start


class OffsetAndMetadata(NamedTuple):
    """An offset to commit: the next offset to consume, with the committer's metadata."""

    offset: int
    """Next offset to consume (C2)."""
    metadata: str = ""
    """At most 4096 UTF-8 bytes."""


class CommittedOffset(NamedTuple):
    """A group's committed offset of one bucket, as stored."""

    table_bucket: TableBucket
    offset: int
    """Next offset to consume."""
    metadata: str
    """The committer's metadata."""
    committed_at: datetime
    """ZooKeeper time of the commit."""


class Record(NamedTuple):
    """One log record returned by ``Consumer.getone`` and consumer iteration."""

    table_bucket: TableBucket
    offset: int
    """The record's log offset."""
    timestamp_ms: int
    """Commit time on the ZooKeeper clock, epoch milliseconds."""
    op: str
    """"upsert" or "delete"."""
    value: dict[str, Any]
    """The table's columns (for a delete: the primary key, the other columns None)."""


class MemberInfo(NamedTuple):
    """A live member of a consumer group, as ZooKeeper holds it now."""

    member_id: str
    """The name of its member znode (ends with its join sequence number)."""
    host: str
    """host:pid of the member's process."""
    buckets: frozenset[TableBucket]
    """The buckets it owns now: their owner znodes name it."""
    assigned: frozenset[TableBucket] = frozenset()
    """The buckets the published assignment gives it; differs from ``buckets`` while buckets
    are handed over (claimed only once their last owner released them, C10)."""
    generation: int | None = None
    """The published assignment's generation (None before the first)."""
    leader: bool = False
    """Whether it leads the group (the oldest live member: it computes the assignments, C14)."""


class GroupStatus(NamedTuple):
    """A group's lag health: the worst bucket's, with STOP, STALL, REWIND and MISSING reported
    as ERR."""

    status: str
    """"OK", "WARN" or "ERR"."""
    buckets: dict[TableBucket, str]
    """Each committed bucket's own status: OK, WARN, STOP, STALL, REWIND, or MISSING (the
    segment file holding its next record is missing while the metadata lists it)."""
    generation: int | None = None
    """The published assignment's generation (None before the first)."""
    unowned: frozenset[TableBucket] = frozenset()
    """Buckets of the tables the live members subscribe to that no live member owns now
    (being handed over, or left by a member that died)."""


DESCRIBE_COLUMNS = [
    "group",
    "table",
    "bucket",
    "current_offset",
    "log_end_offset",
    "lag",
    "time_lag",
    "consumer_id",
    "host",
    "last_commit",
    "status",
]
"""The columns of ``Connection.describe_group``'s frame, in order."""


class GroupBoard(NamedTuple):
    """One reading of a consumer group, as a dashboard shows it (``Connection.group_board``)."""

    frame: pd.DataFrame
    """``describe_group``'s columns plus ``metadata`` (the last commit's, ``<NA>`` if none)."""
    members: list[MemberInfo]
    """Live members, oldest (the leader) first."""
    generation: int | None
    """The group's generation, None without live members."""
    leader: str | None
    """The leader's member id, None without live members."""
    lineage: dict[TableBucket, BucketLineage] = {}
    """The buckets of rescaled tables that a split or merge sealed or made (K6): where each
    came from and went; empty when no table of the group was ever rescaled."""


class Snapshot(NamedTuple):
    """A KV snapshot of one bucket: the state after log records ``[0, log_offset)``."""

    table_bucket: TableBucket
    """The bucket the snapshot belongs to."""
    snapshot_id: int
    """Per-bucket id, 1, 2, 3, ... strictly increasing."""
    log_offset: int
    """The snapshot holds the state after applying records before this offset."""
    row_count: int
    """Live keys in the snapshot."""
    size_bytes: int
    """Total size of the snapshot's files."""
    created_at: datetime
    """When the snapshot was registered (ZooKeeper clock, UTC)."""
    files: tuple[str, ...]
    """Absolute paths (local warehouse) or full URIs of the Parquet files."""


class LogSegment(NamedTuple):
    """An immutable Parquet file holding log records ``[base_offset, end_offset)`` of a bucket."""

    table_bucket: TableBucket
    """The bucket the segment belongs to."""
    base_offset: int
    """Offset of the segment's first record."""
    end_offset: int
    """One past the offset of the segment's last record."""
    timestamp_ms: int
    """Commit time of the segment's last record (ZooKeeper clock, ms); every record of an
    appended segment carries it."""
    size_bytes: int
    """Size of the segment file."""
    file: str
    """Absolute path or full URI of the segment file."""
    first_timestamp_ms: int | None = None
    """A merged segment's (R8) first record's timestamp: its records keep their own timestamps,
    in a ``_timestamp`` column of its file; None for an appended segment."""


class LogCompaction(NamedTuple):
    """What one compaction of a table's log did (R8): runs of adjacent small segments merged,
    each into one segment holding every record with its offset, timestamp and op."""

    table: str
    """The table."""
    merged: int
    """Segments replaced."""
    written: int
    """Merged segments committed."""
    records: int
    """Records rewritten."""
    bytes_read: int
    """Bytes of the replaced segment files."""
    bytes_written: int
    """Bytes of the merged files."""
    lost: int
    """Merges given up because a concurrent change (retention, a drop, another merge) took
    one of their segments first; their files were removed, and the next pass plans again."""
    segments: dict[TableBucket, int]
    """Segments of each bucket looked at, after the compaction."""


class AcquireResult(NamedTuple):
    """What an acquire pinned."""

    acquired: dict[TableBucket, int]
    """Buckets now pinned by the lease, with the pinned snapshot id."""
    unavailable: dict[TableBucket, int]
    """Requested buckets not pinned: the snapshot was missing or being deleted (-1: the bucket
    had none)."""
    expires_at: datetime
    """The lease's expiry after this acquire (ZooKeeper clock, UTC)."""


class LeaseInfo(NamedTuple):
    """A KV snapshot lease as stored."""

    lease_id: str
    """The lease's id."""
    pins: dict[TableBucket, int]
    """Pinned snapshot id per bucket."""
    duration: timedelta
    """Duration of the last acquire or renew."""
    created_at: datetime
    """When the lease was created (ZooKeeper clock, UTC)."""
    renewed_at: datetime
    """Time of the last acquire or renew (ZooKeeper clock, UTC)."""
    expires_at: datetime
    """The lease is valid while ZooKeeper time <= expires_at."""
    owner: str
    """host:pid of the client that last acquired or renewed it."""


class RetentionItem(NamedTuple):
    """One thing retention keeps or deletes, with the reason."""

    kind: str
    """"snapshot", "segment", "orphan" or "lease"."""
    table_bucket: TableBucket | None
    """The bucket it belongs to (None for leases and for files of unknown tables)."""
    item_id: int | str
    """Snapshot id, segment base offset, orphan file URI or lease id."""
    action: str
    """"keep" or "delete"."""
    reason: str
    """Why, in words: "newest 2 of bucket", "pinned by lease q3 until ...", ..."""
    size_bytes: int
    """Bytes the item holds in the warehouse (0 for leases)."""


_ITEM_COLUMNS = ["kind", "table", "bucket", "item_id", "action", "reason", "size_bytes"]


def _frame(items: list[RetentionItem]) -> Any:
    import pandas as pd

    rows = [
        (
            i.kind,
            i.table_bucket.table if i.table_bucket else None,
            i.table_bucket.bucket if i.table_bucket else None,
            i.item_id,
            i.action,
            i.reason,
            i.size_bytes,
        )
        for i in items
    ]
    frame = pd.DataFrame(rows, columns=_ITEM_COLUMNS)
    frame["bucket"] = frame["bucket"].astype("Int64")
    frame["item_id"] = frame["item_id"].astype(object)
    return frame


@dataclass(frozen=True)
class RetentionPlan:
    """What a retention pass would keep and delete, and why. Computing it changes nothing."""

    items: list[RetentionItem]
    """Every snapshot, segment, orphan file and lease considered, with its action and reason."""
    planned_at: datetime
    """The ZooKeeper time the plan was computed for."""
    skipped: list[str] = field(default_factory=list)
    """Metadata that could not be read (corrupt znodes, named by path); left untouched."""

    @property
    def reclaimable_bytes(self) -> int:
        """Bytes freed if the plan runs: the sum of size_bytes over "delete" items."""
        return sum(i.size_bytes for i in self.items if i.action == "delete")

    @property
    def deletes(self) -> list[RetentionItem]:
        return [i for i in self.items if i.action == "delete"]

    def to_pandas(self) -> Any:
        """The items as a DataFrame (kind, table, bucket, item_id, action, reason, size_bytes)."""
        return _frame(self.items)


@dataclass(frozen=True)
class RetentionReport:
    """What a retention pass did."""

    deleted: list[RetentionItem]
    """Items deleted (with dry_run: the items that would be)."""
    freed_bytes: int
    """Bytes freed in the warehouse."""
    errors: list[str]
    """Items that could not be deleted, and why (the next pass retries them)."""
    dry_run: bool = False
    """True when nothing was changed."""
    compacted: list[LogCompaction] = field(default_factory=list)
    """The log compactions of a janitor's pass (R8), one per table that merged or lost a run;
    empty from ``run_retention``, which does not compact."""

    def to_pandas(self) -> Any:
        """The deleted items as a DataFrame."""
        return _frame(self.deleted)
