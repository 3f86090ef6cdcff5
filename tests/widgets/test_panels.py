"""The panels' confirmations, the exact reset and their formatting (docs/panels.md),
headless: built over real ZooKeeper data, buttons clicked, assertions on widget state and on
what the click changed (or did not)."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from helpers import Compacted
from leasekit.widgets import ConsumerPanel, Dashboard, LeasePanel, OverviewPanel, RetentionPanel
from leasekit.widgets.formatting import duration_text, grid_height, human_bytes, time_axis

import leasekit as lk
from leasekit.live import human_duration

TB = lk.TableBucket
UTC = timezone.utc


@pytest.fixture
def other(zookeeper, warehouse, namespace):
    """Another client of the namespace: another shell, another analyst."""
    with lk.connect(zookeeper, warehouse, namespace=namespace) as connection:
        yield connection


@pytest.fixture(scope="module")
def compacted(zookeeper, spark, tmp_path_factory):
    rows = [{"id": i, "status": "new"} for i in range(400)]
    folder = tmp_path_factory.mktemp("orders")
    return Compacted(zookeeper, spark, folder, "id BIGINT, status STRING", [rows])


@pytest.fixture
def orders(conn, compacted):
    """400 rows in 4 buckets, one snapshot per bucket (copies of the module's compaction)."""
    return compacted.make(conn)


def _stopped_group(conn, orders, at=100):
    """Group g with no live member, committed at ``at`` (or the end) in every bucket."""
    ends = orders.end_offsets()
    with conn.consumer(group_id="g", enable_auto_commit=False) as c:
        c.assign(orders.buckets)
        c.commit({tb: min(at, ends[tb]) for tb in orders.buckets})


def _committed(conn):
    f = conn.describe_group("g")
    return {TB(t, int(b)): o for t, b, o in zip(f["table"], f["bucket"], f["current_offset"])}


# -- confirmations ----------------------------------------------------------------------------


def test_drop_asks_first_and_cancel_drops_nothing(conn, orders):
    # docs/panels.md: destructive actions ask for confirmation
    conn.acquire_kv_snapshot_lease("keep-me", {TB("orders", 0): 1}, "1h")
    panel = LeasePanel(conn, auto_refresh=False)
    panel.refresh()
    box = panel.drop_confirm
    assert not box.asking and box.confirm.layout.display == "none"
    panel.drop.click()
    assert box.asking and box.confirm.description == "Confirm drop of keep-me (1 pin)?"
    assert panel.drop.layout.display == "none" and box.cancel.layout.display == ""
    assert [x.lease_id for x in conn.leases()] == ["keep-me"]  # nothing happened yet
    box.cancel.click()
    assert not box.asking and panel.drop.layout.display == ""
    assert [x.lease_id for x in conn.leases()] == ["keep-me"]
    panel.drop.click()
    box.confirm.click()
    assert conn.leases() == [] and not box.asking
    panel.close()


def test_the_drop_confirmed_is_of_the_lease_asked_about(conn, orders):
    conn.acquire_kv_snapshot_lease("first", {}, "1h")
    conn.acquire_kv_snapshot_lease("second", {}, "1h")
    panel = LeasePanel(conn, auto_refresh=False)
    panel.refresh()
    panel.lease.value = "first"
    panel.drop.click()
    panel.lease.value = "second"  # choosing another lease withdraws the question
    assert not panel.drop_confirm.asking
    assert {x.lease_id for x in conn.leases()} == {"first", "second"}
    panel.close()


def test_a_real_retention_run_asks_first_a_dry_run_does_not(conn, orders, spark):
    orders.append([{"id": i, "status": "more"} for i in range(400, 440)])
    orders.snapshot(spark)
    orders.append([{"id": i, "status": "again"} for i in range(440, 480)])
    orders.snapshot(spark)  # three snapshots per bucket: the oldest goes
    panel = RetentionPanel(conn, "orders", auto_refresh=False)
    panel.refresh()
    panel.run.click()  # a dry run changes nothing: no question
    assert not panel.run_confirm.asking and "Dry run" in panel.report.value
    panel.dry_run.value = False
    panel.run.click()
    question = panel.run_confirm.confirm.description
    assert panel.run_confirm.asking and question.startswith("Confirm retention run on orders")
    assert re.search(r"deletes \d+ items, [\d.]+ (B|KiB|MiB)\)\?$", question)
    panel.run_confirm.cancel.click()
    assert len(orders.snapshots(1)) == 3 and "Retention ran" not in panel.report.value
    panel.run.click()
    panel.dry_run.value = True  # changing the choice withdraws the question
    assert not panel.run_confirm.asking
    panel.dry_run.value = False
    panel.run.click()
    panel.run_confirm.confirm.click()
    assert "Retention ran" in panel.report.value
    assert [s.snapshot_id for s in orders.snapshots(1)] == [2, 3]
    panel.close()


# -- the exact reset --------------------------------------------------------------------------


def _preview_shift(panel, by):
    form = panel.reset
    form.target.value, form.value.value = "shift", str(by)
    form.select_all.click()
    form.preview_button.click()
    assert "Dry run" in form.preview.value and not form.execute.disabled
    return form


def test_a_stale_reset_preview_is_refused_on_execute(conn, orders, other):
    # the scenario seen: preview "shift by -100", another shell resets the group to latest,
    # Execute -> it used to apply (latest - 100); now refused, nothing changed
    _stopped_group(conn, orders, at=100)
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    form = _preview_shift(panel, -50)
    assert "50" in form.preview.value
    other.reset_offsets("g", to="latest", dry_run=False)  # behind the panel's back
    latest = orders.end_offsets()
    form.execute.click()
    form.execute_confirm.confirm.click()
    assert "reset offsets failed: CommitFailedError" in panel.message.value
    assert "changed since the plan was made" in panel.message.value
    assert _committed(conn) == latest  # nothing applied
    assert form.execute.disabled and "Preview the reset" in form.reason.value  # preview again
    panel.close()


def test_a_refresh_shows_the_preview_went_stale_before_execute(conn, orders, other):
    _stopped_group(conn, orders, at=100)
    before = _committed(conn)
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    form = _preview_shift(panel, -10)
    other.reset_offsets("g", to="latest", buckets=[TB("orders", 3)], dry_run=False)
    panel.refresh()
    assert form.execute.disabled  # the action refuses when its preview moved
    assert "orders/3 changed since the preview" in form.reason.value
    form.preview_button.click()  # a new preview of the same inputs
    assert not form.execute.disabled
    form.execute.click()
    form.execute_confirm.confirm.click()
    ends = orders.end_offsets()
    assert _committed(conn) == {
        **{TB("orders", b): before[TB("orders", b)] - 10 for b in range(3)},
        TB("orders", 3): ends[TB("orders", 3)] - 10,
    }
    assert "Offsets reset." in form.preview.value and "as previewed" in panel.message.value
    panel.close()


def test_reset_execute_cancelled_changes_nothing(conn, orders):
    _stopped_group(conn, orders, at=100)
    before = _committed(conn)
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    form = _preview_shift(panel, -10)
    form.execute.click()
    assert form.execute_confirm.confirm.description == "Confirm reset of 4 offsets of g?"
    form.execute_confirm.cancel.click()
    assert _committed(conn) == before and not form.execute.disabled
    form.execute.click()
    form.value.value = "-20"  # changing the inputs withdraws the question
    assert not form.execute_confirm.asking and form.execute.disabled
    panel.close()


# -- formatting -------------------------------------------------------------------------------


def test_one_bytes_and_one_duration_format():
    # docs/panels.md: durations read the same everywhere; one bytes format in every panel
    assert [human_bytes(n) for n in (0, 512, 1536, 5 * 2**20, 3 * 2**40)] == [
        "0 B",
        "512 B",
        "1.5 KiB",
        "5.0 MiB",
        "3.0 TiB",
    ]
    assert human_bytes(None) == "-" and human_bytes(float("nan")) == "-"
    assert duration_text(pd.Timedelta(seconds=25.893)) == human_duration(timedelta(seconds=25.893))
    assert duration_text(timedelta(seconds=280)) == "4m 40s"
    assert duration_text(pd.NaT) == "-" and duration_text(float("inf")) == "∞"
    assert duration_text(7530.0) == "2h 5m"  # seconds as a number, never "7530.0"


@pytest.mark.parametrize(
    "span",
    [
        timedelta(seconds=0),
        timedelta(seconds=4),
        timedelta(seconds=47),
        timedelta(minutes=15),
        timedelta(hours=1),
        timedelta(hours=6),
        timedelta(hours=24),
        timedelta(days=7),
    ],
)
@pytest.mark.parametrize("start_hour", [0, 6, 18, 23])
def test_time_axis_is_24_hour_utc_with_labels_never_repeated(span, start_hour):
    start = datetime(2026, 11, 24, start_hour, 33, 17, tzinfo=UTC)
    ticks, fmt = time_axis(start, start + span)
    labels = [pd.Timestamp(t).tz_localize("UTC").strftime(fmt) for t in ticks]
    assert len(labels) == len(set(labels)) and 1 <= len(labels) <= 8, labels
    assert "%I" not in fmt and "%p" not in fmt  # a 24-hour clock
    spans_days = start.date() != (start + span).date()
    assert ("%d" in fmt) == spans_days or span >= timedelta(days=1), fmt
    assert all(start <= pd.Timestamp(t).tz_localize("UTC") <= start + span for t in ticks) or (
        span == timedelta(0)
    )
    if start_hour == 18 and span == timedelta(hours=1):
        assert labels[0].startswith("18:")  # not "06:40" for 18:40


def test_grids_size_to_their_rows_and_say_when_a_filter_matches_nothing(conn, orders):
    _stopped_group(conn, orders, at=100)
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    assert panel.grid.layout.height == grid_height(4) and panel.nothing.value == ""
    panel.status_filter.value = "REWIND"
    assert len(panel.grid.data) == 0 and "No bucket matches the filter" in panel.nothing.value
    assert "4 buckets in all" in panel.nothing.value
    panel.status_filter.value = "all"
    assert panel.nothing.value == "" and grid_height(4) != grid_height(40)
    assert grid_height(40) == grid_height(15)  # at most 15 rows, then it scrolls
    times = list(panel.grid.data["time lag"])
    assert all(re.fullmatch(r"(\d+(\.\d+)?(ms|[dhms]) ?)+|-", t) for t in times), times
    y_axis = panel.chart.y_axis
    assert y_axis.label_offset and y_axis.tick_format == "~s"  # the label clear of its ticks
    panel.close()


def test_retention_grid_has_no_nan_one_bytes_format_and_full_reasons(conn, orders, clock):
    conn.acquire_kv_snapshot_lease("short", {TB("orders", 0): 1}, "1m")
    clock.advance(timedelta(minutes=2))  # expired: a namespace-wide item, in no bucket
    panel = RetentionPanel(conn, auto_refresh=False)
    panel.refresh()
    grid = panel.grid.data
    lease = grid[grid["kind"] == "lease"].iloc[0]
    assert lease["bucket"] == "" and lease["item"] == "short"  # empty, never NaN
    assert not grid.isna().any().any()
    assert all(re.fullmatch(r"\d+ B|[\d.]+ [KMGT]iB", s) for s in grid["size"])
    assert panel.grid.column_widths["reason"] >= 480 and list(grid.columns)[-1] == "reason"
    assert re.search(r"reclaimable <b>[\d.]+ (B|KiB|MiB)</b>", panel.summary.value)
    row = int(grid.index[grid["kind"] == "lease"][0])
    panel._clicked({"row": row})  # what a click on the row does
    assert lease["reason"] in panel.detail.value.replace("&#x27;", "'")
    panel.action_filter.value = "keep"
    panel.scope = "orders"
    panel.action_filter.value = "delete"
    if len(panel.grid.data) == 0:
        assert "No item matches the filter" in panel.nothing.value
    panel.close()


# -- the Dashboard ----------------------------------------------------------------------------


def test_dashboard_auto_refresh_sets_every_panel_and_refresh_close_cover_them(conn, orders):
    # docs/panels.md: every panel, the Dashboard included, has refresh/auto_refresh/close
    dash = Dashboard(conn, auto_refresh=False)
    assert not dash.auto_refresh and not any(p.auto_refresh for p in dash.panels)
    dash.refresh()
    assert all(p.refreshes >= 1 for p in dash.panels)
    dash.auto_refresh = True
    assert all(p.auto_refresh for p in dash.panels)
    dash.auto_refresh = False
    assert not any(p.auto_refresh for p in dash.panels) and all(p.watched == 0 for p in dash.panels)
    dash.close()
    dash.close()  # twice is a no-op
    assert all(p.watched == 0 for p in dash.panels)
    time.sleep(0.2)


def test_overview_panel_is_exported():
    assert OverviewPanel.__name__ == "OverviewPanel"


def test_importing_the_panels_makes_no_widget():
    # docs/panels.md: a notebook that only imports leasekit.widgets saves no widget state (a widget
    # made at import would make nbconvert and code hosts load the widget manager for every report)
    import subprocess
    import sys

    code = (
        "import leasekit.widgets\n"
        "from ipywidgets.widgets.widget import _instances\n"
        "print(len(_instances))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
