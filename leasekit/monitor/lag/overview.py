"""``group_overview`` (M2, M3, M6): one row per consumer group with its state,
lag, status, consume and produce rates from the lag history, the time to catch up, and how long
until retention may delete a record it has not consumed. The status is the worst of the group's
Burrow status, ``BEHIND`` (consuming slower than its tables grow, its lag rising over the rate
window) and ``AT_RISK`` (retention may delete what it has not consumed, soon or before it
catches up).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, NamedTuple

from ...durations import to_ms
from ...rates import Rates
from .history import read_rows
from .readings import GroupReading, read_all_groups

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from ...context import Context

__all__ = [
    "group_overview",
    "OVERVIEW_COLUMNS",
    "AT_RISK",
    "BEHIND",
    "SEVERITY",
    "worst",
    "Rates",
    "rates",
    "assess",
    "assess_groups",
    "Assessment",
]

OVERVIEW_COLUMNS = [
    "group",
    "state",
    "members",
    "generation",
    "tables",
    "total_lag",
    "max_time_lag",
    "status",
    "consume_rate",
    "produce_rate",
    "eta",
    "retention_headroom",
    "last_commit",
]

AT_RISK = "AT_RISK"
BEHIND = "BEHIND"
SEVERITY = ("OK", "WARN", BEHIND, AT_RISK, "ERR")
"""The overview's statuses, least severe first (M6: ERR > AT_RISK > BEHIND > WARN > OK)."""


def worst(*statuses: str) -> str:
    """The most severe of ``statuses`` by ``SEVERITY`` (one it does not know counts as OK)."""
    return max(statuses, key=lambda s: SEVERITY.index(s) if s in SEVERITY else 0)


log = logging.getLogger(__name__)


class Assessment(NamedTuple):
    """What ``assess`` makes of a reading and its rates (times in ms; None: NaT)."""

    eta_ms: float | None
    headroom_ms: int | None
    status: str
    behind: bool = False
    """M6 holds (whatever the status shows: ERR is worse)."""
    at_risk: bool = False
    """M3 holds (whatever the status shows: ERR is worse)."""


def group_overview(ctx: Context) -> pd.DataFrame:
    """Every consumer group now (see ``Connection.group_overview``)."""
    skipped: list[str] = []
    readings = read_all_groups(ctx, skipped=skipped)
    for reason in skipped:
        log.warning("group overview left out %s", reason)
    return _frame(assess_groups(ctx, readings))


def assess_groups(
    ctx: Context, readings: list[GroupReading]
) -> list[tuple[GroupReading, Rates, Assessment]]:
    """Each reading with its rates over ``monitor.rate-window`` (one read of the lag history
    for all of them) and its ``assess``-ment under the namespace's settings."""
    if not readings:
        return []
    settings = ctx.settings()
    window_ms = to_ms(settings["monitor.rate-window"])
    risk_ms = to_ms(settings["monitor.risk-threshold"])
    now = readings[0].time_ms
    samples = read_rows(
        ctx,
        now - window_ms,
        now,
        [r.group for r in readings],
        ["time", "group", "table", "bucket", "committed", "end", "lag"],
    )
    by_group = rates(samples)
    nan = Rates(math.nan, math.nan)
    rows = []
    for reading in readings:
        rate = by_group.get(reading.group, nan)
        rows.append((reading, rate, assess(reading, rate, risk_ms)))
    return rows


