"""``lag_history`` (M1): a group's sampled lag over a time range, summed over its
buckets or per bucket, as a pandas DataFrame."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from ...consumers import offsets as stored
from ...durations import parse_duration, to_ms
from ...errors import InvalidArgumentError
from ...validate import check_bool
from .history import read_rows

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from ...context import Context

__all__ = [
    "lag_history",
    "lag_histories",
    "HISTORY_COLUMNS",
    "BUCKET_HISTORY_COLUMNS",
    "DEFAULT_SINCE",
    "time_ms",
]

HISTORY_COLUMNS = ["time", "lag", "time_lag", "committed", "end"]
BUCKET_HISTORY_COLUMNS = ["time", "table", "bucket", "lag", "time_lag", "committed", "end"]

DEFAULT_SINCE = timedelta(hours=6)
"""What ``since=None`` means: the last 6 hours (720 samples at the default interval), enough
to see a trend and read in a fraction of a second; older samples are there on request, up to
``monitor.retention``."""


def time_ms(value: Any, now_ms: int, *, what: str) -> int:
    """Epoch ms of ``value``: a datetime (naive means UTC), or a duration back from ``now_ms``
    (a ``timedelta``, seconds or a string like ``"6h"``).

    Raises:
        InvalidArgumentError, InvalidDurationError: a bad value, naming ``what``.
    """
    if isinstance(value, datetime):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
        return int(stamp.timestamp() * 1000)
    if hasattr(value, "to_pydatetime"):  # a pandas Timestamp
        return time_ms(value.to_pydatetime(), now_ms, what=what)
    duration = parse_duration(value, what=what)
    if duration < timedelta(0):
        raise InvalidArgumentError(f"{what} must be a datetime or a duration back from now >= 0")
    return now_ms - to_ms(duration)


def lag_history(
    ctx: Context,
    group_id: str,
    *,
    since: Any = None,
    until: Any = None,
    by_bucket: bool = False,
) -> pd.DataFrame:
    """The group's sampled lag from ``since`` to ``until`` (see ``Connection.lag_history``)."""
    group_id = stored.check_group_id(group_id)
    check_bool(by_bucket, "by_bucket")
    start, end = _range(ctx, since, until)
    data = read_rows(ctx, start, end, [group_id])
    if data.num_rows == 0 and not _exists(ctx, group_id):
        raise InvalidArgumentError(
            f"consumer group {group_id!r} does not exist in namespace {ctx.namespace!r} "
            "(no committed offsets, no live members) and has no lag history in that range"
        )
    return _per_bucket(data) if by_bucket else _per_group(data)


def lag_histories(
    ctx: Context, group_ids: Iterable[str], *, since: Any = None, until: Any = None
) -> dict[str, pd.DataFrame]:
    """Each group's ``lag_history`` (summed over its buckets) from one read of the history and
    one pyarrow group-by: what a panel showing every group's trend needs, at the cost of one
    ``lag_history``. A group without samples in the range gets an empty frame.

    Raises:
        InvalidArgumentError: a bad group id, or ``until`` before ``since``.
    """
    import pyarrow.compute as pc

    ids = list(dict.fromkeys(stored.check_group_id(g) for g in group_ids))
    start, end = _range(ctx, since, until)
    if not ids:
        return {}
    sums = _sums(read_rows(ctx, start, end, ids), ["group", "time"])
    return {g: _summed(sums.filter(pc.equal(sums["group"], g))) for g in ids}


def _range(ctx: Context, since: Any, until: Any) -> tuple[int, int]:
    """[since, until] in epoch ms on the ZooKeeper clock (``since=None``: ``DEFAULT_SINCE``
    back; ``until=None``: now)."""
    now = ctx.server_time_ms()
    start = time_ms(DEFAULT_SINCE if since is None else since, now, what="since")
    end = now if until is None else time_ms(until, now, what="until")
    if end < start:
        raise InvalidArgumentError("until must not be before since")
    return start, end


def _exists(ctx: Context, group_id: str) -> bool:
    paths = ctx.paths
    listed = ctx.store.children_many([paths.group_offsets(group_id), paths.group_members(group_id)])
    return any(listed)


def _typed(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    import pandas as pd

    frame = frame.sort_values(
        [c for c in ("time", "table", "bucket") if c in columns], kind="stable", ignore_index=True
    )
    out = pd.DataFrame({"time": pd.to_datetime(frame["time"], utc=True)})
    if "table" in columns:
        out["table"] = frame["table"].astype("string")
        out["bucket"] = frame["bucket"].astype("Int64")
    out["lag"] = frame["lag"].astype("Int64")
    out["time_lag"] = pd.to_timedelta(frame["time_lag_ms"].astype("Float64"), unit="ms")
    out["committed"] = frame["committed"].astype("Int64")
    out["end"] = frame["end"].astype("Int64")
    return out[columns]


def _pandas(data: pa.Table) -> pd.DataFrame:
    """``data`` as pandas, its integer columns nullable (``Int64``): no value rounds through a
    float."""
    import pandas as pd
    import pyarrow as pa

    return data.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def _per_bucket(data: pa.Table) -> pd.DataFrame:
    return _typed(_pandas(data), BUCKET_HISTORY_COLUMNS)


def _per_group(data: pa.Table) -> pd.DataFrame:
    """One row per sample: lag, committed and end summed over the committed buckets (end over
    all), time lag the largest; <NA> where no bucket was committed. Summed by pyarrow, so only
    the samples (not every bucket of each) become pandas rows."""
    return _summed(_sums(data, ["time"]))


def _sums(data: pa.Table, keys: list[str]) -> pa.Table:
    """``data``'s lag, committed and end summed and its time lag maximised per ``keys`` (a sum
    or max over nothing but nulls is null, as <NA> in pandas with min_count=1)."""
    return data.group_by(keys).aggregate(
        [("lag", "sum"), ("time_lag_ms", "max"), ("committed", "sum"), ("end", "sum")]
    )


def _summed(sums: pa.Table) -> pd.DataFrame:
    """``_sums`` per sample as ``lag_history``'s frame."""
    frame = _pandas(sums.select(["time", "lag_sum", "time_lag_ms_max", "committed_sum", "end_sum"]))
    frame.columns = ["time", "lag", "time_lag_ms", "committed", "end"]
    return _typed(frame, HISTORY_COLUMNS)
