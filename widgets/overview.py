"""OverviewPanel: the namespace at a glance — every consumer group with its status (the most
severe first and highlighted: ERR, AT_RISK, BEHIND), lag and a lag sparkline from the lag
history, rates, eta and retention headroom; the lease inventory with states; the bytes
retention would reclaim per table."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import ipywidgets as w
import numpy as np
import pandas as pd
import traitlets

from leasekit.live import (
    NO_SAMPLER,
    eta_text,
    headroom_text,
    is_internal_table,
    lag_histories,
    sample_lag_history,
)

from . import static
from .base import Markup, Panel, esc, html_table
from .formatting import duration_text, human_bytes, utc_text

__all__ = ["OverviewPanel", "SPARK_SPAN", "sparkline"]

INTERNAL = "(lag history, internal)"
"""How the reclaimable bytes of leasekit's internal tables are labelled: never by their name."""
SPARK_SPAN = timedelta(hours=1)
"""How far back each group's sparkline goes."""
STATUS_STYLE = {
    "ERR": "background:#f8d7da;color:#b00020;font-weight:bold",
    "AT_RISK": "background:#b00020;color:white;font-weight:bold",
    "BEHIND": "background:#ffe0b2;color:#8a4b00;font-weight:bold",
    "WARN": "background:#fff3cd;color:#a86b00",
    "OK": "background:#d4edda;color:#1b7f3b",
}
STATUS_ORDER = {"ERR": 0, "AT_RISK": 1, "BEHIND": 2, "WARN": 3, "OK": 4}
"""Most severe first (M6: ERR > AT_RISK > BEHIND > WARN > OK)."""
LEASE_STYLE = {
    "active": "color:#1b7f3b",
    "expiring": "color:#a86b00;font-weight:bold",
    "orphaned": "color:#b00020;font-weight:bold",
    "expired": "color:#b00020",
}
GROUP_COLUMNS = [
    "group",
    "status",
    "state",
    "members",
    "total lag",
    f"lag, last {duration_text(SPARK_SPAN)}",
    "max time lag",
    "consumed/s",
    "produced/s",
    "eta",
    "retention headroom",
    "last commit (UTC)",
]
LEASE_COLUMNS = [
    "lease",
    "state",
    "owner",
    "host",
    "tables",
    "pinned buckets",
    "pinned",
    "freed by dropping",
    "expires at (UTC)",
]


class _Overview(NamedTuple):
    groups: pd.DataFrame
    """``group_overview()``."""
    history: dict[str, pd.DataFrame]
    """Each group's ``lag_history`` over the last ``SPARK_SPAN``."""
    leases: pd.DataFrame
    """``lease_inventory()``."""
    reclaimable: list[tuple[str, int, int]]
    """(table, items to delete, bytes they free) of the retention plan, by table."""


def sparkline(times: Any, lags: Any, *, width: int = 120, height: int = 22) -> Markup:
    """A lag sparkline as inline SVG (numbers only: nothing of the user's is in it).

    Arguments:
        times: the sample times (anything ``pandas.to_datetime`` reads).
        lags: the lag at each.
        width: pixels.
        height: pixels.

    Returns:
        The SVG, or "-" when there are fewer than two samples.
    """
    t = pd.to_datetime(pd.Series(times), utc=True)
    y = np.asarray(pd.Series(lags, dtype="float64").fillna(0.0))
    if len(y) < 2:
        return Markup('<span style="color:#999">-</span>')
    x = (t - t.iloc[0]).dt.total_seconds().to_numpy()
    span_x = float(x[-1] - x[0]) or 1.0
    top = float(y.max()) or 1.0
    points = " ".join(
        f"{2 + (width - 4) * xi / span_x:.1f},{height - 2 - (height - 4) * yi / top:.1f}"
        for xi, yi in zip(x, y)
    )
    return Markup(
        f'<svg class="leasekit-sparkline" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}"><polyline fill="none" stroke="#e39b3b" '
        f'stroke-width="1.5" points="{points}"/></svg>'
    )


