"""The stored formats: one record type per kind of znode, each with its format version and
its encode/decode. Nothing else in leasekit (nor its tests and benchmarks) packs a value.

Values are msgpack maps with short keys (see ``codec``); decoding garbage, an unknown
version or a value with missing or ill-typed fields raises ``CorruptMetadataError``
naming the znode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from ..errors import CorruptMetadataError
from . import codec
from .ops import Node, Stat
from .paths import CHUNK

__all__ = [
    "SettingsRecord",
    "TableRecord",
    "DropMark",
    "DroppedTable",
    "BucketState",
    "SegmentRecord",
    "SnapshotRecord",
    "LatestChunk",
    "LeaseRecord",
    "PinChunk",
    "OffsetRecord",
    "Commit",
    "MemberRecord",
    "AssignmentRecord",
    "OwnerRecord",
    "IdentityRecord",
    "AccessRecord",
    "LIVE",
    "DROPPING",
    "CHUNK",
    "HISTORY",
]

LIVE, DROPPING = "live", "dropping"
"""States of a lease record."""

R = TypeVar("R")


def _load(
    data: bytes, path: str, version: int, kind: str, build: Callable[[dict[str, Any]], R]
) -> R:
    value = codec.decode(data, path, version)
    try:
        return build(value)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise CorruptMetadataError(f"{kind} at {path} is invalid: {exc!r}", path) from None


def _ints(values: Any) -> list[int]:
    if not isinstance(values, list):
        raise TypeError(f"expected a list of ints, got {type(values).__name__}")
    return [int(v) for v in values]


def _strs(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"expected a list of str, got {values!r:.80}")
    return tuple(values)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, got {type(value).__name__}")
    return value


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
        return _load(
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
    """Fixed bucket count."""
    properties: dict[str, Any]
    """Stored form of the properties set at creation."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode(
            {
                "id": self.table_id,
                "schema": self.schema,
                "pk": list(self.primary_key),
                "n": self.num_buckets,
                "props": self.properties,
            },
            self.VERSION,
        )

    @classmethod
    def decode(cls, data: bytes, path: str) -> TableRecord:
        def build(v: dict[str, Any]) -> TableRecord:
            if not isinstance(v["schema"], bytes):
                raise TypeError("schema is not bytes")
            return cls(
                _str(v["id"]), v["schema"], _strs(v["pk"]), int(v["n"]), dict(v.get("props", {}))
            )

        return _load(data, path, cls.VERSION, "table metadata", build)


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
        return _load(
            data, path, cls.VERSION, "drop marker", lambda v: cls(_str(v["name"]), _str(v["dir"]))
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
        return codec.encode(
            {"e": s.end, "b": s.begin, "t": floor, "s": s.next_snapshot, "l": latest}, self.VERSION
        )

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
            )

        return _load(node.data, path, cls.VERSION, "bucket metadata", build)


class SegmentRecord(NamedTuple):
    """``<ns>/data/<table_id>/<bucket>/log/<base offset>``: one immutable log segment file."""

    file: str
    """Warehouse-relative path of the Parquet file."""
    rows: int
    """Records in the file: the segment holds offsets [base, base + rows)."""
    size: int
    """File size in bytes."""
    ts_floor: int
    """Timestamp floor at commit; the segment's timestamp is max(this, znode ctime)."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode(
            {"f": self.file, "n": self.rows, "s": self.size, "t": self.ts_floor}, self.VERSION
        )

    @classmethod
    def decode(cls, data: bytes, path: str) -> SegmentRecord:
        return _load(
            data,
            path,
            cls.VERSION,
            "segment metadata",
            lambda v: cls(_str(v["f"]), int(v["n"]), int(v["s"]), int(v["t"])),
        )


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
        return _load(
            data,
            path,
            cls.VERSION,
            "snapshot metadata",
            lambda v: cls(int(v["o"]), int(v["n"]), int(v["s"]), _strs(v["f"])),
        )


class LatestChunk(NamedTuple):
    """``<ns>/data/<table_id>/latest/<chunk>``: newest snapshot id of CHUNK buckets (0: none)."""

    ids: list[int]
    """Index i is bucket chunk * CHUNK + i; trailing buckets without snapshots may be absent."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"a": self.ids}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> LatestChunk:
        return _load(data, path, cls.VERSION, "latest-snapshot array", lambda v: cls(_ints(v["a"])))


