"""The notebook Dashboard in a real browser: JupyterLab on loopback, Debian's headless
Chromium, a notebook that shows ``Dashboard(conn)``; the panel must render (no "Loading
widget…", no widget or Python error), and its Create button must create a lease that both
the panel and ZooKeeper show. Screenshots go to ``artifacts/browser/``."""

from __future__ import annotations

import re
import time

LEASE_ID = "browser-q3"
RENDER_TIMEOUT_MS = 60_000
UPDATE_TIMEOUT_MS = 15_000


def dashboard_cells(zookeeper: str, warehouse: str, namespace: str) -> list[str]:
    return [
        "import leasekit as lk\n"
        "from leasekit.widgets import Dashboard\n"
        f"conn = lk.connect({zookeeper!r}, {warehouse!r}, namespace={namespace!r})",
        "dash = Dashboard(conn)\ndash",
    ]


def _seed_lag_history(conn, group, table) -> None:
    """Samples of ``group`` 20 and 10 minutes ago (as the janitor takes them)."""
    from leasekit import testing
    from leasekit.monitor.lag import history

    ctx = testing.context(conn)
    now, ends = ctx.server_clock.fresh_ms(), table.end_offsets()
    history.append_rows(
        ctx,
        [
            history.HistoryRow(now - age * 60_000, group, tb.table, tb.bucket, 2, end, end - 2, 0)
            for age in (20, 10)
            for tb, end in ends.items()
        ],
    )


def lease_ids(conn) -> set[str]:
    return {info.lease_id for info in conn.leases()}


