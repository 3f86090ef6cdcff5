"""notebooks/consumer_lag_report.ipynb run through papermill for the tests: the example group
they judge, a run and what it saved, and what a saved notebook must hold to be read without
its kernel (docs/panels.md, "Reports that outlive the kernel")."""

from __future__ import annotations

import base64
import csv
import re
import uuid
from pathlib import Path
from typing import Any, NamedTuple

import nbformat
import papermill
from papermill.exceptions import PapermillExecutionError

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag import history

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "consumer_lag_report.ipynb"
GROUP = "billing"
VIEW = "application/vnd.jupyter.widget-view+json"
HISTORY_AGES_S = [7 * 3600, 5 * 3600, 3 * 3600, 600]
"""Ages of the lag history samples of ``run_with_history``."""
HISTORY_LAGS = [3, 12, 7, 4]
"""Each bucket's lag in those samples (the group's is twice that)."""


class Run(NamedTuple):
    """A papermill run of the lag report."""

    nb: Any
    """The saved notebook (nbformat)."""
    path: Path
    """Where papermill saved it."""
    rows: list[dict[str, str]] | None
    """The report's CSV rows (None: none written)."""
    error: PapermillExecutionError | None
    """Why the run failed, None when it passed."""


def make_orders(conn: Any) -> Any:
    """Table ``orders`` (2 buckets) read to its end by the group ``billing`` in three rounds,
    each committed explicitly; the consumer is closed, so no live member owns a bucket."""
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    with conn.consumer(
        "orders", group_id=GROUP, enable_auto_commit=False, auto_offset_reset="earliest"
    ) as consumer:
        for round_ in range(3):
            table.append([{"id": round_ * 100 + i, "v": "a"} for i in range(20)])
            seen = 0
            while seen < 20:
                seen += sum(batch.num_rows for batch in consumer.poll("1s").values())
            consumer.commit()
    return table


def run(tmp_path: Path, conn: Any, **parameters: Any) -> Run:
    """Execute the notebook in ``tmp_path`` against ``conn``'s namespace."""
    out = tmp_path / "lag_report_out.ipynb"
    params = {
        "zookeeper": conn.zookeeper,
        "warehouse": conn.warehouse,
        "namespace": conn.namespace,
        "group_id": GROUP,
        "max_lag": 10,
        "max_time_lag": "15m",
        "output_path": "report.csv",
        **parameters,
    }
    error = None
    try:
        papermill.execute_notebook(
            str(NOTEBOOK),
            str(out),
            parameters=params,
            kernel_name="python3",
            cwd=str(tmp_path),
            progress_bar=False,
        )
    except PapermillExecutionError as exc:
        error = exc
    nb = nbformat.read(out, as_version=4)  # papermill writes it on failure too
    report = tmp_path / params["output_path"]
    rows = list(csv.DictReader(report.open())) if report.exists() else None
    return Run(nb, out, rows, error)


def history_rows(conn: Any, group: str, ages_s: list[int], committed: int, end: int) -> list:
    """Lag history samples of ``group`` for both buckets of ``orders``, ``ages_s`` seconds ago."""
    now = testing.context(conn).server_clock.fresh_ms()
    return [
        history.HistoryRow(now - age * 1000, group, "orders", b, committed, end, end - committed, 0)
        for age in ages_s
        for b in (0, 1)
    ]


class HistoryRun(NamedTuple):
    """The lag report run over 8 hours of a group with lag history samples."""

    run: Run
    samples: list
    """The samples seeded (``HistoryRow``), at ``HISTORY_AGES_S``."""
    end_ms: int
    """The ZooKeeper clock read after the run: after the chart's right end."""


def run_with_history(zookeeper: str, folder: Path) -> HistoryRun:
    """The ``orders`` group with samples 7 h, 5 h, 3 h and 10 min ago (``HISTORY_LAGS`` in each
    bucket), in a namespace of its own, and the report run over the last 8 hours ("since":
    "8h")."""
    warehouse = folder / "warehouse"
    warehouse.mkdir()
    namespace = f"lagreport{uuid.uuid4().hex[:8]}"
    with lk.connect(zookeeper, str(warehouse), namespace=namespace) as conn:
        make_orders(conn)
        samples = [
            row
            for age, lag in zip(HISTORY_AGES_S, HISTORY_LAGS)
            for row in history_rows(conn, GROUP, [age], 20 - lag, 20)
        ]
        history.append_rows(testing.context(conn), samples)
        done = run(folder, conn, since="8h")
        end = testing.context(conn).server_clock.fresh_ms()
    return HistoryRun(done, samples, end)


def not_static(nb: Any) -> list[str]:
    """The outputs a reader without the kernel could not read: displays with neither
    ``text/html`` nor an image (only a Python repr), or with a widget view (docs/panels.md)."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o["output_type"] not in ("execute_result", "display_data"):
                continue  # streams and errors are text
            kinds = set(o["data"])
            if VIEW in kinds or not kinds & {"text/html", "image/svg+xml", "image/png"}:
                out.append(f"{cell.source.splitlines()[0]!r}: {sorted(kinds)}")
    return out


def chart_svg(nb: Any, cell_id: str = "history") -> str:
    """The SVG of the chart the cell ``cell_id`` displayed, checked to be the same as the
    image its ``text/html`` shows."""
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    (shown,) = [o for o in cell.outputs if o["output_type"] == "execute_result"]
    svg = shown["data"]["image/svg+xml"]
    src = re.search(r'src="data:image/svg\+xml;base64,([^"]+)"', shown["data"]["text/html"])
    assert src is not None and base64.b64decode(src.group(1)).decode() == svg
    return svg


def x_ticks(svg: str) -> list[str]:
    """The time axis' labels of a chart."""
    return re.findall(r'class="leasekit-x-tick"[^>]*>([^<]*)<', svg)


def series_points(svg: str) -> list[list[tuple[float, float]]]:
    """Each series' polyline points."""
    return [
        [tuple(map(float, p.split(","))) for p in points.split()]
        for points in re.findall(r'class="leasekit-series"[^>]* points="([^"]*)"', svg)
    ]
