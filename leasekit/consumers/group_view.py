"""A consumer group as ZooKeeper holds it now (DESIGN §6.6): its live members, the published
assignment, who owns each bucket and the committed offsets, read in two pipelined round trips
for one group or for many (rows of its buckets: ``group_rows``)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import LeasekitError
from ..structs import MemberInfo, TableBucket
from ..tables.info import TableInfo
from ..validate import check_table_name
from ..zk import GetChildren, GetData, Node, ReadResult
from ..zk.formats import AssignmentRecord, MemberRecord, OffsetRecord
from ..zk.paths import Paths
from . import offsets as stored
from .group import member_sequence
from .group_rows import Row, bucket_rows, bucket_rows_now, every_bucket, segments_of
from .owners import owner_of

if TYPE_CHECKING:
    from ..context import Context

__all__ = [
    "GroupView",
    "Row",
    "read_group",
    "read_groups",
    "live_members",
    "members_of",
    "bucket_rows",
    "bucket_rows_now",
    "every_bucket",
    "segments_of",
]


def live_members(ctx: Context, group_id: str) -> list[str]:
    """Ids of the group's live members (ephemeral znodes)."""
    return sorted(ctx.store.children(ctx.paths.group_members(group_id)) or [])


class GroupView(NamedTuple):
    """A group as ZooKeeper holds it now: live members, the published assignment, the bucket
    owners and the committed offsets."""

    members: dict[str, MemberRecord]
    """Live members by id, oldest first (the first leads, C14)."""
    assignment: AssignmentRecord | None
    owners: dict[TableBucket, str]
    """Buckets owned now: the owner znode names a live member."""
    offsets: dict[tuple[str, int], OffsetRecord]
    """Committed offsets by (table id, bucket)."""
    tables: dict[str, TableInfo]
    """The tables members subscribe to, the assignment names or offsets name, that exist."""

    @property
    def leader(self) -> str | None:
        return next(iter(self.members), None)

    @property
    def generation(self) -> int | None:
        return None if self.assignment is None else self.assignment.generation

    def assigned(self, member_id: str) -> frozenset[TableBucket]:
        mine = {} if self.assignment is None else self.assignment.buckets.get(member_id, {})
        return frozenset(TableBucket(t, b) for t, bs in mine.items() for b in bs)

    def subscribed(self) -> set[str]:
        return {name for record in self.members.values() for name in record.tables}

    def unowned(self) -> frozenset[TableBucket]:
        """Buckets of the subscribed tables that no live member owns: active ones, and sealed
        ones the group has not committed to their seals (K6)."""
        subscribed = [
            self.tables[name] for name in sorted(self.subscribed()) if name in self.tables
        ]
        return frozenset(
            tb
            for table, b in every_bucket(subscribed, self.offsets)
            if (tb := TableBucket(table.name, b)) not in self.owners
        )

    def described(self) -> list[TableInfo]:
        """Tables with offsets of their own (a table recreated since has another id), that
        members subscribe to or with owned buckets, by name."""
        ids = {tid for tid, _ in self.offsets}
        names = self.subscribed() | {tb.table for tb in self.owners}
        return sorted(
            (t for t in self.tables.values() if t.table_id in ids or t.name in names),
            key=lambda t: t.name,
        )


def _values(results: list[ReadResult]) -> list[Any]:
    for result in results:
        if result.error is not None:
            raise result.error
    return [r.value for r in results]


def _named(names: Iterable[str]) -> set[str]:
    """The valid table names among ``names`` (stored records are not trusted to build paths)."""
    out = set()
    for name in names:
        try:
            out.add(check_table_name(name))
        except LeasekitError:
            continue
    return out


class _Listing(NamedTuple):
    """The first round trip of ``read_groups``: the names of a group's znodes, and the
    assignment."""

    members: list[str]
    owners: list[str]
    offsets: list[str]
    assignment: AssignmentRecord | None