def test_dashboard_renders_and_creates_a_lease(notebook, conn, zookeeper, warehouse, namespace):
    from playwright.sync_api import expect

    import leasekit as lk

    # a table and a group with commits, so the grids and the lag plot have something to draw
    orders = conn.create_table("orders", "id BIGINT, note STRING", "id", buckets=4)
    orders.append([{"id": i, "note": "x"} for i in range(40)])
    with conn.consumer(
        orders, group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False
    ) as c:
        c.poll(timeout="5s")
        c.commit(
            {tb: lk.OffsetAndMetadata(5, "<script>alert(1)</script>") for tb in orders.buckets}
        )
    _seed_lag_history(conn, "billing", orders)  # the Overview's sparkline draws it
    expect.set_options(timeout=UPDATE_TIMEOUT_MS)
    page = notebook.page
    page.set_viewport_size(SCREEN)  # docs/panels.md: a laptop's screen; each tab kept in docs/
    notebook.open(dashboard_cells(zookeeper, warehouse, namespace), "dashboard.ipynb")
    notebook.run_all()
    dashboard = notebook.wait_for_widget(".leasekit-dashboard", RENDER_TIMEOUT_MS)
    assert notebook.errors() == []
    expect(page.get_by_text("Loading widget")).to_have_count(0)
    expect(dashboard).to_have_count(1)

    expect(dashboard).to_contain_text(namespace)
    expect(dashboard).to_contain_text(zookeeper)
    tabs = dashboard.locator(".lm-TabBar-tab")
    for title in ("Overview", "Leases", "Consumers", "Retention"):
        expect(tabs.filter(has_text=title)).to_have_count(1)

    overview = dashboard.locator(".leasekit-overview-panel")  # the first tab (docs/panels.md)
    expect(overview).to_be_visible()
    expect(overview.locator(".leasekit-overview-groups")).to_contain_text("billing")
    expect(overview.locator("svg.leasekit-sparkline").first).to_be_visible()
    _tab_in_docs(page, overview, "overview")
    # nothing clipped: the last column scrolls into view inside the panel (docs/panels.md)
    last = overview.locator(".leasekit-overview-groups th", has_text="last commit")
    last.scroll_into_view_if_needed()
    expect(last).to_be_in_viewport()
    notebook.screenshot("overview", overview)
    dashboard.locator(".lm-TabBar-tab", has_text="Leases").click()

    panel = dashboard.locator(".leasekit-lease-panel")
    expect(panel).to_be_visible()
    summary = panel.locator(".leasekit-summary")
    expect(summary).to_have_text(re.compile(r"\b0 leases\b"))
    expect(panel.locator(".leasekit-lease-duration input")).to_have_value("1h")
    expect(panel.locator(".leasekit-leases")).not_to_contain_text(LEASE_ID)
    notebook.screenshot("rendered", dashboard)
    _tab_in_docs(page, panel, "leases")

    panel.locator(".leasekit-lease-id input").fill(LEASE_ID)
    panel.get_by_role("button", name="Create", exact=True).click()

    expect(panel.locator(".leasekit-leases table")).to_contain_text(LEASE_ID)
    expect(summary).to_have_text(re.compile(r"\b1 lease\b"))
    notebook.screenshot("after-create", dashboard)

    deadline = time.monotonic() + UPDATE_TIMEOUT_MS / 1000
    while LEASE_ID not in lease_ids(conn) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert LEASE_ID in lease_ids(conn)

    # live: a lease acquired by another process reaches the page through the kernel's watch
    # thread (ZooKeeper watch -> panel thread -> widget state sent by the kernel), no click
    conn.acquire_kv_snapshot_lease("from-elsewhere", {}, "2h")
    expect(panel.locator(".leasekit-leases table")).to_contain_text("from-elsewhere")
    expect(summary).to_have_text(re.compile(r"\b2 leases\b"))
    first = panel.locator(".leasekit-leases table").inner_text()
    expect(panel.locator(".leasekit-leases table")).not_to_have_text(first)  # the countdown ticks
    notebook.screenshot("live-update", dashboard)

    # a destructive action asks first: Drop turns into "Confirm drop of ...?" and Cancel
    panel.locator("select").first.select_option(label=LEASE_ID)
    panel.get_by_role("button", name="Drop", exact=True).click()
    confirm = panel.get_by_role("button", name=f"Confirm drop of {LEASE_ID} (0 pins)?")
    expect(confirm).to_be_visible()
    notebook.screenshot("drop-asks-first", panel)
    assert LEASE_ID in lease_ids(conn)  # nothing dropped before the answer
    panel.get_by_role("button", name="Cancel", exact=True).click()
    expect(confirm).to_be_hidden()
    assert LEASE_ID in lease_ids(conn)

    # the other tabs: ipydatagrid grids (drawn on canvas), the bqplot lag plot, escaped text
    dashboard.locator(".lm-TabBar-tab", has_text="Consumers").click()
    consumers = dashboard.locator(".leasekit-consumer-panel")
    expect(consumers).to_be_visible()
    expect(consumers.locator(".leasekit-summary")).to_contain_text("billing")
    expect(consumers.locator(".leasekit-summary")).to_contain_text("total lag 20")
    expect(consumers.locator(".leasekit-detail")).to_contain_text(
        "<script>alert(1)</script>"
    )  # as text
    expect(consumers.locator("canvas").first).to_be_visible()
    expect(consumers.locator(".bqplot").first).to_be_visible()
    notebook.screenshot("consumers", consumers)
    _tab_in_docs(page, consumers, "consumers")

    # a reset preview that went stale is refused: another client moves the offsets after the
    # preview; the panel follows and Execute refuses until a new preview
    reset = consumers.locator(".leasekit-reset")
    reset.locator("select").first.select_option(label="shift by")
    reset.locator("input[type=text]").fill("-2")
    reset.get_by_role("button", name="Select all").click()
    reset.get_by_role("button", name="Preview").click()
    expect(reset.locator(".leasekit-reset-plan")).to_be_visible()
    execute = reset.get_by_role("button", name="Execute", exact=True)
    expect(execute).to_be_enabled()
    conn.reset_offsets("billing", to="latest", dry_run=False)
    expect(reset.locator(".leasekit-reason")).to_contain_text("changed since the preview")
    expect(execute).to_be_disabled()
    notebook.screenshot("stale-preview-refused", consumers)
    assert set(conn.describe_group("billing")["lag"]) == {0}  # as the other client left it
    dashboard.locator(".lm-TabBar-tab", has_text="Retention").click()
    retention = dashboard.locator(".leasekit-retention-panel")
    expect(retention.locator(".leasekit-summary")).to_contain_text("reclaimable")
    expect(retention.locator("canvas").first).to_be_visible()
    notebook.screenshot("retention", retention)
    _tab_in_docs(page, retention, "retention")
    assert notebook.errors() == []


