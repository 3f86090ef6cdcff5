"""What the metrics show of each consumer group: its health status, live members, and per
bucket the lag in records and in time, as ``describe_group`` measures them now."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from ..consumers import health
from ..consumers.group_admin import consumer_groups, describe_view, read_group
from ..structs import TableBucket

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["BucketFigures", "GroupFigures", "read_group_figures"]

_WINDOW = timedelta(seconds=60)
"""Burrow's STOP and STALL thresholds, as ``describe_group``'s defaults."""


class BucketFigures(NamedTuple):
    """One committed bucket of a group."""

    table: str
    bucket: int
    lag: int
    """Log end - committed offset, records."""
    time_lag_ms: int
    """Age of the first record not consumed (0 with no lag)."""


class GroupFigures(NamedTuple):
    """One consumer group measured now."""

    group: str
    status: str
    """Burrow status of the group: "OK", "WARN" or "ERR"."""
    members: int
    """Live members."""
    buckets: list[BucketFigures]
    """Every committed bucket of the tables it reads (never committed ones are left out)."""


def read_group_figures(ctx: Context) -> list[GroupFigures]:
    """Every consumer group of the namespace, by id.

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
        CorruptMetadataError: a group's znodes hold garbage.
    """
    out = []
    for group_id in consumer_groups(ctx):
        view = read_group(ctx, group_id)
        frame = describe_view(ctx, group_id, view, stop_after=_WINDOW, stall_after=_WINDOW)
        buckets, statuses = [], []
        committed = frame[frame["lag"].notna() & frame["status"].notna()]
        for table, bucket, lag, time_lag, status in zip(
            committed["table"],
            committed["bucket"],
            committed["lag"],
            committed["time_lag"],
            committed["status"],
        ):
            lag_ms = int(time_lag / timedelta(milliseconds=1))
            buckets.append(BucketFigures(str(table), int(bucket), int(lag), lag_ms))
            statuses.append((TableBucket(str(table), int(bucket)), str(status)))
        status = health.group_status(statuses).status
        out.append(GroupFigures(group_id, status, len(view.members), buckets))
    return out
