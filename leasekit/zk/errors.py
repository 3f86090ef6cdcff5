"""Error translation of the ZooKeeper layer: kazoo's exceptions become ``leasekit.errors``, and
a failed transaction op becomes a ``TxnConflict`` reason ("nonode", "exists", ...)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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

__all__ = ["translated", "translate", "conflict_reason"]

_CONFLICTS: dict[type[BaseException], str] = {
    kx.NoNodeError: "nonode",
    kx.NodeExistsError: "exists",
    kx.BadVersionError: "version",
    kx.NotEmptyError: "notempty",
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


def conflict_reason(exc: BaseException) -> str | None:
    """ "nonode", "exists", "version" or "notempty" for a failed transaction op, else None."""
    return next((r for cls, r in _CONFLICTS.items() if isinstance(exc, cls)), None)
