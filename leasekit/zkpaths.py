"""Where every kind of metadata lives in ZooKeeper, under one namespace root.

Tables are addressed by name; their data (buckets, log segments, snapshots) by table id,
so a dropped and recreated table never shares metadata with its predecessor.
"""

from __future__ import annotations

__all__ = ["Paths"]

SEGMENT_DIGITS = 20
SNAPSHOT_DIGITS = 10


class Paths:
    """Path builder for one namespace."""

    def __init__(self, namespace: str) -> None:
        self.root = f"/{namespace}"
        self.settings = f"{self.root}/settings"
        self.clock = f"{self.root}/clock"
        self.tables = f"{self.root}/tables"
        self.data = f"{self.root}/data"
        self.dropped = f"{self.root}/dropped"

    def skeleton(self) -> list[str]:
        """Znodes every namespace has."""
        return [self.root, self.settings, self.clock, self.tables, self.data, self.dropped]

    def table(self, name: str) -> str:
        return f"{self.tables}/{name}"

    def table_data(self, table_id: str) -> str:
        return f"{self.data}/{table_id}"

    def dropped_table(self, table_id: str) -> str:
        return f"{self.dropped}/{table_id}"

    def bucket(self, table_id: str, bucket: int) -> str:
        return f"{self.data}/{table_id}/{bucket}"

    def log(self, table_id: str, bucket: int) -> str:
        return f"{self.bucket(table_id, bucket)}/log"

    def segment(self, table_id: str, bucket: int, base_offset: int) -> str:
        return f"{self.log(table_id, bucket)}/{base_offset:0{SEGMENT_DIGITS}d}"

    def snapshots(self, table_id: str, bucket: int) -> str:
        return f"{self.bucket(table_id, bucket)}/snapshots"

    def snapshot(self, table_id: str, bucket: int, snapshot_id: int) -> str:
        return f"{self.snapshots(table_id, bucket)}/{snapshot_id:0{SNAPSHOT_DIGITS}d}"