def test_dashboard_shows_a_zookeeper_outage_and_recovers(notebook, tmp_path):
    # docs/cli.md, docs/panels.md: a server of this test's own (never the session's),
    # stopped and started again while the Dashboard is open in the browser
    from playwright.sync_api import expect

    import leasekit as lk
    from leasekit import embedded
    from leasekit.live import STALE_AFTER

    data_dir = tmp_path / "own-zookeeper"
    address = embedded.ensure_running(data_dir)
    warehouse = str(tmp_path / "warehouse")
    try:
        with lk.connect(address, warehouse, namespace="outage") as conn:
            conn.acquire_kv_snapshot_lease("before-outage", {}, "2h")
            expect.set_options(timeout=UPDATE_TIMEOUT_MS)
            notebook.open(dashboard_cells(address, warehouse, "outage"), "outage.ipynb")
            notebook.run_all()
            dashboard = notebook.wait_for_widget(".leasekit-dashboard", RENDER_TIMEOUT_MS)
            dashboard.locator(".lm-TabBar-tab", has_text="Leases").click()
            panel = dashboard.locator(".leasekit-lease-panel")
            status = panel.locator(".leasekit-status")
            expect(status).to_contain_text("ZooKeeper connected")
            expect(panel.locator(".leasekit-leases table")).to_contain_text("before-outage")

            assert embedded.stop(data_dir)  # what `leasekit zookeeper stop` does
            # within one refresh interval: unreachable, and what is shown is marked stale
            expect(status).to_contain_text("ZooKeeper unreachable", timeout=STALE_AFTER * 1000)
            expect(status).to_contain_text("stale")
            expect(panel.locator(".leasekit-leases table")).to_contain_text("before-outage")
            _keep_in_docs(notebook.screenshot("zookeeper-stopped", panel), "zookeeper-down")

            assert embedded.ensure_running(data_dir) == address  # the same port (docs/cli.md)
            expect(status).to_contain_text("ZooKeeper connected", timeout=RECOVER_TIMEOUT_MS)
            expect(status).not_to_contain_text("stale")
            conn.acquire_kv_snapshot_lease("after-outage", {}, "2h")  # live again, no click
            expect(panel.locator(".leasekit-leases table")).to_contain_text("after-outage")
            _keep_in_docs(notebook.screenshot("zookeeper-back", panel), "zookeeper-back")
            assert notebook.errors() == []
    finally:
        embedded.stop(data_dir)


SCREEN = {"width": 1280, "height": 800}
"""The screen the Dashboard's tabs are shown on in docs/ (docs/panels.md)."""


def _tab_in_docs(page, panel, name: str) -> None:
    """What a user sees of the tab ``panel`` on a 1280 x 800 screen, its top scrolled into view,
    saved as ``docs/dashboard-<name>.png``."""
    from pathlib import Path

    panel.evaluate("element => element.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)  # the grids redraw their canvas after a scroll
    docs = Path(__file__).resolve().parents[2] / "docs"
    page.screenshot(path=str(docs / f"dashboard-{name}.png"))


RECOVER_TIMEOUT_MS = 40_000
"""kazoo's reconnect back-off plus ZOOKEEPER-5051 (a client connecting while the server starts
may wait a session timeout before it tries again)."""


def _keep_in_docs(shot, name: str) -> None:
    """Copy the element screenshot of ``shot`` to ``docs/dashboard-<name>.png``."""
    import shutil
    from pathlib import Path

    element = shot.with_name(f"{shot.stem}-element.png")
    docs = Path(__file__).resolve().parents[2] / "docs"
    shutil.copyfile(element, docs / f"dashboard-{name}.png")
