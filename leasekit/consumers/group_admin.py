"""Consumer administration (DESIGN §6.6): the groups, their live members and who owns each
bucket now, offsets with lag in offsets and in time measured now, lag health, offset resets
(a dry run unless asked, C13) and deletion of a group or of some of its offsets."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from ..durations import parse_duration, to_ms
from ..errors import (
    GroupNotEmptyError,
    InvalidArgumentError,
    InvalidTypeError,
    LeasekitError,
)
from ..log.reader import find_segment
from ..log.segments import LogSegment, list_segments
from ..structs import GroupStatus, MemberInfo, TableBucket
from ..tables.catalog import load_table
from ..tables.info import TableInfo
from ..validate import check_table_name
from ..zk import Delete, GetChildren, GetData, Node, ReadResult, to_datetime
from ..zk.formats import (
    AssignmentRecord,
    BucketState,
    MemberRecord,
    OffsetRecord,
    TableRecord,
)
from ..zk.paths import Paths
from . import health
from . import offsets as stored
from .group import member_sequence, owner_of

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context

__all__ = [
    "consumer_groups",
    "describe_group",
    "group_members",
    "group_status",
    "reset_offsets",
    "delete_group",
    "delete_offsets",
    "live_members",
    "read_group",
    "describe_view",
    "members_of",
    "GroupView",
    "DESCRIBE_COLUMNS",
    "RESET_COLUMNS",
]

DESCRIBE_COLUMNS = [
    "group",
    "table",
    "bucket",
    "current_offset",
    "log_end_offset",
    "lag",
    "time_lag",
    "consumer_id",
    "host",
    "last_commit",
    "status",
]
RESET_COLUMNS = ["group", "table", "bucket", "current_offset", "new_offset"]


class _Row(NamedTuple):
    tb: TableBucket
    table: TableInfo
    record: OffsetRecord | None
    begin: int
    end: int


def consumer_groups(ctx: Context) -> list[str]:
    """Groups with stored offsets or live members, sorted."""
    names = ctx.store.children(ctx.paths.groups) or []
    listed = ctx.store.children_many(
        [*(ctx.paths.group_offsets(n) for n in names), *(ctx.paths.group_members(n) for n in names)]
    )
    return sorted(
        n for n, offsets, members in zip(names, listed, listed[len(names) :]) if offsets or members
    )


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


def read_group(ctx: Context, group_id: str, *, offsets: bool = True) -> GroupView:
    """The group now, in two pipelined round trips: the lists of members, owners and offsets
    with the assignment, then every znode listed, the tables the assignment names and the
    members listed again, last, so that an owner counts as live only if its member outlived
    the reading of its owner znode. A third reads tables the assignment does not name, or
    members that joined between the two (both rare)."""
    paths, store = ctx.paths, ctx.store
    members_path, owners_path = paths.group_members(group_id), paths.group_owners(group_id)
    offsets_path, assignment_path = paths.group_offsets(group_id), paths.group_assignment(group_id)
    listed, owned, node, *committed = _values(
        store.read_many(
            [
                GetChildren(members_path),
                GetChildren(owners_path),
                GetData(assignment_path),
                *([GetChildren(offsets_path)] if offsets else []),
            ]
        )
    )
    names, owner_names = listed or [], owned or []
    offset_names = [n for n in (committed[0] if committed else None) or [] if not n.startswith(".")]
    assignment = None if node is None else AssignmentRecord.decode(node, assignment_path)
    guessed = sorted(
        _named(t for ts in (assignment.buckets.values() if assignment else ()) for t in ts)
    )
    reads = [
        *(paths.member(group_id, n) for n in names),
        *(f"{owners_path}/{n}" for n in owner_names),
        *(f"{offsets_path}/{n}" for n in offset_names),
        *(paths.table(t) for t in guessed),
    ]
    *nodes, live = _values(
        store.read_many([*(GetData(p) for p in reads), GetChildren(members_path)])
    )
    got = dict(zip(reads, nodes))
    joined = [paths.member(group_id, n) for n in live or [] if n not in names]
    got.update(zip(joined, store.get_many(joined)))  # joined between the two reads: rare
    members: dict[str, MemberRecord] = {}
    for name in sorted(live or [], key=_join_order):
        path = paths.member(group_id, name)
        if got.get(path) is not None:
            members[name] = MemberRecord.decode(got[path], path)
    records: dict[tuple[str, int], OffsetRecord] = {}
    for name in offset_names:
        path = f"{offsets_path}/{name}"
        key = _key(name)
        if key is not None and got.get(path) is not None:
            records[key] = stored.decode(got[path], path)  # (numbers out of range: corrupt)
    wanted = _named(
        [*(t for m in members.values() for t in m.tables), *(r.table for r in records.values())]
    )
    missing = sorted(wanted - set(guessed))
    got.update(
        zip((paths.table(t) for t in missing), store.get_many([paths.table(t) for t in missing]))
    )
    tables = _tables(ctx, {t: got.get(paths.table(t)) for t in [*guessed, *missing]})
    by_id = {t.table_id: t for t in tables.values()}
    owners: dict[TableBucket, str] = {}
    for name in owner_names:
        holder, key = (
            owner_of(got.get(f"{owners_path}/{name}"), f"{owners_path}/{name}"),
            _key(name),
        )
        table = None if key is None else by_id.get(key[0])
        if (
            holder in members
            and table is not None
            and key is not None
            and key[1] < table.num_buckets
        ):
            owners[TableBucket(table.name, key[1])] = holder
    return GroupView(members, assignment, owners, records, tables)


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


def group_members(ctx: Context, group_id: str) -> list[MemberInfo]:
    """The group's live members, oldest (the leader) first, each with the buckets it owns now
    and those the published assignment gives it."""
    group_id = stored.check_group_id(group_id)
    return members_of(read_group(ctx, group_id, offsets=False))


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


def _rows(
    ctx: Context, view: GroupView, keys: list[tuple[TableInfo, int]], nodes: list[Node | None]
) -> list[_Row]:
    """Each (table, bucket) of ``keys`` with the group's committed record and its log bounds
    from its bucket znode in ``nodes``."""
    rows = []
    for (table, b), node in zip(keys, nodes):
        state = (
            None if node is None else BucketState.decode(node, ctx.paths.bucket(table.table_id, b))
        )
        rows.append(
            _Row(
                TableBucket(table.name, b),
                table,
                view.offsets.get((table.table_id, b)),
                state.begin if state else 0,
                state.end if state else 0,
            )
        )
    return rows


def _rows_now(
    ctx: Context, view: GroupView, keys: list[tuple[TableInfo, int]]
) -> tuple[int, list[_Row]]:
    """The rows of ``keys`` and the ZooKeeper time read just before them, in one round trip."""
    now, nodes = ctx.read_with_clock([ctx.paths.bucket(t.table_id, b) for t, b in keys])
    return ctx.clock(now), _rows(ctx, view, keys, nodes)


def _every(tables: Iterable[TableInfo]) -> list[tuple[TableInfo, int]]:
    return [(t, b) for t in tables for b in range(t.num_buckets)]


def describe_group(
    ctx: Context,
    group_id: str,
    *,
    stop_after: timedelta = timedelta(seconds=60),
    stall_after: timedelta = timedelta(seconds=60),
) -> pd.DataFrame:
    """One row per bucket (DESCRIBE_COLUMNS): lag and time lag measured now, ``<NA>`` for a
    bucket never committed; ``consumer_id`` and ``host`` of the live member that owns the
    bucket, ``<NA>`` for a bucket no live member owns. ``attrs`` holds the published
    assignment's ``generation`` and the ``leader`` (None when there is none)."""
    group_id = stored.check_group_id(group_id)
    return describe_view(
        ctx, group_id, read_group(ctx, group_id), stop_after=stop_after, stall_after=stall_after
    )


