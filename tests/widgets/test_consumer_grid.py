"""ConsumerPanel's grid holds at most ``GRID_ROWS`` buckets: the first in the order chosen
(largest lag first by default), the count of the rest said, the summary counting every bucket
(B8: a refresh at 10,000 buckets formats and sends one page, not every row)."""

from __future__ import annotations

import leasekit.widgets.consumers as consumers
import pandas as pd
import pytest
from leasekit.widgets import ConsumerPanel

import leasekit as lk

TB = lk.TableBucket
BUCKETS = 8


@pytest.fixture
def group(conn):
    """Group g over an 8-bucket table, bucket b committed 10 * b records short of its end,
    bucket 7 never committed."""
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=BUCKETS)
    table.append([{"id": i, "v": "x"} for i in range(800)])
    ends = table.end_offsets()
    with conn.consumer(group_id="g", enable_auto_commit=False) as c:
        c.assign(table.buckets)
        c.commit({tb: ends[tb] - 10 * tb.bucket for tb in table.buckets if tb.bucket < 7})
    return ends


def test_the_grid_holds_the_first_rows_in_the_chosen_order(conn, group, monkeypatch):
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    assert len(panel.grid.data) == BUCKETS and panel.nothing.value == ""
    monkeypatch.setattr(consumers, "GRID_ROWS", 3)
    panel._show_rows()
    page = panel.grid.data
    # lag largest first: buckets 6, 5, 4 (bucket 7 never committed has no lag: last)
    assert list(page["bucket"]) == [6, 5, 4]
    assert list(page["lag"]) == [60.0, 50.0, 40.0]
    assert f"Showing the first 3 of {BUCKETS} buckets" in panel.nothing.value
    assert f"{BUCKETS} buckets" in panel.summary.value  # the summary counts every bucket
    panel.sort.value = "bucket"
    assert list(panel.grid.data["bucket"]) == [0, 1, 2]
    panel.status_filter.value = "none"  # one bucket matches: all of it shown, no note
    assert list(panel.grid.data["bucket"]) == [7] and panel.nothing.value == ""
    assert panel.grid.data["committed"].isna().all()
    panel.status_filter.value = "all"
    panel.min_lag.value = 45  # buckets 5 and 6
    assert sorted(panel.grid.data["bucket"]) == [5, 6] and panel.nothing.value == ""
    panel.close()


def test_the_rows_are_what_describe_group_says(conn, group):
    """Every bucket's committed offset, end and lag in the grid equal ``describe_group``'s."""
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    panel.sort.value = "bucket"
    rows = panel.rows()
    described = conn.describe_group("g").sort_values("bucket")
    assert list(rows["bucket"]) == list(described["bucket"])
    assert list(rows["end"]) == [float(x) for x in described["log_end_offset"]]

    def plain(values):
        return [None if pd.isna(x) else int(x) for x in values]

    assert plain(rows["committed"]) == plain(described["current_offset"])
    assert plain(rows["lag"]) == plain(described["lag"])
    panel.close()


def test_sealed_buckets_and_their_children_show_where_they_came_from(conn, group):
    """K6: a bucket split away stays in the grid, marked with its seal and children, until the
    group has committed it to its seal; its children say they come after it, then from it."""
    table = conn.table("orders")
    c1, c2 = table.split_bucket(3)
    sealed_at = group[TB("orders", 3)]
    table.append([{"id": i, "v": "y"} for i in range(800, 1200)])
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    panel.sort.value = "bucket"
    rows = panel.rows().set_index("bucket")
    assert rows.loc[3, "lineage"] == f"sealed at offset {sealed_at:,} → {c1.bucket}, {c2.bucket}"
    assert rows.loc[c1.bucket, "lineage"] == "from 3, after its seal"
    assert rows.loc[c2.bucket, "lineage"] == "from 3, after its seal"
    assert rows.loc[0, "lineage"] == ""
    with conn.consumer(group_id="g", enable_auto_commit=False) as c:
        c.assign([TB("orders", 3)])
        c.commit({TB("orders", 3): sealed_at})  # the group drains the sealed bucket
    panel.refresh()
    rows = panel.rows().set_index("bucket")
    assert 3 not in rows.index  # drained: it leaves the grid, as it leaves describe_group
    assert rows.loc[c1.bucket, "lineage"] == "from 3"
    panel.close()