def _wide(table: str) -> str:
    """A table whose cells keep to one line, scrolling sideways when wider than the panel."""
    return f'<div style="overflow-x:auto;white-space:nowrap">{table}</div>'


def _cell(style: str, text: object) -> Markup:
    return Markup(f'<span style="padding:1px 6px;border-radius:3px;{style}">{esc(text)}</span>')


def _rate(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):,.1f}"


_NO_SAMPLES = "<br>" + (
    f"<span style='color:#a86b00'>No lag history in the last hour, for rates, eta and sparklines: "
    f"{esc(NO_SAMPLER[0])}. Start one with <code>{esc(NO_SAMPLER[1])}</code>.</span>"
)


def _sampled(history: dict[str, pd.DataFrame]) -> bool:
    """Whether any group has a lag history sample in the sparklines' span."""
    return any(frame is not None and not frame.empty for frame in history.values())


def group_rows(groups: pd.DataFrame, history: dict[str, pd.DataFrame]) -> list[list[object]]:
    """The groups table's rows: most severe status first, then by lag."""
    if groups.empty:
        return []
    order = groups.assign(
        _rank=[STATUS_ORDER.get(s, 5) for s in groups["status"]],
        _lag=groups["total_lag"].fillna(0),
    ).sort_values(["_rank", "_lag", "group"], ascending=[True, False, True], kind="stable")
    rows = []
    for r in order.itertuples(index=False):
        seen = history.get(r.group)
        spark = (
            sparkline(seen["time"], seen["lag"])
            if seen is not None and not seen.empty
            else sparkline([], [])
        )
        rows.append(
            [
                r.group,
                _cell(STATUS_STYLE.get(r.status, ""), r.status),
                r.state,
                r.members,
                "-" if pd.isna(r.total_lag) else f"{int(r.total_lag):,}",
                spark,
                duration_text(r.max_time_lag),
                _rate(r.consume_rate),
                _rate(r.produce_rate),
                eta_text(r.eta, r.consume_rate),
                headroom_text(r.retention_headroom),
                utc_text(r.last_commit),
            ]
        )
    return rows


def lease_rows(leases: pd.DataFrame) -> list[list[object]]:
    """The lease inventory's rows, orphaned and expiring first."""
    order = {"orphaned": 0, "expiring": 1, "expired": 2, "active": 3}
    rows = []
    for r in sorted(leases.itertuples(index=False), key=lambda r: (order.get(r.state, 4), r[0])):
        tables = r.tables if isinstance(r.tables, str) else ", ".join(r.tables or ())
        rows.append(
            [
                r.lease_id,
                _cell(LEASE_STYLE.get(r.state, ""), r.state),
                r.owner,
                r.host or "-",
                tables or "-",
                r.pinned_buckets,
                human_bytes(r.pinned_bytes),
                human_bytes(r.exclusive_bytes),
                utc_text(r.expires_at),
            ]
        )
    return rows


def _scrolls() -> w.Layout:
    return w.Layout(width="100%", max_width="100%", overflow="auto")


