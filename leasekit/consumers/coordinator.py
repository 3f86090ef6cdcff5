"""The coordinator of a consumer with a ``group_id``: membership, assignment and the listener's
calls inside ``poll``, commits and committed offsets in ZooKeeper (C2–C4) and auto-commit (C8).
(A consumer without a group has a ``no_group.NoGroupCoordinator``.)"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import CommitFailedError, GroupNotEmptyError, IllegalStateError
from ..structs import OffsetAndMetadata, TableBucket
from ..zk import Check, TxnConflict
from . import offsets as stored
from .group import GroupMember
from .poll_timer import PollTimer
from .seals import SealCommits
from .session_check import SessionCheck
from .subscription import SUBSCRIBED, SubscriptionState

if TYPE_CHECKING:
    from ..context import Context
    from ..zk import Watch
    from .assignors import Assignor
    from .offsets import OffsetRecord
    from .options import ConsumerOptions

__all__ = ["GroupCoordinator"]

log = logging.getLogger("leasekit.consumers")


class GroupCoordinator:
    """A consumer's part in its group. A subscribed consumer joins at its first poll as a live
    member (``group.GroupMember``); ``poll`` follows the assignment the group's leader publishes,
    revoking only the buckets that move away (their positions committed with auto-commit, the
    listener told, the owner znodes released) and claiming new ones once their last owner has
    released them (C10, C15). Commits are fenced by membership and ownership (C11). A consumer
    with a manual assignment commits for the group without joining it."""

    def __init__(
        self,
        ctx: Context,
        group: str,
        subscription: SubscriptionState,
        options: ConsumerOptions,
        *,
        assignor: Assignor,
        wake: Callable[[], None],
    ) -> None:
        self._ctx, self.group_id, self._sub = ctx, group, subscription
        self._parent_first, self._exclusive = options.parent_first, options.exclusive_prefix
        self._auto_commit, self._interval = options.auto_commit, options.auto_commit_interval
        self._next_auto_commit = time.monotonic() + self._interval
        self._committed: dict[TableBucket, OffsetAndMetadata] = {}
        """Offsets known stored: a commit that would not change them writes nothing (C3)."""
        self._seals = SealCommits(ctx, group, subscription)
        self._wake = wake
        self._work = threading.Event()
        self._assignor, self._session_timeout = assignor, options.session_timeout
        self._member: GroupMember | None = None
        """The membership, with a ZooKeeper session of its own, from the first poll to leaving."""
        self._unlisten_member: Callable[[], None] | None = None
        self.generation: int | None = None
        self._owned: dict[TableBucket, int] = {}
        """Claimed buckets and the owner znode version this member wrote."""
        self._pending: set[TableBucket] = set()
        """Assigned, waiting for their last owner to release them."""
        self._held: Watch | None = None
        """While waiting for buckets other members still own: a watch on the group's marker."""
        self._newly: set[TableBucket] = set()
        self._rebalancing = False
        self._joined = -1
        self._suspended: set[str] = set()
        """The sessions (member, connection) whose connection is suspended now."""
        self._lost = False
        self._session = SessionCheck(options.session_timeout, group)
        self._polls = PollTimer(options.max_poll_interval, self._left_idle)
        self._unlisten = ctx.store.add_state_listener(
            lambda state: self._on_state("connection", state)
        )

    @property
    def member_id(self) -> str | None:
        return None if self._member is None else self._member.member_id

    def _signal(self) -> None:
        self._work.set()
        self._wake()

    def _on_state(self, session: str, state: str) -> None:
        if state == "SUSPENDED":  # C16: no records, no commits until it reconnects
            self._suspended.add(session)
        else:
            self._suspended.discard(session)
            if state == "LOST" and session == "member":
                self._lost = True  # the member znode and the claims went with the session
        self._signal()

    def _left_idle(self) -> None:
        """On the poll timer's thread, ``max_poll_interval`` after the last poll: leave the
        group as Kafka does (its buckets move to members that poll); the next poll rejoins."""
        member = self._member
        if member is None or member.member_id is None:
            return
        log.warning(
            "consumer %s of group %s did not poll for %gs (max_poll_interval): leaving the group; "
            "its buckets go to other members",
            member.member_id,
            self.group_id,
            self._polls.interval,
        )
        self._lost = True
        member.leave()
        self._signal()

    @property
    def has_work(self) -> bool:
        """A change ``poll`` must act on (a new assignment, a released bucket, a session change)."""
        return self._work.is_set()

    @property
    def suspended(self) -> bool:  # (or its membership could not be confirmed after a gap)
        return bool(self._suspended) or self._session.unconfirmed

    def polling(self) -> PollTimer:
        """A context manager around ``poll``: time spent inside it counts as polling."""
        return self._polls

    # -- membership ---------------------------------------------------------------------------

    def subscription_changed(self, *, in_poll: bool = False) -> None:
        """After a subscribe: the next poll joins or publishes the new tables."""
        self._work.set()

    def poll(self) -> None:
        """Join or rejoin, follow the published assignment, then auto-commit when due (C8)."""
        self._work.clear()
        if not self._suspended and (self._lost or self._session.gone(self._member, self._owned)):
            self._on_lost()  # (C16: a session that ended unnoticed is found before any hand-out)
        if self._sub.mode == SUBSCRIBED and not self._suspended:
            if self._member is None:
                self._join()
            elif self._member.member_id is None:
                self._member.join(self._sub.tables)
                self._joined = self._sub.changes
            elif self._joined != self._sub.changes:
                self._member.update(self._sub.tables)
                self._joined = self._sub.changes
            self._follow()
        self._commit_seals()
        self.maybe_auto_commit()

    def _join(self) -> None:
        """Open the member's own session (timeout ``session_timeout``) and join through it."""
        store = self._ctx.store.sibling(self._session_timeout)
        store.open()
        member = GroupMember(
            self._ctx,
            store,
            self.group_id,
            self._assignor,
            self._signal,
            parent_first=self._parent_first,
            exclusive_prefix=self._exclusive,
        )
        self._unlisten_member = store.add_state_listener(
            lambda state: self._on_state("member", state)
        )
        self._member = member
        try:
            member.join(self._sub.tables)
        except BaseException:
            self._close_member()
            raise
        self._joined = self._sub.changes
        self._polls.start()

    def _follow(self) -> None:
        if self._member is None:
            raise IllegalStateError("a group consumer follows its assignment only as a member")
        record = self._member.assignment
        me = self._member.member_id
        if record is not None and record.generation != self.generation and me in record.buckets:
            # (a generation computed before this member joined does not name it: not its own)
            mine = {TableBucket(t, b) for t, bs in record.buckets.get(me, {}).items() for b in bs}
            self._revoke(set(self._owned) - mine)
            self._pending = mine - set(self._owned)
            self.generation = record.generation
            self._rebalancing, self._newly = True, set()
        if self._pending and self._member is not None:
            wanted = {
                tb: self._sub.known[tb.table] for tb in self._pending if tb.table in self._sub.known
            }
            held: dict[TableBucket, str] = {}
            got = self._member.claim(wanted, self.generation or 0, held)
            self._owned.update(got)
            self._pending -= set(got)
            self._newly |= set(got)
            self._sub.set_assignment(list(self._owned))
        self._watch_releases(bool(self._pending))
        if self._rebalancing and not self._pending:
            self._rebalancing = False
            # at the end of every rebalance, possibly empty (C15)
            if self._sub.listener is not None:
                self._sub.listener.on_buckets_assigned(set(self._newly))

    def _watch_releases(self, waiting: bool) -> None:
        """While ``waiting`` for buckets others still own, wake poll when one may be released:
        one watch on the group's change marker (every release sets it), not one per bucket. Its
        first call, at once, covers a release between the claim's read and the watch."""
        if waiting and self._held is None:
            marker = self._ctx.paths.group_changes(self.group_id)
            self._held = self._ctx.store.watch(marker, lambda data, stat: self._signal())
        elif not waiting and self._held is not None:
            self._held.remove()
            self._held = None

    def _revoke(self, buckets: set[TableBucket], *, lost: bool = False) -> None:
        """Hand back ``buckets``: commit their positions with auto-commit, tell the listener (a
        commit it makes there is accepted, C10), then release them for their next owner."""
        if not buckets:
            return
        if self._auto_commit and not lost and not self._suspended:
            lost = not self._commit_positions(buckets)
        if self._sub.listener is not None:
            self._sub.listener.on_buckets_revoked(set(buckets))
        owned = {self._owner_path(tb): self._owned.pop(tb) for tb in buckets if tb in self._owned}
        if not lost and self._member is not None:
            self._member.release(owned)
        for tb in buckets:
            self._committed.pop(tb, None)
        self._sub.set_assignment(list(self._owned))

    def _on_lost(self) -> None:
        """C16: the session ended (the member znode and its claims went with it), the member
        left for not polling, or a commit found it fenced: treat the whole assignment as revoked
        and rejoin as a new member at this poll."""
        self._lost = False
        self._revoke(set(self._owned), lost=True)
        self._pending.clear()
        if self._member is not None:
            self._member.leave()  # its znode, if still there, goes: never a member twice
        self.generation = None

    def unsubscribe(self) -> None:
        """Before the subscription is cleared: hand back the buckets, leave the group."""
        try:
            self._revoke(set(self._owned))
        finally:
            self._leave()

    def _leave(self) -> None:
        if self._held is not None:
            self._held.remove()
            self._held = None
        self._pending.clear()
        self.generation = None
        self._close_member()

    def _close_member(self) -> None:
        """Leave (the member znode is deleted at once) and end the member's session."""
        self._polls.stop()
        member, self._member = self._member, None
        unlisten, self._unlisten_member = self._unlisten_member, None
        if unlisten is not None:
            with contextlib.suppress(Exception):
                unlisten()
        if member is not None:
            try:
                member.leave()
            finally:
                member.store.close()

    def _owner_path(self, tb: TableBucket) -> str:
        return self._ctx.paths.owner(self.group_id, self._sub.known[tb.table].table_id, tb.bucket)

    # -- offsets ------------------------------------------------------------------------------

    def require_group(self) -> str:
        return self.group_id

    def starting_offsets(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        """Committed offsets to start ``buckets`` from (buckets without one are left out)."""
        return self.fetch_committed(buckets)

    def from_beginning(self, buckets: list[TableBucket]) -> set[TableBucket]:
        """Of ``buckets`` (made by rescales, without committed offsets), those read from 0."""
        return self._seals.from_beginning(buckets)

    def reset_to_seal(self, tb: TableBucket, seal: int, *, consumed: bool) -> None:
        """The reset policy put this member at ``tb``'s seal: commit it (``seals``, K5 K6)."""
        if self._sub.mode == SUBSCRIBED:  # (a manual assignment: the group's members drain it)
            self._seals.add(tb, seal, consumed)
            self._commit_seals()

    def _commit_seals(self) -> None:
        if not (self._suspended or self._lost) and not self._seals.commit(self.commit, self._owned):
            self._lost = True  # fenced: it rejoins at its next poll

    def fetch_committed(self, buckets: Iterable[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        """The group's committed offsets of ``buckets``, read now."""
        buckets = list(buckets)
        tables = {tb.table: self._sub.known[tb.table] for tb in buckets}
        found = stored.fetch(self._ctx, self.group_id, tables, buckets)
        for tb, record in found.items():
            self._committed[tb] = OffsetAndMetadata(record.offset, record.metadata)
        return found

    def commit(self, offsets: Mapping[TableBucket, OffsetAndMetadata], **flags: bool) -> None:
        """Store ``offsets`` (checked already); those known stored are not written (C3). A
        member's commit is fenced: it must be live and own every bucket (C11). Offsets of a
        dropped table's buckets raise ``TableNotFoundError``, or are left out with the flag
        ``skip_dropped`` (C17); ``reset``: seals a reset put the member at (``seals``)."""
        changed = {tb: o for tb, o in offsets.items() if self._committed.get(tb) != o}  # {} too
        if not changed:
            return
        fence: list[Check] = []
        owners = {self._owner_path(tb): tb for tb in changed}
        if self._sub.mode == SUBSCRIBED:
            if self._suspended:
                raise CommitFailedError(
                    "the connection to ZooKeeper is suspended: nothing committed"
                )
            not_owned = sorted(tb for tb in changed if tb not in self._owned)
            if self._member is None or not_owned:
                raise CommitFailedError(
                    f"commit refused: {not_owned[0] if not_owned else 'no bucket'} is not "
                    f"owned by this member of group {self.group_id}; nothing was written"
                )
            fence = self._member.fence({path: self._owned[tb] for path, tb in owners.items()})
        tables = {tb.table: self._sub.known[tb.table] for tb in changed}
        try:  # a manual assignment commits only into an empty group (docs/consumers.md)
            stored.commit(
                self._ctx,
                self.group_id,
                changed,
                tables,
                fence=fence,
                outside=self._sub.mode != SUBSCRIBED,
                **flags,
            )
        except TxnConflict as exc:
            if exc.op in fence:
                lost = owners.get(exc.op.path, "its buckets")
                raise CommitFailedError(
                    f"commit refused: this member no longer owns {lost} or is no longer "
                    f"in group {self.group_id}; nothing was written"
                ) from None
            raise
        # (a dropped table's skipped offsets too: never written later)
        self._committed.update(changed)

    def maybe_auto_commit(self) -> None:
        if (
            self._auto_commit
            and time.monotonic() >= self._next_auto_commit
            and not self._suspended
            and not self._lost
        ):
            self._commit_positions()
            self._next_auto_commit = time.monotonic() + self._interval

    def _commit_positions(self, only: set[TableBucket] | None = None) -> bool:
        """Auto-commit the positions (of ``only``). False when the commit was refused because
        this member left the group or lost the buckets (C11): it rejoins at its next poll, and
        user code never sees the error."""
        try:
            self.commit(
                {
                    tb: OffsetAndMetadata(p)
                    for tb, p in self._sub.positions().items()
                    if only is None or tb in only
                },
                skip_dropped=True,
            )
            return True
        except CommitFailedError as exc:
            log.warning("auto-commit of group %s refused, rejoining: %s", self.group_id, exc)
            self._lost = True
            return False
        except GroupNotEmptyError as exc:  # a manual assignment's: the group's members own them
            log.warning("auto-commit into group %s skipped: %s", self.group_id, exc)
            return True

    def close(self) -> None:
        """Commit the positions with auto-commit (C8), hand back the buckets, leave."""
        try:
            if self._auto_commit and not self._suspended and not self._lost:
                self._commit_positions()
            self._revoke(set(self._owned), lost=self._lost)
        finally:
            self._unlisten()
            self._leave()
