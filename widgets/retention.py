"""RetentionPanel: the retention plan with every keep and delete, its reason and the leases
that pin each snapshot, the reclaimable bytes, and a run button (or a dry run) with its report."""

from __future__ import annotations

from typing import Any, NamedTuple

import ipywidgets as w
import pandas as pd
import traitlets
from ipydatagrid import DataGrid, TextRenderer, VegaExpr

from leasekit import RetentionPlan, RetentionReport, TableBucket
from leasekit.errors import LeasekitError
from leasekit.live import is_internal_table

from . import static
from .base import Panel, esc, html_table
from .confirm import ConfirmButton, Prepared
from .formatting import clicked_row, grid_height, human_bytes, utc_text

__all__ = ["RetentionPanel", "PLAN_COLUMNS"]

PLAN_COLUMNS = ["kind", "table", "bucket", "item", "action", "size", "pinned by", "reason"]
"""The grid's columns: ``bucket`` is empty for what no bucket holds (leases, orphan files) and
marks a sealed bucket with its children ("3 (sealed → 7, 8)"),
``size`` is in the panels' one bytes format, the reason last and wide (in full below the grid
for the row clicked)."""
ALL = ""
REPORT_ROWS = 50
"""Deleted items listed in the report (the rest counted)."""
GRID_ROWS = 2000
"""Items the grid holds at most: beyond, the deletes and pinned snapshots first (in the plan's
order otherwise), and a note saying how many of the items the filter shows are in the grid."""


class _Plan(NamedTuple):
    tables: list[str]
    plan: RetentionPlan
    pinned_by: dict[tuple[TableBucket, int], list[str]]
    sealed: dict[TableBucket, tuple[int, ...]] = {}
    """The children of each sealed bucket in the plan (K7): split or merged into them."""


def bucket_text(tb: TableBucket | None, sealed: dict[TableBucket, tuple[int, ...]]) -> str:
    """The grid's bucket cell: the number, a sealed bucket marked with its children
    ("3 (sealed → 7, 8)"); empty for what no bucket holds."""
    if tb is None:
        return ""
    children = sealed.get(tb)
    if children is None:
        return str(tb.bucket)
    return f"{tb.bucket} (sealed → {', '.join(map(str, children))})"


def sealed_buckets(
    conn: Any, plan: RetentionPlan, tables: list[str]
) -> dict[TableBucket, tuple[int, ...]]:
    """The sealed buckets of the ``tables`` in ``plan``, with their children (one table record
    read per table; a table dropped meanwhile has none)."""
    names = sorted({i.table_bucket.table for i in plan.items if i.table_bucket} & set(tables))
    out: dict[TableBucket, tuple[int, ...]] = {}
    for name in names:
        try:
            lineage = conn.table(name).lineage()
        except LeasekitError:
            continue  # dropped since the plan, or internal: shown without lineage
        out.update({x.table_bucket: x.children for x in lineage if x.state == "sealed"})
    return out


def plan_frame(data: _Plan, items: Any = None) -> pd.DataFrame:
    """The plan's items (or ``items`` of it) in the grid's columns, with the leases pinning each
    snapshot."""
    pinned, sealed = data.pinned_by, data.sealed
    rows = [
        (
            i.kind,
            i.table_bucket.table if i.table_bucket else "",
            bucket_text(i.table_bucket, sealed),
            str(i.item_id),
            i.action,
            human_bytes(i.size_bytes),
            ", ".join(pinned.get((i.table_bucket, i.item_id), ())) if i.kind == "snapshot" else "",
            i.reason,
        )
        for i in (data.plan.items if items is None else items)
    ]
    return pd.DataFrame.from_records(rows, columns=PLAN_COLUMNS).astype(object)


def internal(item: Any) -> bool:
    """Whether ``item`` belongs to one of leasekit's internal tables (the lag history): the plan
    covers them, the grid and the reports count them without listing them."""
    return item.table_bucket is not None and is_internal_table(item.table_bucket.table)


