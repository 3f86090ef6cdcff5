"""Consumer administration (docs/consumers.md): the groups, their live members and who owns each
bucket now, offsets with lag in offsets and in time measured now, and lag health. Offset resets
and deletions are in ``group_reset``; this module is the one place callers import them from."""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from ...durations import parse_duration, to_ms
from ...structs import DESCRIBE_COLUMNS, GroupBoard, GroupStatus, MemberInfo, TableBucket
from .. import offsets as stored
from . import health
from .group_reset import RESET_COLUMNS, delete_group, delete_offsets, reset_offsets
from .group_view import (
    GroupView,
    Row,
    bucket_rows_now,
    every_bucket,
    live_members,
    members_of,
    missing_files,
    read_group,
    read_groups,
    record_segments,
)

if TYPE_CHECKING:
    import pandas as pd

    from ...context import Context

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
    "read_groups",
    "describe_view",
    "describe_frame",
    "group_board",
    "bucket_lags",
    "BucketLag",
    "members_of",
    "GroupView",
    "DESCRIBE_COLUMNS",
    "RESET_COLUMNS",
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


class BucketLag(NamedTuple):
    """One bucket of a group measured now: a row of ``describe_group`` (times in ms)."""

    table_bucket: TableBucket
    current_offset: int | None
    """The committed offset; None when never committed."""
    log_end_offset: int
    lag: int | None
    """Log end now - committed (at least 0); None when never committed."""
    time_lag_ms: int | None
    """ZooKeeper time now - ``_timestamp`` of the record at the committed offset; 0 when the lag
    is 0; None when never committed."""
    consumer_id: str | None
    """The live member that owns the bucket now; None for none."""
    host: str | None
    last_commit_ms: int | None
    status: str | None
    """Lag health (``health.bucket_status``); None when never committed."""


def bucket_lags(
    view: GroupView,
    rows: list[Row],
    now: int,
    times: dict[tuple[str, int, int], int],
    *,
    stop_after_ms: int,
    stall_after_ms: int,
    missing: Collection[tuple[str, int, int]] = (),
) -> list[BucketLag]:
    """Each row of a group read at ``now``, measured (``times``: ``group_view.record_times``;
    ``missing``: the same keys, of records whose segment file is missing: ``MISSING``)."""
    out = []
    for row in rows:
        rec = row.record
        owner = view.owners.get(row.tb)
        if rec is None:
            out.append(
                BucketLag(row.tb, None, row.end, None, None, owner, _host(view, owner), None, None)
            )
            continue
        lag = max(0, row.end - rec.offset)
        stamp = times.get((row.table.table_id, row.tb.bucket, rec.offset))
        time_lag = 0 if lag == 0 or stamp is None else max(0, now - stamp)
        status = (
            health.MISSING
            if (row.table.table_id, row.tb.bucket, rec.offset) in missing
            else None
            if not rec.history
            else health.bucket_status(
                rec.history,
                lag,
                owner is not None,
                now,
                stop_after_ms=stop_after_ms,
                stall_after_ms=stall_after_ms,
            )
        )
        host = _host(view, owner)
        out.append(
            BucketLag(
                row.tb, rec.offset, row.end, lag, time_lag, owner, host, rec.commit_ms, status
            )
        )
    return out


def _host(view: GroupView, owner: str | None) -> str | None:
    return None if owner is None else view.members[owner].host


def describe_view(
    ctx: Context, group_id: str, view: GroupView, *, stop_after: timedelta, stall_after: timedelta
) -> pd.DataFrame:
    """``describe_group``'s frame of a group read with ``read_group``."""
    now, rows = bucket_rows_now(ctx, view, every_bucket(view.described(), view.offsets))
    held = record_segments(ctx, rows)
    lags = bucket_lags(
        view,
        rows,
        now,
        {key: h.stamp for key, h in held.items()},
        stop_after_ms=to_ms(stop_after),
        stall_after_ms=to_ms(stall_after),
        missing=missing_files(ctx, held),
    )
    return describe_frame(group_id, lags, view.generation, view.leader)