def describe_view(
    ctx: Context, group_id: str, view: GroupView, *, stop_after: timedelta, stall_after: timedelta
) -> pd.DataFrame:
    """``describe_group``'s frame of a group read with ``read_group``."""
    import pandas as pd

    now, rows = _rows_now(ctx, view, _every(view.described()))
    times = _record_times(rows)
    out = []
    for row in rows:
        rec = row.record
        lag = None if rec is None else max(0, row.end - rec.offset)
        time_lag = None
        if rec is not None:
            stamp = times.get(row.tb)
            time_lag = (
                pd.Timedelta(0)
                if lag == 0 or stamp is None
                else pd.Timedelta(milliseconds=max(0, now - stamp))
            )
        owner = view.owners.get(row.tb)
        status = (
            None
            if rec is None or not rec.history
            else health.bucket_status(
                rec.history,
                lag or 0,
                owner is not None,
                now,
                stop_after_ms=to_ms(stop_after),
                stall_after_ms=to_ms(stall_after),
            )
        )
        out.append(
            {
                "group": group_id,
                "table": row.tb.table,
                "bucket": row.tb.bucket,
                "current_offset": None if rec is None else rec.offset,
                "log_end_offset": row.end,
                "lag": lag,
                "time_lag": time_lag,
                "consumer_id": owner,
                "host": None if owner is None else view.members[owner].host,
                "last_commit": None if rec is None else to_datetime(rec.commit_ms),
                "status": status,
            }
        )
    frame = pd.DataFrame(out, columns=DESCRIBE_COLUMNS)
    for column in ("bucket", "current_offset", "log_end_offset", "lag"):
        # straight from the ints: through float64 (where a value is missing) offsets near
        # 2**63 would lose their last digits and fail the cast
        frame[column] = pd.array([row[column] for row in out], dtype="Int64")
    frame["time_lag"] = pd.to_timedelta(frame["time_lag"])
    frame["last_commit"] = pd.to_datetime(frame["last_commit"], utc=True)
    for column in ("group", "table", "consumer_id", "host", "status"):
        frame[column] = frame[column].astype("string")
    frame.attrs.update(generation=view.generation, leader=view.leader)
    return frame


