"""A consumer group as ZooKeeper holds it now (DESIGN §6.6): its live members, the published
assignment, who owns each bucket and the committed offsets, read in two pipelined round trips;
and rows of buckets with their committed offset and log bounds."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import LeasekitError
from ..log.segments import LogSegment, list_segments
from ..structs import MemberInfo, TableBucket
from ..tables.info import TableInfo
from ..validate import check_table_name
from ..zk import GetChildren, GetData, Node, ReadResult
from ..zk.formats import AssignmentRecord, BucketState, MemberRecord, OffsetRecord, TableRecord
from ..zk.paths import Paths
from . import offsets as stored
from .group import member_sequence
from .owners import owner_of

if TYPE_CHECKING:
    from ..context import Context

__all__ = [
    "GroupView",
    "Row",
    "read_group",
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


class Row(NamedTuple):
    """A bucket of a group's table: its committed record (None: never committed) and its log
    bounds [begin, end)."""

    tb: TableBucket
    table: TableInfo
    record: OffsetRecord | None
    begin: int
    end: int


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
        """Buckets of the subscribed tables that no live member owns."""
        return frozenset(
            tb
            for name in self.subscribed()
            if name in self.tables
            for tb in self.tables[name].buckets
            if tb not in self.owners
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
    """The first round trip of ``read_group``: the names of the group's znodes, and the
    assignment."""

    members: list[str]
    owners: list[str]
    offsets: list[str]
    assignment: AssignmentRecord | None


def _list_group(ctx: Context, group_id: str, offsets: bool) -> _Listing:
    paths = ctx.paths
    assignment_path = paths.group_assignment(group_id)
    listed, owned, node, *committed = _values(
        ctx.store.read_many(
            [
                GetChildren(paths.group_members(group_id)),
                GetChildren(paths.group_owners(group_id)),
                GetData(assignment_path),
                *([GetChildren(paths.group_offsets(group_id))] if offsets else []),
            ]
        )
    )
    offset_names = [n for n in (committed[0] if committed else None) or [] if not n.startswith(".")]
    assignment = None if node is None else AssignmentRecord.decode(node, assignment_path)
    return _Listing(listed or [], owned or [], offset_names, assignment)


def read_group(ctx: Context, group_id: str, *, offsets: bool = True) -> GroupView:
    """The group now, in two pipelined round trips: the lists of members, owners and offsets
    with the assignment, then every znode listed, the tables the assignment names and the
    members listed again, last, so that an owner counts as live only if its member outlived
    the reading of its owner znode. A third reads tables the assignment does not name, or
    members that joined between the two (both rare)."""
    paths, store = ctx.paths, ctx.store
    owners_path, offsets_path = paths.group_owners(group_id), paths.group_offsets(group_id)
    listing = _list_group(ctx, group_id, offsets)
    assignment = listing.assignment
    guessed = sorted(
        _named(t for ts in (assignment.buckets.values() if assignment else ()) for t in ts)
    )
    reads = [
        *(paths.member(group_id, n) for n in listing.members),
        *(f"{owners_path}/{n}" for n in listing.owners),
        *(f"{offsets_path}/{n}" for n in listing.offsets),
        *(paths.table(t) for t in guessed),
    ]
    *nodes, live = _values(
        store.read_many([*(GetData(p) for p in reads), GetChildren(paths.group_members(group_id))])
    )
    got: dict[str, Node | None] = dict(zip(reads, nodes))
    joined = [paths.member(group_id, n) for n in live or [] if n not in listing.members]
    got.update(zip(joined, store.get_many(joined)))  # joined between the two reads: rare
    members = _members(ctx, group_id, live or [], got)
    records = _offset_records(offsets_path, listing.offsets, got)
    wanted = _named(
        [*(t for m in members.values() for t in m.tables), *(r.table for r in records.values())]
    )
    missing = sorted(wanted - set(guessed))
    got.update(
        zip((paths.table(t) for t in missing), store.get_many([paths.table(t) for t in missing]))
    )
    tables = _tables(ctx, {t: got.get(paths.table(t)) for t in [*guessed, *missing]})
    owners = _owners(owners_path, listing.owners, got, members, tables)
    return GroupView(members, assignment, owners, records, tables)


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
            and key[1] < table.num_buckets
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
            out[name] = TableInfo(
                ctx, name, TableRecord.decode(node.data, ctx.paths.table(name)), node.stat.ctime_ms
            )
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


def bucket_rows(
    ctx: Context, view: GroupView, keys: list[tuple[TableInfo, int]], nodes: list[Node | None]
) -> list[Row]:
    """Each (table, bucket) of ``keys`` with the group's committed record and its log bounds
    from its bucket znode in ``nodes``."""
    out = []
    for (table, b), node in zip(keys, nodes):
        state = (
            None if node is None else BucketState.decode(node, ctx.paths.bucket(table.table_id, b))
        )
        out.append(
            Row(
                TableBucket(table.name, b),
                table,
                view.offsets.get((table.table_id, b)),
                state.begin if state else 0,
                state.end if state else 0,
            )
        )
    return out


def bucket_rows_now(
    ctx: Context, view: GroupView, keys: list[tuple[TableInfo, int]]
) -> tuple[int, list[Row]]:
    """The rows of ``keys`` and the ZooKeeper time read just before them, in one round trip."""
    now, nodes = ctx.read_with_clock([ctx.paths.bucket(t.table_id, b) for t, b in keys])
    return ctx.clock(now), bucket_rows(ctx, view, keys, nodes)


def every_bucket(tables: Iterable[TableInfo]) -> list[tuple[TableInfo, int]]:
    return [(t, b) for t in tables for b in range(t.num_buckets)]


def segments_of(rows: list[Row]) -> dict[TableBucket, list[LogSegment]]:
    """The log segments of each row's bucket, listed per table in one pipelined read."""
    by_table: dict[str, list[Row]] = {}
    for r in rows:
        by_table.setdefault(r.tb.table, []).append(r)
    out: dict[TableBucket, list[LogSegment]] = {}
    for rs in by_table.values():
        listed = list_segments(rs[0].table, [r.tb.bucket for r in rs])
        out.update((r.tb, listed[r.tb.bucket]) for r in rs)
    return out
