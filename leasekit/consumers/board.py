"""A group as a dashboard shows it, from one reading: ``describe_group``'s rows with each
bucket's commit metadata, the live members, and the lag history the commit windows hold."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, NamedTuple

from ..structs import MemberInfo, TableBucket
from . import group_admin
from . import offsets as stored

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context

__all__ = ["GroupBoard", "group_board", "HISTORY_COLUMNS"]

HISTORY_COLUMNS = ["table", "bucket", "commit_time", "offset", "log_end_offset", "lag"]


class GroupBoard(NamedTuple):
    """One reading of a consumer group."""

    frame: pd.DataFrame
    """``describe_group``'s columns plus ``metadata`` (the last commit's, ``<NA>`` if none)."""
    history: pd.DataFrame
    """HISTORY_COLUMNS: each commit of each bucket's window (the last 10), oldest first, with
    the log end then and the lag at that commit."""
    members: list[MemberInfo]
    """Live members, oldest (the leader) first."""
    generation: int | None
    leader: str | None


def group_board(
    ctx: Context,
    group_id: str,
    *,
    stop_after: timedelta = timedelta(seconds=60),
    stall_after: timedelta = timedelta(seconds=60),
) -> GroupBoard:
    """Read the group once (the round trips of ``describe_group``)."""
    import pandas as pd

    group_id = stored.check_group_id(group_id)
    view = group_admin.read_group(ctx, group_id)
    frame = group_admin.describe_view(
        ctx, group_id, view, stop_after=stop_after, stall_after=stall_after
    )
    by_id = {t.table_id: t for t in view.tables.values()}
    records = {
        TableBucket(by_id[tid].name, b): rec
        for (tid, b), rec in view.offsets.items()
        if tid in by_id
    }
    frame["metadata"] = pd.array(
        [
            None if (rec := records.get(TableBucket(t, b))) is None else rec.metadata
            for t, b in zip(frame["table"], frame["bucket"])
        ],
        dtype="string",
    )
    shown = set(zip(frame["table"], frame["bucket"]))
    rows = [
        (tb.table, tb.bucket, c.time_ms, c.offset, c.log_end, max(0, c.log_end - c.offset))
        for tb, rec in records.items()
        if (tb.table, tb.bucket) in shown
        for c in rec.history
    ]
    history = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    history["commit_time"] = pd.to_datetime(history["commit_time"], unit="ms", utc=True)
    history = history.sort_values("commit_time", kind="stable", ignore_index=True)
    return GroupBoard(frame, history, group_admin.members_of(view), view.generation, view.leader)


def total_lag_over_time(history: pd.DataFrame) -> pd.DataFrame:
    """The group's lag summed over its buckets after each commit (each bucket counting the lag
    at its latest commit so far): columns ``commit_time`` and ``lag``."""
    import pandas as pd

    if history.empty:
        return pd.DataFrame(
            {
                "commit_time": pd.Series([], dtype="datetime64[ms, UTC]"),
                "lag": pd.Series([], dtype="int64"),
            }
        )
    keyed = history.assign(key=list(zip(history["table"], history["bucket"])))
    # each commit changes its bucket's contribution by (its lag - that bucket's previous lag)
    previous = keyed.groupby("key", sort=False)["lag"].shift(1, fill_value=0)
    total = (keyed["lag"] - previous).cumsum()
    return pd.DataFrame({"commit_time": keyed["commit_time"], "lag": total.astype("int64")})