def _record_times(rows: list[_Row]) -> dict[TableBucket, int]:
    """``_timestamp`` of the record at each committed offset below the log end."""
    behind = [r for r in rows if r.record is not None and r.record.offset < r.end]
    segments = _segments(behind)
    out: dict[TableBucket, int] = {}
    for r in behind:
        rec = r.record
        seg = find_segment(segments[r.tb], max(rec.offset, r.begin)) if rec is not None else None
        if seg is not None:
            out[r.tb] = seg.timestamp_ms
    return out


def _segments(rows: list[_Row]) -> dict[TableBucket, list[LogSegment]]:
    """The log segments of each row's bucket, listed per table in one pipelined read."""
    by_table: dict[str, list[_Row]] = {}
    for r in rows:
        by_table.setdefault(r.tb.table, []).append(r)
    out: dict[TableBucket, list[LogSegment]] = {}
    for rs in by_table.values():
        listed = list_segments(rs[0].table, [r.tb.bucket for r in rs])
        out.update((r.tb, listed[r.tb.bucket]) for r in rs)
    return out


def group_status(
    ctx: Context, group_id: str, *, stop_after: Any = "60s", stall_after: Any = "60s"
) -> GroupStatus:
    """The group's lag health (DESIGN §6.6): each committed bucket's status and the worst, with
    the published generation and the subscribed buckets no live member owns."""
    stop_ms = to_ms(parse_duration(stop_after, what="stop_after"))
    stall_ms = to_ms(parse_duration(stall_after, what="stall_after"))
    group_id = stored.check_group_id(group_id)
    view = read_group(ctx, group_id)
    by_id = {t.table_id: t for t in view.tables.values()}
    committed = [
        (by_id[tid], b)
        for tid, b in sorted(view.offsets)
        if tid in by_id and b < by_id[tid].num_buckets and view.offsets[tid, b].history
    ]
    now, rows = _rows_now(ctx, view, committed)
    statuses = [
        (
            row.tb,
            health.bucket_status(
                row.record.history,
                max(0, row.end - row.record.offset),
                row.tb in view.owners,
                now,
                stop_after_ms=stop_ms,
                stall_after_ms=stall_ms,
            ),
        )
        for row in rows
        if row.record is not None
    ]
    return health.group_status(statuses)._replace(
        generation=view.generation, unowned=view.unowned()
    )