def _list_groups(ctx: Context, group_ids: list[str], offsets: bool) -> dict[str, _Listing]:
    paths = ctx.paths
    reads: list[GetChildren | GetData] = []
    for group_id in group_ids:
        reads += [
            GetChildren(paths.group_members(group_id)),
            GetChildren(paths.group_owners(group_id)),
            GetData(paths.group_assignment(group_id)),
            *([GetChildren(paths.group_offsets(group_id))] if offsets else []),
        ]
    values = _values(ctx.store.read_many(reads))
    per = 4 if offsets else 3
    out = {}
    for i, group_id in enumerate(group_ids):
        listed, owned, node, *committed = values[i * per : (i + 1) * per]
        names = [n for n in (committed[0] if committed else None) or [] if not n.startswith(".")]
        path = paths.group_assignment(group_id)
        assignment = None if node is None else AssignmentRecord.decode(node, path)
        out[group_id] = _Listing(listed or [], owned or [], names, assignment)
    return out


def read_group(ctx: Context, group_id: str, *, offsets: bool = True) -> GroupView:
    """The group now, in two pipelined round trips (``read_groups`` of one group)."""
    return read_groups(ctx, [group_id], offsets=offsets)[group_id]


def _assigned_tables(listing: _Listing) -> set[str]:
    assignment = listing.assignment
    return _named(t for ts in (assignment.buckets.values() if assignment else ()) for t in ts)


def _group_reads(ctx: Context, group_id: str, listing: _Listing) -> list[str]:
    """The znodes of a group that its listing names: members, owners and offsets."""
    owners_path, offsets_path = ctx.paths.group_owners(group_id), ctx.paths.group_offsets(group_id)
    return [
        *(ctx.paths.member(group_id, n) for n in listing.members),
        *(f"{owners_path}/{n}" for n in listing.owners),
        *(f"{offsets_path}/{n}" for n in listing.offsets),
    ]


_Parts = dict[str, tuple[dict[str, MemberRecord], dict[tuple[str, int], OffsetRecord]]]


def _decoded(
    ctx: Context,
    listings: dict[str, _Listing],
    live: dict[str, list[str]],
    got: dict[str, Node | None],
    skipped: list[str] | None,
) -> _Parts:
    """Each group's live members and committed offsets, decoded from the znodes read; a group
    that holds garbage raises, or with ``skipped`` is left out and said there."""
    parts: _Parts = {}
    for group_id, listing in listings.items():
        try:
            members = _members(ctx, group_id, live[group_id], got)
            records = _offset_records(ctx.paths.group_offsets(group_id), listing.offsets, got)
        except LeasekitError as exc:
            if skipped is None:
                raise
            skipped.append(f"consumer group {group_id}: {exc}")
            continue
        parts[group_id] = members, records
    return parts


def read_groups(
    ctx: Context,
    group_ids: Iterable[str],
    *,
    offsets: bool = True,
    skip_empty: bool = False,
    skipped: list[str] | None = None,
) -> dict[str, GroupView]:
    """Groups now, in two pipelined round trips for all: the lists of members, owners and
    offsets with the assignments, then every znode listed, the tables the assignments name and
    the members listed again, last, so that an owner counts as live only if its member outlived
    the reading of its owner znode. A third reads tables the assignments do not name, or
    members that joined between the two (both rare). ``skip_empty`` leaves out groups with
    neither members nor offsets; with ``skipped``, a group holding garbage is left out and
    the error noted there, instead of raised."""
    paths, store = ctx.paths, ctx.store
    listings = _list_groups(ctx, list(group_ids), offsets)
    if skip_empty:
        listings = {g: x for g, x in listings.items() if x.members or x.offsets}
    assigned = {g: _assigned_tables(x) for g, x in listings.items()}
    guessed = sorted(set().union(*assigned.values()))
    reads = [p for g, x in listings.items() for p in _group_reads(ctx, g, x)]
    reads += [paths.table(t) for t in guessed]
    nodes = _values(
        store.read_many(
            [*(GetData(p) for p in reads), *(GetChildren(paths.group_members(g)) for g in listings)]
        )
    )
    got: dict[str, Node | None] = dict(zip(reads, nodes))
    live = {g: names or [] for g, names in zip(listings, nodes[len(reads) :])}
    joined = [
        paths.member(g, n) for g, x in listings.items() for n in live[g] if n not in x.members
    ]
    got.update(zip(joined, store.get_many(joined)))  # joined between the two reads: rare
    parts = _decoded(ctx, listings, live, got, skipped)
    wanted = {
        g: _named(
            [*(t for m in members.values() for t in m.tables), *(r.table for r in recs.values())]
        )
        for g, (members, recs) in parts.items()
    }
    missing = sorted(set().union(*wanted.values()) - set(guessed))
    got.update(
        zip((paths.table(t) for t in missing), store.get_many([paths.table(t) for t in missing]))
    )
    tables = _tables(ctx, {t: got.get(paths.table(t)) for t in [*guessed, *missing]})
    out = {}
    for group_id, (members, records) in parts.items():
        mine = {t: tables[t] for t in sorted(assigned[group_id] | wanted[group_id]) if t in tables}
        listing = listings[group_id]
        try:
            owners = _owners(paths.group_owners(group_id), listing.owners, got, members, mine)
        except LeasekitError as exc:
            if skipped is None:
                raise
            skipped.append(f"consumer group {group_id}: {exc}")
            continue
        out[group_id] = GroupView(members, listing.assignment, owners, records, mine)
    return out


