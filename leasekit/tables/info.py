"""``TableInfo``: what the services know of a table — its name, id, schema, key, buckets and
properties, and the context it lives in. The public ``Table`` handle extends it."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import BucketNotFoundError, InvalidArgumentError
from ..properties import TABLE_PROPERTIES, effective
from ..structs import TableBucket
from ..validate import check_int
from ..zk import to_datetime
from ..zk.formats import TableRecord
from . import schema as schemas

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["TableInfo"]


class TableInfo:
    """A table's definition as stored, bound to the context it was loaded from."""

    def __init__(self, ctx: Context, name: str, record: TableRecord, created_ms: int) -> None:
        self._ctx = ctx
        self.name: str = name
        self.table_id: str = record.table_id
        self.schema: pa.Schema = schemas.deserialize_schema(record.schema)
        self.primary_key: tuple[str, ...] = record.primary_key
        self.num_buckets: int = record.num_buckets
        self._stored_properties: dict[str, Any] = dict(record.properties)
        self.created_at: datetime = to_datetime(created_ms)

    @property
    def context(self) -> Context:
        """The context (store, paths, warehouse) the table was loaded through."""
        return self._ctx

    @property
    def buckets(self) -> list[TableBucket]:
        return [TableBucket(self.name, b) for b in range(self.num_buckets)]

    @property
    def properties(self) -> dict[str, Any]:
        """Every table property, defaults filled in (durations as ``timedelta``)."""
        return effective(self._stored_properties, TABLE_PROPERTIES)

    @property
    def data_dir(self) -> str:
        """Warehouse-relative directory of the table's files."""
        return f"{self._ctx.tables_dir}/{self.name}/{self.table_id}"

    def bucket_number(self, bucket: object) -> int:
        """Validate ``bucket`` (an int or a TableBucket of this table) and return its number."""
        if isinstance(bucket, TableBucket):
            if bucket.table != self.name:
                raise InvalidArgumentError(f"{bucket} is not a bucket of table {self.name!r}")
            bucket = bucket.bucket
        bucket = check_int(bucket, "bucket")
        if not 0 <= bucket < self.num_buckets:
            raise BucketNotFoundError(
                f"table {self.name!r} has buckets 0..{self.num_buckets - 1}, not {bucket}"
            )
        return bucket

    def __repr__(self) -> str:
        key = list(self.primary_key)
        return f"Table({self.name!r}, primary_key={key}, buckets={self.num_buckets})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TableInfo) and other.table_id == self.table_id

    def __hash__(self) -> int:
        return hash(self.table_id)
