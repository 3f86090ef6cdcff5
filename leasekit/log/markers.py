"""Writes in progress: a znode per writer, created before its first file.

Orphan cleanup never takes a file whose path carries a live marker's token, and every
commit of the write checks the marker in its transaction, so a writer whose ZooKeeper
session ended (and whose files may since have been cleaned up) can never commit them.

A writer with a session of its own marks its write with an ephemeral znode. Spark tasks write
files in processes that hold no session until their driver commits them, so each task holds a
persistent marker (``hold``) that the commit or abort deletes (``release``). One left behind
(a task whose result Spark dropped, a driver that died) is claimed by orphan cleanup once older
than ``orphan.min-age`` (``claim_stale``): it deletes the marker in a transaction of its own
before it deletes any file, so a commit that comes later fails on its check and writes nothing
(R4, W2).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ..errors import IllegalStateError, LeasekitError, SessionLostError
from ..zk import Check, ConflictReason, Create, Delete, TxnConflict

if TYPE_CHECKING:
    from ..context import Context

__all__ = [
    "in_flight",
    "guard",
    "live_tokens",
    "lost",
    "hold",
    "release",
    "claim_stale",
    "HELD",
]

HELD = b"held"
"""Data of a persistent marker (``hold``): a write whose files are committed by another process;
an ephemeral marker has none."""


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


def claimed_error(token: str) -> IllegalStateError:
    return IllegalStateError(
        f"the files of write {token[:8]} were taken by orphan cleanup before their commit (they "
        "waited longer than orphan.min-age); nothing was committed; write them again"
    )


def hold(ctx: Context) -> str:
    """Mark a write whose files another process commits (a Spark task's): a persistent marker,
    created before the first file; the token its file paths must carry."""
    token = uuid.uuid4().hex
    ctx.store.commit([Create(ctx.paths.write(token), HELD)])
    return token


def release(ctx: Context, tokens: Iterable[str]) -> None:
    """Delete the markers of held writes (committed or abandoned); gone ones are skipped, and
    one that cannot be deleted now is left to orphan cleanup (``claim_stale``)."""
    for token in sorted(set(tokens)):
        with contextlib.suppress(LeasekitError):
            ctx.store.commit([Delete(ctx.paths.write(token))])


def live_tokens(ctx: Context, min_age_ms: int | None = None) -> frozenset[str]:
    """Tokens of every write in progress in the namespace; with ``min_age_ms``, less the held
    markers that old (``claim_stale`` takes them)."""
    tokens = ctx.store.children(ctx.paths.writes) or []
    if min_age_ms is None or not tokens:
        return frozenset(tokens)
    stale = {t for t, _ in _stale(ctx, tokens, min_age_ms)}
    return frozenset(t for t in tokens if t not in stale)


def claim_stale(ctx: Context, min_age_ms: int) -> list[str]:
    """Delete every held marker older than ``min_age_ms`` (each only as it was read, and fenced
    in a janitor), so the files of its write can never be committed; the tokens claimed."""
    claimed: list[str] = []
    tokens = ctx.store.children(ctx.paths.writes) or []
    for token, version in _stale(ctx, tokens, min_age_ms) if tokens else []:
        try:
            ctx.store.commit([Delete(ctx.paths.write(token), version)])
            claimed.append(token)
        except TxnConflict:
            continue  # committed, aborted (or claimed) since it was read
    return claimed


def _stale(ctx: Context, tokens: Sequence[str], min_age_ms: int) -> list[tuple[str, int]]:
    """(token, version) of the held markers among ``tokens`` older than ``min_age_ms``."""
    now, nodes = ctx.read_with_clock([ctx.paths.write(t) for t in tokens])
    now = ctx.clock(now)
    return [
        (t, node.stat.version)
        for t, node in zip(tokens, nodes)
        if node is not None and node.data == HELD and now - node.stat.ctime_ms >= min_age_ms
    ]
