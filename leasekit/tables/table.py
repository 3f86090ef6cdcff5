"""``Table``: the handle users hold, a ``TableInfo`` with the log and snapshot operations."""

from __future__ import annotations

from typing import Any

from ..log.append import append
from ..log.state import read_states
from ..snapshots.catalog import list_snapshots, read_latest
from ..structs import OffsetRange, Snapshot, TableBucket
from .info import TableInfo

__all__ = ["Table"]


class Table(TableInfo):
    """A primary-key table: an offset log per bucket plus periodic KV snapshots."""

    # -- the log ---------------------------------------------------------------------------

    def append(self, rows: Any) -> dict[TableBucket, OffsetRange]:
        """Upsert ``rows`` (pandas DataFrame, pyarrow Table or list of dicts)."""
        return append(self, rows, "upsert")

    def delete(self, keys: Any) -> dict[TableBucket, OffsetRange]:
        """Delete the rows with these primary keys (primary-key columns only)."""
        return append(self, keys, "delete")

    def beginning_offsets(self) -> dict[TableBucket, int]:
        """First offset still stored, per bucket."""
        states = read_states(self, range(self.num_buckets))
        return {TableBucket(self.name, b): (s.begin if s else 0) for b, s in enumerate(states)}

    def end_offsets(self) -> dict[TableBucket, int]:
        """Next offset to assign (high watermark), per bucket."""
        states = read_states(self, range(self.num_buckets))
        return {TableBucket(self.name, b): (s.end if s else 0) for b, s in enumerate(states)}

    # -- snapshots --------------------------------------------------------------------------

    def snapshot(self, spark: Any = None) -> dict[TableBucket, Snapshot]:
        """Take a new snapshot of every bucket whose log advanced since its latest one."""
        from ..snapshots.take import take_snapshots  # Spark loads on first use

        return take_snapshots(self, spark)

    def snapshots(self, bucket: int | None = None) -> list[Snapshot]:
        """Snapshots still stored, oldest first; all buckets unless ``bucket`` is given."""
        buckets = range(self.num_buckets) if bucket is None else [self.bucket_number(bucket)]
        return list_snapshots(self, buckets)

    def latest_snapshots(self) -> dict[TableBucket, int]:
        """Newest snapshot id per bucket; buckets with no snapshot are absent."""
        return {TableBucket(self.name, b): sid for b, sid in read_latest(self).items()}
