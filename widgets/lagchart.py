"""The lag chart of a consumer group: its lag over a chosen time range (15 minutes to 7 days)
from the lag history, for the whole group or one bucket, on a 24-hour UTC time axis."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import bqplot as bq
import ipywidgets as w
import numpy as np
import pandas as pd
import traitlets

from leasekit import TableBucket
from leasekit.live import NO_SAMPLER, human_duration

from .base import Markup, esc
from .formatting import time_axis
from .svgchart import Series, TimeChart

__all__ = ["LagChart", "RANGES", "series", "lag_chart"]

RANGES = [
    ("15m", timedelta(minutes=15)),
    ("1h", timedelta(hours=1)),
    ("6h", timedelta(hours=6)),
    ("24h", timedelta(hours=24)),
    ("7d", timedelta(days=7)),
]
"""The time ranges the chart offers (label, span)."""
ALL = "all buckets"
EVERY = "all"
"""The bucket picker's value for the whole group (a Dropdown shows None as no choice)."""


def series(
    history: pd.DataFrame, bucket: TableBucket | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The points to draw from a ``lag_history`` frame: the group's lag at each sample time (the
    buckets summed when the frame has them) or one bucket's.

    Arguments:
        history: ``conn.lag_history``'s frame (``time``, ``lag``; ``table``, ``bucket`` when
            read by bucket).
        bucket: the bucket to draw; None: the whole group.

    Returns:
        (times as ``datetime64[ms]`` in UTC, lags as floats), oldest first.
    """
    if history is None or history.empty:  # (None: nothing read)
        return np.array([], dtype="datetime64[ms]"), np.array([], dtype=float)
    frame = history
    if bucket is not None and "bucket" in frame.columns:
        frame = frame[(frame["table"] == bucket.table) & (frame["bucket"] == bucket.bucket)]
    if "bucket" in frame.columns and bucket is None:
        frame = frame.groupby("time", sort=True, as_index=False)["lag"].sum()
    frame = frame.sort_values("time", kind="stable")
    times = pd.to_datetime(frame["time"], utc=True).dt.tz_localize(None)
    return (
        times.to_numpy(dtype="datetime64[ms]"),
        frame["lag"].astype("float64").fillna(0.0).to_numpy(),
    )


def lag_chart(
    history: pd.DataFrame | None,
    end: datetime,
    span: timedelta,
    *,
    lag_now: float | None = None,
    bucket: TableBucket | None = None,
    title: str | None = None,
) -> TimeChart:
    """A group's lag over [end - span, end] as a static chart (an image in a notebook, which
    a saved notebook keeps): the points of ``series(history, bucket)``, then ``lag_now`` at
    ``end``, on the lag chart's 24-hour UTC axis.

    Arguments:
        history: ``conn.lag_history``'s frame (None or empty: no sample).
        end: the right end of the time axis (now, timezone-aware or UTC).
        span: how far back the axis goes.
        lag_now: the lag measured now; None: none.
        bucket: the bucket drawn; None: the whole group.
        title: above the chart; None: "Lag over the last <span>".

    Returns:
        A ``TimeChart``: ``.svg()``, ``.html()``, and displayed as an image.
    """
    x, y = series(history, bucket)
    if lag_now is not None and (not len(x) or x[-1] < _ms(end)):
        x, y = np.append(x, _ms(end)), np.append(y, lag_now)
    where = "all buckets" if bucket is None else f"{bucket.table}/{bucket.bucket}"
    return TimeChart(
        title=title or f"Lag over the last {human_duration(span)}, {where}",
        series=[Series(where, x, y)],
        start=end - span,
        end=end,
    )


NO_HISTORY = (
    f"<span style='color:#a86b00'>No lag history in this range (the chart shows the lag now): "
    f"{esc(NO_SAMPLER[0])}. Start one with <code>{esc(NO_SAMPLER[1])}</code>.</span>"
)
"""What the chart says when it has no sample to draw (M1)."""


class LagChart(w.VBox):
    """A time-range picker, a bucket picker and the lag line.

    Arguments:
        on_choice: called when the user picks another range or bucket (the data must be read
            again for it).
    """

    span = traitlets.Instance(timedelta, help="the time range shown, back from now")
    bucket = traitlets.Instance(TableBucket, allow_none=True, help="the bucket shown; None: all")

    def __init__(self, on_choice: Callable[[], None]) -> None:
        super().__init__()
        self.add_class("leasekit-lag-chart")
        self.set_trait("span", timedelta(hours=1))
        self.range = w.ToggleButtons(
            options=RANGES, value=timedelta(hours=1), style={"button_width": "60px"}
        )
        self.range.add_class("leasekit-lag-range")
        self.buckets = w.Dropdown(
            description="Bucket",
            options=[(ALL, EVERY)],
            value=EVERY,
            layout=w.Layout(width="260px"),
        )
        self.x, self.y = bq.DateScale(), bq.LinearScale(min=0.0)
        self.line = bq.Lines(
            x=np.array([], dtype="datetime64[ms]"),
            y=np.array([], dtype=float),
            scales={"x": self.x, "y": self.y},
            interpolation="step-after",
            colors=["#e39b3b"],
        )
        self.x_axis = bq.Axis(scale=self.x, label="time (UTC)", tick_format="%H:%M")
        self.y_axis = bq.Axis(
            scale=self.y,
            orientation="vertical",
            label="lag (records)",
            tick_format="~s",
            label_offset="48px",
        )
        self.figure = bq.Figure(
            marks=[self.line],
            axes=[self.x_axis, self.y_axis],
            title="Lag over time",
            layout=w.Layout(height="260px"),
            fig_margin={"top": 40, "bottom": 40, "left": 72, "right": 20},
        )
        self.range.observe(self._picked, "value")
        self.buckets.observe(self._picked, "value")
        self._on_choice = on_choice
        self.notice = w.HTML("")
        self.notice.add_class("leasekit-lag-notice")
        self.children = [w.HBox([self.range, self.buckets]), self.notice, self.figure]

    def _picked(self, change: dict) -> None:
        if change["new"] == change["old"]:
            return
        with self.hold_trait_notifications():
            self.span = self.range.value
            self.bucket = None if self.buckets.value == EVERY else self.buckets.value
        self._on_choice()

    def show(
        self,
        buckets: list[TableBucket],
        history: pd.DataFrame | None,
        end: datetime,
        *,
        lag_now: float | None = None,
    ) -> None:
        """Draw ``history`` over [end - span, end], then ``lag_now`` at ``end``, and offer
        ``buckets`` to pick from.

        Arguments:
            buckets: the group's buckets (the picker's choices besides "all").
            history: ``lag_history``'s frame for the chosen range and bucket (None: no data).
            end: the right end of the time axis (now).
            lag_now: the lag measured now (of the group or the bucket shown); None: none.
        """
        options = [(ALL, EVERY), *((f"{tb.table}/{tb.bucket}", tb) for tb in buckets)]
        if [o for _, o in options] != [o for _, o in self.buckets.options]:
            keep = self.buckets.value if self.buckets.value in buckets else EVERY
            with self.buckets.hold_trait_notifications():
                self.buckets.unobserve(self._picked, "value")
                self.buckets.options = options
                self.buckets.value = keep
                self.buckets.observe(self._picked, "value")
            self.bucket = None if keep == EVERY else keep
        x, y = series(history, self.bucket)
        if lag_now is not None and (not len(x) or x[-1] < _ms(end)):
            x, y = np.append(x, _ms(end)), np.append(y, lag_now)
        start = end - self.span
        ticks, fmt = time_axis(start, end)
        with self.line.hold_sync():
            self.line.x, self.line.y = x, y
        self.x.min, self.x.max = _ms(start), _ms(end)
        with self.x_axis.hold_sync():
            self.x_axis.tick_values, self.x_axis.tick_format = ticks, fmt
        self.y.max = float(max(1.0, y.max() * 1.1 if len(y) else 1.0))
        where = (
            "all buckets" if self.bucket is None else f"{self.bucket.table}/{self.bucket.bucket}"
        )
        self.figure.title = f"Lag over the last {self.range.label}, {where}"
        self.notice.value = "" if history is not None and not history.empty else NO_HISTORY

    def chart(self) -> TimeChart:
        """What the figure shows now, as a static chart: its title, line and time range."""
        x, y = np.asarray(self.line.x), np.asarray(self.line.y, dtype=float)
        where = (
            "all buckets" if self.bucket is None else f"{self.bucket.table}/{self.bucket.bucket}"
        )
        now = datetime.now(timezone.utc)
        end = now if self.x.max is None else _utc(self.x.max)
        start = end - self.span if self.x.min is None else _utc(self.x.min)
        return TimeChart(
            title=self.figure.title or "Lag over time",
            series=[Series(where, x.astype("datetime64[ms]"), y)],
            start=start,
            end=end,
        )

    def to_html(self) -> Markup:
        """The chart as static HTML: the notice (why there is no history) and the image."""
        notice = f"<div>{self.notice.value}</div>" if self.notice.value else ""
        return Markup(f'<div class="leasekit-lag-chart">{notice}{self.chart().html()}</div>')


def _ms(value: datetime) -> np.datetime64:
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_convert("UTC").tz_localize(None) if stamp.tzinfo else stamp
    return stamp.to_datetime64().astype("datetime64[ms]")


def _utc(value: object) -> datetime:
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.to_pydatetime()
