"""A saved lag report read the way a reader meets it (docs/panels.md, "Reports that outlive the
kernel"): the report run by papermill, converted by ``jupyter nbconvert --to html``
and opened from the file in Debian's headless Chromium, with no kernel and no network. The lag
chart must show its drawn series and the table the group's buckets; the page is kept as
``docs/lag-report.png``."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

from lag_report_run import GROUP, series_points

DOCS = Path(__file__).resolve().parents[2] / "docs"
SERIES = (0xE3, 0x9B, 0x3B)
"""The lag line's colour (``svgchart.PALETTE[0]``)."""

_DRAWN = """img => {
    // the chart's pixels as the browser drew them: how many are the series' colour
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth;
    canvas.height = img.naturalHeight;
    const ctx = canvas.getContext('2d');
    ctx.drawImage(img, 0, 0);
    const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    let n = 0;
    for (let i = 0; i < px.length; i += 4) {
        if (Math.abs(px[i] - 0xe3) < 24 && Math.abs(px[i + 1] - 0x9b) < 24
            && Math.abs(px[i + 2] - 0x3b) < 24 && px[i + 3] > 200) n++;
    }
    return {complete: img.complete, width: img.naturalWidth, series: n};
}"""

NBCONVERT_SCRIPTS = (
    "https://cdnjs.cloudflare.com/ajax/libs/",  # require.js, MathJax
    "https://unpkg.com/@jupyter-widgets/html-manager",  # when the notebook saved widget state
)
"""Scripts the page of ``nbconvert --to html`` links, which the test never lets it fetch."""
_PAGE_Y = "el => el.getBoundingClientRect().top + window.scrollY"


def _bucket_rows(page) -> list[dict[str, str]]:
    """The rows of the per-bucket table as the page shows them, by column."""
    from playwright.sync_api import expect

    table = page.locator(".jp-Cell", has_text="display(buckets.assign(").locator("table").first
    expect(table).to_be_visible()
    head = table.locator("thead th").all_inner_texts()[1:]  # the index has no name
    return [
        dict(zip(head, r.locator("td").all_inner_texts())) for r in table.locator("tbody tr").all()
    ]


def _nbconvert(notebook: Path, out: Path) -> Path:
    """``jupyter nbconvert --to html`` of the venv, as a reader runs it."""
    jupyter = Path(sys.executable).with_name("jupyter")
    subprocess.run(
        [str(jupyter), "nbconvert", "--to", "html", "--output-dir", str(out), str(notebook)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out / f"{notebook.stem}.html"


def test_a_saved_lag_report_reads_in_a_browser_without_a_kernel(
    lag_report_with_history, browser, artifacts, tmp_path
):
    from playwright.sync_api import expect

    run = lag_report_with_history.run
    assert run.error is None, run.error
    page_file = _nbconvert(run.path, tmp_path)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    asked: list[str] = []

    def local_only(route):  # nbconvert's page asks CDNs for require.js and MathJax: no network
        url = route.request.url
        if url.startswith(("file:", "data:")):
            route.continue_()
        else:
            asked.append(url)
            route.abort()

    context.route("**/*", local_only)
    page = context.new_page()
    try:
        page.goto(page_file.as_uri(), wait_until="load")
        expect(page.get_by_text("Loading widget")).to_have_count(0)

        # the group's buckets: the per-bucket table, one row per bucket with its lag
        shown = _bucket_rows(page)
        assert sorted((r["table"], r["bucket"], r["lag"]) for r in shown) == sorted(
            (r["table"], r["bucket"], r["lag"]) for r in run.rows
        ), shown

        # the lag chart: an image the browser decoded, with its series drawn in it
        chart = page.locator("img.leasekit-chart-image")
        expect(chart).to_have_count(1)
        expect(chart).to_be_visible()
        chart.scroll_into_view_if_needed()
        drawn = chart.evaluate(_DRAWN)
        assert drawn["complete"] and drawn["width"] == 760
        assert drawn["series"] > 300, drawn  # a line across hours, not a dot
        src = chart.get_attribute("src")
        svg = base64.b64decode(src.split(",", 1)[1]).decode()
        assert [len(p) for p in series_points(svg)] == [9]  # 4 samples and the lag now
        assert f"{GROUP}: total lag over the last 8h" in svg
        expect(
            page.locator(".jp-OutputArea-output", has_text="lag history: 4 samples")
        ).to_be_visible()
        assert page.locator(".jp-OutputArea-output script").count() == 0  # outputs run nothing

        _keep_in_docs(page, artifacts / "lag-report.png")
    finally:
        context.close()
    # nothing of the report asks the network: only the scripts nbconvert's template links
    assert all(url.startswith(NBCONVERT_SCRIPTS) for url in asked), asked


def _keep_in_docs(page, shot: Path) -> None:
    """The page from "Lag per bucket" to "Health" (the table and the chart) saved as ``shot``
    and as ``docs/lag-report.png``."""
    top, bottom = (
        page.get_by_role("heading", name=name, exact=True).evaluate(_PAGE_Y)
        for name in ("Lag per bucket", "Health")
    )
    page.screenshot(
        path=str(shot),
        full_page=True,
        clip={"x": 0, "y": top - 8, "width": 1280, "height": bottom - top},
    )
    shutil.copyfile(shot, DOCS / "lag-report.png")
