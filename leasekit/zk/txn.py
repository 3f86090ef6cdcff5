"""Transactions of the ZooKeeper layer: leasekit's ops serialized straight into one multi
request (kazoo's connection sends it), and the per-op results of ZooKeeper's answer
translated: a Stat per SetData, the path per Create, a ``TxnConflict`` for the op that failed."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Transaction

from ..errors import LeadershipLostError
from .errors import ConflictReason, conflict_reason, translated
from .ops import Create, Delete, Op, SetData, TxnConflict, stat_of

__all__ = ["Multi", "Pending", "send", "outcome", "acl_bytes"]

_HEAD = struct.Struct("!iBi")
"""Header of each op of a multi request: op type, done flag, error."""
_INT = struct.Struct("!i")
_CREATE, _DELETE, _SET_DATA, _CHECK, _MULTI = 1, 2, 5, 13, 14
_END = _HEAD.pack(-1, True, -1)


def acl_bytes(acls: Sequence[Any]) -> bytes:
    """The serialized ACL vector of a create (kazoo ``ACL`` values)."""
    out = bytearray(_INT.pack(len(acls)))
    for acl in acls:
        out += _INT.pack(acl.perms)
        for text in (acl.id.scheme, acl.id.id):
            raw = text.encode()
            out += _INT.pack(len(raw)) + raw
    return bytes(out)


class Multi(NamedTuple):
    """ZooKeeper's multi request of leasekit's ops, shaped like kazoo's own ``Transaction``
    (same type, same answer) so kazoo's connection sends it and reads its results; each op
    is serialized once, with the store's ACL serialized ahead of time."""

    operations: tuple[Op, ...]
    acl: bytes
    """The serialized ACL vector every create gets."""
    root: str = ""
    """The client's chroot, prefixed to every path."""

    type = _MULTI

    def serialize(self) -> bytearray:
        out = bytearray()
        head, integer, acl, root = _HEAD.pack, _INT.pack, self.acl, self.root
        for op in self.operations:
            path = (root + op.path).encode()
            if isinstance(op, Create):
                flags = (1 if op.ephemeral else 0) | (2 if op.sequence else 0)
                out += head(_CREATE, False, -1) + integer(len(path)) + path
                out += integer(len(op.data)) + op.data + acl + integer(flags)
            elif isinstance(op, SetData):
                out += head(_SET_DATA, False, -1) + integer(len(path)) + path
                out += integer(len(op.data)) + op.data + integer(op.version)
            elif isinstance(op, Delete):
                out += head(_DELETE, False, -1) + integer(len(path)) + path + integer(op.version)
            else:  # Check
                out += head(_CHECK, False, -1) + integer(len(path)) + path + integer(op.version)
        return out + _END

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        return Transaction.deserialize(data, offset)


def send(client: KazooClient, ops: Sequence[Op], acl: bytes) -> Any:
    """Send ``ops`` as one multi request without waiting; kazoo's async result of its answer."""
    result = client.handler.async_result()
    client._call(Multi(tuple(ops), acl, client.chroot or ""), result)
    return result


def outcome(ops: Sequence[Op], results: list[Any], fence: str | None) -> list[Any]:
    """The results of a committed transaction (a path per Create, a Stat per SetData, True per
    Delete and Check), or the error of its failed op: ``TxnConflict``, or, for the fence
    check first in ``ops`` (``fence`` given), ``LeadershipLostError``."""
    for index, result in enumerate(results):
        if isinstance(result, BaseException) and not isinstance(result, kx.RolledBackError):
            reason = conflict_reason(result)
            if fence is not None and index == 0 and reason is not None:
                raise LeadershipLostError(
                    f"no longer the leader ({fence} is gone): transaction refused"
                )
            if reason is None:
                with translated(f"transaction op {ops[index].path}"):
                    raise result
            raise TxnConflict(
                index - (fence is not None), ops[index], reason or ConflictReason.UNKNOWN
            )
    return [stat_of(r) if hasattr(r, "mtime") else r for r in results]


class Pending:
    """A transaction sent and not yet answered; ``result()`` waits for ZooKeeper's answer."""

    def __init__(self, ops: list[Op], answer: Any, fence: str | None) -> None:
        self._ops, self._answer, self._fence = ops, answer, fence

    def result(self) -> list[Any]:
        """The transaction's results (see ``outcome``), without the fence check's.

        Raises:
            TxnConflict: an op failed; nothing was written.
            LeadershipLostError: the fence is gone; nothing was written.
            ZooKeeperUnavailableError: the connection was lost: the transaction may or may not
                have committed.
        """
        with translated(f"transaction of {len(self._ops)} ops"):
            results = self._answer.get()
        out = outcome(self._ops, results, self._fence)
        return out if self._fence is None else out[1:]
