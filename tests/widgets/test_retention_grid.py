"""RetentionPanel's grid holds at most ``GRID_ROWS`` items: the deletes and pinned snapshots
first, the count of the rest said, the filter narrowing what is held."""

from __future__ import annotations

import html

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
        assert "keep-first" in set(page["pinned by"])
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


def test_internal_tables_are_counted_not_listed(conn):
    # leasekit's internal tables (the lag history) are in the plan (M1: retention
    # cleans them) but the grid of "all tables" and a run's report never list them; the summary
    # says how many items are theirs
    from leasekit import testing
    from leasekit.monitor.lag import history

    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": 1}])
    with conn.consumer(group_id="billing", enable_auto_commit=False) as consumer:
        consumer.assign([TB("orders", 0)])
        consumer.commit({TB("orders", 0): 1})
    history.sample(testing.context(conn), force=True)
    panel = RetentionPanel(conn, auto_refresh=False)
    panel.refresh()
    theirs = [i for i in panel.planned.plan.items if retention.internal(i)]
    assert theirs, "the lag history's segment is in the plan"
    assert not panel.grid.data["table"].str.startswith("__").any()
    assert "__lag_history" not in [label for label, _ in panel.table.options]
    summary = html.unescape(panel.summary.value)
    assert f"{len(theirs)} of them of leasekit's internal tables" in summary
    assert f"{len(panel.planned.plan.items)} items" in summary  # the counts cover all
    report = conn.run_retention(dry_run=True)
    assert "__lag_history" not in retention.render_report(report)
    panel.close()


def test_grids_are_headed_as_people_read_them():
    # docs/panels.md: human column headers, not field names (time_lag, snapshot_id)
    from leasekit.widgets.consumers import GRID_COLUMNS
    from leasekit.widgets.leases import PIN_COLUMNS

    headers = [*GRID_COLUMNS, *retention.PLAN_COLUMNS, *PIN_COLUMNS]
    assert not [c for c in headers if "_" in c]
