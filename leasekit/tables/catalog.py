"""Tables: create, look up, list and drop, and the ``Table`` handle users hold.

A table's znode holds its schema, primary key, bucket count, properties and id; its
buckets, log and snapshots live under ``data/<id>`` (see ``zkpaths``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..durations import check_table_name
from ..errors import (
    BucketNotFoundError,
    CorruptMetadataError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
    TableExistsError,
    TableNotFoundError,
)
from ..properties import TABLE_PROPERTIES, effective, parse_properties
from ..records import OffsetRange, Snapshot, TableBucket
from ..zk import Check, Create, Delete, TxnConflict, decode, encode, to_datetime
from . import schema as schemas

if TYPE_CHECKING:
    from ..connection import Connection

__all__ = ["Table", "create_table", "load_table", "list_tables", "drop_table", "MAX_BUCKETS"]

MAX_BUCKETS = 1_000_000


class Table:
    """A primary-key table: an offset log per bucket plus periodic KV snapshots."""

    def __init__(self, conn: Connection, name: str, meta: dict[str, Any], created_ms: int) -> None:
        self._conn = conn
        self.name: str = name
        self.table_id: str = meta["id"]
        self.schema: pa.Schema = schemas.deserialize_schema(meta["schema"])
        self.primary_key: tuple[str, ...] = tuple(meta["pk"])
        self.num_buckets: int = meta["n"]
        self._stored_properties: dict[str, Any] = dict(meta.get("props", {}))
        self.created_at: datetime = to_datetime(created_ms)

    @property
    def connection(self) -> Connection:
        return self._conn

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
        return f"tables/{self.name}/{self.table_id}"

    def bucket_number(self, bucket: object) -> int:
        """Validate ``bucket`` (an int or a TableBucket of this table) and return its number."""
        if isinstance(bucket, TableBucket):
            if bucket.table != self.name:
                raise InvalidArgumentError(f"{bucket} is not a bucket of table {self.name!r}")
            bucket = bucket.bucket
        if isinstance(bucket, bool) or not isinstance(bucket, int):
            raise InvalidTypeError(f"bucket must be an int, not {type(bucket).__name__}")
        if not 0 <= bucket < self.num_buckets:
            raise BucketNotFoundError(f"table {self.name!r} has buckets 0..{self.num_buckets - 1}, not {bucket}")
        return bucket

    # -- the log ---------------------------------------------------------------------------

    def append(self, rows: Any) -> dict[TableBucket, OffsetRange]:
        """Upsert ``rows`` (pandas DataFrame, pyarrow Table or list of dicts)."""
        from ..log.append import append

        return append(self, rows, "upsert")

    def delete(self, keys: Any) -> dict[TableBucket, OffsetRange]:
        """Delete the rows with these primary keys (primary-key columns only)."""
        from ..log.append import append

        return append(self, keys, "delete")

    def beginning_offsets(self) -> dict[TableBucket, int]:
        """First offset still stored, per bucket."""
        from ..log.append import read_states

        states = read_states(self, range(self.num_buckets))
        return {TableBucket(self.name, b): (s.begin if s else 0) for b, s in enumerate(states)}

    def end_offsets(self) -> dict[TableBucket, int]:
        """Next offset to assign (high watermark), per bucket."""
        from ..log.append import read_states

        states = read_states(self, range(self.num_buckets))
        return {TableBucket(self.name, b): (s.end if s else 0) for b, s in enumerate(states)}

    # -- snapshots --------------------------------------------------------------------------

    def snapshot(self, spark: Any = None) -> dict[TableBucket, Snapshot]:
        """Take a new snapshot of every bucket whose log advanced since its latest one."""
        from ..snapshots.catalog import take_snapshots

        return take_snapshots(self, spark)

    def snapshots(self, bucket: int | None = None) -> list[Snapshot]:
        """Snapshots still stored, oldest first; all buckets unless ``bucket`` is given."""
        from ..snapshots.catalog import list_snapshots

        buckets = range(self.num_buckets) if bucket is None else [self.bucket_number(bucket)]
        return list_snapshots(self, buckets)

    def latest_snapshots(self) -> dict[TableBucket, int]:
        """Newest snapshot id per bucket; buckets with no snapshot are absent."""
        from ..snapshots.catalog import read_latest

        return {TableBucket(self.name, b): sid for b, sid in read_latest(self).items()}

    def __repr__(self) -> str:
        return f"Table({self.name!r}, primary_key={list(self.primary_key)}, buckets={self.num_buckets})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Table) and other.table_id == self.table_id

    def __hash__(self) -> int:
        return hash(self.table_id)


def _check_buckets(buckets: object) -> int:
    if isinstance(buckets, bool) or not isinstance(buckets, int):
        raise InvalidTypeError(f"buckets must be an int, not {type(buckets).__name__}")
    if not 1 <= buckets <= MAX_BUCKETS:
        raise InvalidArgumentError(f"buckets must be between 1 and {MAX_BUCKETS}, got {buckets}")
    return buckets


def create_table(
    conn: Connection,
    name: str,
    schema: str | pa.Schema,
    primary_key: str | Sequence[str],
    buckets: int = 4,
    properties: Mapping[str, Any] | None = None,
) -> Table:
    check_table_name(name)
    arrow_schema = schemas.parse_schema(schema)
    key = schemas.check_primary_key(arrow_schema, primary_key)
    arrow_schema = schemas.with_primary_key(arrow_schema, key)
    num_buckets = _check_buckets(buckets)
    props = parse_properties(properties, TABLE_PROPERTIES, what="table property")
    table_id = uuid.uuid4().hex
    meta = {"id": table_id, "schema": schemas.serialize_schema(arrow_schema), "pk": list(key),
            "n": num_buckets, "props": props}
    paths = conn.paths
    try:
        conn.store.commit([Create(paths.table(name), encode(meta)), Create(paths.table_data(table_id)),
                           Create(paths.latest(table_id))])
    except TxnConflict as exc:
        if exc.reason == "exists":
            raise TableExistsError(f"table {name!r} exists already") from None
        raise
    return load_table(conn, name)


def load_table(conn: Connection, name: object) -> Table:
    if not isinstance(name, str) and hasattr(name, "table_id"):
        name = name.name  # a Table object
    check_table_name(name)
    path = conn.paths.table(name)
    node = conn.store.get(path)
    if node is None:
        raise TableNotFoundError(f"table {name!r} does not exist")
    try:
        return Table(conn, name, decode(node.data, path), node.stat.ctime_ms)
    except CorruptMetadataError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as exc:  # ValueError/TypeError: leasekit's too
        raise CorruptMetadataError(f"table metadata at {path} is invalid: {exc!r}", path) from None


def list_tables(conn: Connection) -> list[str]:
    return conn.store.children(conn.paths.tables) or []


def drop_table(conn: Connection, name: object, *, force: bool = False) -> None:
    """Remove the table: its znode and a drop marker in one step, then data metadata, then files."""
    from ..leases.store import forget_table, leases_pinning

    table = load_table(conn, name)
    pinned_by = leases_pinning(conn, table.table_id)
    if pinned_by and not force:
        raise IllegalStateError(
            f"table {table.name!r} is pinned by lease(s) {', '.join(pinned_by)}; drop or release them, "
            "or pass force=True"
        )
    path = conn.paths.table(table.name)
    marker = encode({"name": table.name, "dir": table.data_dir})
    try:  # the Check makes sure the name still belongs to the table loaded above
        conn.store.commit([Check(conn.paths.table_data(table.table_id), -1), Delete(path),
                           Create(conn.paths.dropped_table(table.table_id), marker)])
    except TxnConflict as exc:
        if exc.reason == "nonode":
            raise TableNotFoundError(f"table {table.name!r} does not exist") from None
        raise
    if pinned_by or force:
        forget_table(conn, table.table_id)
    finish_drop(conn, table.table_id)


def finish_drop(conn: Connection, table_id: str) -> None:
    """Complete a drop recorded by its marker: metadata first, files second, marker last."""
    marker_path = conn.paths.dropped_table(table_id)
    value = conn.store.get_value(marker_path)
    if value is None:
        return
    conn.store.delete_tree(conn.paths.table_data(table_id))
    conn.warehouse.delete_dir(value[0]["dir"])
    conn.store.delete_tree(marker_path)


def pending_drops(conn: Connection) -> list[str]:
    """Ids of dropped tables whose data is not yet removed (a dropper died half way)."""
    return conn.store.children(conn.paths.dropped) or []