class OverviewPanel(Panel):
    """Every consumer group, every lease and what retention would reclaim, of one namespace.

    Arguments:
        conn: the Connection shown.
        auto_refresh: follow ZooKeeper changes (the ``auto_refresh`` trait).
    """

    FOLLOW = "positions"

    overview = traitlets.Instance(_Overview, allow_none=True, help="the namespace as last read")

    def __init__(self, conn: Any, *, auto_refresh: bool = True) -> None:
        super().__init__(conn, auto_refresh=auto_refresh)
        self.add_class("leasekit-overview-panel")
        self.summary = w.HTML()
        self.summary.add_class("leasekit-summary")
        # the tables scroll sideways inside the panel, whose width is the notebook's
        # (docs/panels.md: nothing clipped at 1280 px)
        self.groups = w.HTML(layout=_scrolls())
        self.groups.add_class("leasekit-overview-groups")
        self.leases = w.HTML(layout=_scrolls())
        self.leases.add_class("leasekit-overview-leases")
        self.reclaimable = w.HTML()
        self.reclaimable.add_class("leasekit-overview-reclaimable")
        self.children = [
            self.status,  # on top, seen first: the stale notice and what went wrong
            self.message,
            self.summary,
            w.HTML("<b>Consumer groups</b>"),
            self.groups,
            w.HTML("<b>Leases</b>"),
            self.leases,
            w.HTML("<b>Retention</b>"),
            self.reclaimable,
        ]

    def _load(self) -> _Overview:
        sample_lag_history(self.conn)  # M1: an open view records the lag (when one is due)
        groups = self.conn.group_overview()
        since = datetime.now(timezone.utc) - SPARK_SPAN
        history = lag_histories(self.conn, list(groups["group"]), since=since)
        leases = self.conn.lease_inventory()
        by_table: dict[str, list[int]] = {}
        for item in self.conn.retention_plan().items:
            if item.action == "delete":
                table = item.table_bucket.table if item.table_bucket else "(namespace)"
                table = INTERNAL if is_internal_table(table) else table
                counts = by_table.setdefault(table, [0, 0])
                counts[0] += 1
                counts[1] += item.size_bytes
        reclaimable = [(t, n, b) for t, (n, b) in sorted(by_table.items())]
        return _Overview(groups, history, leases, reclaimable)

    def _show(self, data: _Overview) -> None:
        self.overview = data
        counts = data.groups["status"].value_counts() if len(data.groups) else {}
        alarms = "".join(
            f" · <b style='color:#b00020'>{int(counts[s])} {s}</b>"
            for s in ("ERR", "AT_RISK", "BEHIND")
            if counts.get(s, 0)
        )
        states = data.leases["state"].value_counts() if len(data.leases) else {}
        total = sum(b for _, _, b in data.reclaimable)
        self.summary.value = (
            f"<b>{len(data.groups)} group{'s' if len(data.groups) != 1 else ''}</b>"
            + alarms
            + f" · <b>{len(data.leases)} lease{'s' if len(data.leases) != 1 else ''}</b>"
            + "".join(f" · {int(n)} {esc(s)}" for s, n in dict(states).items())
            + f" · reclaimable <b>{esc(human_bytes(total))}</b>"
            + (_NO_SAMPLES if len(data.groups) and not _sampled(data.history) else "")
        )
        rows = group_rows(data.groups, data.history)
        self.groups.value = (
            _wide(html_table(GROUP_COLUMNS, rows, css="leasekit-groups"))
            if rows
            else "<i>No consumer group yet.</i>"
        )
        leases = lease_rows(data.leases)
        self.leases.value = (
            _wide(html_table(LEASE_COLUMNS, leases, css="leasekit-inventory"))
            if leases
            else "<i>No lease.</i>"
        )
        self.reclaimable.value = (
            html_table(
                ["table", "items to delete", "reclaimable"],
                [[t, n, human_bytes(b)] for t, n, b in data.reclaimable],
                css="leasekit-reclaimable",
            )
            if data.reclaimable
            else "<i>Nothing to reclaim.</i>"
        )

    def _static(self) -> list[str]:
        """The summary, the groups (sparklines as images), the leases and what retention would
        reclaim (``Panel.to_html``)."""
        return [
            f"<div>{self.summary.value}</div>",
            static.section("Consumer groups", static.svg_images(self.groups.value)),
            static.section("Leases", self.leases.value),
            static.section("Retention", self.reclaimable.value),
        ]

    def __repr__(self) -> str:
        n = 0 if self.overview is None else len(self.overview.groups)
        return f"OverviewPanel({n} groups)"
