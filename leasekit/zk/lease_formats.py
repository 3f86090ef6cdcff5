"""The stored formats of leases: a lease's record and its pin arrays (one chunk of a table's
buckets each); see ``formats`` for the others."""

from __future__ import annotations

from typing import Any, NamedTuple

from .chunked import CHUNK, ChunkArray
from .codec import encode
from .fields import ints, load, string
from .ops import Node, Stat

__all__ = ["LeaseRecord", "PinChunk", "HolderRecord", "LIVE", "DROPPING", "EMPTY_PIN"]

LIVE, DROPPING = "live", "dropping"
"""States of a lease record."""


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
    holder: str = ""
    """Token of the keepalive that last acquired or renewed it, whose ``HolderRecord`` znode
    lives as long as that keepalive runs; "" when no keepalive did (and in records stored
    before holders were recorded: the field is optional, so the format version stays 1 and
    older readers read newer records too)."""

    VERSION = 1

    @property
    def expires_ms(self) -> int:
        """Expiry: never earlier than a previous expiry (renew only extends, L7)."""
        return max(self.floor_ms, (self.stat.mtime_ms if self.stat else 0) + self.duration_ms)

    def renewed(
        self, duration_ms: int, owner: str, state: str = LIVE, holder: str = ""
    ) -> LeaseRecord:
        """The record after an acquire or renew: every earlier expiry is kept as a floor."""
        floor = self.expires_ms if self.stat else self.floor_ms
        return LeaseRecord(duration_ms, floor, owner, state, None, holder)

    def encode(self) -> bytes:
        value = {"d": self.duration_ms, "f": self.floor_ms, "o": self.owner, "s": self.state}
        if self.holder:
            value["h"] = self.holder
        return encode(value, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> LeaseRecord:
        def build(v: dict[str, Any]) -> LeaseRecord:
            state = string(v["s"])
            if state not in (LIVE, DROPPING):
                raise ValueError(f"unknown lease state {state!r}")
            holder = string(v.get("h", ""))
            return cls(int(v["d"]), int(v["f"]), string(v["o"]), state, node.stat, holder)

        return load(node.data, path, cls.VERSION, "lease record", build)


EMPTY_PIN = -1
"""A pin array's entry for a bucket pinned as empty (L15): it had no snapshot and nothing in
its log (nor its ancestors'), so the lease reads no rows for it. No pin znode stands for it:
retention has nothing to keep. Shown to users as snapshot id 0."""


class PinChunk(NamedTuple):
    """``<ns>/leases/<id>/pins/<table_id>.<chunk>``: a lease's pinned snapshot id for each of
    CHUNK buckets of one table (0: not pinned; ``EMPTY_PIN``: pinned as empty)."""

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

    @property
    def array(self) -> ChunkArray:
        """The pinned snapshot ids addressed by bucket number."""
        return ChunkArray(self.chunk, self.ids)

    @classmethod
    def empty(cls, table_id: str, chunk: int, table: str) -> PinChunk:
        return cls(table_id, chunk, table, [0] * CHUNK)

    def encode(self) -> bytes:
        end = len(self.ids)
        while end and self.ids[end - 1] == 0:
            end -= 1
        return encode({"t": self.table, "a": self.ids[:end]}, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str, table_id: str, chunk: int) -> PinChunk:
        def build(v: dict[str, Any]) -> PinChunk:
            ids = ints(v["a"])
            if len(ids) > CHUNK:
                raise ValueError(f"{len(ids)} entries, at most {CHUNK}")
            return cls(table_id, chunk, string(v["t"]), ids + [0] * (CHUNK - len(ids)), node.stat)

        return load(node.data, path, cls.VERSION, "lease pins", build)


class HolderRecord(NamedTuple):
    """``<ns>/keepalives/<token>`` (ephemeral): a lease's keepalive is running in a live
    session; it goes when the keepalive stops or its session ends (the process died)."""

    lease_id: str
    """The lease it renews."""
    owner: str
    """host:pid of the process running it."""

    VERSION = 1

    def encode(self) -> bytes:
        return encode({"l": self.lease_id, "o": self.owner}, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> HolderRecord:
        def build(v: dict[str, Any]) -> HolderRecord:
            return cls(string(v["l"]), string(v["o"]))

        return load(node.data, path, cls.VERSION, "lease keepalive holder", build)
