"""Carrying out a previewed offset reset exactly: each bucket of a dry run's plan gets its
``new_offset`` only while its committed offset is still the plan's ``current_offset``, checked
in the commit's own transaction (the versions read), else nothing is written (DESIGN §6.8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import CommitFailedError, GroupNotEmptyError, InvalidArgumentError, InvalidTypeError
from ..structs import TableBucket
from ..tables.catalog import load_table
from ..validate import check_bool
from . import offsets as stored
from .group_view import Row, bucket_rows, read_group

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context

__all__ = ["apply_plan", "PLAN_COLUMNS"]

PLAN_COLUMNS = ["group", "table", "bucket", "current_offset", "new_offset"]
"""The columns a plan must have (``reset_offsets``'s result has them)."""


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
        plan: a frame of PLAN_COLUMNS for this group, one row per bucket.
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
    missing = [c for c in PLAN_COLUMNS if c not in plan.columns]
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
