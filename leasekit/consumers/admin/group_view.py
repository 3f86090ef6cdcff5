"""A consumer group as ZooKeeper holds it now (docs/consumers.md) and the rows of its buckets: live
members, the published assignment, who owns each bucket and the committed offsets, read in two
pipelined round trips for one group or for many; each bucket's committed record and log bounds,
read in one round trip with the ZooKeeper clock; and the time of the first record not yet
consumed, read for many buckets (of many groups) in two pipelined round trips."""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import LeasekitError
from ...log.segments import LogSegment, decode_segment, list_segments
from ...log.stamps import merged_stamps
from ...structs import MemberInfo, TableBucket
from ...tables.info import TableInfo
from ...validate import check_table_name
from ...zk import GetChildren, GetData, Node, ReadResult
from ...zk.formats import AssignmentRecord, BucketState, MemberRecord, OffsetRecord, SegmentRecord
from ...zk.paths import Paths
from .. import offsets as stored
from ..group import member_sequence
from ..lineage import sealed, undrained
from ..owners import owner_of

if TYPE_CHECKING:
    from ...context import Context

__all__ = [
    "GroupView",
    "read_group",
    "read_groups",
    "live_members",
    "members_of",
    "Row",
    "bucket_rows",
    "bucket_rows_now",
    "rows_of_states",
    "every_bucket",
    "segments_of",
    "record_times",
    "record_segments",
    "missing_files",
    "Held",
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


class Row(NamedTuple):
    """A bucket of a group's table: its committed record (None: never committed) and its log
    bounds [begin, end)."""

    tb: TableBucket
    table: TableInfo
    record: OffsetRecord | None
    begin: int
    end: int


def bucket_rows(
    ctx: Context, view: GroupView, keys: list[tuple[TableInfo, int]], nodes: list[Node | None]
) -> list[Row]:
    """Each (table, bucket) of ``keys`` with the group's committed record and its log bounds
    from its bucket znode in ``nodes``."""
    states = [
        None if node is None else BucketState.decode(node, ctx.paths.bucket(table.table_id, b))
        for (table, b), node in zip(keys, nodes)
    ]
    return rows_of_states(view, keys, states)


def rows_of_states(
    view: GroupView, keys: Iterable[tuple[TableInfo, int]], states: Iterable[BucketState | None]
) -> list[Row]:
    """Each (table, bucket) of ``keys`` with the group's committed record and its log bounds
    from its decoded bucket state (None: an empty log)."""
    return [
        Row(
            TableBucket(table.name, b),
            table,
            view.offsets.get((table.table_id, b)),
            state.begin if state else 0,
            state.end if state else 0,
        )
        for (table, b), state in zip(keys, states)
    ]


def bucket_rows_now(
    ctx: Context, view: GroupView, keys: list[tuple[TableInfo, int]]
) -> tuple[int, list[Row]]:
    """The rows of ``keys`` and the ZooKeeper time read just before them, in one round trip."""
    now, nodes = ctx.read_with_clock([ctx.paths.bucket(t.table_id, b) for t, b in keys])
    return ctx.clock(now), bucket_rows(ctx, view, keys, nodes)


def every_bucket(
    tables: Iterable[TableInfo], offsets: Mapping[tuple[str, int], OffsetRecord] | None = None
) -> list[tuple[TableInfo, int]]:
    """The active buckets of ``tables`` and, given a group's committed ``offsets`` (by
    (table id, bucket)), the sealed ones the group has not committed to their seals (K6: a
    rescale hides no lag), in bucket order."""
    out = []
    for t in tables:
        ids = t.active
        if offsets is not None and t.layout.rescaled:
            mine = {
                b: rec.offset
                for b in sealed(t.layout)
                if (rec := offsets.get((t.table_id, b))) is not None
            }
            ids = tuple(sorted([*ids, *undrained(t.layout, mine)]))
        out += [(t, b) for b in ids]
    return out


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


_Wanted = tuple[str, int, int]
"""(table id, bucket, offset): a record whose timestamp is wanted."""


def record_times(ctx: Context, rows: Iterable[Row]) -> dict[_Wanted, int]:
    """``_timestamp`` (ms) of the record at each committed offset below its log end (its
    segment's commit time; in a merged segment, read from its file), keyed (table id, bucket,
    offset); absent where no stored segment holds it. Two pipelined round trips for all rows:
    the log listings of their buckets, then only the segment znodes that hold the offsets
    (offsets below the log start count as the log start)."""
    return {key: held.stamp for key, held in record_segments(ctx, rows).items()}


class Held(NamedTuple):
    """The segment holding a record: the record's ``_timestamp`` (ms), the segment's file
    (warehouse-relative) and znode."""

    stamp: int
    file: str
    znode: str


def record_segments(ctx: Context, rows: Iterable[Row]) -> dict[_Wanted, Held]:
    """As ``record_times``, with the segment holding each record."""
    tables: dict[tuple[str, int], TableInfo] = {}
    targets: dict[_Wanted, int] = {}
    for r in rows:
        rec = r.record
        if rec is not None and rec.offset < r.end:
            tables[r.table.table_id, r.tb.bucket] = r.table
            targets[r.table.table_id, r.tb.bucket, rec.offset] = max(rec.offset, r.begin)
    buckets = list(tables)
    paths = ctx.paths
    listed = ctx.store.children_many([paths.log(t, b) for t, b in buckets])
    bases = {
        key: sorted(int(n) for n in names or () if n.isdigit())
        for key, names in zip(buckets, listed)
    }
    found: dict[_Wanted, int] = {}
    for (tid, b, offset), target in targets.items():
        base = _floor(bases[tid, b], target)
        if base is not None:
            found[tid, b, offset] = base
    wanted = sorted({(tid, b, base) for (tid, b, _), base in found.items()})
    seg_paths = [paths.segment(tid, b, base) for tid, b, base in wanted]
    segments: dict[tuple[str, int, int], tuple[SegmentRecord, Held]] = {}
    for (tid, b, base), path, node in zip(wanted, seg_paths, ctx.store.get_many(seg_paths)):
        if node is None:
            continue  # deleted by retention between listing and reading
        rec = decode_segment(tables[tid, b], node.data, path)
        segments[tid, b, base] = rec, Held(rec.last_stamp(node.stat.ctime_ms), rec.file, path)
    out: dict[_Wanted, Held] = {}
    merged: dict[_Wanted, tuple[SegmentRecord, int]] = {}
    for (tid, b, offset), base in found.items():
        if (tid, b, base) not in segments:
            continue
        rec, held = segments[tid, b, base]
        row = targets[tid, b, offset] - base
        if row < rec.rows:
            out[tid, b, offset] = held
            if rec.stamps is not None:  # a merged segment: each record has its own (R8)
                merged[tid, b, offset] = rec, row
    for key, stamp in merged_stamps(ctx.warehouse, merged).items():
        out[key] = out[key]._replace(stamp=stamp)
    return out


def missing_files(ctx: Context, segments: Mapping[_Wanted, Held]) -> dict[_Wanted, str]:
    """The records of ``segments`` (``record_segments``) whose segment file is missing while
    the metadata still lists it (a disk fault, a file deleted by hand), with the file's
    location: one batched look-up of the files, then (only when one is missing) one read of
    those segments' znodes, so a segment retention deleted meanwhile (its znode first) is not
    taken for a lost file."""
    there = {e.path for e in ctx.warehouse.stat(sorted({h.file for h in segments.values()}))}
    gone = {key: held for key, held in segments.items() if held.file not in there}
    if not gone:
        return {}
    nodes = ctx.store.get_many([held.znode for held in gone.values()])
    return {
        key: ctx.warehouse.uri(held.file)
        for (key, held), node in zip(gone.items(), nodes)
        if node is not None
    }


def _floor(bases: list[int], offset: int) -> int | None:
    """The largest of ``bases`` (sorted) at or below ``offset``."""
    i = bisect.bisect_right(bases, offset) - 1
    return bases[i] if i >= 0 else None
