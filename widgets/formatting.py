"""How the panels write numbers for people: one bytes format, one duration format (the
library's ``human_duration``), grid heights that follow the rows, and a 24-hour UTC time axis
whose labels never repeat."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pandas as pd

from leasekit import BucketLineage, TableBucket
from leasekit.live import human_bytes, human_duration

__all__ = [
    "human_bytes",
    "duration_text",
    "utc_text",
    "grid_height",
    "time_axis",
    "lineage_text",
    "TICK_STEPS",
]


def duration_text(value: Any, *, missing: str = "-") -> str:
    """A duration (timedelta, pandas Timedelta or seconds) as ``human_duration`` writes it
    everywhere ("4m 40s", "2h 5m", "3d 4h"); ``missing`` for None/NaT/NaN, "∞" for infinite."""
    if value is None or value is pd.NaT:
        return missing
    if isinstance(value, (int, float, np.floating, np.integer)):
        if math.isnan(value):
            return missing
        if math.isinf(value):
            return "∞"
        value = timedelta(seconds=float(value))
    if pd.isna(value):
        return missing
    if isinstance(value, pd.Timedelta):
        value = value.to_pytimedelta()
    return human_duration(value)


def utc_text(value: Any, *, missing: str = "-") -> str:
    """A point in time as "2026-11-25 14:03:07" (24-hour, UTC); ``missing`` when there is none."""
    if value is None or value is pd.NaT or (not isinstance(value, datetime) and pd.isna(value)):
        return missing
    stamp = pd.Timestamp(value)
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return stamp.strftime("%Y-%m-%d %H:%M:%S")


SCROLLBAR = 18
"""Pixels a grid's horizontal scroll bar takes below its last row."""


def grid_height(rows: int, *, row: int = 22, least: int = 3, most: int = 15) -> str:
    """A grid's height for ``rows`` rows and its header: as tall as its rows, at least ``least``
    and at most ``most`` rows (the grid scrolls beyond)."""
    shown = min(max(rows, least), most)
    return f"{(shown + 1) * row + 4 + SCROLLBAR}px"


TICK_STEPS = [
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    2 * 86400,
    7 * 86400,
    14 * 86400,
    28 * 86400,
]
"""Seconds between time-axis ticks, from which the axis takes the finest that gives at most
``MAX_TICKS`` ticks."""
MAX_TICKS = 7


def time_axis(start: datetime, end: datetime) -> tuple[np.ndarray, str]:
    """Ticks and their format for a UTC time axis over [start, end]: whole steps (10 s, 5 min,
    1 h, 1 d ...), at most ``MAX_TICKS`` + 1 of them, written on a 24-hour clock ("%H:%M", or
    with seconds when they are seconds apart), with the date when the range spans days; no two
    ticks read the same.

    Arguments:
        start: the left end (timezone-aware or UTC).
        end: the right end.

    Returns:
        (the ticks as ``datetime64[ms]`` values, a d3/strftime format).
    """
    lo, hi = _epoch_s(start), _epoch_s(end)
    if hi < lo:
        lo, hi = hi, lo
    span = hi - lo
    step = next((s for s in TICK_STEPS if span / s <= MAX_TICKS), TICK_STEPS[-1])
    first = math.ceil(lo / step) * step
    ticks = np.arange(first, hi + step * 1e-3, step) if span else np.array([lo])
    values = (np.asarray(ticks, dtype="float64") * 1000).astype("int64").astype("datetime64[ms]")
    days = datetime.fromtimestamp(lo, timezone.utc).date() != (
        datetime.fromtimestamp(hi, timezone.utc).date()
    )
    if step >= 86400:
        fmt = "%Y-%m-%d"
    elif step < 60 or span == 0:
        fmt = "%m-%d %H:%M:%S" if days else "%H:%M:%S"
    else:
        fmt = "%m-%d %H:%M" if days else "%H:%M"
    return values, fmt


def _epoch_s(value: datetime) -> float:
    stamp = pd.Timestamp(value)
    if stamp.tzinfo is None:
        stamp = stamp.tz_localize("UTC")
    return stamp.timestamp()


def clicked_row(grid: Any, cell: dict[str, Any]) -> Any:
    """The row of ``grid``'s data that a cell click (ipydatagrid's ``on_cell_click``) names,
    None when the click names no row of it."""
    frame = grid.data
    row = cell.get("primary_key_row", cell.get("row"))
    return frame.iloc[row] if isinstance(row, int) and 0 <= row < len(frame) else None


def lineage_text(
    tables: list[str],
    buckets: list[int],
    lineage: dict[TableBucket, BucketLineage],
    undrained: set[tuple[str, int]],
) -> list[str]:
    """Each row's place in its table's rescales (K6): "sealed at offset 22,198 → 7, 8" for a
    bucket split or merged away that the group has not drained, "from 3, after its seal" for a
    new bucket whose parent the group still reads (``undrained``: parent first), "from 3" once
    it has; empty otherwise."""
    if not lineage:
        return [""] * len(buckets)
    out = []
    for t, b in zip(tables, buckets):
        lin = lineage.get(TableBucket(t, b))
        if lin is None:
            out.append("")
        elif lin.state == "sealed":
            children = ", ".join(map(str, lin.children))
            out.append(f"sealed at offset {lin.sealed_at:,} → {children}")
        else:
            waiting = any((t, p) in undrained for p in lin.parents)
            parents = ", ".join(map(str, lin.parents))
            after = "after its seal" if len(lin.parents) == 1 else "after their seals"
            out.append(f"from {parents}, {after}" if waiting else f"from {parents}")
    return out
