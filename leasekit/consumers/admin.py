"""Consumer administration (DESIGN §6.6): the groups, a group's offsets with lag in offsets
and in time measured now, lag health, offset resets (a dry run unless asked, C13) and
deletion of a group or of some of its offsets."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from ..durations import parse_duration, to_ms
from ..errors import (
    CorruptMetadataError,
    GroupNotEmptyError,
    InvalidArgumentError,
    InvalidTypeError,
    TableNotFoundError,
)
from ..log.reader import find_segment
from ..log.segments import list_segments
from ..records import MemberInfo, TableBucket
from ..tables.catalog import load_table
from ..zk import Delete, to_datetime
from ..zk.formats import BucketState, MemberRecord, OffsetRecord
from . import health
from . import offsets as stored

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context
    from ..tables.info import TableInfo

__all__ = ["consumer_groups", "describe_group", "group_members", "group_status", "reset_offsets", "delete_group",
           "delete_offsets", "live_members", "DESCRIBE_COLUMNS", "RESET_COLUMNS"]

DESCRIBE_COLUMNS = ["group", "table", "bucket", "current_offset", "log_end_offset", "lag", "time_lag",
                    "consumer_id", "host", "last_commit", "status"]
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
    listed = ctx.store.children_many([*(ctx.paths.group_offsets(n) for n in names),
                                      *(ctx.paths.group_members(n) for n in names)])
    return sorted(n for n, offsets, members in zip(names, listed, listed[len(names):]) if offsets or members)


def live_members(ctx: Context, group_id: str) -> list[str]:
    """Ids of the group's live members (ephemeral znodes)."""
    return sorted(ctx.store.children(ctx.paths.group_members(group_id)) or [])


def group_members(ctx: Context, group_id: str) -> list[MemberInfo]:
    """The group's live members with the buckets each owns, by member id."""
    group_id = stored.check_group_id(group_id)
    ids = live_members(ctx, group_id)
    paths = [ctx.paths.member(group_id, m) for m in ids]
    out = []
    tables: dict[str, TableInfo | None] = {}
    for member_id, path, node in zip(ids, paths, ctx.store.get_many(paths)):
        if node is None:
            continue  # left meanwhile
        record = MemberRecord.decode(node, path)
        buckets: set[TableBucket] = set()
        for name in record.tables:
            if name not in tables:
                try:
                    tables[name] = load_table(ctx, name)
                except TableNotFoundError:
                    tables[name] = None
            table = tables[name]
            if table is not None:
                buckets.update(TableBucket(name, b) for b in range(table.num_buckets))
        out.append(MemberInfo(member_id, record.host, frozenset(buckets)))
    return out


def _owners(members: list[MemberInfo]) -> dict[TableBucket, MemberInfo]:
    return {tb: m for m in members for tb in m.buckets}


def _tables(ctx: Context, names: Iterable[str]) -> dict[str, TableInfo]:
    """The named tables that exist, by name."""
    out = {}
    for name in set(names):
        try:
            out[name] = load_table(ctx, name)
        except (TableNotFoundError, CorruptMetadataError):
            continue  # dropped meanwhile, or unreadable: not described
    return out


def _rows(ctx: Context, group_id: str, tables: Iterable[str] | None = None,
          extra: set[TableBucket] | None = None) -> list[_Row]:
    """Every bucket of every table the group has offsets for or its members consume (``extra``),
    or of ``tables``, with its committed record and log bounds now."""
    records = stored.fetch_group(ctx, group_id)
    ids = {tid for tid, _ in records}
    extra_names = {tb.table for tb in extra or ()}
    # Offset records name their table; one recreated since has another id: its offsets are not its own.
    found = _tables(ctx, [r.table for r in records.values()] + list(extra_names))
    wanted = {t for t in found.values() if t.table_id in ids or t.name in extra_names}
    if tables is not None:
        wanted = {load_table(ctx, t) for t in tables}
    rows = []
    for table in sorted(wanted, key=lambda t: t.name):
        paths = [ctx.paths.bucket(table.table_id, b) for b in range(table.num_buckets)]
        for b, path, node in zip(range(table.num_buckets), paths, ctx.store.get_many(paths)):
            state = None if node is None else BucketState.decode(node, path)
            rows.append(_Row(TableBucket(table.name, b), table, records.get((table.table_id, b)),
                             state.begin if state else 0, state.end if state else 0))
    return rows


