"""Coordinators: what a consumer's group gives it. Without a ``group_id`` a consumer has a
``NoGroupCoordinator``: the buckets of the tables it subscribes to are all its own, and commits
are refused. With one it has a ``GroupCoordinator``: membership, assignment and the listener's
calls inside ``poll``, commits and committed offsets in ZooKeeper (C2–C4) and auto-commit (C8)."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import IllegalOperationError
from ..records import OffsetAndMetadata, TableBucket
from ..zk import Create, Delete, TxnConflict
from ..zk.formats import MemberRecord
from . import offsets as stored
from .subscription import SUBSCRIBED, SubscriptionState

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from .offsets import OffsetRecord

__all__ = ["NoGroupCoordinator", "GroupCoordinator"]


class NoGroupCoordinator:
    """A consumer without a group: it is assigned every bucket of the tables it subscribes to
    at once; it has no member id, no generation and no committed offsets."""

    member_id: str | None = None
    generation: int | None = None
    group_id: str | None = None

    def __init__(self, subscription: SubscriptionState) -> None:
        self._sub = subscription

    def subscription_changed(self) -> None:
        if self._sub.mode == SUBSCRIBED:
            self._sub.set_assignment(self._sub.subscribed_buckets())

    def unsubscribe(self) -> None:
        pass

    def poll(self) -> None:
        pass

    def require_group(self) -> str:
        raise _no_group()

    def starting_offsets(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        return {}

    def fetch_committed(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        raise _no_group()

    def commit(self, offsets: Mapping[TableBucket, OffsetAndMetadata]) -> None:
        raise _no_group()

    def close(self) -> None:
        pass


class GroupCoordinator:
    """A consumer's part in its group. A subscribed consumer joins at its first poll as a live
    member (an ephemeral znode that ends with its ZooKeeper session) and owns every bucket of
    its tables; the listener hears of the buckets it gains and loses, revoked first (C10).
    A consumer with a manual assignment commits for the group without joining it."""

    generation: int | None = None

    def __init__(self, ctx: Context, group: str, subscription: SubscriptionState,
                 tables: Mapping[str, TableInfo], *, auto_commit: bool, interval: float) -> None:
        self._ctx, self.group_id, self._sub, self._tables = ctx, group, subscription, tables
        self._auto_commit, self._interval = auto_commit, interval
        self._next_auto_commit = time.monotonic() + interval
        self._committed: dict[TableBucket, OffsetAndMetadata] = {}
        """Offsets known stored: a commit that would not change them writes nothing (C3)."""
        self.member_id: str | None = None
        self._member_tables: tuple[str, ...] = ()
        self._joined = -1
        """The subscription change the current assignment follows (-1: none)."""

    # -- membership ---------------------------------------------------------------------------

    def subscription_changed(self) -> None:
        """After a subscribe: the next poll rejoins with the new tables."""

    def unsubscribe(self) -> None:
        """Before the subscription is cleared: hand back the buckets, leave the group."""
        try:
            self._revoke(set(self._owned))
        finally:
            self._leave()

    @property
    def _owned(self) -> list[TableBucket]:
        return self._sub.assignment() if self._joined >= 0 else []

    def poll(self) -> None:
        """Rejoin when the subscription changed, then auto-commit when due (C8)."""
        if self._sub.mode == SUBSCRIBED and self._joined != self._sub.changes:
            self._rebalance()
        self.maybe_auto_commit()

    def _rebalance(self) -> None:
        self._join()
        wanted = self._sub.subscribed_buckets()  # the group's only member owns every bucket
        before = set(self._owned)
        revoked = before - set(wanted)
        if revoked:
            self._revoke(revoked)
        self._sub.set_assignment(wanted)
        self._joined = self._sub.changes
        if self._sub.listener is not None:  # at the end of every rebalance, possibly empty
            self._sub.listener.on_buckets_assigned(set(wanted) - before)

    def _revoke(self, buckets: set[TableBucket]) -> None:
        """Commit the positions of ``buckets`` with auto-commit, then tell the listener; a
        commit it makes there is accepted (C10)."""
        if not buckets or self._joined < 0:
            return
        if self._auto_commit:
            self.commit({tb: OffsetAndMetadata(p) for tb, p in self._sub.positions().items() if tb in buckets})
        if self._sub.listener is not None:
            self._sub.listener.on_buckets_revoked(set(buckets))
        for tb in buckets:
            self._committed.pop(tb, None)

    def _join(self) -> None:
        paths = self._ctx.paths
        tables = tuple(sorted(self._sub.tables))
        record = MemberRecord(self._ctx.owner, tables)
        if self.member_id is None:
            self.member_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
            self._ctx.store.ensure_path(paths.group_members(self.group_id))
            self._ctx.store.commit([Create(paths.member(self.group_id, self.member_id), record.encode(), True)])
        elif tables != self._member_tables:
            self._ctx.store.set(paths.member(self.group_id, self.member_id), record.encode())
        self._member_tables = tables

    def _leave(self) -> None:
        self._joined = -1
        if self.member_id is not None:
            try:
                self._ctx.store.commit([Delete(self._ctx.paths.member(self.group_id, self.member_id))])
            except TxnConflict:
                pass  # the session ended first: the member is gone already
            self.member_id = None

    # -- offsets ------------------------------------------------------------------------------

    def require_group(self) -> str:
        return self.group_id

    def starting_offsets(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        """Committed offsets to start ``buckets`` from (buckets without one are left out)."""
        return self.fetch_committed(buckets)

    def fetch_committed(self, buckets: Iterable[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        """The group's committed offsets of ``buckets``, read now."""
        buckets = list(buckets)
        tables = {tb.table: self._tables[tb.table] for tb in buckets}
        found = stored.fetch(self._ctx, self.group_id, tables, buckets)
        for tb, record in found.items():
            self._committed[tb] = OffsetAndMetadata(record.offset, record.metadata)
        return found

    def commit(self, offsets: Mapping[TableBucket, OffsetAndMetadata]) -> None:
        """Store ``offsets`` (checked already); those known stored are not written (C3)."""
        changed = {tb: o for tb, o in offsets.items() if self._committed.get(tb) != o}  # {} too
        if not changed:
            return
        stored.commit(self._ctx, self.group_id, changed, {tb.table: self._tables[tb.table] for tb in changed})
        self._committed.update(changed)

    def maybe_auto_commit(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self.commit({tb: OffsetAndMetadata(p) for tb, p in self._sub.positions().items()})
            self._next_auto_commit = time.monotonic() + self._interval

    def close(self) -> None:
        """Commit the positions with auto-commit (C8), hand back the buckets, leave."""
        try:
            if self._auto_commit:
                self.commit({tb: OffsetAndMetadata(p) for tb, p in self._sub.positions().items()})
            self._revoke(set(self._owned))
        finally:
            self._leave()


def _no_group() -> IllegalOperationError:
    return IllegalOperationError("this consumer has no group_id: offsets cannot be committed or read")
