"""The ConsumerPanel's grid: its columns headed as people read them, the rows of a group board
in plain types, the lag bars, the health colours and the count cells."""

from __future__ import annotations

import bqplot as bq
import ipywidgets as w
import pandas as pd
from ipydatagrid import BarRenderer, DataGrid, TextRenderer, VegaExpr

from leasekit import BucketLineage, TableBucket
from leasekit.live import DESCRIBE_COLUMNS

from .formatting import duration_text, grid_height, lineage_text, utc_text

__all__ = ["GRID_COLUMNS", "BAD", "STATUS_COLOURS", "grid", "grid_frame", "empty_frame"]

GRID_COLUMNS = [
    "table",
    "bucket",
    "lineage",
    "committed",
    "end",
    "lag",
    "time lag",
    "status",
    "member",
    "host",
    "last commit",
    "metadata",
]
"""The grid's columns, headed as people read them (``group_board``'s frame has the field
names: ``time_lag``, ``last_commit``)."""
BAD = ("STOP", "STALL", "REWIND", "MISSING")
STATUS_COLOURS = {"OK": "#d4edda", "WARN": "#fff3cd", **{s: "#f8d7da" for s in BAD}}


def grid_frame(
    frame: pd.DataFrame,
    lineage: dict[TableBucket, BucketLineage] | None = None,
    undrained: set[tuple[str, int]] | None = None,
) -> pd.DataFrame:
    """``group_board``'s frame in the grid's columns and plain types (missing numbers NaN, the
    time lag as people read it: "4m 40s"), with each bucket's ``lineage`` across rescales
    (``undrained``: the sealed buckets the group still reads)."""
    tables, buckets = frame["table"].tolist(), frame["bucket"].tolist()
    return pd.DataFrame(
        {
            "table": frame["table"].astype(object),
            "bucket": frame["bucket"].astype("int64"),
            "lineage": lineage_text(tables, buckets, lineage or {}, undrained or set()),
            "committed": frame["current_offset"].astype("float64"),
            "end": frame["log_end_offset"].astype("float64"),
            "lag": frame["lag"].astype("float64"),
            "time lag": [duration_text(t) for t in frame["time_lag"]],
            "status": frame["status"].fillna("-").astype(object),
            "member": frame["consumer_id"].fillna("-").astype(object),
            "host": frame["host"].fillna("-").astype(object),
            "last commit": [utc_text(t) for t in frame["last_commit"]],
            "metadata": frame["metadata"].fillna("").astype(object),
        },
        columns=GRID_COLUMNS,
    )


COUNT_TEXT = "cell.value === null || isNaN(cell.value) ? '-' : format(cell.value, ',d')"
"""A count cell's text: "1,234", and "-" where there is none (NaN reaches the grid as NaN, which
its ``missing`` text does not cover). Made into a widget per grid, not at import: a widget made
at import would put widget state into every notebook that imports the panels."""


def _status_colour() -> VegaExpr:
    cases = " : ".join(f"cell.value === '{s}' ? '{c}'" for s, c in STATUS_COLOURS.items())
    return VegaExpr(f"{cases} : 'white'")


def grid(lag_scale: bq.LinearScale) -> DataGrid:
    count = VegaExpr(COUNT_TEXT)
    return DataGrid(
        grid_frame(empty_frame()),
        selection_mode="row",
        base_row_size=22,
        base_column_size=90,
        header_visibility="column",
        column_widths={"lineage": 170, "member": 220, "metadata": 200, "last commit": 150},
        layout=w.Layout(height=grid_height(0)),
        renderers={
            "lag": BarRenderer(bar_value=lag_scale, bar_color="#e39b3b", text_value=count),
            "status": TextRenderer(background_color=_status_colour()),
            "committed": TextRenderer(text_value=count),
            "end": TextRenderer(text_value=count),
        },
    )


def empty_frame() -> pd.DataFrame:
    """``group_board``'s frame with no bucket (the grid before the first refresh)."""
    frame = pd.DataFrame({c: [] for c in [*DESCRIBE_COLUMNS, "metadata"]})
    frame["time_lag"] = pd.to_timedelta(frame["time_lag"])
    frame["last_commit"] = pd.to_datetime(frame["last_commit"], utc=True)
    return frame
