"""The group protocol in ZooKeeper (C9–C16).

- **Members** are sequential ephemeral znodes (``members/<host>-<pid>-<id>-<seq>``) carrying
  host and subscription; liveness is the ZooKeeper session. Joining also bumps the data
  version of ``members``, which commits from outside the group check (docs/consumers.md). An
  exclusive member (the data source's stream, ``spark-<stream id>-<seq>``) keeps every other
  out (``exclusive``).
- **The leader** is the member with the lowest sequence number; each other member watches only
  the member just before it, so a leave wakes one member, not all (no herd effect). The leader
  watches the members (debounced: joins close together make one generation), computes each
  assignment with the group's assignor from the membership it read, and publishes it with the
  next generation in one write that checks its own member znode (C14).
- **Rescales** (K5): the leader assigns a table's active buckets and its sealed ones until the
  group has committed them to their seals, a new bucket once its parents are drained; it
  assigns again on a rescale or on a commit that may drain a parent (``rescales``).
- **Owners**: a member consumes a bucket only after claiming it (writing its id into the
  bucket's owner znode at the version it read, only when the owner znode is empty or names a
  member that is gone), and releases it after ``on_buckets_revoked``, so the next owner starts
  from what the last one committed (C10). A commit checks the member's znode and the owner
  znode versions it wrote inside its transaction (C11). The owner znode writes are in
  ``owners``.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import CommitFailedError, LeasekitError
from ..structs import TableBucket
from ..tables.catalog import load_tables
from ..zk import Check, Create, Delete, Node, SetData, TxnConflict
from ..zk.formats import AssignmentRecord, MemberRecord
from . import exclusive, owners
from .rescales import RescaleWatch, group_buckets

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from ..zk import Watch, ZkStore
    from .assignors import Assignor

__all__ = ["GroupMember", "member_sequence"]

REBALANCE_DEBOUNCE = 0.1
"""Seconds the leader waits after a membership change for more before it assigns."""


def member_sequence(name: str) -> int:
    """The sequence number ZooKeeper appended to a member znode's name."""
    return int(name.rsplit("-", 1)[1])


