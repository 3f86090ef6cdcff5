"""The panels over the monitoring readings (docs/panels.md, docs/monitoring.md): the
ConsumerPanel's lag chart reads the lag history (a time-range picker, the whole group or one
bucket, a 24-hour UTC axis) and the OverviewPanel shows every group, lease and reclaimable byte;
headless, over real ZooKeeper data and a real lag history."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest
from leasekit.widgets import ConsumerPanel

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag import history

TB = lk.TableBucket
HOUR_MS = 3_600_000
WRITER = ("writer", "s3cret")


def _commit(conn, offsets, group="g"):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


@pytest.fixture
def sampled(conn):
    """Group g, stopped, 2 buckets of table t, with a lag history of 3 hours: a sample every 10
    minutes, bucket 0's lag = 10 x the sample's age in hours x 6 (so older is larger), bucket 1's
    a constant 5; the sampler's znode says a sample was taken now (so open panels take none)."""
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(400)])
    ends = table.end_offsets()
    _commit(conn, {tb: end - 5 for tb, end in ends.items()})
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    rows = []
    for k in range(18, 0, -1):  # 180 min .. 10 min ago
        at = now - k * 600_000 + 30_000  # (30 s inside the range of k x 10 minutes)
        rows += [
            history.HistoryRow(at, "g", "t", 0, 100, 100 + 10 * k, 10 * k, 1000),
            history.HistoryRow(at, "g", "t", 1, 100, 105, 5, 1000),
        ]
    history.append_rows(ctx, rows)
    assert history._claim(ctx, None, now)  # a sampler's sample of now: none due while tested
    return table, now


def _points(panel):
    return pd.to_datetime(panel.lag_line.x).tz_localize("UTC"), list(panel.lag_line.y)


def test_lag_chart_reads_the_history_of_the_range_picked(conn, sampled):
    # docs/panels.md: the lag chart reads lag_history, with a time-range picker; then the lag now
    table, now = sampled
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    chart = panel.chart
    assert chart.range.value == timedelta(hours=1) and chart.bucket is None
    assert chart.notice.value == ""  # a history to draw: nothing to explain
    times, lags = _points(panel)
    # the last hour: samples 60, 50, ..., 10 minutes ago, summed over both buckets, then now
    assert lags == [10 * k + 5 for k in range(6, 0, -1)] + [10.0]
    assert times.is_monotonic_increasing
    assert (times[-1] - times[0]) <= pd.Timedelta(hours=1, seconds=5)
    chart.range.value = timedelta(hours=6)  # picking a range reads that range
    times, lags = _points(panel)
    assert len(lags) == 18 + 1 and lags[0] == 10 * 18 + 5
    assert chart.x_axis.tick_format in ("%H:%M", "%m-%d %H:%M")
    labels = [pd.Timestamp(t).strftime(chart.x_axis.tick_format) for t in chart.x_axis.tick_values]
    assert len(labels) == len(set(labels)) >= 3  # no label twice
    assert "Lag over the last 6h, all buckets" == panel.plot.title
    panel.close()


def test_lag_chart_shows_one_bucket_when_picked(conn, sampled):
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    chart = panel.chart
    assert [label for label, _ in chart.buckets.options] == ["all buckets", "t/0", "t/1"]
    chart.range.value = timedelta(hours=24)
    chart.buckets.value = TB("t", 1)  # one bucket: its own lag only
    _, lags = _points(panel)
    assert chart.bucket == TB("t", 1) and lags == [5.0] * 18 + [5.0]
    chart.buckets.value = TB("t", 0)
    _, lags = _points(panel)
    assert lags == [10.0 * k for k in range(18, 0, -1)] + [5.0]
    assert panel.plot.title == "Lag over the last 24h, t/0"
    panel.refresh()  # a refresh keeps the choices
    assert chart.bucket == TB("t", 0) and chart.range.value == timedelta(hours=24)
    panel.close()


