"""The stored formats: one record type per kind of znode, each with its format version and
its encode/decode (those of leases, of consumer groups and of bucket layouts in
``lease_formats``, ``group_formats`` and ``layout_formats``, re-exported here). Nothing else in
leasekit (nor its tests and benchmarks) packs a value.

Values are msgpack maps with short keys (see ``codec``); decoding garbage, an unknown
version or a value with missing or ill-typed fields raises ``CorruptMetadataError``
naming the znode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import codec
from .fields import ints, load, string, strs
from .group_formats import (
    HISTORY,
    AssignmentRecord,
    Commit,
    MemberRecord,
    OffsetRecord,
    OwnerRecord,
)
from .layout_formats import LayoutRecord, MergeOp, SplitOp, operation
from .lease_formats import DROPPING, EMPTY_PIN, LIVE, LeaseRecord, PinChunk
from .ops import Node, Stat
from .sink_formats import SinkMarkRecord

__all__ = [
    "SettingsRecord",
    "TableRecord",
    "LayoutRecord",
    "SplitOp",
    "MergeOp",
    "DropMark",
    "DroppedTable",
    "BucketState",
    "SegmentRecord",
    "RetiredRecord",
    "SnapshotRecord",
    "LatestChunk",
    "LeaseRecord",
    "PinChunk",
    "EMPTY_PIN",
    "OffsetRecord",
    "Commit",
    "MemberRecord",
    "AssignmentRecord",
    "OwnerRecord",
    "IdentityRecord",
    "AccessRecord",
    "SinkMarkRecord",
    "LIVE",
    "DROPPING",
    "HISTORY",
]


class SettingsRecord(NamedTuple):
    """``<ns>/settings``: the namespace settings that differ from their defaults."""

    values: dict[str, Any]
    """Stored form of each set key (durations in ms)."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"values": self.values}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> SettingsRecord:
        """An empty znode holds no settings."""
        if not data:
            return cls({})
        return load(
            data, path, cls.VERSION, "namespace settings", lambda v: cls(dict(v.get("values", {})))
        )