class GroupMember:
    """One consumer's membership of a group: joining, leading when it is the oldest member,
    following the published assignment and owning buckets. ``store`` is the member's own
    ZooKeeper session, whose timeout is the consumer's ``session_timeout``: its member znode
    lives as long as that session. Thread-safe: watches call into it from the store's watch
    thread, the consumer from its own."""

    def __init__(
        self,
        ctx: Context,
        store: ZkStore,
        group_id: str,
        assignor: Assignor,
        wake: Callable[[], None],
        *,
        parent_first: bool = True,
        exclusive_prefix: str | None = None,
    ) -> None:
        self._ctx, self._store, self.group_id, self._assignor, self._wake = (
            ctx,
            store,
            group_id,
            assignor,
            wake,
        )
        self._parent_first = parent_first
        """As the leader: new buckets are assigned once their parents are drained (K5)."""
        self._exclusive = exclusive_prefix
        """The member id prefix of an exclusive member (``exclusive``), None for an ordinary one."""
        self._rescales = RescaleWatch(store, ctx, group_id, self._reassign)
        self._lock = threading.RLock()
        self.member_id: str | None = None
        self._watches: list[Watch] = []
        self._leading = False
        self._member_watches: dict[str, Watch] = {}
        self._assigned_from: tuple[list[str], dict[str, int]] = ([], {})
        """The members (sorted) and their znode versions the leader last assigned from: a watch
        that reports just these needs no new assignment."""
        self._assigned_tables: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        """The tables the members subscribed to at the last assignment, and those of them that
        existed."""
        self.assignment: AssignmentRecord | None = None
        """The newest assignment seen (from the watch on the assignment znode)."""

    # -- joining and leaving ------------------------------------------------------------------

    def join(self, tables: Iterable[str]) -> str:
        """Join with a new member znode; returns the member id."""
        paths, store = self._ctx.paths, self._store
        for path in (paths.group_members(self.group_id), paths.group_owners(self.group_id)):
            store.ensure_path(path)
        record = MemberRecord(self._ctx.owner, tuple(sorted(tables)))
        prefix = self._exclusive or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}-"
        me = Create(
            paths.member(self.group_id, prefix), record.encode(), ephemeral=True, sequence=True
        )
        if self._exclusive is not None:
            created = exclusive.exclusive_join(store, paths, self.group_id, prefix, me)
        else:  # the data version of members counts joins: a commit from outside the group checks it
            members = paths.group_members(self.group_id)
            try:
                created = store.commit(
                    [me, SetData(members, b""), *exclusive.ordinary_join(paths, self.group_id)]
                )[0]
            except TxnConflict as exc:
                raise exclusive.refused(self.group_id, exc, paths) or exc from None
        with self._lock:
            self.member_id = created.rsplit("/", 1)[1]
            self.assignment = None
        self._watches.append(
            store.watch(paths.group_assignment(self.group_id), self._on_assignment)
        )
        if self._follow():  # the oldest member assigns at once: a lone consumer's first poll reads
            self.rebalance()
        return self.member_id

    def update(self, tables: Iterable[str]) -> None:
        """Publish a new subscription (the leader reassigns)."""
        if self.member_id is not None:
            record = MemberRecord(self._ctx.owner, tuple(sorted(tables)))
            self._store.set(self._ctx.paths.member(self.group_id, self.member_id), record.encode())
            if self._leading:
                self.rebalance()

    def leave(self) -> None:
        """Delete the member znode (its claims die with it) and stop every watch."""
        member = self.forget()
        if member is not None:
            gone = [Delete(self._ctx.paths.member(self.group_id, member))]
            if self._exclusive is not None:
                gone.append(Delete(exclusive.exclusive_path(self._ctx.paths, self.group_id)))
            try:
                self._store.commit(gone)
            except TxnConflict:
                pass  # its session ended first: it is gone already
            except LeasekitError:
                pass  # ZooKeeper unreachable: the session's end removes it

    def forget(self) -> str | None:
        """Stop every watch and keep nothing (after a lost session the member znode is gone
        already); returns the member id it had."""
        with self._lock:
            member, self.member_id, self._leading = self.member_id, None, False
            watches, self._watches = [*self._watches, *self._member_watches.values()], []
            self._member_watches = {}
        for watch in watches:
            watch.remove()
        self._rescales.close()
        return member

    @property
    def store(self) -> ZkStore:
        """The member's own session."""
        return self._store

    @property
    def member_path(self) -> str | None:
        member = self.member_id
        return None if member is None else self._ctx.paths.member(self.group_id, member)

    # -- leadership ---------------------------------------------------------------------------

    def _follow(self) -> bool:
        """Lead if this is the oldest member; otherwise watch the member just before it.
        Whether it became the leader now (the caller then assigns)."""
        member = self.member_id
        if member is None:
            return False
        names = self._store.children(self._ctx.paths.group_members(self.group_id)) or []
        older = sorted(
            (n for n in names if member_sequence(n) < member_sequence(member)), key=member_sequence
        )
        if not older:
            with self._lock:
                if self._leading or self.member_id != member:
                    return False
                self._leading = True
            self._watches.append(
                self._store.watch_children(
                    self._ctx.paths.group_members(self.group_id),
                    self._on_members,
                    debounce=REBALANCE_DEBOUNCE,
                )
            )
            self._watches.append(
                self._store.watch_children(
                    self._ctx.paths.tables, self._on_tables, debounce=REBALANCE_DEBOUNCE
                )
            )
            return True
        before = self._ctx.paths.member(self.group_id, older[-1])

        def on_before(data: bytes | None, stat: Any) -> None:
            if data is None and stat is None:
                watch.remove()
                if self._follow():
                    self._reassign()

        watch = self._store.watch(before, on_before)
        self._watches.append(watch)
        return False

    def _on_members(self, names: list[str] | None) -> None:
        if names is not None and names != self._assigned_from[0]:  # not the view just assigned
            self._reassign()

    def _on_tables(self, names: list[str] | None) -> None:
        """A subscribed table created or dropped since the last assignment reassigns (a dropped
        table's buckets leave it, C17)."""
        subscribed, assigned = self._assigned_tables
        if names is not None and subscribed.intersection(names) != assigned:
            self._reassign()

    def _on_member(self, name: str) -> Callable[[bytes | None, Any], None]:
        def changed(data: bytes | None, stat: Any) -> None:
            if stat is not None and stat.version != self._assigned_from[1].get(name):
                self._reassign()  # its subscription changed since the last assignment

        return changed

    def _reassign(self) -> None:
        """On the watch thread, after a change of membership or of a member's subscription."""
        if not self._leading:
            return
        try:
            self.rebalance()
        except LeasekitError:
            pass  # the next membership change, or the next leader, tries again

    def rebalance(self) -> AssignmentRecord | None:
        """As the leader: compute the assignment from the membership read now and publish it
        with the next generation, if it differs (C9, C14). None when nothing changed or this
        member is not the leader."""
        ctx, group = self._ctx, self.group_id
        me = self.member_path
        if me is None or not self._leading:
            return None
        paths = ctx.paths
        names = sorted(self._store.children(paths.group_members(group)) or [], key=member_sequence)
        self._watch_members(names)
        current, members = self._read_members(names)
        subscribed = set().union(*members.values()) if members else set()
        loaded = load_tables(ctx, sorted(subscribed))  # (dropped ones get no buckets)
        # K5: sealed buckets until drained, new ones once their parents are drained
        tables, awaiting = group_buckets(ctx, group, loaded, parent_first=self._parent_first)
        self._rescales.follow(loaded, awaiting)
        self._assigned_tables = (frozenset(subscribed), frozenset(tables))
        owned = (
            {}
            if current is None
            else {
                m: {TableBucket(t, b) for t, bs in ts.items() for b in bs}
                for m, ts in current.buckets.items()
            }
        )
        result = self._assignor.assign(members, tables, owned)
        buckets = {m: _by_table(bs) for m, bs in sorted(result.items())}
        if current is not None and current.buckets == buckets:
            return None
        record = AssignmentRecord(
            0 if current is None else current.generation + 1, me.rsplit("/", 1)[1], buckets
        )
        write = (
            Create(paths.group_assignment(group), record.encode())
            if current is None
            else SetData(paths.group_assignment(group), record.encode(), current.stat.version)
        )
        try:
            self._store.commit([Check(me, -1), write])  # only a live leader publishes (C14)
        except TxnConflict:
            return None  # a newer view or another leader won; its watch brings the result
        self._seen(record)
        return record

    def _read_members(
        self, names: list[str]
    ) -> tuple[AssignmentRecord | None, dict[str, frozenset[str]]]:
        """The published assignment and the subscription of each of the members ``names`` that
        is still there, read now (noted as the view the leader assigns from)."""
        paths, group = self._ctx.paths, self.group_id
        nodes = self._store.get_many(
            [paths.group_assignment(group), *(paths.member(group, n) for n in names)]
        )
        current = (
            None
            if nodes[0] is None
            else AssignmentRecord.decode(nodes[0], paths.group_assignment(group))
        )
        members: dict[str, frozenset[str]] = {}
        for name, node in zip(names, nodes[1:]):
            if node is not None:
                members[name] = frozenset(
                    MemberRecord.decode(node, paths.member(group, name)).tables
                )
        self._assigned_from = (
            names,
            {n: node.stat.version for n, node in zip(names, nodes[1:]) if node},
        )
        return current, members

    def _watch_members(self, names: list[str]) -> None:
        """As the leader, follow each member's subscription (a change reassigns)."""
        with self._lock:
            gone = [n for n in self._member_watches if n not in names]
            new = [n for n in names if n not in self._member_watches and n != self.member_id]
            for name in gone:
                self._member_watches.pop(name).remove()
        for name in new:
            watch = self._store.watch(
                self._ctx.paths.member(self.group_id, name),
                self._on_member(name),
                debounce=REBALANCE_DEBOUNCE,
            )
            with self._lock:
                self._member_watches[name] = watch

    def _on_assignment(self, data: bytes | None, stat: Any) -> None:
        if data is None or stat is None:
            return
        try:
            record = AssignmentRecord.decode(
                Node(data, stat), self._ctx.paths.group_assignment(self.group_id)
            )
        except LeasekitError:
            return
        self._seen(record)

    def _seen(self, record: AssignmentRecord) -> None:
        with self._lock:
            if self.assignment is not None and record.generation <= self.assignment.generation:
                return  # never an older generation than one seen (C14)
            self.assignment = record
        self._wake()

    # -- owners -------------------------------------------------------------------------------

    def owner_path(self, table: TableInfo, bucket: int) -> str:
        return self._ctx.paths.owner(self.group_id, table.table_id, bucket)

    def claim(
        self, wanted: Mapping[TableBucket, TableInfo], generation: int, held: dict[TableBucket, str]
    ) -> dict[TableBucket, int]:
        """Claim the buckets of ``wanted`` that have no live owner; their owner znode versions.
        Buckets a live member still owns go into ``held`` (bucket -> owner znode path)."""
        me = self.member_path
        if me is None or not wanted:
            return {}
        paths = {tb: self.owner_path(table, tb.bucket) for tb, table in wanted.items()}
        members = self._ctx.paths.group_members(self.group_id)
        return owners.claim(self._store, me, members, paths, generation, held)

    def release(self, owned: Mapping[str, int]) -> None:
        """Empty the owner znodes (path -> the version this member wrote); those changed
        meanwhile are no longer this member's."""
        owners.release(self._store, owned)

    def fence(self, owned: Mapping[str, int]) -> list[Check]:
        """The checks a commit makes: this member is live and still owns each bucket (C11)."""
        me = self.member_path
        if me is None:
            raise CommitFailedError(
                f"this consumer is not a member of group {self.group_id}: rejoin by polling"
            )
        return [Check(me, -1), *(Check(path, version) for path, version in owned.items())]


def _by_table(buckets: Iterable[TableBucket]) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for tb in sorted(buckets):
        out.setdefault(tb.table, []).append(tb.bucket)
    return {t: tuple(bs) for t, bs in out.items()}
