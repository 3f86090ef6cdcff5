"""What a panel shows outlives its kernel (docs/panels.md, "Reports that outlive the kernel"):
``to_html()`` renders each panel and the Dashboard as static HTML (tables with the
cell text the grids show, the lag chart as an SVG image, the freshness line), with no script and
user text escaped, and a displayed panel carries that rendering beside its widget view."""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from ipydatagrid import DataGrid
from leasekit.widgets import ConsumerPanel, Dashboard, LeasePanel, OverviewPanel, RetentionPanel
from leasekit.widgets.consumers import GRID_COLUMNS
from leasekit.widgets.formatting import time_axis
from leasekit.widgets.lagchart import lag_chart
from leasekit.widgets.static import grid_table
from leasekit.widgets.svgchart import Series, TimeChart

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag import history

TB = lk.TableBucket
VIEW = "application/vnd.jupyter.widget-view+json"
SCRIPT = "<script>alert(1)</script>"
OWNER = "<script>alert('owner')</script><b>mallory</b>"


class Page(HTMLParser):
    """The parts of an HTML fragment the tests read: every tag, the tables (header and rows of
    cell text), the images and all text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.tables: list[dict] = []
        self.images: list[dict[str, str]] = []
        self.text: list[str] = []
        self.headings: list[str] = []
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self.tables.append({"class": dict(attrs).get("class", ""), "head": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(dict(attrs))
        elif tag == "h3":
            self.headings.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            table, text = self.tables[-1], "".join(self._cell).strip()
            (table["head"] if tag == "th" else table["rows"][-1]).append(text)
            self._cell = None

    def handle_data(self, data):
        if self.tags and self.tags[-1] == "h3" and self.headings and not self.headings[-1]:
            self.headings[-1] = data
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def table(self, css: str) -> dict:
        (found,) = [t for t in self.tables if css in t["class"].split()]
        found["rows"] = [r for r in found["rows"] if r]  # the header's <tr> holds no <td>
        return found

    def all_text(self) -> str:
        return "".join(self.text)


def svg_of(image: dict[str, str]) -> str:
    prefix = "data:image/svg+xml;base64,"
    assert image["src"].startswith(prefix)
    return base64.b64decode(image["src"][len(prefix) :]).decode()


def _commit(conn, offsets, group="g"):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


@pytest.fixture
def hostile(conn, zookeeper, warehouse, namespace):
    """Table t (2 buckets, 40 rows) read by group g up to offset 5 with commit metadata that
    is a script; a lease whose owner is markup; lag history samples of 50 to 10 minutes ago."""
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(40)])
    _commit(conn, {tb: lk.OffsetAndMetadata(5, SCRIPT) for tb in table.buckets})
    with lk.connect(zookeeper, warehouse, namespace=namespace) as other:
        testing.context(other).owner = OWNER  # owners are user-supplied text
        other.acquire_kv_snapshot_lease("held", {}, "1h")
    ctx = testing.context(conn)
    now, ends = ctx.server_clock.fresh_ms(), table.end_offsets()
    rows = [
        history.HistoryRow(now - age * 60_000, "g", tb.table, tb.bucket, 5, end, end - 5, 0)
        for age in (50, 40, 30, 20, 10)
        for tb, end in ends.items()
    ]
    history.append_rows(ctx, rows)
    return table


def _no_script_and_escaped(html: str) -> Page:
    page = Page(html)
    assert "script" not in page.tags  # docs/panels.md: no <script>, and user text stays text
    assert "<script" not in html.lower() and "<b>mallory" not in html
    return page


# -- every panel ------------------------------------------------------------------------------


def test_consumer_panel_renders_its_rows_chart_and_freshness(conn, hostile):
    # docs/panels.md, to_html: the grid's columns and cell
    # text, the lag chart as an image, the status line
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    html = panel.to_html()
    assert panel.refreshes == 1  # never shown: it loads once first, as on display
    page = _no_script_and_escaped(html)
    assert SCRIPT in page.all_text()  # shown as written, as the widget shows it
    table = page.table("leasekit-buckets")
    assert table["head"] == GRID_COLUMNS
    rows, described = panel.rows(), conn.describe_group("g").set_index("bucket")
    assert [r[:2] for r in table["rows"]] == [["t", str(b)] for b in rows["bucket"]]
    for cells in table["rows"]:
        row = dict(zip(GRID_COLUMNS, cells))
        want = described.loc[int(row["bucket"])]
        assert row["committed"] == "5" and row["end"] == f"{int(want['log_end_offset']):,}"
        assert row["lag"] == f"{int(want['lag']):,}" and row["status"] == want["status"]
        assert row["metadata"] == SCRIPT and row["member"] == "-"
        shown = rows[rows["bucket"] == int(row["bucket"])].iloc[0]
        assert row["time lag"] == shown["time lag"] and row["last commit"] == shown["last commit"]
    assert "refreshed" in page.all_text() and "ZooKeeper connected" in page.all_text()
    (image,) = [i for i in page.images if "leasekit-chart-image" in i.get("class", "")]
    svg = svg_of(image)
    ET.fromstring(svg)  # a well-formed SVG document
    assert svg.count('class="leasekit-series"') == 1 and "<script" not in svg
    assert "Lag over the last 1h, all buckets" in svg and "Lag over the last 1h" in image["alt"]
    panel.close()


def test_lag_chart_image_draws_the_widget_line_on_its_utc_axis(conn, hostile):
    # docs/panels.md: the lag chart's static image holds the points the widget draws, stepping after
    # each sample, on the widget's 24-hour UTC ticks, no label twice
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    panel.refresh()
    panel.chart.range.value = timedelta(hours=6)
    svg = panel.chart.chart().svg()
    (points,) = re.findall(r'class="leasekit-series"[^>]* points="([^"]*)"', svg)
    n = len(panel.lag_line.x)
    assert n == 6  # five samples and the lag now
    assert len(points.split()) == 2 * n - 1  # a step after each point
    ticks, fmt = time_axis(panel.chart.x.min, panel.chart.x.max)
    labels = re.findall(r'class="leasekit-x-tick"[^>]*>([^<]*)<', svg)
    assert labels == [pd.Timestamp(t).strftime(fmt) for t in ticks][: len(labels)]
    assert len(labels) == len(set(labels)) >= 3 and fmt in ("%H:%M", "%m-%d %H:%M")
    assert "Lag over the last 6h, all buckets" in svg
    panel.chart.buckets.value = TB("t", 1)
    assert 'data-label="t/1"' in panel.chart.chart().svg()
    panel.close()


def test_lease_retention_and_overview_panels_render_their_tables(conn, hostile):
    # docs/panels.md, to_html for each panel: its tables, escaped owners, sparklines as images
    leases = LeasePanel(conn, auto_refresh=False)
    page = _no_script_and_escaped(leases.to_html())
    listed = page.table("leasekit-lease-list")
    assert listed["head"][:2] == ["lease", "owner"]
    assert [r[:2] for r in listed["rows"]] == [["held", OWNER]]
    assert "Pins of held" in page.all_text() and "No pinned bucket." in page.all_text()

    retention = RetentionPanel(conn, auto_refresh=False)
    page = _no_script_and_escaped(retention.to_html())
    plan = page.table("leasekit-plan")
    assert plan["head"] == list(retention.grid.data.columns)
    assert len(plan["rows"]) == len(retention.grid.data) > 0
    assert "Retention plan" in page.all_text() and "reclaimable" in page.all_text()

    overview = OverviewPanel(conn, auto_refresh=False)
    html = overview.to_html()
    page = _no_script_and_escaped(html)
    assert page.table("leasekit-groups")["rows"][0][0] == "g"
    assert page.table("leasekit-inventory")["rows"][0][:3] == ["held", "active", OWNER]
    assert "<svg" not in html  # the sparkline is an image: sanitizers keep it
    sparkline = svg_of(next(i for i in page.images if "leasekit-svg" in i.get("class", "")))
    assert "leasekit-sparkline" in sparkline and "<polyline" in sparkline
    for panel in (leases, retention, overview):
        assert panel.refreshes == 1
        panel.close()


def test_dashboard_renders_every_tab_under_its_title(conn, hostile):
    # docs/panels.md: the Dashboard has to_html too: the header, then each tab's rendering
    dash = Dashboard(conn, auto_refresh=False)
    page = _no_script_and_escaped(dash.to_html())
    assert page.headings == ["Overview", "Leases", "Consumers", "Retention"]
    assert conn.namespace in page.all_text()
    assert all(p.refreshes == 1 for p in dash.panels)  # each tab loaded once
    for css in ("leasekit-groups", "leasekit-lease-list", "leasekit-buckets", "leasekit-plan"):
        assert page.table(css)["rows"]
    dash.close()


def test_a_shown_panel_carries_its_static_rendering_beside_its_view(conn, hostile):
    # docs/panels.md, a widget output carries a static rendering beside its view: text/html is what
    # a reader without the kernel sees (nbconvert takes it when no widget state is saved,
    # JupyterLab when it does not trust the notebook); text/plain is short
    for panel in (
        ConsumerPanel(conn, "g", auto_refresh=False),
        Dashboard(conn, auto_refresh=False),
    ):
        bundle = panel._repr_mimebundle_()
        assert set(bundle) == {VIEW, "text/html", "text/plain"}
        assert bundle[VIEW]["model_id"] == panel.model_id
        page = _no_script_and_escaped(bundle["text/html"])
        assert page.table("leasekit-buckets")["rows"]
        assert bundle["text/plain"] in (
            "ConsumerPanel(group='g')",
            f"Dashboard(namespace={conn.namespace!r})",
        )
        panel.close()


# -- the pieces -------------------------------------------------------------------------------


def test_a_grid_beyond_the_static_rows_says_how_many_more():
    grid = DataGrid(pd.DataFrame({"name": ["a", "<b>", "c"], "n": [1.0, np.nan, 2500.0]}))
    page = Page(grid_table(grid, css="x", rows=2))
    assert page.table("x")["rows"] == [["a", "1"], ["<b>", ""]]
    assert "… and 1 more row in the panel." in page.all_text()


def test_time_chart_is_an_svg_image_with_escaped_text_and_a_legend():
    # a chart saved as an image; user text (a title, a label) stays text
    end = datetime(2026, 11, 25, 14, 0, tzinfo=timezone.utc)
    times = np.array(["2026-11-25T13:10", "2026-11-25T13:40"], dtype="datetime64[ms]")
    chart = TimeChart(
        title=SCRIPT,
        series=[Series("a<b>", times, np.array([1500.0, 0.0])), Series("b", times[:1], np.ones(1))],
        start=end - timedelta(hours=1),
        end=end,
    )
    svg = chart.svg()
    root = ET.fromstring(svg)  # well formed: the title is escaped, not markup
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert SCRIPT in texts and "a<b>" in texts and "b" in texts  # title and legend
    ticks = re.findall(r'class="leasekit-y-tick"[^>]*>([^<]*)<', svg)
    assert ticks == ["0", "500", "1k", "1.5k"]  # whole steps up to 1.1 x the largest value
    assert [t for t in texts if t in ("13:00", "13:10", "13:20", "13:30", "13:40", "13:50")]
    assert svg.count("<polyline") == 2 and "<script" not in svg
    assert chart._repr_svg_() == svg and "data:image/svg+xml;base64," in chart._repr_html_()
    assert repr(chart).startswith(SCRIPT) and "2 points, last 0" in repr(chart)


def test_lag_chart_of_a_history_frame_adds_the_lag_now():
    end = datetime(2026, 11, 25, 14, 0, tzinfo=timezone.utc)
    frame = pd.DataFrame(
        {
            "time": pd.to_datetime(["2026-11-25T12:00Z", "2026-11-25T12:00Z", "2026-11-25T13:00Z"]),
            "table": ["t", "t", "t"],
            "bucket": [0, 1, 0],
            "lag": [3, 4, 5],
        }
    )
    chart = lag_chart(frame, end, timedelta(hours=6), lag_now=2)
    (line,) = chart.series
    assert list(line.values) == [7.0, 5.0, 2.0]  # buckets summed per sample, then now
    assert chart.title == "Lag over the last 6h, all buckets" and chart.start == end - timedelta(
        hours=6
    )
    empty = lag_chart(None, end, timedelta(hours=1))
    assert len(empty.series[0].values) == 0 and "<polyline" not in empty.svg()
