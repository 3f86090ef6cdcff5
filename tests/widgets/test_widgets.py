"""The notebook panels headless (docs/panels.md, docs/architecture.md): built over real
ZooKeeper data, every button clicked with ``button.click()``, assertions on widget state and on
the metadata the click changed; live refresh from watches shows another connection's change;
``close()`` leaves no watch or thread behind; user-supplied text is HTML-escaped."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import Compacted
from leasekit.widgets import ConsumerPanel, Dashboard, LeasePanel, RetentionPanel
from leasekit.widgets.base import STALE_CLASS

import leasekit as lk
from leasekit.live import LiveView
from leasekit.testing import context

TB = lk.TableBucket
XSS = "<script>alert(1)</script>"


def wait_until(what, condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def panel_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("leasekit-panel")]


@pytest.fixture
def other(zookeeper, warehouse, namespace):
    """A second connection to the same namespace: another analyst or process."""
    with lk.connect(zookeeper, warehouse, namespace=namespace) as connection:
        yield connection


@pytest.fixture(scope="module")
def compacted(zookeeper, spark, tmp_path_factory):
    rows = [{"id": i, "status": "new"} for i in range(40)]
    folder = tmp_path_factory.mktemp("orders")
    return Compacted(zookeeper, spark, folder, "id BIGINT, status STRING", [rows])


@pytest.fixture
def orders(conn, compacted):
    """40 rows in 4 buckets, one snapshot per bucket (copies of the module's compaction)."""
    return compacted.make(conn)


# -- LeasePanel -------------------------------------------------------------------------------


# -- every panel ------------------------------------------------------------------------------


def test_building_a_panel_reads_nothing_until_it_is_displayed(conn, orders):
    # no I/O in constructors; the first load happens on display (or on refresh())
    conn.acquire_kv_snapshot_lease("held", {}, "1h")
    trips = context(conn).store.round_trips
    panels = [LeasePanel(conn), ConsumerPanel(conn), RetentionPanel(conn, "orders")]
    dash = Dashboard(conn)
    time.sleep(0.5)
    assert context(conn).store.round_trips == trips  # no ZooKeeper round trip
    assert all(p.refreshes == 0 and p.watched == 0 for p in [*panels, *dash.panels])
    assert not panel_threads() and panels[0].lease.options == ()
    bundle = panels[0]._repr_mimebundle_()  # what Jupyter calls to display it
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert panels[0].refreshes >= 1 and panels[0].lease.options == ("held",)
    dash._repr_mimebundle_()  # a Dashboard shown loads every tab
    assert all(p.refreshes >= 1 for p in dash.panels)
    assert "held" in dash.leases.table.value and "reclaimable" in dash.retention.summary.value
    for panel in [*panels, dash]:
        panel.close()
    wait_until("every panel thread to end", lambda: not panel_threads(), seconds=5)


def test_live_view_watches_what_a_read_touched_and_calls_back_once_per_burst(conn, other):
    # the machinery behind every panel, public in leasekit.live
    calls = []
    view = LiveView(conn, lambda: calls.append(1), debounce=1.0, name="leasekit-panel-test")
    try:
        assert view.watched == 0 and view.refreshed_at is None and view.connected
        view.follow_changes(True, read_now=False)
        assert view.read(conn.leases) == [] and view.refreshed_at is not None
        wait_until("the watches", lambda: view.watched > 0)
        wait_until("the call for the watches just set", lambda: len(calls) == 1)
        for i in range(3):
            other.acquire_kv_snapshot_lease(f"burst-{i}", {}, "1h")
        wait_until("one call for the burst", lambda: len(calls) == 2)
        time.sleep(1.5)
        assert len(calls) == 2
        view.follow_changes(False)
        assert view.watched == 0
        other.acquire_kv_snapshot_lease("unheard", {}, "1h")
        time.sleep(1.5)
        assert len(calls) == 2
    finally:
        view.close()
    wait_until("the view's thread to end", lambda: not panel_threads(), seconds=5)


def test_lease_panel_buttons_change_the_leases_in_zookeeper(conn, orders):
    panel = LeasePanel(conn, auto_refresh=False)
    panel.refresh()
    assert "0 leases" in panel.summary.value and panel.lease.options == ()
    panel.new_id.value, panel.duration.value = "q3-report", "2h"
    panel.create.click()  # L8: the first acquire creates the lease
    assert [x.lease_id for x in conn.leases()] == ["q3-report"]
    assert panel.lease.value == "q3-report" and "1 lease" in panel.summary.value
    assert "q3-report" in panel.table.value and "alive" in panel.table.value
    panel.acquire_table.value = "orders"
    panel.acquire.click()  # L6: the newest snapshot of every bucket
    pins = conn.leases()[0].pins
    assert set(pins) == set(orders.buckets) and len(panel.pins.data) == 4
    assert "4 pinned buckets" in panel.summary.value
    before = conn.leases()[0].expires_at
    panel.duration.value = "3h"
    panel.renew.click()  # L7: renew only extends
    assert conn.leases()[0].expires_at > before and "now expires at" in panel.message.value
    assert panel.release.disabled  # nothing selected, nothing to release
    panel.release_buckets.value = (TB("orders", 0), TB("orders", 2))
    assert not panel.release.disabled
    panel.release.click()  # L9
    assert set(conn.leases()[0].pins) == {TB("orders", 1), TB("orders", 3)}
    assert sorted(panel.pins.data["bucket"]) == [1, 3] and panel.release_buckets.value == ()
    panel.drop.click()  # docs/panels.md: asks first; nothing dropped yet
    assert panel.drop_confirm.asking and len(conn.leases()) == 1
    assert panel.drop_confirm.confirm.description == "Confirm drop of q3-report (2 pins)?"
    panel.drop_confirm.confirm.click()  # L10
    assert conn.leases() == [] and panel.lease.options == () and "0 leases" in panel.summary.value
    assert panel.renew.disabled and panel.drop.disabled
    panel.close()


def test_lease_panel_shows_errors_as_text_and_escapes_user_text(conn, orders, other):
    panel = LeasePanel(conn, auto_refresh=False)
    panel.new_id.value = "bad id/with slash"
    panel.create.click()  # L1: refused before any ZooKeeper call, shown inside the panel
    assert "InvalidLeaseIdError" in panel.message.value and conn.leases() == []
    panel.new_id.value, panel.duration.value = "ok", "-5m"
    panel.create.click()  # L2
    assert "InvalidDurationError" in panel.message.value and conn.leases() == []
    context(other).owner = "<b>mallory</b>"  # owners are user-supplied text
    other.acquire_kv_snapshot_lease("owned", {}, "1h")
    panel.refresh()
    assert (
        "&lt;b&gt;mallory&lt;/b&gt;" in panel.table.value and "<b>mallory" not in panel.table.value
    )
    panel.close()


def test_a_failed_refresh_shows_why_and_clears_when_reading_works_again(
    zookeeper, warehouse, namespace, conn
):
    # a panel says when it last refreshed and whether ZooKeeper answers
    lost = lk.connect(zookeeper, warehouse, namespace=namespace)
    panel = LeasePanel(lost, auto_refresh=False)
    assert panel.refreshed_at is None and "not refreshed yet" in panel.status.value
    panel.new_id.value = "bad/id"
    panel.create.click()
    assert "create failed" in panel.message.value
    panel.refresh()
    assert "create failed" in panel.message.value  # an action's error stays until the next action
    refreshed = panel.refreshed_at
    assert refreshed is not None and not panel.stale and panel.connected
    assert f"refreshed {refreshed:%H:%M:%S} UTC" in panel.status.value
    assert "ZooKeeper connected" in panel.status.value
    lost.close()
    panel.refresh()  # the connection is gone: said inside the panel, nothing raised
    assert "could not read: IllegalStateError" in panel.message.value
    assert panel.last_error.startswith("IllegalStateError") and panel.refreshed_at == refreshed
    assert panel.stale and not panel.connected
    assert "stale" in panel.status.value and "ZooKeeper unreachable" in panel.status.value
    # docs/panels.md: the notice is the panel's first line, and what may be out of date is dimmed
    assert panel.children[0] is panel.status and STALE_CLASS in panel._dom_classes
    panel.conn = conn
    panel.refresh()
    assert panel.message.value == ""
    assert STALE_CLASS not in panel._dom_classes
    assert not panel.stale and panel.last_error == "" and panel.refreshed_at > refreshed
    panel.close()


def test_lease_countdown_ticks_without_zookeeper(conn):
    conn.acquire_kv_snapshot_lease("short", {}, "90s")
    panel = LeasePanel(conn)
    panel.refresh()
    wait_until("the refresh that follows the first watches", lambda: panel.refreshes == 2)
    first = panel.table.value
    store = context(conn).store
    trips = store.round_trips
    wait_until("the countdown to tick", lambda: panel.table.value != first, seconds=5)
    assert "1m" in first and store.round_trips == trips  # ticks locally: no ZooKeeper access
    panel.close()


def test_lease_panel_refreshes_from_watches_when_another_connection_changes_a_lease(
    conn, orders, other
):
    panel = LeasePanel(conn)
    panel.refresh()
    other.acquire_kv_snapshot_lease("from-elsewhere", {TB("orders", 1): 1}, "1h")
    wait_until("the new lease", lambda: "from-elsewhere" in panel.lease.options)
    panel.lease.value = "from-elsewhere"
    wait_until("its pin", lambda: len(panel.pins.data) == 1)
    other.release_kv_snapshot_lease(
        "from-elsewhere", [TB("orders", 1)]
    )  # only the pin array changes
    wait_until("the release", lambda: len(panel.pins.data) == 0)
    before = panel.table.value
    other.renew_kv_snapshot_lease("from-elsewhere", "5h")
    wait_until(
        "the renewal",
        lambda: "4h 59m" in panel.table.value or "5h 00m" in panel.table.value,
        seconds=10,
    )
    assert before != panel.table.value
    other.drop_kv_snapshot_lease("from-elsewhere")
    wait_until("the drop", lambda: panel.lease.options == ())
    assert panel.watched > 0 and panel_threads()
    panel.close()
    assert panel.watched == 0  # close() unregisters every watch...
    wait_until(
        "the panel thread to end", lambda: not panel_threads(), seconds=5
    )  # ...and ends its thread
    refreshes = panel.refreshes
    other.acquire_kv_snapshot_lease("after-close", {}, "1h")
    time.sleep(1.0)
    assert panel.refreshes == refreshes


def test_auto_refresh_off_holds_no_watch_and_on_again_watches(conn, other):
    panel = LeasePanel(conn, auto_refresh=False)
    assert panel.watched == 0 and not panel_threads()
    other.acquire_kv_snapshot_lease("unseen", {}, "1h")
    time.sleep(0.6)
    assert panel.lease.options == ()
    panel.auto_refresh = True  # refreshes at once, then follows the watches
    wait_until("the refresh", lambda: panel.lease.options == ("unseen",))
    other.acquire_kv_snapshot_lease("seen", {}, "1h")
    wait_until("the watch", lambda: panel.lease.options == ("seen", "unseen"))
    panel.auto_refresh = False
    assert panel.watched == 0
    panel.close()
    wait_until("the panel thread to end", lambda: not panel_threads(), seconds=5)


# -- ConsumerPanel ----------------------------------------------------------------------------


def _group(conn, orders, metadata=""):
    """Group g: consumed everything, committed 5 short of the end of each bucket."""
    c = conn.consumer(orders, group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    c.poll(timeout="5s")
    ends = orders.end_offsets()
    c.commit({tb: lk.OffsetAndMetadata(max(0, ends[tb] - 5), metadata) for tb in orders.buckets})
    return c


def test_consumer_panel_shows_lag_status_owner_and_escapes_metadata(conn, orders):
    consumer = _group(conn, orders, metadata=XSS)
    panel = ConsumerPanel(conn, auto_refresh=False)
    panel.refresh()
    assert panel.group.options == ("g",) and panel.group.value == "g"
    rows = panel.grid.data
    assert len(rows) == 4 and set(rows["lag"]) == {5.0}  # lag measured now (docs/consumers.md)
    assert set(rows["member"]) == {consumer.member_id} and set(rows["status"]) == {"OK"}
    assert set(rows["metadata"]) == {XSS}  # the grid draws cells as text, never as HTML
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt;" in panel.detail.value
        and "<script>" not in panel.detail.value
    )
    assert "1 live member" in panel.summary.value and "total lag 20" in panel.summary.value
    assert list(panel.lag_line.y)[-1] == 20  # lag over time, ending with the lag now
    consumer.close()


def test_consumer_panel_filters_and_sorts(conn, orders):
    consumer = _group(conn, orders)
    orders.append([{"id": i, "status": "late"} for i in range(100, 160)])
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    lags = list(panel.grid.data["lag"])
    assert lags == sorted(lags, reverse=True)  # lag, largest first
    panel.min_lag.value = int(lags[0])
    assert list(panel.grid.data["lag"]) == [lags[0]] * lags.count(lags[0])
    panel.min_lag.value = 0
    panel.sort.value = "bucket"
    assert list(panel.grid.data["bucket"]) == [0, 1, 2, 3]
    panel.status_filter.value = "not-ok"
    assert len(panel.grid.data) == 0
    panel.status_filter.value = "OK"
    assert len(panel.grid.data) == 4
    consumer.close()


def test_reset_form_selects_nothing_previews_then_executes_only_without_members(conn, orders):
    # C13; a reset is safe by default: nothing chosen, a dry-run preview before any change
    consumer = _group(conn, orders)
    committed = {tb: consumer.committed(tb) for tb in orders.buckets}
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    form = panel.reset
    assert form.target.value == "" and form.buckets.value == ()
    assert form.preview_button.disabled and form.execute.disabled
    form.target.value = "earliest"
    form.select_all.click()
    assert form.buckets.value == tuple(orders.buckets)
    assert form.preview_button.disabled and form.execute.disabled  # a live member
    assert "1 live member" in form.reason.value
    consumer.close()
    panel.refresh()
    assert (
        not form.preview_button.disabled
        and form.execute.disabled
        and "Preview" in form.reason.value
    )
    form.preview_button.click()
    assert "Dry run" in form.preview.value and not form.execute.disabled
    assert {
        tb: conn.consumer(group_id="g").committed(tb) for tb in orders.buckets
    } == committed  # nothing changed
    form.target.value = "shift"  # changing the inputs asks for a new preview
    assert form.execute.disabled
    form.value.value = "x"
    form.preview_button.click()
    assert "is not a whole number" in panel.message.value and form.execute.disabled
    form.target.value, form.value.value = "offset", "1"
    form.buckets.value = (TB("orders", 2),)
    form.preview_button.click()
    form.execute.click()  # docs/panels.md: asks first
    assert form.execute_confirm.asking and "Confirm reset of 1 offset of g?" == (
        form.execute_confirm.confirm.description
    )
    assert conn.consumer(group_id="g").committed(TB("orders", 2)) == committed[TB("orders", 2)]
    form.execute_confirm.confirm.click()
    assert conn.consumer(group_id="g").committed(TB("orders", 2)) == 1
    assert conn.consumer(group_id="g").committed(TB("orders", 0)) == committed[TB("orders", 0)]
    assert "Offsets reset" in form.preview.value and form.execute.disabled  # once
    panel.close()


def test_consumer_panel_follows_commits_and_appends_of_others(conn, orders, other):
    consumer = _group(other, orders)
    panel = ConsumerPanel(conn, "g")
    panel.refresh()
    assert set(panel.grid.data["lag"]) == {5.0}
    orders.append([{"id": i, "status": "x"} for i in range(200, 240)])  # the log end moves
    wait_until("the new lag", lambda: panel.grid.data["lag"].sum() == 20 + 40)
    while any(consumer.position(tb) < end for tb, end in orders.end_offsets().items()):
        consumer.poll(timeout="1s")
    consumer.commit()  # another process commits the end
    wait_until("the commit", lambda: panel.grid.data["lag"].sum() == 0)
    consumer.close()  # the member leaves
    wait_until("the member to leave", lambda: "0 live members" in panel.summary.value)
    panel.close()
    assert panel.watched == 0
    wait_until("the panel thread to end", lambda: not panel_threads(), seconds=5)


# -- RetentionPanel and Dashboard -------------------------------------------------------------


def test_retention_panel_plans_runs_and_names_the_pinning_lease(conn, orders, spark):
    orders.append([{"id": i, "status": "more"} for i in range(40, 80)])
    orders.snapshot(spark)
    orders.append([{"id": i, "status": "again"} for i in range(80, 120)])
    orders.snapshot(spark)  # three snapshots per bucket: the oldest is beyond the 2 retained
    conn.acquire_kv_snapshot_lease("keep-first", {TB("orders", 0): 1}, "1h")
    panel = RetentionPanel(conn, "orders", auto_refresh=False)
    panel.refresh()
    plan = panel.grid.data
    snaps = plan[plan["kind"] == "snapshot"]
    first = snaps[(snaps["bucket"] == "0") & (snaps["item"] == "1")].iloc[0]
    assert first["action"] == "keep" and first["pinned by"] == "keep-first"  # R1, R6
    assert "keep-first" in first["reason"]
    deletes = snaps[snaps["action"] == "delete"]
    assert sorted(deletes["bucket"]) == ["1", "2", "3"] and "reclaimable" in panel.summary.value
    panel.action_filter.value = "delete"
    assert set(panel.grid.data["action"]) == {"delete"}
    assert panel.dry_run.value  # a dry run unless the user unticks it
    panel.run.click()
    assert "Dry run" in panel.report.value and len(orders.snapshots(1)) == 3
    panel.dry_run.value = False
    panel.run.click()  # docs/panels.md: a real run asks first
    assert panel.run_confirm.asking and len(orders.snapshots(1)) == 3
    panel.run_confirm.confirm.click()
    assert "Retention ran" in panel.report.value
    assert [s.snapshot_id for s in orders.snapshots(1)] == [2, 3]
    assert [s.snapshot_id for s in orders.snapshots(0)] == [1, 2, 3]  # pinned: kept (R2)
    assert len(panel.grid.data) == 0  # refreshed: nothing left to delete
    panel.close()


def test_retention_panel_follows_new_snapshots(conn, orders, spark):
    panel = RetentionPanel(conn)
    panel.refresh()
    before = len(panel.grid.data)
    orders.append([{"id": i, "status": "more"} for i in range(40, 80)])
    orders.snapshot(spark)
    wait_until("the new snapshots and segments", lambda: len(panel.grid.data) > before, seconds=15)
    panel.close()


def test_dashboard_holds_the_four_panels_and_closes_them(conn, orders):
    dash = Dashboard(conn)
    assert [type(p).__name__ for p in dash.tabs.children] == [
        "OverviewPanel",
        "LeasePanel",
        "ConsumerPanel",
        "RetentionPanel",
    ]
    assert dash.tabs.titles == ("Overview", "Leases", "Consumers", "Retention")  # docs/panels.md
    assert conn.namespace in dash.header.value and conn.zookeeper in dash.header.value
    dash.leases.new_id.value = "from-dashboard"
    dash.leases.create.click()
    assert [x.lease_id for x in conn.leases()] == ["from-dashboard"]
    dash.close()
    assert all(p.watched == 0 for p in dash.panels)
    wait_until("every panel thread to end", lambda: not panel_threads(), seconds=5)
