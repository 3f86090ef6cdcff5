"""RetentionPanel's grid holds at most ``GRID_ROWS`` items: the deletes and pinned snapshots
first, the count of the rest said, the filter narrowing what is held."""

from __future__ import annotations

import leasekit.widgets.retention as retention
import pytest
from leasekit.widgets import RetentionPanel

import leasekit as lk

TB = lk.TableBucket


@pytest.fixture
def orders(conn, spark):
    table = conn.create_table("orders", "id BIGINT, status STRING", "id", buckets=4)
    for n in range(3):
        table.append([{"id": i, "status": f"v{n}"} for i in range(40)])
        table.snapshot(spark)
    return table


def test_the_grid_holds_a_page_deletes_and_pinned_first(conn, orders, monkeypatch):
    conn.acquire_kv_snapshot_lease("keep-first", {TB("orders", 0): 1}, "1h")
    panel = RetentionPanel(conn, "orders", auto_refresh=False)
    panel.refresh()
    everything = panel.grid.data
    items = len(panel.planned.plan.items)
    assert len(everything) == items and panel.nothing.value == ""
    monkeypatch.setattr(retention, "GRID_ROWS", 4)
    panel.refresh()
    panel._show_rows()
    page = panel.grid.data
    deletes = (everything["action"] == "delete").sum()
    assert len(page) == 4 and f"Showing 4 of {items} items" in panel.nothing.value
    shown = list(page["action"])
    assert shown[: min(4, deletes)] == ["delete"] * min(4, deletes)
    if deletes < 4:
        assert "keep-first" in set(page["pinned_by"])
    panel.action_filter.value = "delete"
    assert set(panel.grid.data["action"]) <= {"delete"}
    assert len(panel.grid.data) == min(4, deletes)
    panel.close()


def test_sealed_buckets_show_their_children_and_what_holds_them(conn, orders):
    # K7: the grid marks a split bucket with its new buckets; the reason says what holds it
    orders.split_bucket(1)
    panel = RetentionPanel(conn, "orders", auto_refresh=False)
    panel.refresh()
    grid = panel.grid.data
    sealed = grid[grid["bucket"] == "1 (sealed → 4, 5)"]
    assert len(sealed) and set(grid["bucket"]) >= {"0", "2", "3", "1 (sealed → 4, 5)"}
    held = "sealed bucket 1: children 4, 5 have no snapshot of their own yet"
    assert held in set(sealed["reason"])
    assert (sealed[sealed["reason"] == held]["action"] == "keep").all()
    panel._show_detail(sealed.iloc[0])
    assert "orders/1 (sealed → 4, 5)" in panel.detail.value
    panel.close()