def rates(samples: pa.Table) -> dict[str, Rates]:
    """Each group's ``Rates`` from history rows (time, group, table, bucket, committed, end,
    lag): between its first and its last sample, per bucket present in both (growth below 0, a
    rewind or a recreated table, counts as none; the lag's growth is taken as it is)."""
    data = samples.to_pandas()
    if data.empty:
        return {}
    by_group = data.groupby("group")["time"]
    data["first"], data["last"] = by_group.transform("min"), by_group.transform("max")
    keys = ["group", "table", "bucket"]
    columns = ["time", "committed", "end", "lag"]
    before = data[data["time"] == data["first"]].set_index(keys)[columns]
    after = data[data["time"] == data["last"]].set_index(keys)[columns]
    both = before.join(after, lsuffix="_0", rsuffix="_1", how="inner")
    both = both[both["time_1"] > both["time_0"]]
    if both.empty:
        return {}
    growth = both.assign(
        consumed=(both["committed_1"].astype("float64") - both["committed_0"]).clip(lower=0),
        produced=(both["end_1"].astype("float64") - both["end_0"]).clip(lower=0),
    ).groupby(level="group")
    totals = growth[["consumed", "produced", "lag_0", "lag_1"]].sum()
    seconds = (growth["time_1"].first() - growth["time_0"].first()).dt.total_seconds()
    return {
        str(group): Rates(
            float(row.consumed) / seconds[group],
            float(row.produced) / seconds[group],
            float(row.lag_1) - float(row.lag_0),
        )
        for group, row in totals.iterrows()
    }


def assess(reading: GroupReading, rate: Rates, risk_ms: int) -> Assessment:
    """M2, M3: the time to catch up at ``rate`` (0 with no lag; None when not catching up or
    not known), the retention headroom (the least, over the buckets with records not consumed
    and a time retention, of log.retention - their time lag, at least 0; None: no such
    bucket, nothing retention may take), and the status: the worst (M6) of the group's Burrow
    status, ``BEHIND`` when ``rate`` says so, and ``AT_RISK`` when the headroom is below the ETA
    or below ``risk_ms``."""
    lag = reading.total_lag
    gain = rate.consume - rate.produce
    eta = 0.0 if lag == 0 else lag * 1000 / gain if gain > 0 else None
    headroom = min(
        (
            max(0, reading.retention_ms[b.table_bucket.table] - b.time_lag_ms)
            for b in reading.buckets
            if b.lag
            and b.time_lag_ms is not None
            and reading.retention_ms.get(b.table_bucket.table) is not None
        ),
        default=None,
    )
    risky = headroom is not None and (headroom < risk_ms or (eta is not None and headroom < eta))
    behind = rate.behind
    status = worst(reading.status, BEHIND if behind else "OK", AT_RISK if risky else "OK")
    return Assessment(eta, headroom, status, behind, risky)


def _frame(rows: list[tuple[GroupReading, Rates, Assessment]]) -> pd.DataFrame:
    import pandas as pd

    def span(ms: float | None) -> float:
        return math.nan if ms is None else float(ms)

    records = [
        {
            "group": r.group,
            "state": r.state,
            "members": len(r.members),
            "generation": r.generation,
            "tables": r.tables,
            "total_lag": r.total_lag,
            "max_time_lag": span(
                max((b.time_lag_ms for b in r.buckets if b.time_lag_ms is not None), default=None)
            ),
            "status": a.status,
            "consume_rate": rate.consume,
            "produce_rate": rate.produce,
            "eta": span(a.eta_ms),
            "retention_headroom": span(a.headroom_ms),
            "last_commit": max(
                (b.last_commit_ms for b in r.buckets if b.last_commit_ms is not None),
                default=None,
            ),
        }
        for r, rate, a in rows
    ]
    frame = pd.DataFrame(records, columns=OVERVIEW_COLUMNS)
    for column in ("group", "state", "status"):
        frame[column] = frame[column].astype("string")
    frame["members"] = frame["members"].astype("int64")
    frame["generation"] = pd.array([x["generation"] for x in records], dtype="Int64")
    frame["total_lag"] = frame["total_lag"].astype("int64")
    for column in ("consume_rate", "produce_rate"):
        frame[column] = frame[column].astype("float64")
    for column in ("max_time_lag", "eta", "retention_headroom"):
        frame[column] = pd.to_timedelta(frame[column].astype("float64"), unit="ms")
    frame["last_commit"] = pd.to_datetime(frame["last_commit"], unit="ms", utc=True)
    return frame
