"""Static HTML of what a panel shows, for a notebook read without its kernel: a grid as a table
with the cell text it shows, inline SVG as images, headings and the
controls' choices in words."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .base import esc

__all__ = [
    "STATIC_ROWS",
    "cell_text",
    "cell_styles",
    "grid_table",
    "svg_images",
    "section",
    "controls",
    "label_of",
]

STATIC_ROWS = 500
"""Rows of a grid its static table holds at most (a note counts the rest)."""
CELL = "padding:2px 8px;text-align:left;vertical-align:top"
_NUMBER = re.compile(r"(,)?(?:\.(\d+))?([fd])")
_VEGA_FORMAT = re.compile(r"format\(cell\.value,\s*'([^']*)'\)")
_VEGA_MISSING = re.compile(r"isNaN\(cell\.value\)\s*\?\s*'([^']*)'")
_SVG = re.compile(r"<svg\b[^>]*>.*?</svg>", re.S)

CellStyle = Callable[[str, Any], str]
"""The inline style of a cell, from its column and value ("" for none)."""


def cell_text(value: Any, renderer: Any = None) -> str:
    """A grid cell as ipydatagrid writes it: the renderer's number format (its ``format``, or
    the ``format(cell.value, ',d')`` of its ``text_value`` expression), its text for a missing
    value (``missing``, or the expression's for NaN), whole floats without ".0"."""
    expression = str(getattr(getattr(renderer, "text_value", None), "value", "") or "")
    said = _VEGA_MISSING.search(expression)
    missing = said.group(1) if said else (getattr(renderer, "missing", "") or "")
    if value is None or value is pd.NA or value is pd.NaT:
        return missing
    if isinstance(value, (float, np.floating)) and np.isnan(value):
        return missing
    spec = _VEGA_FORMAT.search(expression)
    number = _NUMBER.fullmatch(spec.group(1) if spec else getattr(renderer, "format", None) or "")
    if number and isinstance(value, (int, float, np.integer, np.floating)):
        comma, digits, kind = number.groups()
        digits = "0" if kind == "d" else (digits or "6")
        return f"{float(value):{',' if comma else ''}.{digits}f}"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def cell_styles(
    colours: dict[str, dict[Any, str]] | None = None,
    bars: dict[str, tuple[float, str]] | None = None,
    wide: tuple[str, ...] = (),
) -> CellStyle:
    """Cells coloured as the grid colours them: a background by value (``colours``: column ->
    value -> colour, white otherwise), a bar of value / top (``bars``: column -> (top, colour)),
    and ``wide`` columns whose text wraps."""

    def style(column: str, value: Any) -> str:
        if colours and column in colours:
            return f"background:{colours[column].get(value, 'white')}"
        if bars and column in bars and not pd.isna(value):
            top, colour = bars[column]
            share = max(0.0, min(100.0, 100.0 * float(value) / (top or 1.0)))
            return (
                f"background:linear-gradient(90deg,{colour} {share:.0f}%,transparent {share:.0f}%)"
            )
        return "white-space:normal;min-width:320px" if column in wide else ""

    return style


def grid_table(
    grid: Any, *, css: str, style: CellStyle | None = None, rows: int | None = None
) -> str:
    """``grid`` (an ipydatagrid DataGrid) as an HTML table: its columns, its first ``rows``
    rows in its order, each cell's text as the grid shows it (escaped), a note when it has more.

    Arguments:
        grid: the grid.
        css: the table's class.
        style: a cell's inline style (a status colour, a bar), from its column and value.
        rows: rows shown at most (default ``STATIC_ROWS``).
    """
    rows = STATIC_ROWS if rows is None else rows
    frame = grid.data
    renderers = grid.renderers or {}
    columns = list(frame.columns)
    head = "".join(f'<th style="{CELL}">{esc(c)}</th>' for c in columns)
    body = []
    for row in frame.head(rows).itertuples(index=False):
        cells = []
        for column, value in zip(columns, row):
            extra = style(column, value) if style is not None else ""
            text = cell_text(value, renderers.get(column))
            cells.append(f'<td style="{CELL};{extra}">{esc(text)}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    more = len(frame) - rows
    note = (
        f'<div style="color:#666">… and {more:,} more row{"s" if more != 1 else ""} in the '
        "panel.</div>"
        if more > 0
        else ""
    )
    return (
        f'<div style="overflow-x:auto"><table class="leasekit-table {esc(css)}" '
        f'style="border-collapse:collapse;white-space:nowrap"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>{note}"
    )


def svg_images(html: str) -> str:
    """``html`` with each inline ``<svg>`` (a sparkline) turned into an ``<img>`` of it, which
    HTML sanitizers keep (JupyterLab's drops ``<svg>`` in a notebook it does not trust).

    Only the panels' own SVG is ever matched: user text in ``html`` is escaped, so it holds no
    ``<svg``."""

    def image(match: re.Match[str]) -> str:
        svg = match.group(0)
        if "xmlns=" not in svg[:200]:
            svg = svg.replace("<svg", '<svg xmlns="http://www.w3.org/2000/svg"', 1)
        data = base64.b64encode(svg.encode()).decode("ascii")
        size = re.search(r'width="(\d+)" height="(\d+)"', svg)
        dims = f' width="{size.group(1)}" height="{size.group(2)}"' if size else ""
        return f'<img class="leasekit-svg"{dims} alt="" src="data:image/svg+xml;base64,{data}"/>'

    return _SVG.sub(image, html)


def section(title: str, html: str) -> str:
    """``html`` under a heading."""
    return f'<div style="margin-top:8px"><b>{esc(title)}</b></div>{html}'


def controls(*pairs: tuple[str, object]) -> str:
    """The choices a panel's controls hold, as one line ("Status: all · Sort: lag ↓")."""
    shown = " · ".join(f"{esc(name)}: {esc(value)}" for name, value in pairs)
    return f'<div class="leasekit-controls" style="color:#555">{shown}</div>'


def label_of(dropdown: Any) -> str:
    """The label a dropdown (or toggle buttons) shows for its value."""
    return str(getattr(dropdown, "label", None) or dropdown.value or "")
