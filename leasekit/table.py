"""``Table``: the handle users hold (a table's definition plus its log and snapshot operations),
and dropping a table, which needs the leases that pin it (above the catalog).
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING, Any

from .errors import IllegalStateError
from .leases.pins import forget_table, leases_pinning
from .log.append import append
from .log.compaction import compact_log
from .log.state import read_states
from .snapshots.catalog import list_snapshots
from .snapshots.cover import latest_cover
from .structs import BucketLineage, LogCompaction, OffsetRange, Snapshot, TableBucket
from .tables import catalog
from .tables.info import TableInfo
from .tables.rescale import merge_buckets, split_bucket

if TYPE_CHECKING:
    from .context import Context

__all__ = ["Table", "drop_table", "finish_drop"]

log = logging.getLogger(__name__)

_DROP_ATTEMPTS = 1000


class Table(TableInfo):
    """A primary-key table: an offset log per bucket plus periodic KV snapshots."""

    def __init__(self, connection: Any, info: TableInfo) -> None:
        vars(self).update(vars(info))  # the definition as loaded, not read again
        self._connection = connection

    @property
    def connection(self) -> Any:
        """The ``Connection`` this table was obtained from.

        Returns:
            The connection.

        Raises nothing.
        """
        return self._connection

    # -- the log ---------------------------------------------------------------------------

    def append(self, rows: Any) -> dict[TableBucket, OffsetRange]:
        """Upsert rows; each goes to the bucket of its primary key.

        Arguments:
            rows: a pandas DataFrame, pyarrow Table or list of dicts with the table's columns.

        Returns:
            The offsets assigned, per bucket written.

        Raises:
            InvalidArgumentError: the rows do not fit the schema (a missing column, a null key,
                a value of the wrong type).
            InvalidTypeError: ``rows`` is none of those forms, or a row is not a dict.
            TableNotFoundError: the table was dropped.
            PartialAppendError: some buckets committed before a later transaction failed: it says
                which are visible and carries the other rows for a retry.
            SessionLostError: the write lost its ZooKeeper session; nothing is visible, a retry is
                safe.
            IllegalStateError: a file could not be written to the warehouse.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer; the rows may have committed
                (compare ``end_offsets`` before writing them again).
        """
        return append(self, rows, "upsert")

    def delete(self, keys: Any) -> dict[TableBucket, OffsetRange]:
        """Delete the rows with these primary keys.

        Arguments:
            keys: rows of the primary-key columns only (same forms as ``append``).

        Returns:
            The offsets assigned to the deletions, per bucket written.

        Raises:
            As ``append``; InvalidArgumentError also when the keys do not fit the primary key.
        """
        return append(self, keys, "delete")

    def beginning_offsets(self) -> dict[TableBucket, int]:
        """First offset still stored, per bucket.

        Returns:
            The first stored offset of every bucket the table has had, sealed ones included
            (0 for a bucket never written).

        Raises:
            TableNotFoundError: the table was dropped.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self.refresh()
        states = read_states(self, range(self.layout.count))
        return {TableBucket(self.name, b): (s.begin if s else 0) for b, s in enumerate(states)}

    def end_offsets(self) -> dict[TableBucket, int]:
        """Next offset to assign (high watermark), per bucket.

        Returns:
            The end offset of every bucket the table has had (a sealed bucket's is where it was
            sealed; 0 for a bucket never written).

        Raises:
            As ``beginning_offsets``.
        """
        self.refresh()
        states = read_states(self, range(self.layout.count))
        return {TableBucket(self.name, b): (s.end if s else 0) for b, s in enumerate(states)}

    # -- the bucket layout ----------------------------------------------------------------------

    @property
    def num_buckets(self) -> int:
        """How many buckets are active now (read from ZooKeeper).

        Returns:
            The number of active buckets.

        Raises:
            As ``beginning_offsets``.
        """
        return len(self.refresh().active)

    @property
    def buckets(self) -> list[TableBucket]:
        """The active buckets now (read from ZooKeeper).

        Returns:
            Their TableBuckets, by id; ids need not be contiguous after a rescale.

        Raises:
            As ``beginning_offsets``.
        """
        return [TableBucket(self.name, b) for b in self.refresh().active]

    def split_bucket(self, bucket: int | TableBucket) -> tuple[TableBucket, TableBucket]:
        """Split an active bucket online: it is sealed at its end offset and two new buckets,
        each owning half of its keys, take its appends (K1, K2). No file is copied (K3).

        Arguments:
            bucket: the bucket, a number or a ``TableBucket``.

        Returns:
            The two new buckets.

        Raises:
            BucketNotFoundError: the table never had that bucket.
            InvalidTypeError: ``bucket`` is not an int or a TableBucket.
            InvalidArgumentError: a TableBucket of another table.
            IllegalStateError: the bucket is sealed, another rescale of the table committed
                meanwhile, or the table is being dropped.
            TableNotFoundError: the table was dropped.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        return split_bucket(self, bucket)

    def merge_buckets(
        self, bucket_a: int | TableBucket, bucket_b: int | TableBucket
    ) -> TableBucket:
        """Merge two siblings (the two buckets one split made) back into one new bucket; both are
        sealed at their end offsets (K1).

        Arguments:
            bucket_a: one sibling, a number or a ``TableBucket``.
            bucket_b: the other.

        Returns:
            The new bucket.

        Raises:
            BucketNotFoundError: the table never had one of them.
            InvalidTypeError: a bucket is not an int or a TableBucket.
            InvalidArgumentError: they are the same bucket, not siblings, or a TableBucket of
                another table.
            IllegalStateError: one is sealed, another rescale committed meanwhile, or the table
                is being dropped.
            TableNotFoundError: the table was dropped.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        return merge_buckets(self, bucket_a, bucket_b)

    def compact_log(self, bucket: int | TableBucket | None = None) -> LogCompaction:
        """Merge runs of adjacent small segments of the log into segments of up to
        ``log.segment.target-bytes`` (R8): every record keeps its offset, timestamp and op, in
        order. Readers carry on meanwhile; the replaced files stay for ``orphan.min-age`` for
        readers that listed them, then retention deletes them. The janitor does this every
        pass; call it to do it now.

        Arguments:
            bucket: one bucket (a number or a ``TableBucket``), active or sealed; ``None`` for
                every bucket the table has had.

        Returns:
            What was merged, and the segments each bucket holds now.

        Raises:
            BucketNotFoundError: the table never had that bucket.
            InvalidTypeError: ``bucket`` is not an int or a TableBucket.
            InvalidArgumentError: a TableBucket of another table.
            TableNotFoundError: the table was dropped.
            SessionLostError: the ZooKeeper session ended during a merge (nothing of it was
                committed; call again).
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self.refresh()
        buckets = None if bucket is None else [self.bucket_number(bucket)]
        return compact_log(self, buckets)

    def lineage(self) -> list[BucketLineage]:
        """Every bucket the table has had, by id: its state, parents, children and seal.

        Returns:
            One ``BucketLineage`` per bucket, read from ZooKeeper now.

        Raises:
            As ``beginning_offsets``.
        """
        return self.refresh().layout.lineage(self.name)

    # -- snapshots --------------------------------------------------------------------------

    def snapshot(self, spark: Any = None) -> dict[TableBucket, Snapshot]:
        """Take a new snapshot of every active bucket whose state advanced since its latest one:
        its log grew, or it was made by a rescale and has no snapshot yet (its first snapshot
        materialises its share of its parents' state, K3).

        Arguments:
            spark: the SparkSession to compact with; ``None`` uses the active one (or starts one).

        Returns:
            The new snapshots, per bucket (empty when no bucket advanced).

        Raises:
            InvalidTypeError: ``spark`` is not a SparkSession.
            JavaNotFoundError: ``spark`` is None and no Java was found to start Spark with.
            TableNotFoundError: the table was dropped meanwhile.
            IllegalStateError: Spark failed to compact, or the files could not be registered.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        from .sparkio.compact import take_snapshots  # Spark loads on first use

        return take_snapshots(self, spark)

    def snapshots(self, bucket: int | None = None) -> list[Snapshot]:
        """Snapshots still stored, oldest first.

        Arguments:
            bucket: one bucket (a number or a ``TableBucket``), active or sealed; ``None`` for all.

        Returns:
            The snapshots, oldest first.

        Raises:
            BucketNotFoundError: the table never had that bucket.
            InvalidTypeError: ``bucket`` is not an int or a TableBucket.
            InvalidArgumentError: a TableBucket of another table.
            TableNotFoundError: the table was dropped.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self.refresh()
        buckets = range(self.layout.count) if bucket is None else [self.bucket_number(bucket)]
        return list_snapshots(self, buckets)

    def latest_snapshots(self) -> dict[TableBucket, int]:
        """The newest snapshots that stand for the table now: each active bucket's newest, or,
        for a bucket a rescale made that has none yet, its ancestors' newest (K3, K4). A sealed
        bucket whose descendants have snapshots of their own is not named, so
        ``read_snapshots(spark, table, table.latest_snapshots())`` reads every key once.

        Returns:
            Snapshot id per bucket; active buckets whose keys no snapshot stands for are absent.

        Raises:
            As ``beginning_offsets``.
        """
        latest = latest_cover(self.refresh())
        return {TableBucket(self.name, b): sid for b, sid in latest.items()}


# -- dropping ---------------------------------------------------------------------------------


def drop_table(ctx: Context, name: object, *, force: bool = False) -> None:
    """Remove the table: its znode and a drop marker in one step, then the leases' pins of it,
    its data metadata, then its files (``finish_drop``).

    The table's data znode is marked first and the pinning leases read after, so an acquire
    either committed before the mark (and is seen here) or fails its fence check (docs/security.md).

    Arguments:
        ctx: the namespace.
        name: the table's name or a Table.
        force: drop it even while live leases pin it: their pins of it are removed (a WARNING
            names those leases), the leases stay.

    Raises:
        TableNotFoundError: no such table.
        IllegalStateError: live leases pin it and ``force`` is False (the message names them).
        CorruptMetadataError: the drop marker is unreadable or names another directory.
    """
    delay = 0.002
    for _ in range(_DROP_ATTEMPTS):
        table = catalog.load_table(ctx, name)
        if _attempt_drop(ctx, table, force):
            break
        time.sleep(random.uniform(0, delay))
        delay = min(delay * 2, 0.05)
    else:
        raise IllegalStateError(
            f"drop of table {table.name!r}: gave up after {_DROP_ATTEMPTS} concurrent changes"
        )
    finish_drop(ctx, table.table_id)


def _attempt_drop(ctx: Context, table: TableInfo, force: bool) -> bool:
    """One attempt: mark the fence, read the pinning leases, commit the drop or unmark and
    refuse. False when the attempt must be retried."""
    fenced = catalog.mark_for_drop(ctx, table)
    if fenced is None:
        return False
    try:
        pinned_by = leases_pinning(ctx, table.table_id)
    except BaseException:
        catalog.unmark_drop(ctx, fenced)
        raise
    return catalog.commit_drop(ctx, fenced, pinned_by, force=force)


def finish_drop(ctx: Context, table_id: str) -> None:
    """Complete a drop recorded by its marker: the leases' pins of the table, then its other
    metadata, its files, and the marker last (so a pass cut short is finished by the next).

    Logs a WARNING naming the leases whose pins of the table it removed (a forced drop's, or
    expired ones'); those leases stay, maybe with no pin left.

    Arguments:
        ctx: the namespace.
        table_id: the dropped table's id (the name of its drop marker).

    Raises:
        CorruptMetadataError: naming the marker, when it cannot be decoded or names another
            directory than the table's own; nothing is deleted then (docs/security.md,
            "Containment").
    """
    dropped = catalog.read_drop(ctx, table_id)
    if dropped is None:
        return
    forgotten = forget_table(ctx, table_id)
    if forgotten:
        log.warning(
            "dropped table %r: removed its pins from lease(s) %s; the leases stay",
            dropped.name,
            ", ".join(sorted(forgotten)),
        )
    catalog.remove_dropped(ctx, dropped)
