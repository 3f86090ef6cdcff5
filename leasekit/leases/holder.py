"""Keepalive holders: an ephemeral znode per running lease keepalive, in the session of the
connection that runs it, so others can tell a lease whose holder is gone (M4).

The lease record names the token of the keepalive that last acquired or renewed it; the holder
znode ``<ns>/keepalives/<token>`` goes when the keepalive stops or its process dies (with its
ZooKeeper session). A keepalive puts it back after each renewal if a new session lost it.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING

from ..errors import LeasekitError
from ..zk import ConflictReason, Create, Delete, TxnConflict
from ..zk.lease_formats import HolderRecord

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["new_token", "ensure", "remove", "live_holders"]


def new_token() -> str:
    """A fresh holder token."""
    return uuid.uuid4().hex


def ensure(ctx: Context, lease_id: str, token: str) -> None:
    """Create the holder znode of ``token`` unless it exists (its parent too, on first use).

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
        PermissionDeniedError: this connection may not write.
    """
    path = ctx.paths.keepalive(token)
    value = HolderRecord(lease_id, ctx.owner).encode()
    for _ in range(2):
        try:
            ctx.store.commit([Create(path, value, ephemeral=True)])
            return
        except TxnConflict as exc:
            if exc.reason == ConflictReason.EXISTS:
                return
            if exc.reason != ConflictReason.NONODE:
                raise
            ctx.store.ensure_path(ctx.paths.keepalives)


def remove(ctx: Context, token: str) -> None:
    """Delete the holder znode of ``token``; gone already, or ZooKeeper away, is fine (the
    znode then goes with the session)."""
    with contextlib.suppress(LeasekitError):  # TxnConflict included
        ctx.store.commit([Delete(ctx.paths.keepalive(token))])


def live_holders(ctx: Context) -> frozenset[str]:
    """Tokens of every keepalive running now in the namespace."""
    return frozenset(ctx.store.children(ctx.paths.keepalives) or [])
