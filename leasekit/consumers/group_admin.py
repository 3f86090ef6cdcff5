"""Consumer administration (DESIGN §6.6): the groups, their live members and who owns each
bucket now, offsets with lag in offsets and in time measured now, and lag health. Offset resets
and deletions are in ``group_reset``; this module is the one place callers import them from."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..durations import parse_duration, to_ms
from ..log.segments import segments_at
from ..structs import GroupStatus, MemberInfo, TableBucket
from ..zk import to_datetime
from . import health
from . import offsets as stored
from .group_reset import RESET_COLUMNS, delete_group, delete_offsets, reset_offsets
from .group_view import (
    GroupView,
    Row,
    bucket_rows_now,
    every_bucket,
    live_members,
    members_of,
    read_group,
)

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


def consumer_groups(ctx: Context) -> list[str]:
    """The namespace's consumer groups.

    Arguments:
        ctx: the connection's context.

    Returns:
        The ids of groups with stored offsets or live members, sorted.
    """
    names = ctx.store.children(ctx.paths.groups) or []
    listed = ctx.store.children_many(
        [*(ctx.paths.group_offsets(n) for n in names), *(ctx.paths.group_members(n) for n in names)]
    )
    return sorted(
        n for n, offsets, members in zip(names, listed, listed[len(names) :]) if offsets or members
    )


def group_members(ctx: Context, group_id: str) -> list[MemberInfo]:
    """The group's live members, each with the buckets it owns now and those the published
    assignment gives it.

    Arguments:
        ctx: the connection's context.
        group_id: the group (the lease-id rule, L1).

    Returns:
        The members, oldest (the leader) first; ``[]`` for a group without live members.

    Raises:
        InvalidArgumentError: a bad ``group_id``.
        CorruptMetadataError: a member or assignment znode holds garbage.
    """
    group_id = stored.check_group_id(group_id)
    return members_of(read_group(ctx, group_id, offsets=False))


def describe_group(
    ctx: Context,
    group_id: str,
    *,
    stop_after: timedelta = timedelta(seconds=60),
    stall_after: timedelta = timedelta(seconds=60),
) -> pd.DataFrame:
    """The group's offsets and lag, measured now, per bucket of every table it has offsets for
    or subscribes to (K6: sealed buckets until drained).

    Arguments:
        ctx: the connection's context.
        group_id: the group (the lease-id rule, L1).
        stop_after, stall_after: when a bucket's ``status`` says stopped or stalled.

    Returns:
        One row per bucket (DESCRIBE_COLUMNS): ``current_offset``, ``lag`` and ``time_lag``
        are ``<NA>`` for a bucket never committed; ``consumer_id`` and ``host`` name the live
        member that owns the bucket (``<NA>``: none). ``attrs`` holds the published
        assignment's ``generation`` and the ``leader`` (None when there is none).

    Raises:
        InvalidArgumentError: a bad ``group_id``.
        CorruptMetadataError: a znode of the group holds garbage.
    """
    group_id = stored.check_group_id(group_id)
    return describe_view(
        ctx, group_id, read_group(ctx, group_id), stop_after=stop_after, stall_after=stall_after
    )


def describe_view(
    ctx: Context, group_id: str, view: GroupView, *, stop_after: timedelta, stall_after: timedelta
) -> pd.DataFrame:
    """``describe_group``'s frame of a group read with ``read_group``."""
    import pandas as pd

    now, rows = bucket_rows_now(ctx, view, every_bucket(view.described()))
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


def _record_times(rows: list[Row]) -> dict[TableBucket, int]:
    """``_timestamp`` of the record at each committed offset below the log end."""
    behind: dict[str, list[Row]] = {}
    for r in rows:
        if r.record is not None and r.record.offset < r.end:
            behind.setdefault(r.tb.table, []).append(r)
    out: dict[TableBucket, int] = {}
    for rs in behind.values():  # one segment read per bucket, not its whole log
        at = {r.tb.bucket: max(r.record.offset, r.begin) for r in rs if r.record is not None}
        found = segments_at(rs[0].table, at)
        out.update((r.tb, found[r.tb.bucket].timestamp_ms) for r in rs if r.tb.bucket in found)
    return out


def group_status(
    ctx: Context, group_id: str, *, stop_after: Any = "60s", stall_after: Any = "60s"
) -> GroupStatus:
    """The group's lag health (DESIGN §6.6).

    Arguments:
        ctx: the connection's context.
        group_id: the group (the lease-id rule, L1).
        stop_after, stall_after: durations after which a bucket counts as stopped or stalled.

    Returns:
        Each committed bucket's status and the worst, with the published generation and the
        subscribed buckets no live member owns.

    Raises:
        InvalidArgumentError: a bad ``group_id``.
        InvalidDurationError: a bad ``stop_after`` or ``stall_after``.
        CorruptMetadataError: a znode of the group holds garbage.
    """
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
    now, rows = bucket_rows_now(ctx, view, committed)
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
