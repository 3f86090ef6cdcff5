"""The stored formats of consumer groups: committed offsets with their history, members,
the assignment and bucket owners; see ``formats`` for the others."""

from __future__ import annotations

from typing import Any, NamedTuple

from .codec import encode
from .fields import ints, load, string, strs
from .ops import Node, Stat

__all__ = ["HISTORY", "Commit", "OffsetRecord", "MemberRecord", "AssignmentRecord", "OwnerRecord"]

HISTORY = 10
"""Commits an offset record remembers (the window of lag health, docs/concepts.md)."""


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
    reset: bool = False
    """The offset is a sealed bucket's seal where the reset policy put a member that had no
    offset for it: the group did not consume the bucket (K6, C5)."""

    VERSION = 1

    @property
    def commit_ms(self) -> int:
        """ZooKeeper time of the last commit."""
        return (
            self.history[-1].time_ms if self.history else (self.stat.mtime_ms if self.stat else 0)
        )

    def committed(
        self,
        offset: int,
        metadata: str,
        table: str,
        now_ms: int,
        log_end: int,
        *,
        reset: bool = False,
    ) -> OffsetRecord:
        """The record after committing ``offset`` at ``now_ms`` with the log end then (by a
        reset to a seal with ``reset``)."""
        history = (*self.history, Commit(now_ms, offset, log_end))[-HISTORY:]
        return OffsetRecord(offset, metadata, table, history, reset=reset)

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "o": self.offset,
            "m": self.metadata,
            "t": self.table,
            "h": [list(c) for c in self.history],
        }
        if self.reset:  # (absent otherwise: records written before it existed read the same)
            value["r"] = True
        return encode(value, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> OffsetRecord:
        def build(v: dict[str, Any]) -> OffsetRecord:
            history = tuple(Commit(int(t), int(o), int(e)) for t, o, e in v["h"])
            if len(history) > HISTORY:
                raise ValueError(f"{len(history)} commits in the history, at most {HISTORY}")
            offset = int(v["o"])
            if offset < 0:
                raise ValueError(f"negative offset {offset}")
            reset = v.get("r", False)
            if not isinstance(reset, bool):
                raise TypeError(f"reset flag {reset!r:.40} is not a bool")
            return cls(offset, string(v["m"]), string(v["t"]), history, node.stat, reset)

        return load(node.data, path, cls.VERSION, "committed offset", build)

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
        return encode({"h": self.host, "t": list(self.tables)}, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> MemberRecord:
        return load(
            node.data,
            path,
            cls.VERSION,
            "group member",
            lambda v: cls(string(v["h"]), strs(v["t"]), node.stat),
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
        return encode(
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
                string(m): {string(t): tuple(ints(bs)) for t, bs in tables.items()}
                for m, tables in v["a"].items()
            }
            return cls(int(v["g"]), string(v["l"]), buckets, node.stat)

        return load(node.data, path, cls.VERSION, "group assignment", build)


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
        return encode({"m": self.member, "g": self.generation}, self.VERSION)

    @classmethod
    def decode(cls, node: Node, path: str) -> OwnerRecord:
        return load(
            node.data,
            path,
            cls.VERSION,
            "bucket owner",
            lambda v: cls(string(v["m"]), int(v["g"]), node.stat),
        )