def reset_offsets(
    ctx: Context,
    group_id: str,
    *,
    to: Any = None,
    shift_by: int | None = None,
    tables: Iterable[Any] | None = None,
    buckets: Iterable[TableBucket] | None = None,
    dry_run: bool = True,
) -> pd.DataFrame:
    """The reset plan: RESET_COLUMNS, with ``new_offset`` clamped to the bucket's [beginning,
    end] as kafka-consumer-groups does, and ``clamped`` saying where the target was outside.

    Carried out only with ``dry_run=False`` (C13), in transactions that check the group has
    no live members.

    Raises:
        GroupNotEmptyError: the group has live members (also when one joins before the write).
        InvalidArgumentError, InvalidTypeError: bad arguments (offsets and shifts of 2**63 or
            more included), before anything is written.
    """
    import pandas as pd

    group_id = stored.check_group_id(group_id)
    if (to is None) == (shift_by is None):
        raise InvalidArgumentError("give exactly one of to= and shift_by=")
    if shift_by is not None:
        stored.check_offset(abs(shift_by) if isinstance(shift_by, int) else shift_by, "shift_by")
    if isinstance(to, int) and not isinstance(to, bool):
        stored.check_offset(to, "to= offset")
    if not isinstance(dry_run, bool):
        raise InvalidTypeError("dry_run must be a bool")
    if isinstance(tables, (str, TableInfo)):
        tables = [tables]
    for given, what in ((tables, "tables"), (buckets, "buckets")):
        if given is not None and (
            isinstance(given, TableBucket) or not isinstance(given, Iterable)
        ):
            raise InvalidTypeError(f"{what} must be a collection, not {type(given).__name__}")
    chosen = None if buckets is None else list(buckets)
    for tb in chosen or ():
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"buckets must be TableBucket, not {type(tb).__name__}")
    view = read_group(ctx, group_id)
    if view.members:
        raise GroupNotEmptyError(
            f"group {group_id} has {len(view.members)} live member(s); stop them before a reset"
        )
    keys = _every(
        view.described()
        if tables is None
        else sorted({load_table(ctx, t) for t in tables}, key=lambda t: t.name)
    )
    rows = _rows(
        ctx, view, keys, ctx.store.get_many([ctx.paths.bucket(t.table_id, b) for t, b in keys])
    )
    if chosen is not None:
        wanted = frozenset(chosen)
        rows = [r for r in rows if r.tb in wanted]
    wanted = _targets(ctx, rows, to, shift_by)
    # clamped to [beginning, end], as kafka-consumer-groups does
    targets = {r.tb: min(max(wanted[r.tb], r.begin), r.end) for r in rows}
    plan = [
        {
            "group": group_id,
            "table": r.tb.table,
            "bucket": r.tb.bucket,
            "current_offset": None if r.record is None else r.record.offset,
            "new_offset": targets[r.tb],
            "clamped": targets[r.tb] != wanted[r.tb],
        }
        for r in rows
    ]
    if not dry_run and plan:
        stored.commit(
            ctx,
            group_id,
            {r.tb: targets[r.tb] for r in rows},
            {r.tb.table: r.table for r in rows},
            outside=True,
        )  # a member joining since the read above refuses the write (C13)
    frame = pd.DataFrame(plan, columns=[*RESET_COLUMNS, "clamped"])
    frame["clamped"] = frame["clamped"].astype(bool)
    for column in ("bucket", "current_offset", "new_offset"):
        frame[column] = frame[column].astype("Int64")
    return frame


def _targets(
    ctx: Context, rows: list[_Row], to: Any, shift_by: int | None
) -> dict[TableBucket, int]:
    """Each row's target before clamping (a shift or an offset may lie outside the log)."""
    out: dict[TableBucket, int] = {}
    if isinstance(to, (datetime, timedelta)):
        if isinstance(to, datetime) and to.tzinfo is None:
            raise InvalidArgumentError("to= datetime must be timezone-aware")
        # by duration: any length (a huge one means from the beginning, as clamped below)
        since = (
            ctx.now_ms() - to // timedelta(milliseconds=1)
            if isinstance(to, timedelta)
            else int(to.timestamp() * 1000)
        )
        segments = _segments(rows)
        for r in rows:
            found = next(
                (s for s in segments[r.tb] if s.end_offset > r.begin and s.timestamp_ms >= since),
                None,
            )
            out[r.tb] = r.end if found is None else max(found.base_offset, r.begin)
        return out
    for r in rows:
        current = r.record.offset if r.record is not None else None
        if shift_by is not None:
            out[r.tb] = (current if current is not None else r.begin) + shift_by
        elif to == "earliest":
            out[r.tb] = r.begin
        elif to == "latest":
            out[r.tb] = r.end
        elif to == "current":
            out[r.tb] = current if current is not None else r.end
        elif isinstance(to, int) and not isinstance(to, bool):
            out[r.tb] = to
        else:
            raise InvalidArgumentError(
                f"to= must be 'earliest', 'latest', 'current', an int, a datetime or a timedelta, not {to!r}"
            )
    return out


def delete_group(ctx: Context, group_id: str) -> bool:
    """Delete the group and its offsets; False if it did not exist. Refused while it has live
    members (``GroupNotEmptyError``)."""
    group_id = stored.check_group_id(group_id)
    if live_members(ctx, group_id):
        raise GroupNotEmptyError(f"group {group_id} has live members")
    path = ctx.paths.group(group_id)
    if ctx.store.exists(path) is None:
        return False
    ctx.store.delete_tree(path)
    return True


def delete_offsets(ctx: Context, group_id: str, buckets: Iterable[TableBucket]) -> int:
    """Delete the group's committed offsets of ``buckets``; how many there were."""
    group_id = stored.check_group_id(group_id)
    if isinstance(buckets, TableBucket) or not isinstance(buckets, Iterable):
        raise InvalidTypeError("buckets must be a collection of TableBucket")
    wanted = list(buckets)
    for tb in wanted:
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"buckets must be TableBucket, not {type(tb).__name__}")
    tables = {tb.table: load_table(ctx, tb.table) for tb in wanted}
    paths = [ctx.paths.offset(group_id, tables[tb.table].table_id, tb.bucket) for tb in wanted]
    present = [p for p, node in zip(paths, ctx.store.get_many(paths)) if node is not None]
    if present:
        ctx.store.commit_chunked([Delete(p) for p in present])
    return len(present)