def _internal_note(items: list[Any], verb: str) -> str:
    hidden = [i for i in items if internal(i)]
    if not hidden:
        return ""
    deletes = [i for i in hidden if verb == "deleted" or i.action == "delete"]
    return (
        f"{len(hidden)} of them of leasekit's internal tables (the lag history, not listed): "
        f"{len(deletes)} {verb}, {human_bytes(sum(i.size_bytes for i in deletes))}"
    )


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
            selection_mode="row",
            column_widths={"bucket": 150, "reason": 560, "item": 160, "pinned by": 140},
            layout=w.Layout(height=grid_height(0)),
            renderers={"action": TextRenderer(background_color=colour)},
        )
        self.grid.on_cell_click(self._clicked)
        self.nothing = w.HTML()
        self.nothing.add_class("leasekit-no-match")
        self.detail = w.HTML()
        self.detail.add_class("leasekit-detail")
        self.dry_run = w.Checkbox(value=True, description="dry run (change nothing)", indent=False)
        self.run_confirm = ConfirmButton(
            "Run retention",
            self._ask_run,
            style="warning",
            tooltip="expire leases, then delete what the plan deletes (a real run asks first)",
        )
        self.run = self.run_confirm.button
        self.report = w.HTML()
        self.report.add_class("leasekit-report")
        self.table.observe(self._table_changed, "value")
        self.action_filter.observe(lambda _: self._show_rows(), "value")
        self.dry_run.observe(lambda _: self.run_confirm.withdraw(), "value")
        self.children = [
            self.status,  # on top, seen first: the stale notice and what went wrong
            self.message,
            w.HBox([self.table, self.action_filter]),
            self.summary,
            self.nothing,
            self.grid,
            self.detail,
            w.HBox([self.dry_run, self.run_confirm]),
            self.report,
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
        return _Plan(tables, plan, pinned, sealed_buckets(self.conn, plan, tables))

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
            f"{len(items) - deletes} kept · reclaimable "
            f"<b>{human_bytes(data.plan.reclaimable_bytes)}</b>"
            f" · planned at {utc_text(data.plan.planned_at)} UTC"
            + (f"<br>{esc(note)}" if (note := _internal_note(items, "to delete")) else "")
        )
        self._show_rows()

    def _grid_items(self) -> tuple[list[Any], int]:
        """The items the grid holds (at most ``GRID_ROWS``) and how many the filter shows."""
        if self.planned is None:
            return [], 0
        wanted = self.action_filter.value
        items = [
            i
            for i in self.planned.plan.items
            if (not wanted or i.action == wanted) and not internal(i)
        ]
        if len(items) <= GRID_ROWS:
            return items, len(items)
        pinned = self.planned.pinned_by
        # deletes first, then pinned snapshots first within each, the plan's order otherwise
        ranks: list[list[Any]] = [[], [], [], []]
        for i in items:
            held = i.kind == "snapshot" and (i.table_bucket, i.item_id) in pinned
            ranks[(i.action != "delete") * 2 + (not held)].append(i)
        return [i for rank in ranks for i in rank][:GRID_ROWS], len(items)

    def _show_rows(self) -> None:
        items, matching = self._grid_items()
        frame = (
            plan_frame(self.planned, items)
            if self.planned is not None
            else pd.DataFrame(columns=PLAN_COLUMNS)
        )
        everything = (
            0 if self.planned is None else sum(not internal(i) for i in self.planned.plan.items)
        )
        self.nothing.value = (
            '<span class="leasekit-empty" style="color:#666">No item matches the filter '
            f"({everything} item{'s' if everything != 1 else ''} in the plan).</span>"
            if everything and not len(frame)
            else (
                f'<span class="leasekit-more" style="color:#666">Showing {len(frame)} of '
                f"{matching} items (deletes and pinned snapshots first); the filter narrows "
                "them.</span>"
                if matching > len(frame)
                else ""
            )
        )
        if self._shown is not None and frame.equals(self._shown):
            return  # a refresh that found the same plan sends nothing to the browser
        self._shown = frame
        self.grid.data = frame
        self.grid.layout.height = grid_height(len(frame))
        self._show_detail(None)

    def _clicked(self, cell: dict[str, Any]) -> None:
        row = clicked_row(self.grid, cell)
        if row is not None:
            self._show_detail(row)

    def _show_detail(self, row: Any) -> None:
        """The clicked item in full: its reason, however long, and who pins it."""
        if row is None:
            self.detail.value = ""
            return
        where = f"{row['table']}/{row['bucket']}" if row["bucket"] else row["table"] or "namespace"
        self.detail.value = (
            f"<b>{esc(row['kind'])} {esc(row['item'])}</b> of {esc(where)} · "
            f"{esc(row['action'])} · {esc(row['size'])}"
            + (f" · pinned by {esc(row['pinned by'])}" if row["pinned by"] else "")
            + f"<br>{esc(row['reason'])}"
        )

    def _static(self) -> list[str]:
        """The controls' choices, the summary, the grid's items, the item shown in detail and
        the last run's report (``Panel.to_html``)."""
        style = static.cell_styles(
            colours={"action": {"delete": "#f8d7da", "keep": "#d4edda"}}, wide=("reason",)
        )
        parts = [
            static.controls(
                ("Table", static.label_of(self.table)),
                ("Show", static.label_of(self.action_filter)),
            ),
            f"<div>{self.summary.value}</div>",
            f"<div>{self.nothing.value}</div>" if self.nothing.value else "",
        ]
        if self.planned is not None:
            parts.append(static.grid_table(self.grid, css="leasekit-plan", style=style))
        parts += [f"<div>{self.detail.value}</div>", self.report.value]
        return parts

    def __repr__(self) -> str:
        items = 0 if self.planned is None else len(self.planned.plan.items)
        return f"RetentionPanel({self.scope or 'every table'}: {items} items)"

    def _table_changed(self, change: dict[str, Any]) -> None:
        if change["new"] is not None:
            self.run_confirm.withdraw()
            self.scope = change["new"]

    # -- running ----------------------------------------------------------------------------

    def _ask_run(self) -> Prepared:
        dry, scope = bool(self.dry_run.value), self.scope or None
        if dry:
            return None, lambda: self._run(scope, True)  # changes nothing: no question
        plan = self.planned.plan if self.planned is not None else None
        deletes = [] if plan is None else [i for i in plan.items if i.action == "delete"]
        where = "every table" if scope is None else scope
        return (
            f"Confirm retention run on {where} (deletes {len(deletes)} "
            f"item{'s' if len(deletes) != 1 else ''}, "
            f"{human_bytes(sum(i.size_bytes for i in deletes))})?",
            lambda: self._run(scope, False),
        )

    def _run(self, scope: str | None, dry: bool) -> None:
        report = self.act(
            "retention",
            lambda: self.conn.run_retention(scope, dry_run=dry),
            lambda r: (
                ("dry run: " if dry else "")
                + f"{len(r.deleted)} items, {human_bytes(r.freed_bytes)}"
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
            human_bytes(i.size_bytes),
        ]
        for i in [i for i in report.deleted if not internal(i)][:REPORT_ROWS]
    ]
    more = sum(not internal(i) for i in report.deleted) - len(rows)
    note = _internal_note(list(report.deleted), "deleted")
    errors = "".join(f"<li>{esc(e)}</li>" for e in report.errors)
    freed = f"{'would free' if report.dry_run else 'freed'} {human_bytes(report.freed_bytes)}"
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
        + (f"<div style='color:#666'>{esc(note)}</div>" if note else "")
        + (
            f"<div style='color:#b00020'>Errors (retried by the next pass):<ul>{errors}</ul></div>"
            if errors
            else ""
        )
    )
