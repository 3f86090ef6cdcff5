"""Error translation of the ZooKeeper layer: kazoo's exceptions become ``leasekit.errors``, and
a failed transaction op becomes a ``ConflictReason`` of a ``TxnConflict``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from enum import Enum

from kazoo import exceptions as kx
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import RetryFailedError

from ..errors import (
    IllegalStateError,
    InvalidArgumentError,
    LeasekitError,
    PermissionDeniedError,
    ZooKeeperUnavailableError,
)

__all__ = ["ConflictReason", "translated", "translate", "conflict_reason"]


class ConflictReason(str, Enum):
    """Why one op of a transaction failed (a str, so it still compares equal to its value)."""

    NONODE = "nonode"
    """The znode (or, for a create, its parent) does not exist."""
    EXISTS = "exists"
    """A create found the znode already there."""
    VERSION = "version"
    """The znode's version is not the one the op expected."""
    NOTEMPTY = "notempty"
    """A delete found children under the znode."""
    UNKNOWN = "unknown"
    """The server named no reason (kazoo gave no error for the failed op)."""

    def __str__(self) -> str:
        return self.value


_CONFLICTS: dict[type[BaseException], ConflictReason] = {
    kx.NoNodeError: ConflictReason.NONODE,
    kx.NodeExistsError: ConflictReason.EXISTS,
    kx.BadVersionError: ConflictReason.VERSION,
    kx.NotEmptyError: ConflictReason.NOTEMPTY,
}

_UNAVAILABLE = (
    kx.ConnectionLoss,
    kx.SessionExpiredError,
    kx.OperationTimeoutError,
    kx.ConnectionClosedError,
    KazooTimeoutError,
    RetryFailedError,
    kx.SessionMovedError,
)


def translate(exc: BaseException, what: str = "ZooKeeper call") -> LeasekitError:
    """The ``leasekit.errors`` error for a kazoo (or leasekit) exception."""
    if isinstance(exc, LeasekitError):
        return exc
    if isinstance(exc, (kx.NoAuthError, kx.AuthFailedError)):
        return PermissionDeniedError(f"{what}: ZooKeeper denied access ({type(exc).__name__})")
    if isinstance(exc, _UNAVAILABLE):
        return ZooKeeperUnavailableError(f"{what}: ZooKeeper unavailable ({type(exc).__name__})")
    if isinstance(exc, kx.BadArgumentsError):
        return InvalidArgumentError(f"{what}: bad arguments ({exc})")
    return IllegalStateError(f"{what}: ZooKeeper error {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def translated(what: str = "ZooKeeper call") -> Iterator[None]:
    """Translate kazoo errors raised inside into ``leasekit.errors``."""
    try:
        yield
    except LeasekitError:
        raise
    except (kx.KazooException, KazooTimeoutError, RetryFailedError) as exc:
        raise translate(exc, what) from None


def conflict_reason(exc: BaseException) -> ConflictReason | None:
    """The reason a transaction op failed with ``exc``; None for other errors."""
    return next((r for cls, r in _CONFLICTS.items() if isinstance(exc, cls)), None)
