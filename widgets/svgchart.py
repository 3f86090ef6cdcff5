"""Time series drawn as SVG, for what outlives the kernel: a chart of lines over a 24-hour UTC
time axis (the ticks of ``formatting.time_axis``), with its title, axes and legend, as an image
that any HTML reader shows."""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from .base import Markup, esc
from .formatting import time_axis

__all__ = ["Series", "TimeChart", "PALETTE", "compact_number"]

PALETTE = ["#e39b3b", "#3b6fb6", "#2e8b57", "#b00020", "#7b4fa8", "#8c6d31"]
"""The series' colours, in order (the first is the lag chart's)."""
WIDTH, HEIGHT = 760, 280
TOP, RIGHT, BOTTOM, LEFT = 44, 24, 48, 72
MARKERS = 60
"""Series of at most this many points also mark each point."""


@dataclass(frozen=True)
class Series:
    """One line of a chart."""

    label: str
    """What the legend calls it (user text: escaped)."""
    times: np.ndarray
    """Sample times as ``datetime64[ms]`` in UTC, oldest first."""
    values: np.ndarray
    """The value at each time."""


@dataclass(frozen=True)
class TimeChart:
    """A chart of ``series`` over [start, end], drawn as SVG; in a notebook it displays as an
    image (``text/html`` and ``image/svg+xml``), so a saved notebook shows it without a kernel.

    Lines step after each point: a value holds until the next sample (as the widget draws).
    """

    title: str
    """Above the chart (user text: escaped)."""
    series: Sequence[Series]
    start: datetime
    """The time axis' left end (UTC)."""
    end: datetime
    """The time axis' right end (UTC)."""
    y_label: str = "lag (records)"
    x_label: str = "time (UTC)"

    def svg(self) -> str:
        """The chart as a standalone SVG document (no script, no external reference)."""
        lo, hi = _ms(self.start), _ms(self.end)
        hi = hi if hi > lo else lo + 1
        top = max((float(np.nanmax(s.values)) for s in self.series if len(s.values)), default=0)
        y_max = max(1.0, top * 1.1)
        width, height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

        def x_of(ms: float) -> float:
            return LEFT + width * (ms - lo) / (hi - lo)

        def y_of(value: float) -> float:
            return TOP + height * (1 - value / y_max)

        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11" '
            'class="leasekit-chart">',
            f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
            f'<text class="leasekit-chart-title" x="{LEFT}" y="20" font-size="13" '
            f'font-weight="bold">{esc(self.title)}</text>',
            *_y_axis(y_max, y_of, width),
            *_x_axis(self.start, self.end, x_of, lo, hi),
            f'<rect x="{LEFT}" y="{TOP}" width="{width}" height="{height}" fill="none" '
            'stroke="#999"/>',
            f'<text x="{LEFT + width / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
            f"{esc(self.x_label)}</text>",
            f'<text transform="translate(16,{TOP + height / 2:.1f}) rotate(-90)" '
            f'text-anchor="middle">{esc(self.y_label)}</text>',
        ]
        for i, s in enumerate(self.series):
            parts += _line(s, PALETTE[i % len(PALETTE)], x_of, y_of)
        parts += _legend(self.series)
        return "".join(parts) + "</svg>"

    def html(self) -> Markup:
        """The chart as an ``<img>`` whose source is the SVG itself (a data URI): HTML readers
        that drop inline ``<svg>`` (JupyterLab's sanitizer for notebooks not trusted) keep it."""
        svg = base64.b64encode(self.svg().encode()).decode("ascii")
        return Markup(
            f'<img class="leasekit-chart-image" alt="{esc(self.describe())}" width="{WIDTH}" '
            f'height="{HEIGHT}" style="max-width:100%;height:auto" '
            f'src="data:image/svg+xml;base64,{svg}"/>'
        )

    def describe(self) -> str:
        """The chart in words (the image's alternative text)."""
        lines = [
            f"{s.label}: {len(s.values)} point{'s' if len(s.values) != 1 else ''}"
            + (f", last {compact_number(float(s.values[-1]))}" if len(s.values) else "")
            for s in self.series
        ]
        return f"{self.title} ({'; '.join(lines) or 'no data'})"

    def _repr_html_(self) -> str:
        return self.html()

    def _repr_svg_(self) -> str:
        return self.svg()

    def __repr__(self) -> str:
        return self.describe()


def compact_number(value: float) -> str:
    """A number as the chart's axis writes it: "950", "1.5k", "12M" (d3's "~s")."""
    for size, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}" if value != int(value) else f"{int(value)}"


def _y_axis(y_max: float, y_of: Any, width: float) -> list[str]:
    raw = y_max / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    step = max(1.0, next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw))
    out = []
    for k in range(int(y_max // step) + 1):
        value, y = k * step, y_of(k * step)
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text class="leasekit-y-tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{compact_number(value)}</text>"
        )
    return out


def _x_axis(start: datetime, end: datetime, x_of: Any, lo: float, hi: float) -> list[str]:
    ticks, fmt = time_axis(start, end)
    bottom = HEIGHT - BOTTOM
    out = []
    for tick in ticks:
        ms = float(tick.astype("int64"))
        if not lo <= ms <= hi:
            continue
        x = x_of(ms)
        label = pd.Timestamp(tick).strftime(fmt)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{bottom + 4}" stroke="#eee"/>'
            f'<text class="leasekit-x-tick" x="{x:.1f}" y="{bottom + 16}" '
            f'text-anchor="middle">{esc(label)}</text>'
        )
    return out


def _line(s: Series, colour: str, x_of: Any, y_of: Any) -> list[str]:
    xs = [x_of(float(t)) for t in np.asarray(s.times, dtype="datetime64[ms]").astype("int64")]
    ys = [y_of(float(v)) for v in np.nan_to_num(np.asarray(s.values, dtype=float))]
    if not xs:
        return []
    points = [(xs[0], ys[0])]
    for i in range(1, len(xs)):  # step after: the value holds until the next sample
        points += [(xs[i], ys[i - 1]), (xs[i], ys[i])]
    out = [
        f'<polyline class="leasekit-series" data-label="{esc(s.label)}" fill="none" '
        f'stroke="{colour}" stroke-width="2" '
        f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in points)}"/>'
    ]
    if len(xs) <= MARKERS:
        r = 4 if len(xs) == 1 else 2.5  # a lone point (the lag now only) must still be seen
        out += [
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour}"/>' for x, y in zip(xs, ys)
        ]
    return out


def _legend(series: Sequence[Series]) -> list[str]:
    out = []
    x = WIDTH - RIGHT
    for i, s in reversed(list(enumerate(series))):
        label = s.label[:40]
        x -= 30 + 6.5 * len(label)
        colour = PALETTE[i % len(PALETTE)]
        out.append(
            f'<g class="leasekit-legend"><line x1="{x:.1f}" x2="{x + 18:.1f}" y1="{TOP - 10}" '
            f'y2="{TOP - 10}" stroke="{colour}" stroke-width="3"/><text x="{x + 22:.1f}" '
            f'y="{TOP - 6}">{esc(label)}</text></g>'
        )
    return out


def _ms(value: datetime) -> float:
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp
    return stamp.timestamp() * 1000