class LeaseRecord(NamedTuple):
    """``<ns>/leases/<id>``: a lease; ``stat.mtime_ms`` is the time of its last acquire or renew."""

    duration_ms: int
    """Duration of the last acquire or renew."""
    floor_ms: int
    """Earlier expiry that the next one never goes below (renew only extends, L7)."""
    owner: str
    """host:pid of the client that last acquired or renewed it."""
    state: str
    """LIVE, or DROPPING while a large lease's pins are removed."""
    stat: Stat | None = None
    """The znode's stat (None for a record not yet stored)."""

    VERSION = 1

    @property
    def expires_ms(self) -> int:
        """Expiry: never earlier than a previous expiry (renew only extends, L7)."""
        return max(self.floor_ms, (self.stat.mtime_ms if self.stat else 0) + self.duration_ms)

    def renewed(self, duration_ms: int, owner: str, state: str = LIVE) -> LeaseRecord:
        """The record after an acquire or renew: every earlier expiry is kept as a floor."""
        return LeaseRecord(
            duration_ms, self.expires_ms if self.stat else self.floor_ms, owner, state
        )

    def encode(self) -> bytes:
        return codec.encode(
            {"d": self.duration_ms, "f": self.floor_ms, "o": self.owner, "s": self.state},
            self.VERSION,
        )

    @classmethod
    def decode(cls, node: Node, path: str) -> LeaseRecord:
        def build(v: dict[str, Any]) -> LeaseRecord:
            state = _str(v["s"])
            if state not in (LIVE, DROPPING):
                raise ValueError(f"unknown lease state {state!r}")
            return cls(int(v["d"]), int(v["f"]), _str(v["o"]), state, node.stat)

        return _load(node.data, path, cls.VERSION, "lease record", build)


class PinChunk(NamedTuple):
    """``<ns>/leases/<id>/pins/<table_id>.<chunk>``: a lease's pinned snapshot id for each of
    CHUNK buckets of one table (0: not pinned)."""

    table_id: str
    """The table's id (from the znode's name)."""
    chunk: int
    """Chunk number (from the znode's name): buckets [chunk * CHUNK, (chunk + 1) * CHUNK)."""
    table: str
    """The table's name."""
    ids: list[int]
    """Pinned snapshot id per bucket of the chunk, always CHUNK long once decoded."""
    stat: Stat | None = None
    """The znode's stat (None when the chunk is not stored)."""

    VERSION = 1

    @classmethod
    def empty(cls, table_id: str, chunk: int, table: str) -> PinChunk:
        return cls(table_id, chunk, table, [0] * CHUNK)

    def encode(self) -> bytes:
        end = len(self.ids)
        while end and self.ids[end - 1] == 0:
            end -= 1
        return codec.encode({"t": self.table, "a": self.ids[:end]}, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str, table_id: str, chunk: int) -> PinChunk:
        def build(v: dict[str, Any]) -> PinChunk:
            ids = _ints(v["a"])
            if len(ids) > CHUNK:
                raise ValueError(f"{len(ids)} entries, at most {CHUNK}")
            return cls(table_id, chunk, _str(v["t"]), ids + [0] * (CHUNK - len(ids)), node.stat)

        return _load(node.data, path, cls.VERSION, "lease pins", build)


HISTORY = 10
"""Commits an offset record remembers (the window of lag health, DESIGN §6.6)."""


class Commit(NamedTuple):
    """One commit of an offset record's history."""

    time_ms: int
    """ZooKeeper time of the commit (read in the commit's own round trip, just before it)."""
    offset: int
    """The committed offset."""
    log_end: int
    """The bucket's log end offset at that time: lag at commit = log_end - offset."""


