"""Znode values and transaction ops of the ZooKeeper layer: Stat, Node, the four ops,
the conflict a failed transaction raises and the split of ops into transaction-sized chunks."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ..errors import IllegalStateError
from .errors import ConflictReason

MAX_TXN_BYTES = 512 * 1024
"""Largest transaction of leasekit's batched writes (``chunk_ops``)."""
MAX_REQUEST_BYTES = 1_000_000
"""ZooKeeper refuses requests over jute.maxbuffer (1 MiB by default); stay clear of it."""
MAX_TXN_OPS = 5000


class Stat(NamedTuple):
    """The parts of a znode's stat that leasekit uses."""

    version: int
    """Data version, for compare-and-set."""
    ctime_ms: int
    """Creation time, ZooKeeper clock."""
    mtime_ms: int
    """Last modification time, ZooKeeper clock."""
    num_children: int
    """Number of children."""
    cversion: int
    """Child version: changes whenever a child is created or deleted."""
    czxid: int = 0
    """Id of the transaction that created the znode: tells one instance of a path from
    another created under the same path later (versions restart at 0 and repeat)."""


class Node(NamedTuple):
    """A znode's raw data with its stat."""

    data: bytes
    stat: Stat


def stat_of(s: Any) -> Stat:
    """The Stat of a kazoo ZnodeStat."""
    return Stat(s.version, s.ctime, s.mtime, s.numChildren, s.cversion, s.czxid)


class Create(NamedTuple):
    """Transaction op: create ``path`` with ``data`` (with ``sequence``, ZooKeeper appends a
    10-digit counter to the name; the result is the path created)."""

    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequence: bool = False


class SetData(NamedTuple):
    """Transaction op: set ``path`` to ``data`` if its version is ``version`` (-1: any)."""

    path: str
    data: bytes
    version: int = -1


class Delete(NamedTuple):
    """Transaction op: delete ``path`` if its version is ``version`` (-1: any)."""

    path: str
    version: int = -1


class Check(NamedTuple):
    """Transaction op: fail unless ``path`` exists with ``version`` (-1: any version)."""

    path: str
    version: int


Op = Create | SetData | Delete | Check


class TxnConflict(IllegalStateError):
    """A transaction failed on op ``index`` (``op``) for ``reason``, a ``ConflictReason``.

    Callers translate it into a meaningful error; one that escapes is still an IllegalStateError."""

    def __init__(self, index: int, op: Op, reason: ConflictReason) -> None:
        super().__init__(f"transaction op {index} ({type(op).__name__} {op.path}) failed: {reason}")
        self.index = index
        self.op = op
        self.reason = reason


ACL_ALLOWANCE = 160
"""Bytes allowed per create for its ACL list and fields: a digest ACL (scheme, user and
password hash) serializes to about 60 bytes, the open ACL to about 25."""


def op_size(op: Op, create_extra: int = ACL_ALLOWANCE) -> int:
    """A safe upper bound of the bytes ``op`` takes in a serialized multi request;
    ``create_extra`` bounds a create's bytes besides its path and data (its ACL and flags)."""
    size = 16 + len(op.path.encode())  # multi header, path length prefix, version or flags
    if isinstance(op, Create):
        return size + len(op.data) + create_extra
    if isinstance(op, SetData):
        return size + len(op.data) + 8
    return size + 8


def ops_size(ops: Iterable[Op], create_extra: int = ACL_ALLOWANCE) -> int:
    """The sum of ``op_size`` of ``ops``, in one loop (acquire sizes tens of thousands)."""
    total = 0
    for op in ops:
        kind = type(op)
        total += 16 + len(op.path.encode())
        if kind is Create:
            total += len(op.data) + create_extra
        elif kind is SetData:
            total += len(op.data) + 8
        else:
            total += 8
    return total


def chunk_ops(
    ops: Iterable[Op], max_ops: int = MAX_TXN_OPS, max_bytes: int = MAX_TXN_BYTES
) -> Iterator[list[Op]]:
    """Split ``ops`` into lists that fit one ZooKeeper transaction each."""
    chunk: list[Op] = []
    size = 0
    for op in ops:
        size_of_op = op_size(op)
        if chunk and (len(chunk) >= max_ops or size + size_of_op > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(op)
        size += size_of_op
    if chunk:
        yield chunk
