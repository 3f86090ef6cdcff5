"""A consumer group's rates over the rate window (M2) and the falling-behind rule (M6): the
record and its measure from lag-history samples, pure computation shared by the overview, the
metrics and the panels."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BEHIND_RATIO", "Rates", "history_rates"]

BEHIND_RATIO = 0.9
"""M6: a group consuming below this share of its produce rate may be BEHIND."""


class Rates(NamedTuple):
    """A group's rates over the rate window (records per second); NaN with fewer than two
    samples in it."""

    consume: float
    """Records committed per second: the committed offsets' growth between the window's first
    and last samples, summed over the buckets committed in both."""
    produce: float
    """Records appended per second to the buckets the group reads (their log ends' growth)."""
    lag_growth: float = math.nan
    """Total lag at the window's last sample minus at its first, over the same buckets."""

    @property
    def known(self) -> bool:
        """Whether the window held two samples to measure rates between."""
        return not (math.isnan(self.consume) or math.isnan(self.produce))

    @property
    def behind(self) -> bool:
        """M6: consuming below ``BEHIND_RATIO`` of the produce rate with the lag higher at the
        window's end than at its start."""
        return self.known and self.consume < BEHIND_RATIO * self.produce and self.lag_growth > 0


def history_rates(history: pd.DataFrame, now_ms: int, window_ms: int) -> Rates:
    """A group's ``Rates`` over the window ``[now_ms - window_ms, now_ms]`` from a frame of
    ``lag_history`` (totals per sample, or by bucket: summed per sample), between its first
    and last samples in the window: what a view that already holds the group's history shows
    without another read (M6). NaN rates with fewer than two samples there."""
    import pandas as pd

    nan = Rates(math.nan, math.nan)
    if history is None or len(history) < 2:
        return nan
    frame = history
    if "bucket" in frame.columns:
        frame = frame.groupby("time", as_index=False)[["committed", "end", "lag"]].sum()
    start = pd.Timestamp(now_ms - window_ms, unit="ms", tz="UTC")
    frame = frame[frame["time"] >= start].sort_values("time")
    if len(frame) < 2:
        return nan
    first, last = frame.iloc[0], frame.iloc[-1]
    seconds = (last["time"] - first["time"]).total_seconds()
    values = [first["committed"], last["committed"], first["end"], last["end"]]
    if seconds <= 0 or any(pd.isna(v) for v in values):
        return nan
    consumed = max(0.0, float(last["committed"]) - float(first["committed"]))
    produced = max(0.0, float(last["end"]) - float(first["end"]))
    return Rates(consumed / seconds, produced / seconds, float(last["lag"]) - float(first["lag"]))