class OffsetRecord(NamedTuple):
    """``<ns>/groups/<group>/offsets/<table_id>.<bucket>``: a group's committed offset of one
    bucket (the next offset to consume, C2), with its last HISTORY commits, oldest first."""

    offset: int
    metadata: str
    """The committer's metadata (at most 4096 UTF-8 bytes)."""
    table: str
    """The table's name at commit (the znode names the table by id)."""
    history: tuple[Commit, ...]
    """The last HISTORY commits, oldest first; the last one is this offset's."""
    stat: Stat | None = None
    """The znode's stat (None for a record not yet stored)."""

    VERSION = 1

    @property
    def commit_ms(self) -> int:
        """ZooKeeper time of the last commit."""
        return (
            self.history[-1].time_ms if self.history else (self.stat.mtime_ms if self.stat else 0)
        )

    def committed(
        self, offset: int, metadata: str, table: str, now_ms: int, log_end: int
    ) -> OffsetRecord:
        """The record after committing ``offset`` at ``now_ms`` with the log end then."""
        return OffsetRecord(
            offset, metadata, table, (*self.history, Commit(now_ms, offset, log_end))[-HISTORY:]
        )

    def encode(self) -> bytes:
        return codec.encode(
            {
                "o": self.offset,
                "m": self.metadata,
                "t": self.table,
                "h": [list(c) for c in self.history],
            },
            self.VERSION,
        )

    @classmethod
    def decode(cls, node: Node, path: str) -> OffsetRecord:
        def build(v: dict[str, Any]) -> OffsetRecord:
            history = tuple(Commit(int(t), int(o), int(e)) for t, o, e in v["h"])
            if len(history) > HISTORY:
                raise ValueError(f"{len(history)} commits in the history, at most {HISTORY}")
            offset = int(v["o"])
            if offset < 0:
                raise ValueError(f"negative offset {offset}")
            return cls(offset, _str(v["m"]), _str(v["t"]), history, node.stat)

        return _load(node.data, path, cls.VERSION, "committed offset", build)

    @classmethod
    def empty(cls, table: str) -> OffsetRecord:
        """No commit yet."""
        return cls(-1, "", table, ())


class MemberRecord(NamedTuple):
    """``<ns>/groups/<group>/members/<member_id>`` (ephemeral): a live member of a group."""

    host: str
    """host:pid of the member's process."""
    tables: tuple[str, ...]
    """Tables it subscribes to: its assignment has buckets of these only."""
    stat: Stat | None = None

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"h": self.host, "t": list(self.tables)}, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> MemberRecord:
        return _load(
            node.data,
            path,
            cls.VERSION,
            "group member",
            lambda v: cls(_str(v["h"]), _strs(v["t"]), node.stat),
        )


class AssignmentRecord(NamedTuple):
    """``<ns>/groups/<group>/assignment``: which member consumes which buckets, written in one
    write by the member that led the group when it computed it (C14)."""

    generation: int
    """Increases with every assignment the group publishes (C9)."""
    leader: str
    """Member id of the member that computed it."""
    buckets: dict[str, dict[str, tuple[int, ...]]]
    """Member id -> table name -> its buckets of that table."""
    stat: Stat | None = None

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode(
            {
                "g": self.generation,
                "l": self.leader,
                "a": {
                    m: {t: list(bs) for t, bs in tables.items()}
                    for m, tables in self.buckets.items()
                },
            },
            self.VERSION,
        )

    @classmethod
    def decode(cls, node: Node, path: str) -> AssignmentRecord:
        def build(v: dict[str, Any]) -> AssignmentRecord:
            buckets = {
                _str(m): {_str(t): tuple(_ints(bs)) for t, bs in tables.items()}
                for m, tables in v["a"].items()
            }
            return cls(int(v["g"]), _str(v["l"]), buckets, node.stat)

        return _load(node.data, path, cls.VERSION, "group assignment", build)


class OwnerRecord(NamedTuple):
    """``<ns>/groups/<group>/owners/<table id>.<bucket>``: the member that consumes the bucket
    now ("" once released). A member claims a bucket by writing its id here at the version it
    read, and releases it after its revocation; a commit checks the version it wrote (C10, C11)."""

    member: str
    generation: int
    """The assignment's generation when it was claimed."""
    stat: Stat | None = None

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"m": self.member, "g": self.generation}, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> OwnerRecord:
        return _load(
            node.data,
            path,
            cls.VERSION,
            "bucket owner",
            lambda v: cls(_str(v["m"]), int(v["g"]), node.stat),
        )


class IdentityRecord(NamedTuple):
    """``<ns>/identity``: the namespace's random identity, created once with the namespace; the
    warehouse namespace directory names it in its owner marker (DESIGN §9 "Ownership")."""

    identity: str

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"id": self.identity}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> IdentityRecord:
        return _load(data, path, cls.VERSION, "namespace identity", lambda v: cls(_str(v["id"])))


class AccessRecord(NamedTuple):
    """``<ns>/access``: written once the whole namespace is closed to writers without the
    credentials of ``user`` (DESIGN §6.1); until then a connection with ``auth`` closes it."""

    user: str

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"u": self.user}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> AccessRecord:
        return _load(data, path, cls.VERSION, "namespace access", lambda v: cls(_str(v["u"])))