def _members(
    ctx: Context, group_id: str, live: list[str], got: dict[str, Node | None]
) -> dict[str, MemberRecord]:
    """The live members whose znodes were read, oldest first."""
    members: dict[str, MemberRecord] = {}
    for name in sorted(live, key=_join_order):
        path = ctx.paths.member(group_id, name)
        node = got.get(path)
        if node is not None:
            members[name] = MemberRecord.decode(node, path)
    return members


def _offset_records(
    offsets_path: str, names: list[str], got: dict[str, Node | None]
) -> dict[tuple[str, int], OffsetRecord]:
    """The committed offsets read, by (table id, bucket)."""
    records: dict[tuple[str, int], OffsetRecord] = {}
    for name in names:
        path = f"{offsets_path}/{name}"
        key, node = _key(name), got.get(path)
        if key is not None and node is not None:
            records[key] = stored.decode(node, path)  # (numbers out of range: corrupt)
    return records


def _owners(
    owners_path: str,
    names: list[str],
    got: dict[str, Node | None],
    members: dict[str, MemberRecord],
    tables: dict[str, TableInfo],
) -> dict[TableBucket, str]:
    """The buckets whose owner znode names a live member, with that member."""
    by_id = {t.table_id: t for t in tables.values()}
    owners: dict[TableBucket, str] = {}
    for name in names:
        path = f"{owners_path}/{name}"
        holder, key = owner_of(got.get(path), path), _key(name)
        table = None if key is None else by_id.get(key[0])
        if (
            holder in members
            and table is not None
            and key is not None
            and key[1] < table.layout.count
        ):
            owners[TableBucket(table.name, key[1])] = holder
    return owners


def _join_order(name: str) -> tuple[int, str]:
    try:
        return member_sequence(name), name
    except (ValueError, IndexError):
        return sys.maxsize, name  # not a member znode of leasekit's: last


def _key(name: str) -> tuple[str, int] | None:
    """(table id, bucket) of an owner or offset znode's name; None for a stray znode."""
    try:
        return Paths.parse_offset(name)
    except ValueError:
        return None


def _tables(ctx: Context, nodes: dict[str, Node | None]) -> dict[str, TableInfo]:
    """The tables whose znodes were read, by name (missing or unreadable ones left out)."""
    out = {}
    for name, node in nodes.items():
        if node is None:
            continue  # dropped meanwhile
        try:
            out[name] = TableInfo.from_node(ctx, name, node)
        except LeasekitError:
            continue  # unreadable: not described
    return out


def members_of(view: GroupView) -> list[MemberInfo]:
    """The live members of a group read, oldest first."""
    owned: dict[str, set[TableBucket]] = {}
    for tb, member in view.owners.items():
        owned.setdefault(member, set()).add(tb)
    return [
        MemberInfo(
            m,
            record.host,
            frozenset(owned.get(m, ())),
            view.assigned(m),
            view.generation,
            m == view.leader,
        )
        for m, record in view.members.items()
    ]
