"""The stored form of a lease: its record znode (duration, expiry floor, owner, state) and its
pin arrays, one znode per 1,000 buckets of a table, changed in the same transactions as the pins."""

from __future__ import annotations

from typing import NamedTuple

from ..errors import CorruptMetadataError
from ..zk import Node, Stat, decode, encode
from ..zk.paths import CHUNK

LIVE, DROPPING = "live", "dropping"
OPS_PER_TXN = 5000


class LeaseRecord(NamedTuple):
    """The lease znode's value with its stat; ``stat.mtime_ms`` is the last acquire or renew."""

    duration_ms: int
    floor_ms: int
    owner: str
    state: str
    stat: Stat

    @property
    def expires_ms(self) -> int:
        """Expiry: never earlier than a previous expiry (renew only extends, L7)."""
        return max(self.floor_ms, self.stat.mtime_ms + self.duration_ms)

    def value(self, duration_ms: int, owner: str, state: str = LIVE) -> bytes:
        """Stored form after an acquire or renew that keeps every earlier expiry as a floor."""
        return encode({"d": duration_ms, "f": self.expires_ms, "o": owner, "s": state})


def _record(node: Node, path: str) -> LeaseRecord:
    v = decode(node.data, path)
    try:
        return LeaseRecord(int(v["d"]), int(v["f"]), str(v["o"]), str(v["s"]), node.stat)
    except (KeyError, TypeError, ValueError):
        raise CorruptMetadataError(f"lease record at {path} is missing fields", path) from None


def _new_record(duration_ms: int, owner: str) -> bytes:
    return encode({"d": duration_ms, "f": 0, "o": owner, "s": LIVE})


class Chunk(NamedTuple):
    """A lease's pinned snapshot ids for one chunk of one table's buckets (0: not pinned)."""

    table_id: str
    chunk: int
    table: str
    ids: list[int]
    stat: Stat | None


def _chunk(node: Node | None, path: str, table_id: str, chunk: int, table: str) -> Chunk:
    if node is None:
        return Chunk(table_id, chunk, table, [0] * CHUNK, None)
    v = decode(node.data, path)
    ids = list(v["a"])
    return Chunk(table_id, chunk, v["t"], ids + [0] * (CHUNK - len(ids)), node.stat)


def _chunk_value(table: str, ids: list[int]) -> bytes:
    end = len(ids)
    while end and ids[end - 1] == 0:
        end -= 1
    return encode({"t": table, "a": ids[:end]})
