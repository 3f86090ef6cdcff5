"""ConsumerPanel: a consumer group's position per bucket (committed, end, lag with a bar, time
lag, health in colour, owner, last commit and its metadata), sortable and filterable, the
group's lag over time, and the reset-offsets form."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import bqplot as bq
import ipywidgets as w
import numpy as np
import pandas as pd
import traitlets

from leasekit import TableBucket
from leasekit.live import (
    GroupBoard,
    group_board,
    history_rates,
    human_duration,
    server_time_estimate,
)

from . import static
from .base import Panel, esc
from .consumer_grid import BAD, GRID_COLUMNS, STATUS_COLOURS, empty_frame, grid, grid_frame
from .formatting import clicked_row, grid_height
from .lagchart import LagChart
from .reset import ResetForm

__all__ = ["ConsumerPanel", "GRID_COLUMNS", "GRID_ROWS"]

FILTERS = [
    ("all", "all"),
    ("not OK", "not-ok"),
    ("OK", "OK"),
    ("WARN", "WARN"),
    ("STOP", "STOP"),
    ("STALL", "STALL"),
    ("REWIND", "REWIND"),
    ("MISSING", "MISSING"),
    ("never committed", "none"),
]
GRID_ROWS = 2000
"""Buckets the grid holds at most: the first in the chosen order, with a note saying how many
the filter matches (the summary counts them all)."""
SORTS = [
    ("lag ↓", "lag"),
    ("time lag ↓", "time_lag"),
    ("status", "status"),
    ("table, bucket", "bucket"),
]


class _Group(NamedTuple):
    groups: list[str]
    chosen: str | None
    board: GroupBoard | None
    history: pd.DataFrame | None
    """``lag_history`` over the chart's range (by bucket when the chart shows one)."""
    behind: bool = False
    """M6 holds over the rate window, from ``history`` (the header's BEHIND)."""