def describe_group(ctx: Context, group_id: str, *, stop_after: timedelta = timedelta(seconds=60),
                   stall_after: timedelta = timedelta(seconds=60)) -> pd.DataFrame:
    """One row per bucket (DESCRIBE_COLUMNS): lag and time lag measured now, ``<NA>`` for a
    bucket never committed."""
    import pandas as pd

    group_id = stored.check_group_id(group_id)
    now = ctx.now_ms()
    owners = _owners(group_members(ctx, group_id))
    rows = _rows(ctx, group_id, extra=set(owners))
    times = _record_times(rows)
    out = []
    for row in rows:
        rec = row.record
        lag = None if rec is None else max(0, row.end - rec.offset)
        time_lag = None
        if rec is not None:
            stamp = times.get(row.tb)
            time_lag = pd.Timedelta(0) if lag == 0 or stamp is None else pd.Timedelta(milliseconds=max(0, now - stamp))
        owner = owners.get(row.tb)
        status = None if rec is None or not rec.history else health.bucket_status(
            rec.history, lag or 0, owner is not None, now, stop_after_ms=to_ms(stop_after),
            stall_after_ms=to_ms(stall_after))
        out.append({"group": group_id, "table": row.tb.table, "bucket": row.tb.bucket,
                    "current_offset": None if rec is None else rec.offset, "log_end_offset": row.end, "lag": lag,
                    "time_lag": time_lag, "consumer_id": None if owner is None else owner.member_id,
                    "host": None if owner is None else owner.host,
                    "last_commit": None if rec is None else to_datetime(rec.commit_ms), "status": status})
    frame = pd.DataFrame(out, columns=DESCRIBE_COLUMNS)
    for column in ("bucket", "current_offset", "log_end_offset", "lag"):
        frame[column] = frame[column].astype("Int64")
    frame["time_lag"] = pd.to_timedelta(frame["time_lag"])
    frame["last_commit"] = pd.to_datetime(frame["last_commit"], utc=True)
    for column in ("group", "table", "consumer_id", "host", "status"):
        frame[column] = frame[column].astype("string")
    return frame


def _record_times(rows: list[_Row]) -> dict[TableBucket, int]:
    """``_timestamp`` of the record at each committed offset below the log end."""
    behind = [r for r in rows if r.record is not None and r.record.offset < r.end]
    out: dict[TableBucket, int] = {}
    by_table: dict[str, list[_Row]] = {}
    for r in behind:
        by_table.setdefault(r.tb.table, []).append(r)
    for rs in by_table.values():
        segments = list_segments(rs[0].table, [r.tb.bucket for r in rs])
        for r in rs:
            rec = r.record
            seg = find_segment(segments[r.tb.bucket], max(rec.offset, r.begin)) if rec is not None else None
            if seg is not None:
                out[r.tb] = seg.timestamp_ms
    return out


def group_status(ctx: Context, group_id: str, *, stop_after: Any = "60s", stall_after: Any = "60s") -> health.GroupStatus:
    """The group's lag health (DESIGN §6.6): each committed bucket's status and the worst."""
    stop_ms = to_ms(parse_duration(stop_after, what="stop_after"))
    stall_ms = to_ms(parse_duration(stall_after, what="stall_after"))
    group_id = stored.check_group_id(group_id)
    now = ctx.now_ms()
    owners = _owners(group_members(ctx, group_id))
    statuses = [(row.tb, health.bucket_status(row.record.history, max(0, row.end - row.record.offset),
                                              row.tb in owners, now,
                                              stop_after_ms=stop_ms, stall_after_ms=stall_ms))
                for row in _rows(ctx, group_id) if row.record is not None and row.record.history]
    return health.group_status(statuses)


