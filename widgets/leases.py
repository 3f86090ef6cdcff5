"""LeasePanel: every KV snapshot lease with a live countdown, the selected lease's pins, and
the lease actions (create, acquire latest, renew, release, drop)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NamedTuple

import ipywidgets as w
import pandas as pd
import traitlets
from ipydatagrid import DataGrid

from leasekit import LeaseInfo
from leasekit.live import human_duration, server_time_estimate

from . import static
from .base import Markup, Panel, button, html_table
from .confirm import ConfirmButton, Prepared
from .formatting import grid_height, utc_text

__all__ = ["LeasePanel"]

TICK = 1.0
"""Seconds between countdown updates (local: no ZooKeeper access per tick)."""

PIN_COLUMNS = ["table", "bucket", "snapshot"]


class _Leases(NamedTuple):
    leases: list[LeaseInfo]
    tables: list[str]


def expires_in(ms: int) -> str:
    """What the countdown shows for ``ms`` milliseconds left: "4m 40s", or "expired"."""
    return "expired" if ms < 0 else human_duration(timedelta(milliseconds=ms))


class LeasePanel(Panel):
    """Every lease (id, owner, tables, pinned buckets, expires in — ticking locally from the
    ZooKeeper clock last read — alive or expired), the pins of the selected one, and the lease
    actions: create, acquire latest, renew, release, drop.

    Arguments:
        conn: the Connection whose leases are shown.
        auto_refresh: follow ZooKeeper changes (the ``auto_refresh`` trait).
    """

    leases = traitlets.List(help="the leases shown (LeaseInfo), as last read")

    def __init__(self, conn: Any, *, auto_refresh: bool = True) -> None:
        super().__init__(conn, auto_refresh=auto_refresh)
        self.add_class("leasekit-lease-panel")
        self.summary = w.HTML()
        self.summary.add_class("leasekit-summary")
        self.table = w.HTML()
        self.table.add_class("leasekit-leases")
        self.lease = w.Dropdown(description="Lease", options=[], layout=w.Layout(width="320px"))
        self.new_id = w.Text(
            placeholder="lease id (empty: a new one)", layout=w.Layout(width="240px")
        )
        self.new_id.add_class("leasekit-lease-id")
        self.duration = w.Text(value="1h", description="Duration", layout=w.Layout(width="170px"))
        self.duration.add_class("leasekit-lease-duration")
        self.create = button(
            "Create", self._create, style="primary", tooltip="create an empty lease"
        )
        self.acquire_table = w.Dropdown(
            description="Table", options=[], layout=w.Layout(width="260px")
        )
        self.acquire = button(
            "Acquire latest", self._acquire, tooltip="pin the newest snapshot of every bucket"
        )
        self.renew = button("Renew", self._renew, tooltip="extend to at least now + duration")
        self.drop_confirm = ConfirmButton(
            "Drop", self._ask_drop, style="danger", tooltip="remove the lease and all its pins"
        )
        self.drop = self.drop_confirm.button
        self.pins = DataGrid(
            pd.DataFrame(columns=PIN_COLUMNS),
            selection_mode="row",
            base_row_size=22,
            base_column_size=110,
            header_visibility="column",
            layout=w.Layout(height=grid_height(0), width="360px"),
        )
        self.release_buckets = w.SelectMultiple(
            options=[], rows=6, description="Buckets", layout=w.Layout(width="260px")
        )
        self.release = button("Release selected", self._release, style="warning", disabled=True)
        self.release_buckets.observe(lambda _: self._enable(), "value")
        self.lease.observe(lambda _: self._show_selected(), "value")
        self.lease.observe(lambda _: self.drop_confirm.withdraw(), "value")
        self.children = [
            self.status,  # on top, seen first: the stale notice and what went wrong
            self.message,
            self.summary,
            self.table,
            w.HBox([self.new_id, self.duration, self.create]),
            w.HBox([self.lease, self.renew, self.drop_confirm]),
            w.HBox([self.acquire_table, self.acquire]),
            w.HBox(
                [self.pins, w.VBox([self.release_buckets, self.release])],
                layout=w.Layout(flex_flow="row wrap", grid_gap="12px"),
            ),
        ]

    # -- reading and showing ----------------------------------------------------------------

    def _load(self) -> _Leases:
        self.conn.server_time()  # the countdown's base: a clock read at most every few seconds
        return _Leases(self.conn.leases(), self.conn.tables())

    def _show(self, data: _Leases) -> None:
        self.leases = data.leases
        ids = [x.lease_id for x in data.leases]
        keep = self.lease.value if self.lease.value in ids else (ids[0] if ids else None)
        self.lease.options = ids
        self.lease.value = keep
        keep_table = self.acquire_table.value if self.acquire_table.value in data.tables else None
        self.acquire_table.options = data.tables
        self.acquire_table.value = (
            keep_table if keep_table is not None else (data.tables[0] if data.tables else None)
        )
        self._render_list()
        self._show_selected()

    def _now_ms(self) -> int | None:
        return server_time_estimate(self.conn)

    def _render_list(self) -> None:
        now = self._now_ms()
        rows = []
        pinned = 0
        for x in self.leases:
            left = None if now is None else int(x.expires_at.timestamp() * 1000) - now
            alive = left is None or left >= 0
            pinned += len(x.pins)
            tables = sorted({tb.table for tb in x.pins})
            state = Markup(
                '<span style="color:#1b7f3b">alive</span>'
                if alive
                else '<span style="color:#b00020">expired</span>'
            )
            rows.append(
                [
                    x.lease_id,
                    x.owner,
                    ", ".join(tables) or "-",
                    len(x.pins),
                    "-" if left is None else expires_in(left),
                    f"{utc_text(x.expires_at)} UTC",
                    state,
                ]
            )
        n = len(self.leases)
        self.summary.value = (
            f"<b>Leases</b> · {n} lease{'s' if n != 1 else ''} · {pinned} pinned "
            f"bucket{'s' if pinned != 1 else ''}"
        )
        self.table.value = html_table(
            ["lease", "owner", "tables", "pinned", "expires in", "expires at", "state"],
            rows,
            css="leasekit-lease-list",
        )

    def _selected(self) -> LeaseInfo | None:
        return next((x for x in self.leases if x.lease_id == self.lease.value), None)

    def _show_selected(self) -> None:
        lease = self._selected()
        pins = sorted((lease.pins if lease else {}).items())
        self.pins.data = pd.DataFrame(
            [(tb.table, tb.bucket, sid) for tb, sid in pins], columns=PIN_COLUMNS
        )
        self.pins.layout.height = grid_height(len(pins))
        labels = [(f"{tb.table}/{tb.bucket}", tb) for tb, _ in pins]
        chosen = [tb for tb in self.release_buckets.value if tb in dict(pins)]
        self.release_buckets.options = labels
        self.release_buckets.value = tuple(chosen)
        self._enable()

    def _enable(self) -> None:
        selected = self.lease.value is not None
        for b in (self.renew, self.drop, self.acquire):
            b.disabled = not selected
        self.acquire.disabled = not selected or self.acquire_table.value is None
        self.release.disabled = not selected or not self.release_buckets.value

    def _ticking(self) -> None:
        self._live.every(TICK, self._tick)

    def _tick(self) -> None:
        if self.leases:
            with self._lock:
                self._render_list()

    # -- actions ----------------------------------------------------------------------------

    def _create(self) -> None:
        lease_id = self.new_id.value.strip() or None

        def create() -> str:
            lease = self.conn.lease(lease_id, self._duration(), drop_on_exit=False)
            lease.acquire({})  # the first acquire creates the lease (L8)
            return lease.lease_id

        created = self.act("create", create, lambda c: f"created lease {c}")
        if created is not None:
            self.new_id.value = ""
            if created in self.lease.options:
                self.lease.value = created

    def _acquire(self) -> None:
        lease_id, table = self.lease.value, self.acquire_table.value
        self.act(
            "acquire latest",
            lambda: self.conn.lease(lease_id, self._duration(), drop_on_exit=False).acquire_latest(
                table
            ),
            lambda r: (
                f"{lease_id}: pinned {len(r.acquired)} buckets of {table}"
                + (f", {len(r.unavailable)} unavailable" if r.unavailable else "")
            ),
        )

    def _renew(self) -> None:
        lease_id = self.lease.value
        self.act(
            "renew",
            lambda: self.conn.renew_kv_snapshot_lease(lease_id, self._duration()),
            lambda at: f"{lease_id} now expires at {at:%Y-%m-%d %H:%M:%S} UTC",
        )

    def _release(self) -> None:
        lease_id, buckets = self.lease.value, list(self.release_buckets.value)
        self.act(
            "release",
            lambda: self.conn.release_kv_snapshot_lease(lease_id, buckets),
            lambda _: (
                f"{lease_id}: released {len(buckets)} bucket{'s' if len(buckets) != 1 else ''}"
            ),
        )

    def _ask_drop(self) -> Prepared:
        lease_id = self.lease.value
        pins = len(lease.pins) if (lease := self._selected()) is not None else 0
        return (
            f"Confirm drop of {lease_id} ({pins} pin{'s' if pins != 1 else ''})?",
            lambda: self._drop(lease_id),
        )

    def _drop(self, lease_id: str) -> None:
        self.act(
            "drop",
            lambda: self.conn.drop_kv_snapshot_lease(lease_id),
            lambda dropped: (
                f"dropped lease {lease_id}" if dropped else f"lease {lease_id} was gone already"
            ),
        )

    def _duration(self) -> str:
        return self.duration.value.strip()

    def _static(self) -> list[str]:
        """The summary, the lease list and the pins of the lease selected (``Panel.to_html``)."""
        parts = [f"<div>{self.summary.value}</div>", self.table.value]
        lease = self._selected()
        if lease is not None:
            pins = (
                static.grid_table(self.pins, css="leasekit-pins")
                if lease.pins
                else "<i>No pinned bucket.</i>"
            )
            parts.append(static.section(f"Pins of {lease.lease_id}", pins))
        return parts

    def __repr__(self) -> str:
        return f"LeasePanel({len(self.leases)} leases)"
