"""Offset resets of a consumer group, planned (a dry run unless asked, C13) or carried out
exactly as a dry run previewed them: each bucket of the plan gets its ``new_offset`` only while
its committed offset is still the plan's ``current_offset``, checked in the commit's own
transaction, else nothing is written (docs/consumers.md); and deletion of a group or of some of its
offsets. All are refused while the group has live members (docs/consumers.md)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import CommitFailedError, GroupNotEmptyError, InvalidArgumentError, InvalidTypeError
from ...log.segments import list_segments
from ...log.stamps import offset_for_time
from ...structs import LogSegment, TableBucket
from ...tables.catalog import load_table
from ...tables.info import TableInfo
from ...validate import check_bool
from ...zk import Delete, touch
from .. import offsets as stored
from .group_view import (
    GroupView,
    Row,
    bucket_rows,
    every_bucket,
    live_members,
    read_group,
    segments_of,
)

if TYPE_CHECKING:
    import pandas as pd

    from ...context import Context

__all__ = ["RESET_COLUMNS", "reset_offsets", "apply_plan", "delete_group", "delete_offsets"]

RESET_COLUMNS = ["group", "table", "bucket", "current_offset", "new_offset"]
"""The columns of a reset plan (``reset_offsets``'s result; ``apply_plan`` wants them)."""


def reset_offsets(
    ctx: Context,
    group_id: str,
    *,
    to: Any = None,
    shift_by: int | None = None,
    tables: Iterable[Any] | None = None,
    buckets: Iterable[TableBucket] | None = None,
    dry_run: bool = True,
    plan: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Plan a reset of the group's committed offsets; carry it out only with ``dry_run=False``
    (C13), in transactions that check the group has no live members. With ``plan`` (a dry
    run's result), carry out exactly that plan, or refuse it when an offset changed since.

    Arguments:
        ctx: the connection's context.
        group_id: the group (the lease-id rule, L1).
        to: "earliest", "latest", "current", an offset, a timezone-aware datetime, or a
            timedelta (the earliest offset whose timestamp is >= now - it); not with shift_by.
        shift_by: move the committed offsets by this many (from the beginning where none).
        tables: the tables to reset (names or Table objects; default: the group's tables).
        buckets: only these (without ``tables``: of their tables, committed or not).
        dry_run: only plan (the default).
        plan: a dry run's result, carried out exactly while each committed offset is still its
            ``current_offset`` (see ``apply_plan``); alone, without ``to`` & co.

    Returns:
        The plan: RESET_COLUMNS, with ``new_offset`` clamped to the bucket's [beginning, end]
        as kafka-consumer-groups does, and ``clamped`` saying where the target was outside.

    Raises:
        GroupNotEmptyError: the group has live members (also when one joins before the write).
        CommitFailedError: with ``plan``: an offset changed since (named); nothing written.
        InvalidArgumentError, InvalidTypeError: bad arguments (offsets and shifts of 2**63 or
            more included, a plan that is not one), before anything is written.
        TableNotFoundError: a table of ``tables`` (or of ``plan``) does not exist.
    """
    group_id = stored.check_group_id(group_id)
    if plan is not None:
        return apply_plan(ctx, group_id, plan, dry_run, (to, shift_by, tables, buckets))
    tables, chosen = _check_reset(to, shift_by, dry_run, tables, buckets)
    view = read_group(ctx, group_id)
    if view.members:
        raise GroupNotEmptyError(
            f"group {group_id} has {len(view.members)} live member(s); stop them before a reset"
        )
    rows = _rows(ctx, view, tables, chosen)
    wanted = _targets(ctx, rows, to, shift_by)
    # clamped to [beginning, end], as kafka-consumer-groups does
    targets = {r.tb: min(max(wanted[r.tb], r.begin), r.end) for r in rows}
    if not dry_run and rows:
        stored.commit(
            ctx,
            group_id,
            {r.tb: targets[r.tb] for r in rows},
            {r.tb.table: r.table for r in rows},
            outside=True,
        )  # a member joining since the read above refuses the write (C13)
    return _plan_frame(group_id, rows, targets, wanted)


def _rows(
    ctx: Context, view: GroupView, tables: Iterable[Any] | None, chosen: list[TableBucket] | None
) -> list[Row]:
    """The rows of the buckets to reset: of ``tables`` (default: the group's), only those
    ``chosen`` if given."""
    keys = every_bucket(
        view.described()
        if tables is None
        else sorted({load_table(ctx, t) for t in tables}, key=lambda t: t.name),
        view.offsets,  # (sealed buckets not drained too, K6)
    )
    rows = bucket_rows(
        ctx, view, keys, ctx.store.get_many([ctx.paths.bucket(t.table_id, b) for t, b in keys])
    )
    if chosen is None:
        return rows
    wanted = frozenset(chosen)
    missing = sorted(wanted - {r.tb for r in rows})
    if missing:
        raise InvalidArgumentError(
            f"{missing[0]} is not a bucket of its table's layout that a reset can move"
            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
        )
    return [r for r in rows if r.tb in wanted]


def _check_reset(
    to: Any, shift_by: Any, dry_run: Any, tables: Any, buckets: Any
) -> tuple[Iterable[Any] | None, list[TableBucket] | None]:
    """``reset_offsets``'s arguments checked: the tables (a single one as a list) and the
    buckets chosen (None: every one)."""
    if (to is None) == (shift_by is None):
        raise InvalidArgumentError("give exactly one of to= and shift_by=")
    if shift_by is not None:
        stored.check_offset(abs(shift_by) if isinstance(shift_by, int) else shift_by, "shift_by")
    if isinstance(to, int) and not isinstance(to, bool):
        stored.check_offset(to, "to= offset")
    check_bool(dry_run, "dry_run")
    if isinstance(tables, (str, TableInfo)):
        tables = [tables]
    for given, what in ((tables, "tables"), (buckets, "buckets")):
        if given is not None and (
            isinstance(given, TableBucket) or not isinstance(given, Iterable)
        ):
            raise InvalidTypeError(f"{what} must be a collection, not {type(given).__name__}")
    chosen = None if buckets is None else list(buckets)
    if tables is None and chosen is not None:
        # the buckets name their tables, committed to by the group or not (as Kafka's tool
        # resets a partition the group never committed)
        tables = sorted({tb.table for tb in chosen if isinstance(tb, TableBucket)})
    for tb in chosen or ():
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"buckets must be TableBucket, not {type(tb).__name__}")
    return tables, chosen


def _plan_frame(
    group_id: str, rows: list[Row], targets: dict[TableBucket, int], wanted: dict[TableBucket, int]
) -> pd.DataFrame:
    """The plan as a frame: RESET_COLUMNS and ``clamped``."""
    import pandas as pd

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
    frame = pd.DataFrame(plan, columns=[*RESET_COLUMNS, "clamped"])
    frame["clamped"] = frame["clamped"].astype(bool)
    for column in ("bucket", "current_offset", "new_offset"):
        frame[column] = frame[column].astype("Int64")
    return frame


def _targets(
    ctx: Context, rows: list[Row], to: Any, shift_by: int | None
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
        return _targets_by_time(ctx, rows, since)
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
                "to= must be 'earliest', 'latest', 'current', an int, a datetime or a "
                f"timedelta, not {to!r}"
            )
    return out


def _targets_by_time(ctx: Context, rows: list[Row], since: int) -> dict[TableBucket, int]:
    """Each row's earliest offset whose timestamp is >= ``since`` (inside a merged segment,
    found in its file's record timestamps), its log end when none is.

    Raises:
        DataFileMissingError: the file of a merged segment holding ``since`` is missing while
            the metadata still lists it.
    """
    segments = segments_of(rows)
    out: dict[TableBucket, int] = {}
    for r in rows:

        def relist(r: Row = r) -> list[LogSegment]:
            return list_segments(r.table, [r.tb.bucket])[r.tb.bucket]

        found = offset_for_time(ctx.warehouse, segments[r.tb], since, r.begin, relist)
        out[r.tb] = r.end if found is None else found
    return out


class _Step(NamedTuple):
    tb: TableBucket
    current: int | None
    new: int


def apply_plan(
    ctx: Context, group_id: str, plan: Any, dry_run: bool, others: tuple[Any, ...] = ()
) -> pd.DataFrame:
    """Carry out ``plan`` for the group, or only check it (``dry_run``).

    Arguments:
        ctx: the connection's context.
        group_id: the group (checked already).
        plan: a frame of RESET_COLUMNS for this group, one row per bucket.
        dry_run: only check that it still applies.
        others: ``reset_offsets``'s other choices (to, shift_by, tables, buckets): all None.

    Returns:
        The plan (a copy).

    Raises:
        CommitFailedError: a committed offset is no longer the plan's ``current_offset`` (the
            message names the buckets), or a ``new_offset`` left its bucket's log; nothing was
            written.
        GroupNotEmptyError: the group has live members.
        InvalidArgumentError, InvalidTypeError: ``plan`` is not a plan of this group, or comes
            with other choices.
        TableNotFoundError, BucketNotFoundError: a table or bucket of the plan is gone.
    """
    if any(x is not None for x in others):
        raise InvalidArgumentError(
            "plan= carries the buckets and their offsets: give no to=, shift_by=, tables= or "
            "buckets= with it"
        )
    check_bool(dry_run, "dry_run")
    steps = _steps(group_id, plan)
    view = read_group(ctx, group_id)
    if view.members:
        raise GroupNotEmptyError(
            f"group {group_id} has {len(view.members)} live member(s); stop them before a reset"
        )
    tables = {name: load_table(ctx, name) for name in sorted({s.tb.table for s in steps})}
    keys = [(tables[s.tb.table], tables[s.tb.table].bucket_number(s.tb)) for s in steps]
    nodes = ctx.store.get_many([ctx.paths.bucket(t.table_id, b) for t, b in keys])
    _refuse_stale(group_id, steps, bucket_rows(ctx, view, keys, nodes))
    if not dry_run and steps:
        stored.commit(
            ctx,
            group_id,
            {s.tb: s.new for s in steps},
            tables,
            outside=True,
            expected={s.tb: s.current for s in steps},
        )  # the transaction checks the versions read: a change since refuses it
    return plan.copy()


def _refuse_stale(group_id: str, steps: list[_Step], rows: list[Row]) -> None:
    """``CommitFailedError`` when the plan no longer applies to what was read: a planned
    offset outside its bucket's log, or a committed offset not the one planned from."""
    outside = [
        f"{s.tb.table}/{s.tb.bucket} ({s.new} not in [{r.begin}, {r.end}])"
        for s, r in zip(steps, rows)
        if not r.begin <= s.new <= r.end
    ]
    if outside:
        raise CommitFailedError(
            f"the reset planned for group {group_id} no longer fits the log of "
            f"{', '.join(outside[:10])}: preview it again; nothing was written"
        )
    changed = [
        f"{s.tb.table}/{s.tb.bucket} (planned from {s.current}, now {now})"
        for s, r in zip(steps, rows)
        if (now := None if r.record is None else r.record.offset) != s.current
    ]
    if changed:
        raise CommitFailedError(
            f"the committed offsets of group {group_id} changed since the plan was made: "
            f"{', '.join(changed[:10])}{' ...' if len(changed) > 10 else ''}; preview the "
            "reset again; nothing was written"
        )


def _steps(group_id: str, plan: Any) -> list[_Step]:
    """The plan's rows, checked: every column there, this group's, one row per bucket."""
    import pandas as pd

    if not isinstance(plan, pd.DataFrame):
        raise InvalidTypeError(
            f"plan must be the DataFrame a dry run returned, not {type(plan).__name__}"
        )
    missing = [c for c in RESET_COLUMNS if c not in plan.columns]
    if missing:
        raise InvalidArgumentError(f"plan lacks the columns {missing}: it is not a reset plan")
    others = sorted({str(g) for g in plan["group"]} - {group_id})
    if others:
        raise InvalidArgumentError(f"the plan is of group {others[0]!r}, not {group_id!r}")
    steps, seen = [], set()
    for row in plan.itertuples(index=False):
        if not isinstance(row.table, str) or pd.isna(row.bucket) or pd.isna(row.new_offset):
            raise InvalidArgumentError(f"plan row {tuple(row)!r} lacks a table, bucket or offset")
        tb = TableBucket(row.table, int(row.bucket))
        if tb in seen:
            raise InvalidArgumentError(f"the plan names {tb.table}/{tb.bucket} twice")
        seen.add(tb)
        current = None if pd.isna(row.current_offset) else int(row.current_offset)
        new = stored.check_offset(int(row.new_offset), f"new_offset of {tb}")
        steps.append(_Step(tb, current, new))
    return steps


def delete_group(ctx: Context, group_id: str) -> bool:
    """Delete the group and its offsets.

    Arguments:
        ctx: the connection's context.
        group_id: the group (the lease-id rule, L1).

    Returns:
        True, or False if it did not exist.

    Raises:
        InvalidArgumentError: a bad ``group_id``.
        GroupNotEmptyError: the group has live members; nothing is deleted.
    """
    group_id = stored.check_group_id(group_id)
    if live_members(ctx, group_id):
        raise GroupNotEmptyError(f"group {group_id} has live members")
    path = ctx.paths.group(group_id)
    if ctx.store.exists(path) is None:
        return False
    ctx.store.delete_tree(path)
    return True


def delete_offsets(ctx: Context, group_id: str, buckets: Iterable[TableBucket]) -> int:
    """Delete the group's committed offsets of ``buckets``.

    Arguments:
        ctx: the connection's context.
        group_id: the group (the lease-id rule, L1).
        buckets: a collection of TableBucket.

    Returns:
        How many of them had a committed offset.

    Raises:
        InvalidArgumentError: a bad ``group_id``.
        InvalidTypeError: ``buckets`` is not a collection of TableBucket.
        TableNotFoundError: a table does not exist.
    """
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
        marker = touch(ctx.paths.group_changes(group_id))
        ctx.store.commit_chunked([*(Delete(p) for p in present), marker])
    return len(present)
