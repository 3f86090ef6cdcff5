"""Writes in progress: an ephemeral znode per writer, created before its first file.

Orphan cleanup never takes a file whose path carries a live marker's token, and every
commit of the write checks the marker in its transaction, so a writer whose ZooKeeper
session ended (and whose files may since have been cleaned up) can never commit them.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import LeasekitError, SessionLostError
from ..zk import Check, ConflictReason, Create, Delete, TxnConflict

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["in_flight", "guard", "live_tokens", "lost"]


@contextlib.contextmanager
def in_flight(ctx: Context) -> Iterator[str]:
    """Mark a write in progress for this block; yields the token its file paths must carry."""
    token = uuid.uuid4().hex
    path = ctx.paths.write(token)
    ctx.store.commit([Create(path, b"", ephemeral=True)])
    try:
        yield token
    finally:
        with contextlib.suppress(LeasekitError):
            ctx.store.commit([Delete(path)])


def guard(ctx: Context, token: str) -> Check:
    """Transaction op that fails unless the write's marker still exists."""
    return Check(ctx.paths.write(token), -1)


def lost(ctx: Context, exc: TxnConflict, token: str) -> bool:
    """Whether a failed commit failed on the write's marker."""
    return exc.reason == ConflictReason.NONODE and exc.op.path == ctx.paths.write(token)


def lost_error(token: str) -> SessionLostError:
    return SessionLostError(
        f"the write {token[:8]} lost its ZooKeeper session before committing; nothing was "
        "committed and its files will be cleaned up as orphans; retry the write"
    )


def live_tokens(ctx: Context) -> frozenset[str]:
    """Tokens of every write in progress in the namespace."""
    return frozenset(ctx.store.children(ctx.paths.writes) or [])