def test_lag_chart_of_a_group_without_history_shows_the_lag_now(zookeeper, warehouse, namespace):
    # M1: a view that may not write (no credentials for the namespace) takes no sample: the
    # chart shows the lag now and says why there is no history and which command records it
    from leasekit.widgets import OverviewPanel

    with lk.connect(zookeeper, warehouse, namespace=namespace, auth=WRITER) as writer:
        table = writer.create_table("t", "id BIGINT", "id", buckets=1)
        table.append([{"id": i} for i in range(30)])
        _commit(writer, {TB("t", 0): 10})
        with lk.connect(zookeeper, warehouse, namespace=namespace) as reader:
            panel = ConsumerPanel(reader, "g", auto_refresh=False)
            panel.refresh()
            _, lags = _points(panel)
            assert lags == [20.0] and panel.last_error == ""
            assert "leasekit janitor" in panel.chart.notice.value
            panel.close()
            overview = OverviewPanel(reader, auto_refresh=False)
            overview.refresh()
            assert overview.last_error == "" and ">g<" in overview.groups.value
            assert "No lag history" in overview.summary.value
            assert "leasekit janitor" in overview.summary.value
            overview.close()
        assert writer.lag_history("g").empty


# -- OverviewPanel ----------------------------------------------------------------------------


def test_group_rows_put_at_risk_first_with_sparklines_rates_and_human_durations(conn, sampled):
    # docs/panels.md: every group with status (AT_RISK
    # highlighted), lag, a sparkline, rates, eta, headroom
    from leasekit.widgets.overview import group_rows, sparkline

    other = conn.create_table("u", "id BIGINT", "id", buckets=1)
    other.append([{"id": i} for i in range(10)])
    _commit(conn, {TB("u", 0): 10}, group="caught-up")
    groups = conn.group_overview()
    at_risk = groups.assign(
        status=[
            "AT_RISK" if g == "caught-up" else s for g, s in zip(groups["group"], groups["status"])
        ]
    )  # (a constructed status: the colouring is what is checked)
    since = pd.Timestamp.now(tz="UTC") - pd.Timedelta(hours=1)
    seen = {g: conn.lag_history(g, since=since.to_pydatetime()) for g in groups["group"]}
    rows = group_rows(at_risk, seen)
    assert [r[0] for r in rows] == ["caught-up", "g"]  # AT_RISK first
    assert "AT_RISK" in rows[0][1] and "background:#b00020" in rows[0][1]
    g = rows[1]
    assert g[4] == "10" and g[5].startswith("<svg") and "polyline" in g[5]
    assert rows[0][5] == sparkline([], [])  # no history: no line
    assert rows[0][10] == "∞" and g[10] == "6d 23h"  # headroom as people read it (7d default)
    assert all("days" not in str(c) and "ms" != str(c) for c in g)


def test_overview_panel_shows_groups_leases_and_reclaimable_bytes(conn, sampled, spark, clock):
    # docs/panels.md: the OverviewPanel; M4's states in the inventory; reclaimable bytes per table
    from leasekit.widgets import Dashboard, OverviewPanel

    orders = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    for k in range(3):  # three snapshots per bucket: the oldest is beyond the 2 retained
        orders.append([{"id": i, "v": f"v{k}"} for i in range(20)])
        orders.snapshot(spark)
    conn.acquire_kv_snapshot_lease("holding", {TB("orders", 0): 3}, "1h")
    testing.context(conn).owner = "<i>mallory</i>"  # owners are user-supplied text
    conn.acquire_kv_snapshot_lease("gone", {}, "1m")
    clock.advance(timedelta(minutes=2))  # the second lease expired
    panel = OverviewPanel(conn, auto_refresh=False)
    panel.refresh()
    assert panel.last_error == "", panel.last_error
    assert "<svg" in panel.groups.value and ">g<" in panel.groups.value
    assert "1 group" in panel.summary.value and "2 leases" in panel.summary.value
    assert "holding" in panel.leases.value and "active" in panel.leases.value
    assert "expired" in panel.leases.value
    assert "&lt;i&gt;mallory" in panel.leases.value and "<i>mallory" not in panel.leases.value
    reclaim = panel.reclaimable.value
    assert ">orders<" in reclaim and re_bytes(reclaim)
    assert "reclaimable <b>" in panel.summary.value
    panel.close()
    dash = Dashboard(conn, auto_refresh=False)
    assert dash.tabs.titles[0] == "Overview" and dash.tabs.children[0] is dash.overview
    dash.refresh()
    assert dash.overview.refreshes == 1 and dash.overview.last_error == ""
    dash.close()