def reset_offsets(ctx: Context, group_id: str, *, to: Any = None, shift_by: int | None = None,
                  tables: Iterable[Any] | None = None, buckets: Iterable[TableBucket] | None = None,
                  dry_run: bool = True) -> pd.DataFrame:
    """The reset plan (RESET_COLUMNS); carried out only with ``dry_run=False`` (C13), and
    refused with ``GroupNotEmptyError`` while the group has live members."""
    import pandas as pd

    group_id = stored.check_group_id(group_id)
    if (to is None) == (shift_by is None):
        raise InvalidArgumentError("give exactly one of to= and shift_by=")
    if shift_by is not None and (isinstance(shift_by, bool) or not isinstance(shift_by, int)):
        raise InvalidTypeError("shift_by must be an int")
    if not isinstance(dry_run, bool):
        raise InvalidTypeError("dry_run must be a bool")
    if isinstance(tables, str):
        tables = [tables]
    members = live_members(ctx, group_id)
    if members:
        raise GroupNotEmptyError(f"group {group_id} has {len(members)} live member(s); stop them before a reset")
    rows = _rows(ctx, group_id, None if tables is None else list(tables))
    if buckets is not None:
        chosen = set(buckets)
        for tb in chosen:
            if not isinstance(tb, TableBucket):
                raise InvalidTypeError(f"buckets must be TableBucket, not {type(tb).__name__}")
        rows = [r for r in rows if r.tb in chosen]
    targets = _targets(ctx, rows, to, shift_by)
    plan = [{"group": group_id, "table": r.tb.table, "bucket": r.tb.bucket,
             "current_offset": None if r.record is None else r.record.offset, "new_offset": targets[r.tb]}
            for r in rows]
    if not dry_run and plan:
        stored.commit(ctx, group_id, {r.tb: targets[r.tb] for r in rows}, {r.tb.table: r.table for r in rows})
    frame = pd.DataFrame(plan, columns=RESET_COLUMNS)
    for column in ("bucket", "current_offset", "new_offset"):
        frame[column] = frame[column].astype("Int64")
    return frame


def _targets(ctx: Context, rows: list[_Row], to: Any, shift_by: int | None) -> dict[TableBucket, int]:
    out: dict[TableBucket, int] = {}
    if isinstance(to, timedelta):
        to = to_datetime(ctx.now_ms() - to_ms(to))
    if isinstance(to, datetime):
        if to.tzinfo is None:
            raise InvalidArgumentError("to= datetime must be timezone-aware")
        since = int(to.timestamp() * 1000)
        by_table: dict[str, list[_Row]] = {}
        for r in rows:
            by_table.setdefault(r.tb.table, []).append(r)
        for rs in by_table.values():
            segments = list_segments(rs[0].table, [r.tb.bucket for r in rs])
            for r in rs:
                found = next((s for s in segments[r.tb.bucket] if s.end_offset > r.begin and s.timestamp_ms >= since),
                             None)
                out[r.tb] = r.end if found is None else max(found.base_offset, r.begin)
        return out
    for r in rows:
        current = r.record.offset if r.record is not None else None
        if shift_by is not None:
            base = current if current is not None else r.begin
            out[r.tb] = min(max(base + shift_by, r.begin), r.end)  # clamped to [beginning, end]
        elif to == "earliest":
            out[r.tb] = r.begin
        elif to == "latest":
            out[r.tb] = r.end
        elif to == "current":
            out[r.tb] = current if current is not None else r.end
        elif isinstance(to, int) and not isinstance(to, bool):
            if to < 0:
                raise InvalidArgumentError(f"to= offset must be >= 0, got {to}")
            out[r.tb] = to
        else:
            raise InvalidArgumentError(
                f"to= must be 'earliest', 'latest', 'current', an int, a datetime or a timedelta, not {to!r}")
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