def describe_frame(
    group_id: str, lags: list[BucketLag], generation: int | None, leader: str | None
) -> pd.DataFrame:
    """``describe_group``'s frame (DESCRIBE_COLUMNS) of measured buckets, built a column at a
    time (a group of 100,000 buckets makes no object per cell)."""
    import pandas as pd

    def ints(values: list[int | None]) -> Any:
        # straight from the ints: through float64 (where a value is missing) offsets near
        # 2**63 would lose their last digits
        return pd.array(values, dtype="Int64")

    def strings(values: list[str | None]) -> Any:
        return pd.array(values, dtype="string")

    tbs = [x.table_bucket for x in lags]
    frame = pd.DataFrame(
        {
            "group": strings([group_id] * len(lags)),
            "table": strings([tb.table for tb in tbs]),
            "bucket": ints([tb.bucket for tb in tbs]),
            "current_offset": ints([x.current_offset for x in lags]),
            "log_end_offset": ints([x.log_end_offset for x in lags]),
            "lag": ints([x.lag for x in lags]),
            # from whole milliseconds: exact, and any commit time up to year 9999
            "time_lag": pd.to_timedelta(ints([x.time_lag_ms for x in lags]), unit="ms"),
            "consumer_id": strings([x.consumer_id for x in lags]),
            "host": strings([x.host for x in lags]),
            "last_commit": pd.to_datetime(
                ints([x.last_commit_ms for x in lags]), unit="ms", utc=True
            ),
            "status": strings([x.status for x in lags]),
        },
        columns=DESCRIBE_COLUMNS,
    )
    frame.attrs.update(generation=generation, leader=leader)
    return frame


def group_board(
    ctx: Context, group_id: str, *, stop_after: timedelta, stall_after: timedelta
) -> GroupBoard:
    """A group read once as a dashboard shows it: ``describe_group``'s rows with each bucket's
    commit metadata, the live members, and the lineage of rescaled tables' buckets.

    Arguments:
        ctx: the connection's context.
        group_id: the group.
        stop_after, stall_after: Burrow's STOP and STALL thresholds.

    Returns:
        The group's ``GroupBoard``.

    Raises:
        InvalidArgumentError: a bad ``group_id``.
    """
    import pandas as pd

    group_id = stored.check_group_id(group_id)
    view = read_group(ctx, group_id)
    frame = describe_view(ctx, group_id, view, stop_after=stop_after, stall_after=stall_after)
    ids = {t.name: t.table_id for t in view.tables.values()}
    offsets = view.offsets
    frame["metadata"] = pd.array(
        [
            None if (rec := offsets.get((ids.get(t), b))) is None else rec.metadata
            for t, b in zip(frame["table"].tolist(), frame["bucket"].tolist())
        ],
        dtype="string",
    )
    lineage = {
        lin.table_bucket: lin
        for t in view.tables.values()
        if t.layout.rescaled
        for lin in t.layout.lineage(t.name)
        if lin.state == "sealed" or lin.parents
    }
    return GroupBoard(frame, members_of(view), view.generation, view.leader, lineage)


def group_status(
    ctx: Context, group_id: str, *, stop_after: Any = "60s", stall_after: Any = "60s"
) -> GroupStatus:
    """The group's lag health (docs/consumers.md).

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
    described = set(every_bucket(view.tables.values(), view.offsets))  # K6: until drained
    by_id = {t.table_id: t for t in view.tables.values()}
    committed = [
        (by_id[tid], b)
        for tid, b in sorted(view.offsets)
        if tid in by_id and (by_id[tid], b) in described and view.offsets[tid, b].history
    ]
    now, rows = bucket_rows_now(ctx, view, committed)
    missing = missing_files(ctx, record_segments(ctx, rows))
    statuses = [
        (
            row.tb,
            health.MISSING
            if (row.table.table_id, row.tb.bucket, row.record.offset) in missing
            else health.bucket_status(
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