def test_a_group_falling_behind_reads_behind_and_eta_never_in_the_overview(conn):
    # M6: the status everywhere a status shows; eta "never", not "-", when it will not catch up
    from leasekit.widgets import OverviewPanel

    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(300)])
    _commit(conn, {TB("t", 0): 100}, group="slow")
    _commit(conn, {TB("t", 0): 300}, group="done")
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    history.append_rows(
        ctx,
        [
            history.HistoryRow(now - 120_000, "slow", "t", 0, 0, 0, 0, 0),
            history.HistoryRow(now - 30_000, "slow", "t", 0, 30, 270, 240, 0),
        ],
    )
    overview = OverviewPanel(conn, auto_refresh=False)
    overview.refresh()
    assert overview.last_error == "", overview.last_error
    rows = [r for r in overview.groups.value.split("<tr") if ">slow<" in r]
    assert len(rows) == 1 and "BEHIND" in rows[0] and ">never<" in rows[0]
    assert "1 BEHIND" in overview.summary.value
    overview.close()


def test_an_open_overview_samples_the_lag_history(conn):
    # M1: with no janitor or exporter running, an open OverviewPanel (the Dashboard's first
    # tab) records the lag, at most once per monitor.interval for the namespace, so the
    # quickstart's Dashboard has a history
    from leasekit.widgets import OverviewPanel

    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(30)])
    _commit(conn, {TB("t", 0): 10}, group="quick")
    panel = OverviewPanel(conn, auto_refresh=False)
    panel.refresh()
    assert panel.last_error == "", panel.last_error
    assert conn.lag_history("quick")["lag"].tolist() == [20]
    assert "No lag history" not in panel.summary.value
    panel.refresh()  # within monitor.interval (30s): no second sample
    assert len(conn.lag_history("quick")) == 1
    panel.close()
    chart = ConsumerPanel(conn, "quick", auto_refresh=False)
    chart.refresh()
    assert chart.chart.notice.value == ""  # the sample is drawn: nothing to explain
    chart.close()


def test_hostile_bytes_in_the_sampler_znode_do_not_break_the_overview(conn):
    # M1: sampling is the open view's side job: a sampler znode holding garbage leaves the
    # OverviewPanel showing the groups (the janitor's sampler still reports the corruption)
    from leasekit.widgets import OverviewPanel

    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(30)])
    _commit(conn, {TB("t", 0): 10}, group="quick")
    ctx = testing.context(conn)
    path = history.sampler_path(ctx)
    ctx.store.ensure_path(path.rsplit("/", 1)[0])
    ctx.store.client.create(path, b"\xff\x00garbage" * 100)
    with pytest.raises(lk.CorruptMetadataError):
        history.sample(ctx)
    panel = OverviewPanel(conn, auto_refresh=False)
    panel.refresh()
    assert panel.last_error == "", panel.last_error
    assert ">quick<" in panel.groups.value
    panel.close()


def re_bytes(text):
    import re

    return re.search(r"\d+(\.\d)? (B|KiB|MiB)", text)


def test_overview_never_labels_by_an_internal_tables_name(conn):
    # the lag history's old segments are reclaimable (M1), counted under a readable
    # label, never as "__lag_history"
    import time

    from leasekit.widgets import OverviewPanel
    from leasekit.widgets.overview import INTERNAL

    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": 1}])
    _commit(conn, {TB("orders", 0): 1}, "billing")
    conn.update_settings({"monitor.retention": "1s"})
    for _ in range(3):
        history.sample(testing.context(conn), force=True)
        time.sleep(1.1)
    panel = OverviewPanel(conn, auto_refresh=False)
    panel.refresh()
    labels = [t for t, _, _ in panel.overview.reclaimable]
    assert INTERNAL in labels and not [t for t in labels if t.startswith("__")]
    assert "__lag_history" not in panel.reclaimable.value + panel.to_html()
    panel.close()
