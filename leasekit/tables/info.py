"""``TableInfo``: what the services know of a table — its name, id, schema, key, bucket layout
and properties, and the context it lives in. The public ``Table`` handle extends it."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import BucketNotFoundError, InvalidArgumentError, TableNotFoundError
from ..properties import TABLE_PROPERTIES, effective
from ..structs import TableBucket
from ..validate import check_int
from ..zk import Node, to_datetime
from ..zk.formats import TableRecord
from . import schema as schemas
from .layout import BucketLayout

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["TableInfo"]


class TableInfo:
    """A table's definition as stored, bound to the context it was loaded from.

    Its bucket layout is the one read with it: ``refresh()`` reads it again (a rescale by
    another client changes it)."""

    def __init__(
        self, ctx: Context, name: str, record: TableRecord, created_ms: int, version: int = 0
    ) -> None:
        self._ctx = ctx
        self.name: str = name
        self.table_id: str = record.table_id
        self.schema: pa.Schema = schemas.deserialize_schema(record.schema)
        self.primary_key: tuple[str, ...] = record.primary_key
        self._stored_properties: dict[str, Any] = dict(record.properties)
        self.created_at: datetime = to_datetime(created_ms)
        self._record = record
        self._version = version
        self._layout = BucketLayout.from_record(record.layout, ctx.paths.table(name))

    @classmethod
    def from_node(cls, ctx: Context, name: str, node: Node) -> TableInfo:
        """The table whose znode ``node`` was read.

        Raises:
            CorruptMetadataError: the znode cannot be decoded.
        """
        record = TableRecord.decode(node.data, ctx.paths.table(name))
        return cls(ctx, name, record, node.stat.ctime_ms, node.stat.version)

    @property
    def context(self) -> Context:
        """The context (store, paths, warehouse) the table was loaded through."""
        return self._ctx

    @property
    def layout(self) -> BucketLayout:
        """Every bucket the table has had, as last read (no I/O)."""
        return self._layout

    @property
    def record(self) -> tuple[TableRecord, int]:
        """The stored definition as last read, and its znode's version."""
        return self._record, self._version

    def sealed_times(self) -> dict[int, datetime]:
        """When each sealed bucket was sealed, as last read (no I/O).

        Returns:
            Bucket number -> the time its split or merge committed (ZooKeeper clock, UTC); a
            bucket sealed by a version that recorded no time is missing.

        Raises nothing.
        """
        stamps, out = self._record.rescaled_ms, {}
        for lin in self._layout.lineage(self.name):
            index = self._layout.sealed_by(lin.table_bucket.bucket)
            if index is not None and index < len(stamps) and stamps[index] > 0:
                out[lin.table_bucket.bucket] = to_datetime(stamps[index])
        return out

    @property
    def active(self) -> tuple[int, ...]:
        """The ids of the active buckets, as last read (no I/O)."""
        return self._layout.active

    @property
    def num_buckets(self) -> int:
        """How many buckets are active (K1: ids need not be contiguous after a rescale)."""
        return len(self._layout.active)

    @property
    def buckets(self) -> list[TableBucket]:
        """The active buckets."""
        return [TableBucket(self.name, b) for b in self._layout.active]

    def refresh(self) -> TableInfo:
        """Read the table's definition again (its layout changes with every rescale).

        Raises:
            TableNotFoundError: the table was dropped (or dropped and created again).
        """
        path = self._ctx.paths.table(self.name)
        node = self._ctx.store.get(path)
        if node is None or node.stat.version == self._version:
            if node is None:
                raise TableNotFoundError(f"table {self.name!r} was dropped")
            return self
        record = TableRecord.decode(node.data, path)
        if record.table_id != self.table_id:
            raise TableNotFoundError(f"table {self.name!r} was dropped and created again")
        self.adopt(record, node.stat.version)
        return self

    def adopt(self, record: TableRecord, version: int) -> None:
        """Take ``record`` (stored at ``version``) as the table's definition: its layout."""
        if version > self._version:
            layout = BucketLayout.from_record(record.layout, self._ctx.paths.table(self.name))
            self._record, self._version, self._layout = record, version, layout

    @property
    def properties(self) -> dict[str, Any]:
        """Every table property, defaults filled in (durations as ``timedelta``)."""
        return effective(self._stored_properties, TABLE_PROPERTIES)

    @property
    def data_dir(self) -> str:
        """Warehouse-relative directory of the table's files."""
        return f"{self._ctx.tables_dir}/{self.name}/{self.table_id}"

    def bucket_number(self, bucket: object) -> int:
        """Validate ``bucket`` (an int or a TableBucket of this table, active or sealed) and
        return its number."""
        if isinstance(bucket, TableBucket):
            if bucket.table != self.name:
                raise InvalidArgumentError(f"{bucket} is not a bucket of table {self.name!r}")
            bucket = bucket.bucket
        bucket = check_int(bucket, "bucket")
        if not 0 <= bucket < self._layout.count:
            raise BucketNotFoundError(
                f"table {self.name!r} has buckets 0..{self._layout.count - 1}, not {bucket}"
            )
        return bucket

    def __repr__(self) -> str:
        key = list(self.primary_key)
        return f"Table({self.name!r}, primary_key={key}, buckets={len(self.active)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableInfo) and other.table_id == self.table_id

    def __hash__(self) -> int:
        return hash(self.table_id)
