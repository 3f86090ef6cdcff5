"""One reading of every consumer group of a namespace (docs/monitoring.md): per group its members,
generation and Burrow status, and per bucket committed, log end, lag, time lag, owner, last
commit and status, read for all groups at once in a handful of pipelined round trips."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from ...consumers.admin import health
from ...consumers.admin.group_admin import BucketLag, bucket_lags
from ...consumers.admin.group_view import (
    GroupView,
    Row,
    every_bucket,
    members_of,
    missing_files,
    read_groups,
    record_segments,
    rows_of_states,
)
from ...durations import to_ms
from ...memory import collector_paused
from ...structs import MemberInfo
from ...tables.info import TableInfo
from ...zk.formats import BucketState

if TYPE_CHECKING:
    from ...context import Context

__all__ = ["GroupReading", "BucketLag", "read_all_groups"]


class GroupReading(NamedTuple):
    """A consumer group as read now."""

    group: str
    time_ms: int
    """ZooKeeper time of the reading (epoch ms); time lags and statuses are measured at it."""
    members: tuple[MemberInfo, ...]
    """Live members, oldest (the leader) first."""
    generation: int | None
    """The published assignment's generation (None before the first)."""
    status: str
    """Burrow status of the group: "OK", "WARN" or "ERR" (its worst bucket's)."""
    buckets: tuple[BucketLag, ...]
    """Every bucket of the tables it has offsets for or subscribes to (``describe_group``'s
    rows), by table name and bucket."""
    retention_ms: dict[str, int | None]
    """Per table of ``buckets``: its ``log.retention`` in ms, None when retention waits for
    consumers (``log.retention.respect-consumers``)."""

    @property
    def state(self) -> str:
        """ "live" with live members, else "empty" (Kafka's Stable / Empty)."""
        return "live" if self.members else "empty"

    @property
    def tables(self) -> list[str]:
        """The tables of ``buckets``, sorted."""
        return sorted({b.table_bucket.table for b in self.buckets})

    @property
    def total_lag(self) -> int:
        """Lag summed over the committed buckets."""
        return sum(b.lag for b in self.buckets if b.lag)


def read_all_groups(
    ctx: Context,
    group_ids: Iterable[str] | None = None,
    *,
    stop_after: timedelta = timedelta(seconds=60),
    stall_after: timedelta = timedelta(seconds=60),
    skipped: list[str] | None = None,
) -> list[GroupReading]:
    """Every consumer group of the namespace (or those of ``group_ids``), read at once.

    The reads of all groups go in pipelined batches: the groups' listings, their znodes, the
    ZooKeeper clock with every bucket state, the log listings and the segment records holding
    the committed offsets: six round trips whatever the number of groups (100 groups of 100
    buckets read in well under a second), and one look-up of those segments' files in the
    warehouse, so a bucket whose next record's file is lost is ``MISSING`` as in
    ``group_status``.

    Arguments:
        ctx: the connection's context.
        group_ids: the groups to read; None for every group with offsets or live members.
        stop_after, stall_after: Burrow's STOP and STALL thresholds (docs/consumers.md).
        skipped: where to note groups left out because their znodes hold garbage; None
            raises instead.

    Returns:
        One ``GroupReading`` per group with offsets or live members, by group id.

    Raises:
        CorruptMetadataError: a group's znodes hold garbage (without ``skipped``), or a bucket
            state or segment record does.
        ZooKeeperUnavailableError: ZooKeeper did not answer.
    """
    with collector_paused():  # ~100,000 acyclic objects for 100 groups of 100 buckets
        return _read(ctx, group_ids, to_ms(stop_after), to_ms(stall_after), skipped)


def _read(
    ctx: Context,
    group_ids: Iterable[str] | None,
    stop_ms: int,
    stall_ms: int,
    skipped: list[str] | None,
) -> list[GroupReading]:
    if group_ids is None:
        ids = ctx.store.children(ctx.paths.groups) or []
    else:
        ids = list(group_ids)
    views = read_groups(ctx, sorted(set(ids)), skip_empty=True, skipped=skipped)
    keys = {g: every_bucket(view.described(), view.offsets) for g, view in views.items()}
    unique = sorted({(t.table_id, b) for ks in keys.values() for t, b in ks})
    zk_now, nodes = ctx.read_with_clock([ctx.paths.bucket(tid, b) for tid, b in unique])
    now = ctx.clock(zk_now)  # lags are measured on the clock that decides ages (tests shift it)
    states = {
        key: None if node is None else BucketState.decode(node, ctx.paths.bucket(*key))
        for key, node in zip(unique, nodes)
    }
    rows = {g: _rows(views[g], ks, states) for g, ks in keys.items()}
    segments = record_segments(ctx, (r for rs in rows.values() for r in rs))
    times = {key: held.stamp for key, held in segments.items()}
    missing = missing_files(ctx, segments)  # MISSING, as group_status says (one file listing)
    out = []
    for group_id, view in views.items():
        lags = bucket_lags(
            view,
            rows[group_id],
            now,
            times,
            stop_after_ms=stop_ms,
            stall_after_ms=stall_ms,
            missing=missing,
        )
        out.append(_reading(group_id, view, zk_now, lags))
    return out


def _rows(
    view: GroupView,
    keys: list[tuple[TableInfo, int]],
    states: dict[tuple[str, int], BucketState | None],
) -> list[Row]:
    """As ``group_view.bucket_rows``, from bucket states decoded once for every group."""
    return rows_of_states(view, keys, [states[table.table_id, b] for table, b in keys])


def _reading(group_id: str, view: GroupView, now: int, lags: list[BucketLag]) -> GroupReading:
    status = health.group_status((x.table_bucket, x.status) for x in lags if x.status).status
    tables = {t.name: t for t in view.described()}
    return GroupReading(
        group_id,
        now,
        tuple(members_of(view)),
        view.generation,
        status,
        tuple(lags),
        {name: _retention_ms(t) for name, t in tables.items()},
    )


def _retention_ms(table: TableInfo) -> int | None:
    props = table.properties
    return None if props["log.retention.respect-consumers"] else to_ms(props["log.retention"])