class TableRecord(NamedTuple):
    """``<ns>/tables/<name>``: a table's definition."""

    table_id: str
    """Unique id; the table's data metadata lives under ``<ns>/data/<table_id>``."""
    schema: bytes
    """The arrow schema, serialized (``tables.schema.serialize_schema``)."""
    primary_key: tuple[str, ...]
    """Primary-key column names."""
    num_buckets: int
    """Bucket count at creation (ids 0 .. num_buckets - 1)."""
    properties: dict[str, Any]
    """Stored form of the properties set at creation."""
    rescales: tuple[SplitOp | MergeOp, ...] = ()
    """Every split and merge of its buckets, oldest first (``LayoutRecord.operations``)."""
    rescaled_ms: tuple[int, ...] = ()
    """When each of ``rescales`` committed, epoch ms on the ZooKeeper clock, in the same order
    (0, or missing at the end: not recorded)."""

    VERSION = 1

    @property
    def layout(self) -> LayoutRecord:
        """The table's bucket layout as stored."""
        return LayoutRecord(self.num_buckets, self.rescales)

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "id": self.table_id,
            "schema": self.schema,
            "pk": list(self.primary_key),
            "n": self.num_buckets,
            "props": self.properties,
        }
        if self.rescales:
            value["o"] = [list(op) for op in self.rescales]
        if self.rescaled_ms:
            value["ot"] = list(self.rescaled_ms)
        return codec.encode(value, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> TableRecord:
        def build(v: dict[str, Any]) -> TableRecord:
            if not isinstance(v["schema"], bytes):
                raise TypeError("schema is not bytes")
            ops = v.get("o", [])
            if not isinstance(ops, list):
                raise TypeError(f"rescales are a {type(ops).__name__}, not a list")
            return cls(
                string(v["id"]),
                v["schema"],
                strs(v["pk"]),
                int(v["n"]),
                dict(v.get("props", {})),
                tuple(operation(op) for op in ops),
                tuple(ints(v.get("ot", []))),
            )

        return load(data, path, cls.VERSION, "table metadata", build)


class DropMark(NamedTuple):
    """``<ns>/data/<table_id>`` while a drop decides (the drop fence); the znode is empty while
    the table lives."""

    state: str = "dropping"
    """Always "dropping"."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"state": self.state}, self.VERSION)

    @staticmethod
    def is_marked(node: Node) -> bool:
        """Whether a table's data znode carries the mark (any value does: the table lives
        while it is empty)."""
        return bool(node.data)


class DroppedTable(NamedTuple):
    """``<ns>/dropped/<table_id>``: a drop in progress (its metadata and files still go)."""

    name: str
    """The table's name when it was dropped."""
    data_dir: str
    """Warehouse-relative directory of its files."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"name": self.name, "dir": self.data_dir}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> DroppedTable:
        return load(
            data,
            path,
            cls.VERSION,
            "drop marker",
            lambda v: cls(string(v["name"]), string(v["dir"])),
        )


class BucketState(NamedTuple):
    """``<ns>/data/<table_id>/<bucket>``: a bucket's offsets and snapshot counters, with the
    znode stat for compare-and-set (None for a state not yet stored)."""

    end: int
    """Next offset to assign."""
    begin: int
    """First offset still stored."""
    ts_floor: int
    """Lower bound for the next segment's timestamp (keeps _timestamp non-decreasing)."""
    next_snapshot: int
    """Id the next snapshot gets."""
    latest_snapshot: int | None
    """Id of the newest snapshot, if any."""
    latest_offset: int
    """Log offset of the newest snapshot (0 when none)."""
    stat: Stat | None = None
    """The znode's stat: ``version`` for compare-and-set, ``mtime_ms`` = last commit time."""
    sealed: bool = False
    """Split or merged away: its log ends at ``end`` and takes no more appends (K1)."""

    VERSION = 1

    @classmethod
    def new(cls, end: int, ts_floor: int) -> BucketState:
        """The state of a bucket's first commit."""
        return cls(end, 0, ts_floor, 1, None, 0)

    def encode(self, **changes: Any) -> bytes:
        """The stored value with ``changes``; the floor always absorbs the last commit time."""
        s = self._replace(**changes)
        latest = None if s.latest_snapshot is None else [s.latest_snapshot, s.latest_offset]
        floor = max(s.ts_floor, self.stat.mtime_ms if self.stat else 0)
        value = {"e": s.end, "b": s.begin, "t": floor, "s": s.next_snapshot, "l": latest}
        if s.sealed:
            value["x"] = True
        return codec.encode(value, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> BucketState:
        def build(v: dict[str, Any]) -> BucketState:
            latest = v.get("l")
            return cls(
                int(v["e"]),
                int(v["b"]),
                int(v["t"]),
                int(v["s"]),
                int(latest[0]) if latest else None,
                int(latest[1]) if latest else 0,
                node.stat,
                v.get("x", False) is True,
            )

        return load(node.data, path, cls.VERSION, "bucket metadata", build)


class SegmentRecord(NamedTuple):
    """``<ns>/data/<table_id>/<bucket>/log/<base offset>``: one log segment file. An appended
    segment's records share one timestamp (its commit time); a merged one (R8) keeps each
    record's own in a ``_timestamp`` column of its file, and ``stamps`` says so."""

    file: str
    """Warehouse-relative path of the Parquet file."""
    rows: int
    """Records in the file: the segment holds offsets [base, base + rows)."""
    size: int
    """File size in bytes."""
    ts_floor: int
    """Timestamp floor at commit; an appended segment's timestamp is max(this, znode ctime)."""
    stamps: tuple[int, int] | None = None
    """A merged segment's first and last record timestamps (ms); None for an appended one."""

    VERSION = 1
    MERGED_VERSION = 2
    """Format of a merged segment's record: a reader that does not know it must not read the
    file as if all its records had one timestamp."""

    def encode(self) -> bytes:
        value: dict[str, Any] = {"f": self.file, "n": self.rows, "s": self.size, "t": self.ts_floor}
        if self.stamps is None:
            return codec.encode(value, self.VERSION)
        return codec.encode({**value, "m": list(self.stamps)}, self.MERGED_VERSION)

    def last_stamp(self, ctime_ms: int) -> int:
        """Timestamp of the segment's last record, given its znode's ctime (ms)."""
        return max(ctime_ms, self.ts_floor) if self.stamps is None else self.stamps[1]

    @classmethod
    def decode(cls, data: bytes, path: str) -> SegmentRecord:
        def build(v: dict[str, Any]) -> SegmentRecord:
            rows, size, floor = int(v["n"]), int(v["s"]), int(v["t"])
            if rows < 0 or size < 0:
                raise ValueError(f"{rows} rows, {size} bytes")
            if v["v"] == cls.VERSION:
                return cls(string(v["f"]), rows, size, floor)
            first, last = ints(v["m"])
            if not 0 <= first <= last:
                raise ValueError(f"timestamps {first} to {last}")
            return cls(string(v["f"]), rows, size, floor, (first, last))

        versions = (cls.VERSION, cls.MERGED_VERSION)
        return load(data, path, versions, "segment metadata", build)


class RetiredRecord(NamedTuple):
    """``<ns>/data/<table_id>/<bucket>/retired/<base>-<token>``: the files of segments that a
    merge replaced (R8). Readers that listed the segments before the merge may still read
    them, so they stay until the znode (created by the merge's transaction: its ctime is the
    merge's time) is older than ``orphan.min-age``; then retention deletes the files, then it."""

    files: tuple[str, ...]
    """Warehouse-relative paths of the replaced segment files."""
    size: int
    """Their bytes."""
    base: int
    """First offset of the merged segment."""
    end: int
    """One past its last offset."""
    merged: str
    """Warehouse-relative path of the merged segment's file."""

    VERSION = 1

    def encode(self) -> bytes:
        value = {"f": list(self.files), "s": self.size, "b": self.base, "e": self.end}
        return codec.encode({**value, "m": self.merged}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> RetiredRecord:
        def build(v: dict[str, Any]) -> RetiredRecord:
            rec = cls(strs(v["f"]), int(v["s"]), int(v["b"]), int(v["e"]), string(v["m"]))
            if not 0 <= rec.base < rec.end or rec.size < 0:
                raise ValueError(f"offsets {rec.base} to {rec.end}, {rec.size} bytes")
            return rec

        return load(data, path, cls.VERSION, "retired segments", build)


class SnapshotRecord(NamedTuple):
    """``<ns>/data/<table_id>/<bucket>/snapshots/<id>``: one KV snapshot; lease pins are its
    children."""

    log_offset: int
    """The snapshot holds the state after records [0, log_offset)."""
    rows: int
    """Live keys."""
    size: int
    """Bytes of its files."""
    files: tuple[str, ...]
    """Warehouse-relative paths of its Parquet files."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode(
            {"o": self.log_offset, "n": self.rows, "s": self.size, "f": list(self.files)},
            self.VERSION,
        )

    @classmethod
    def decode(cls, data: bytes, path: str) -> SnapshotRecord:
        return load(
            data,
            path,
            cls.VERSION,
            "snapshot metadata",
            lambda v: cls(int(v["o"]), int(v["n"]), int(v["s"]), strs(v["f"])),
        )


class LatestChunk(NamedTuple):
    """``<ns>/data/<table_id>/latest/<chunk>``: newest snapshot id of one
    chunk of buckets (0: none)."""

    ids: list[int]
    """Index i is the i-th bucket of the chunk (see ``chunked``); trailing buckets without
    snapshots may be absent."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"a": self.ids}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> LatestChunk:
        return load(data, path, cls.VERSION, "latest-snapshot array", lambda v: cls(ints(v["a"])))


class IdentityRecord(NamedTuple):
    """``<ns>/identity``: the namespace's random identity, created once with the namespace; the
    warehouse namespace directory names it in its owner marker (docs/security.md, "Ownership")."""

    identity: str

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"id": self.identity}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> IdentityRecord:
        return load(data, path, cls.VERSION, "namespace identity", lambda v: cls(string(v["id"])))


class AccessRecord(NamedTuple):
    """``<ns>/access``: written once the whole namespace is closed to writers without the
    credentials of ``user`` (docs/security.md); until then a connection with ``auth`` closes it."""

    user: str

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"u": self.user}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> AccessRecord:
        return load(data, path, cls.VERSION, "namespace access", lambda v: cls(string(v["u"])))
