"""RetentionPanel: the retention plan with every keep and delete, its reason and the leases
that pin each snapshot, the reclaimable bytes, and a run button (or a dry run) with its report."""

from __future__ import annotations

from typing import Any, NamedTuple

import ipywidgets as w
import pandas as pd
import traitlets
from ipydatagrid import DataGrid, TextRenderer, VegaExpr

from leasekit import RetentionPlan, RetentionReport, TableBucket

from .base import Panel, button, esc, html_table

__all__ = ["RetentionPanel", "PLAN_COLUMNS"]

PLAN_COLUMNS = ["kind", "table", "bucket", "item_id", "action", "reason", "pinned_by", "size_bytes"]
ALL = ""
REPORT_ROWS = 50
"""Deleted items listed in the report (the rest counted)."""


class _Plan(NamedTuple):
    tables: list[str]
    plan: RetentionPlan
    pinned_by: dict[tuple[TableBucket, int], list[str]]


def size(n: float) -> str:
    """Bytes in a readable unit."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def plan_frame(data: _Plan) -> pd.DataFrame:
    """The plan's items in the grid's columns, with the leases pinning each snapshot."""
    pinned = data.pinned_by
    rows = [
        (
            i.kind,
            i.table_bucket.table if i.table_bucket else "-",
            i.table_bucket.bucket if i.table_bucket else float("nan"),
            str(i.item_id),
            i.action,
            i.reason,
            ", ".join(pinned.get((i.table_bucket, i.item_id), ())) if i.kind == "snapshot" else "",
            i.size_bytes,
        )
        for i in data.plan.items
    ]
    frame = pd.DataFrame.from_records(rows, columns=PLAN_COLUMNS)
    frame["bucket"] = frame["bucket"].astype("float64")
    frame["size_bytes"] = frame["size_bytes"].astype("int64")
    return frame


class RetentionPanel(Panel):
    """The retention plan of one table (or all), refreshed as snapshots, segments and leases
    change, and the pass itself (a dry run unless unticked).

    Arguments:
        conn: the Connection whose retention is shown.
        table: the table (a name or a Table) planned first; None: every table.
        auto_refresh: follow ZooKeeper changes (the ``auto_refresh`` trait).
    """

    FOLLOW = "retention"

    scope = traitlets.Unicode(ALL, help="the table planned; empty: every table")
    planned = traitlets.Instance(_Plan, allow_none=True, help="the plan as last read")

    def __init__(self, conn: Any, table: Any = None, *, auto_refresh: bool = True) -> None:
        super().__init__(conn, auto_refresh=auto_refresh)
        self.add_class("leasekit-retention-panel")
        self.set_trait("scope", ALL if table is None else getattr(table, "name", table))
        self._shown: pd.DataFrame | None = None
        self.table = w.Dropdown(
            description="Table",
            options=[("all tables", ALL)],
            value=ALL,
            layout=w.Layout(width="300px"),
        )
        self.action_filter = w.Dropdown(
            description="Show",
            options=[("every item", ""), ("deletes", "delete"), ("keeps", "keep")],
            value="",
            layout=w.Layout(width="220px"),
        )
        self.summary = w.HTML()
        self.summary.add_class("leasekit-summary")
        colour = VegaExpr("cell.value === 'delete' ? '#f8d7da' : '#d4edda'")
        self.grid = DataGrid(
            pd.DataFrame(columns=PLAN_COLUMNS),
            base_row_size=22,
            base_column_size=90,
            header_visibility="column",
            column_widths={"reason": 320, "item_id": 140},
            layout=w.Layout(height="300px"),
            renderers={
                "action": TextRenderer(background_color=colour),
                "bucket": TextRenderer(format=".0f", missing="-"),
            },
        )
        self.dry_run = w.Checkbox(value=True, description="dry run (change nothing)", indent=False)
        self.run = button(
            "Run retention",
            self._run,
            style="warning",
            tooltip="expire leases, then delete what the plan deletes",
        )
        self.report = w.HTML()
        self.report.add_class("leasekit-report")
        self.table.observe(self._table_changed, "value")
        self.action_filter.observe(lambda _: self._show_rows(), "value")
        self.children = [
            w.HBox([self.table, self.action_filter]),
            self.summary,
            self.grid,
            w.HBox([self.dry_run, self.run]),
            self.report,
            self.message,
            self.status,
        ]
        self.observe(lambda _: self.refresh(), "scope")

    # -- reading and showing ----------------------------------------------------------------

    def _load(self) -> _Plan:
        tables = self.conn.tables()
        plan = self.conn.retention_plan(self.scope or None)
        pinned: dict[tuple[TableBucket, int], list[str]] = {}
        for lease in self.conn.leases():
            for tb, sid in lease.pins.items():
                pinned.setdefault((tb, sid), []).append(lease.lease_id)
        return _Plan(tables, plan, pinned)

    def _show(self, data: _Plan) -> None:
        self.planned = data
        with self.hold_trait_notifications():
            self.table.options = [("all tables", ALL), *((t, t) for t in data.tables)]
            self.table.value = self.scope if self.scope in data.tables else ALL
        items = data.plan.items
        deletes = sum(1 for i in items if i.action == "delete")
        scope = "every table" if not self.scope else self.scope
        self.summary.value = (
            f"<b>Retention plan</b> of {esc(scope)} · {len(items)} items · {deletes} to delete · "
            f"{len(items) - deletes} kept · reclaimable <b>{size(data.plan.reclaimable_bytes)}</b>"
            f" · planned at {data.plan.planned_at:%Y-%m-%d %H:%M:%S} UTC"
        )
        self._show_rows()

    def _show_rows(self) -> None:
        frame = (
            plan_frame(self.planned)
            if self.planned is not None
            else pd.DataFrame(columns=PLAN_COLUMNS)
        )
        if self.action_filter.value:
            frame = frame[frame["action"] == self.action_filter.value].reset_index(drop=True)
        if self._shown is not None and frame.equals(self._shown):
            return  # a refresh that found the same plan sends nothing to the browser
        self._shown = frame
        self.grid.data = frame

    def _table_changed(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self.scope = change["new"]

    # -- running ----------------------------------------------------------------------------

    def _run(self) -> None:
        dry = bool(self.dry_run.value)
        report = self.act(
            "retention",
            lambda: self.conn.run_retention(self.scope or None, dry_run=dry),
            lambda r: (
                ("dry run: " if dry else "") + f"{len(r.deleted)} items, {size(r.freed_bytes)}"
            ),
        )
        if report is not None:
            self.report.value = render_report(report)


def render_report(report: RetentionReport) -> str:
    """``report`` as HTML: what was (or would be) deleted, the bytes freed and the errors."""
    head = (
        "<b>Dry run</b> (nothing changed): would delete"
        if report.dry_run
        else "<b>Retention ran</b>: deleted"
    )
    rows = [
        [
            i.kind,
            i.table_bucket.table if i.table_bucket else "-",
            i.table_bucket.bucket if i.table_bucket else "-",
            i.item_id,
            i.reason,
            size(i.size_bytes),
        ]
        for i in report.deleted[:REPORT_ROWS]
    ]
    more = len(report.deleted) - len(rows)
    errors = "".join(f"<li>{esc(e)}</li>" for e in report.errors)
    freed = f"{'would free' if report.dry_run else 'freed'} {size(report.freed_bytes)}"
    return (
        f"<div>{head} {len(report.deleted)} items; {esc(freed)}.</div>"
        + (
            html_table(
                ["kind", "table", "bucket", "item", "reason", "size"],
                rows,
                css="leasekit-report-items",
            )
            if rows
            else ""
        )
        + (f"<div>… and {more} more</div>" if more > 0 else "")
        + (
            f"<div style='color:#b00020'>Errors (retried by the next pass):<ul>{errors}</ul></div>"
            if errors
            else ""
        )
    )