class ConsumerPanel(Panel):
    """One consumer group at a time, picked from every group of the namespace: its position per
    bucket, its lag over time and the reset-offsets form.

    Arguments:
        conn: the Connection whose groups are shown.
        group_id: the group shown first; None: the first group there is.
        auto_refresh: follow ZooKeeper changes (the ``auto_refresh`` trait).
    """

    FOLLOW = "positions"

    group_id = traitlets.Unicode(None, allow_none=True, help="the group shown")
    board = traitlets.Instance(GroupBoard, allow_none=True, help="the group as last read")

    def __init__(
        self, conn: Any, group_id: str | None = None, *, auto_refresh: bool = True
    ) -> None:
        super().__init__(conn, auto_refresh=auto_refresh)
        self.add_class("leasekit-consumer-panel")
        self.set_trait("group_id", group_id)
        self._loaded_group: str | None = None
        self._behind = False
        self.group = w.Dropdown(description="Group", options=[], layout=w.Layout(width="320px"))
        self.summary = w.HTML()
        self.summary.add_class("leasekit-summary")
        self.status_filter = w.Dropdown(
            description="Status", options=FILTERS, value="all", layout=w.Layout(width="220px")
        )
        self.min_lag = w.IntText(value=0, description="Lag ≥", layout=w.Layout(width="160px"))
        self.sort = w.Dropdown(
            description="Sort", options=SORTS, value="lag", layout=w.Layout(width="220px")
        )
        self.lag_scale = bq.LinearScale(min=0.0, max=1.0)
        self.grid = grid(self.lag_scale)
        self.grid.on_cell_click(self._clicked)
        self.detail = w.HTML()
        self.detail.add_class("leasekit-detail")
        self.nothing = w.HTML()
        self.nothing.add_class("leasekit-no-match")
        self.chart = LagChart(self.refresh)
        self.plot, self.lag_line = self.chart.figure, self.chart.line
        self.reset = ResetForm(lambda *a, **k: self.conn.reset_offsets(*a, **k), self.act)
        for control in (self.status_filter, self.min_lag, self.sort):
            control.observe(lambda _: self._show_rows(), "value")
        self.group.observe(self._picked, "value")
        self.observe(self._on_group_id, "group_id")
        self.children = [
            self.status,  # on top, seen first: the stale notice and what went wrong
            self.message,
            w.HBox([self.group]),
            self.summary,
            w.HBox([self.status_filter, self.min_lag, self.sort]),
            self.nothing,
            self.grid,
            self.detail,
            self.chart,
            self.reset,
        ]

    # -- reading and showing ----------------------------------------------------------------

    def _load(self) -> _Group:
        groups = self.conn.consumer_groups()
        chosen = self.group_id
        if chosen is None and groups:
            chosen = groups[0]
        if chosen is None:
            return _Group(groups, None, None, None)
        board = group_board(self.conn, chosen)
        window = self.conn.settings()["monitor.rate-window"]
        history = self.conn.lag_history(
            chosen, since=max(self.chart.span, window), by_bucket=self.chart.bucket is not None
        )
        now = server_time_estimate(self.conn) or int(time.time() * 1000)
        behind = history_rates(history, now, window // timedelta(milliseconds=1)).behind
        return _Group(groups, chosen, board, history, behind)

    def _show(self, data: _Group) -> None:
        self._loaded_group = data.chosen
        self.group_id = data.chosen
        options = sorted({*data.groups, *([data.chosen] if data.chosen else [])})
        with self.hold_trait_notifications():
            self.group.options = options
            self.group.value = data.chosen
        self.board = board = data.board
        self._behind = data.behind
        self._show_summary()
        self._show_rows()
        frame = empty_frame() if board is None else board.frame
        committed = {
            TableBucket(t, b): None if o is pd.NA else o
            for t, b, o in zip(
                frame["table"].tolist(),
                frame["bucket"].tolist(),
                frame["current_offset"].astype(object).tolist(),
            )
        }
        buckets = list(committed)
        self._show_plot(buckets, data.history)
        members = 0 if board is None else len(board.members)
        self.reset.show(data.chosen, buckets, members, committed)

    def _picked(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self.group_id = change["new"]

    def _on_group_id(self, change: dict[str, Any]) -> None:
        if change["new"] is not None and change["new"] != self._loaded_group:
            self.refresh()

    def _show_summary(self) -> None:
        board = self.board
        if board is None:
            self.summary.value = "<b>Consumer groups</b> · none yet"
            return
        f = board.frame
        statuses = [s for s in f["status"].dropna()]
        burrow = (
            "ERR"
            if any(s in BAD for s in statuses)
            else "WARN"
            if "WARN" in statuses
            else "OK"
            if statuses
            else "-"
        )
        worst = "BEHIND" if self._behind and burrow in ("OK", "WARN") else burrow  # M6
        colour = {"ERR": "#b00020", "BEHIND": "#8a4b00", "WARN": "#a86b00", "OK": "#1b7f3b"}
        colour = colour.get(worst, "#555")
        max_time = f["time_lag"].max()
        members = len(board.members)
        self.summary.value = (
            f"<b>{esc(self.group_id)}</b> · status <b style='color:{colour}'>{esc(worst)}</b> · "
            f"{members} live member{'s' if members != 1 else ''}"
            f"{'' if board.generation is None else f' · generation {board.generation}'}"
            f"{'' if board.leader is None else f' · leader {esc(board.leader)}'}"
            f" · total lag {int(f['lag'].fillna(0).sum()):,}"
            f" · max time lag {'-' if pd.isna(max_time) else esc(human_duration(max_time))}"
            f" · {len(f)} buckets, {int(f['consumer_id'].isna().sum())} without a live owner"
        )

    def rows(self) -> pd.DataFrame:
        """The grid's rows: the group's buckets as filtered and sorted by the controls, the
        first ``GRID_ROWS`` of them.

        Returns:
            A frame of GRID_COLUMNS (no ZooKeeper access: the last refresh's reading).
        """
        return self._rows()[0]

    def _rows(self) -> tuple[pd.DataFrame, int]:
        """The grid's rows and how many buckets the filter matches. Filtered and sorted on the
        board's frame, then only the rows the grid holds are formatted."""
        board = self.board
        source = empty_frame() if board is None else board.frame
        status = source["status"].fillna("-")
        keep = np.ones(len(source), dtype=bool)
        chosen = self.status_filter.value
        if chosen == "not-ok":
            keep &= ~status.isin(["OK", "-"]).to_numpy()
        elif chosen == "none":
            keep &= source["current_offset"].isna().to_numpy()
        elif chosen != "all":
            keep &= (status == chosen).to_numpy()
        if self.min_lag.value:
            keep &= (source["lag"].fillna(0) >= self.min_lag.value).to_numpy(dtype=bool)
        picked = source[keep].assign(_status=status[keep])
        key = self.sort.value
        if key == "bucket":
            picked = picked.sort_values(["table", "bucket"], kind="stable")
        elif key == "status":
            picked = picked.sort_values(["_status", "table", "bucket"], kind="stable")
        else:
            picked = picked.sort_values(
                [key, "table", "bucket"],
                ascending=[False, True, True],
                kind="stable",
                na_position="last",
            )
        lineage = {} if board is None else board.lineage
        undrained = {
            (tb.table, tb.bucket) for tb, lin in lineage.items() if lin.state == "sealed"
        } & set(zip(source["table"].tolist(), source["bucket"].tolist()))
        rows = grid_frame(picked.head(GRID_ROWS), lineage, undrained)
        return rows.reset_index(drop=True), len(picked)

    def _show_rows(self) -> None:
        frame, matching = self._rows()
        self.lag_scale.max = float(
            max(1.0, frame["lag"].max() if len(frame) and frame["lag"].notna().any() else 1.0)
        )
        self.grid.data = frame
        self.grid.layout.height = grid_height(len(frame))
        everything = 0 if self.board is None else len(self.board.frame)
        self.nothing.value = (
            '<span class="leasekit-empty" style="color:#666">No bucket matches the filter '
            f"({everything} bucket{'s' if everything != 1 else ''} in all).</span>"
            if everything and not len(frame)
            else (
                f'<span class="leasekit-more" style="color:#666">Showing the first {len(frame):,} '
                f"of {matching:,} buckets in this order; the filter and the sort choose "
                "them.</span>"
                if matching > len(frame)
                else ""
            )
        )
        self._show_detail(frame.iloc[0] if len(frame) else None)

    def _clicked(self, cell: dict[str, Any]) -> None:
        row = clicked_row(self.grid, cell)
        if row is not None:
            self._show_detail(row)

    def _show_detail(self, row: Any) -> None:
        if row is None:
            self.detail.value = ""
            return
        lag = "-" if pd.isna(row["lag"]) else f"{int(row['lag']):,}"
        self.detail.value = (
            f"<b>{esc(row['table'])}/{esc(row['bucket'])}</b> · committed "
            f"{'-' if pd.isna(row['committed']) else int(row['committed'])} · lag {lag} · "
            f"status {esc(row['status'])} · "
            + (
                "no live owner · "
                if row["member"] == "-"
                else f"member {esc(row['member'])} on {esc(row['host'])} · "
            )
            + f"last commit {esc(row['last commit'])} · "
            + f"metadata <code>{esc(row['metadata'])}</code>"
        )

    def _show_plot(self, buckets: list[TableBucket], history: pd.DataFrame | None) -> None:
        """The lag chart: the history read, then the lag now (of the group or the bucket)."""
        board = self.board
        now_ms = server_time_estimate(self.conn)
        now = (
            datetime.now(timezone.utc)
            if now_ms is None
            else datetime.fromtimestamp(now_ms / 1000, timezone.utc)
        )
        lag_now = None
        if board is not None:
            f, tb = board.frame, self.chart.bucket
            mine = f if tb is None else f[(f["table"] == tb.table) & (f["bucket"] == tb.bucket)]
            lag_now = float(mine["lag"].fillna(0).sum())
        self.chart.show(buckets, history, now, lag_now=lag_now)

    def _static(self) -> list[str]:
        """The summary, the controls' choices, the grid's rows, the bucket shown in detail, the
        lag chart and a reset previewed (``Panel.to_html``)."""
        style = static.cell_styles(
            colours={"status": STATUS_COLOURS}, bars={"lag": (self.lag_scale.max, "#e39b3b88")}
        )
        parts = [
            f"<div>{self.summary.value}</div>",
            static.controls(
                ("Status", static.label_of(self.status_filter)),
                ("Lag ≥", self.min_lag.value),
                ("Sort", static.label_of(self.sort)),
            ),
            f"<div>{self.nothing.value}</div>" if self.nothing.value else "",
        ]
        if self.board is not None:
            parts.append(static.grid_table(self.grid, css="leasekit-buckets", style=style))
        parts += [f"<div>{self.detail.value}</div>", self.chart.to_html()]
        if self.reset.preview.value:  # a reset previewed, and whether it may still run
            parts.append(
                static.section("Reset offsets", self.reset.reason.value + self.reset.preview.value)
            )
        return parts

    def __repr__(self) -> str:
        return f"ConsumerPanel(group={self.group_id!r})"
