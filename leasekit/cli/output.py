"""How the CLI prints: aligned text tables and fields, or one JSON document with ``--json``.

Datetimes print as ISO 8601 UTC with milliseconds. Tables write durations and byte sizes the
way every panel and notebook does (``"4m 40s"``, ``"1.5 KiB"``); JSON carries plain numbers:
durations in seconds (``280.0``), sizes in bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = [
    "format_table",
    "value_text",
    "seconds",
    "is_bytes_column",
    "format_fields",
    "frame_rows",
    "to_json",
    "emit",
    "note",
    "listing",
    "unreadable",
]


def _iso(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_json(value: Any) -> Any:
    """``value`` as JSON-ready data: datetimes ISO 8601 UTC, timedeltas as seconds (a float,
    exact to the millisecond)."""
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, timedelta):
        return seconds(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return to_json(value.item())
    return str(value)


def seconds(value: timedelta) -> float:
    """A duration as JSON carries it: seconds, rounded to the millisecond (``280.0``)."""
    return round(value.total_seconds(), 3)


def is_bytes_column(column: str) -> bool:
    """Whether a table column holds a byte size (``size_bytes``, ``pinned_bytes``, ...)."""
    return column == "bytes" or column.endswith("_bytes")


def _cell(column: str, value: Any) -> str:
    if is_bytes_column(column) and _is_number(value):
        from ..sizes import human_bytes

        return human_bytes(value)
    return value_text(value)


def value_text(value: Any) -> str:
    """``value`` as tables and messages print it: durations like "4m 40s", times ISO 8601."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, timedelta):
        from ..durations import human_duration

        return human_duration(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={value_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(value_text(v) for v in value)
    data = to_json(value)
    return data if isinstance(data, str) else str(data)


def frame_rows(frame: Any) -> list[dict[str, Any]]:
    """A pandas DataFrame's rows as plain values: missing ones None, pandas times as
    datetime/timedelta, numpy scalars as Python numbers."""
    import pandas as pd

    rows = []
    for record in frame.to_dict("records"):
        row = {}
        for key, value in record.items():
            if value is None or (not isinstance(value, (list, dict)) and pd.isna(value)):
                row[key] = None
            elif isinstance(value, pd.Timestamp):
                row[key] = value.to_pydatetime()
            elif isinstance(value, pd.Timedelta):
                row[key] = value.to_pytimedelta()
            elif hasattr(value, "item"):
                row[key] = value.item()
            else:
                row[key] = value
        rows.append(row)
    return rows


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """Aligned plain-text columns under upper-case headers; numbers (and byte sizes, written
    like "1.5 KiB") right-aligned."""
    if columns is None:
        columns = list(rows[0]) if rows else []
    headers = [c.upper().replace("_", "-") for c in columns]
    cells = [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    numeric = [
        bool(rows) and all(row.get(c) is None or _is_number(row.get(c)) for row in rows)
        for c in columns
    ]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def unreadable(exc: Exception) -> str:
    """A listed record that cannot be read, as a listing's row shows it: the error's type and
    message (which names the znode)."""
    return f"{type(exc).__name__}: {exc}"


def listing(
    rows: Sequence[Mapping[str, Any]], what: str, columns: Sequence[str], empty: str
) -> str:
    """A listing's text: its readable rows as a table, then one line per row whose stored
    record is unreadable (``state`` "corrupt", with its ``error``), named by its first column
    (``what`` says what it is); ``empty`` if there are no rows."""
    good = [r for r in rows if r.get("state") != "corrupt"]
    bad = [f"{what} {r[columns[0]]!r} unreadable: {r['error']}" for r in rows if r not in good]
    if not rows:
        return empty
    return "\n".join([*([format_table(good, columns)] if good else []), *bad])


def format_fields(fields: Mapping[str, Any]) -> str:
    """``name  value`` lines, values aligned; a mapping value gets one ``key = value`` line each."""
    width = max((len(k) for k in fields), default=0)
    lines = []
    for key, value in fields.items():
        label = key.replace("_", " ").ljust(width)
        if isinstance(value, Mapping) and value:
            items = [f"{k} = {value_text(v)}" for k, v in value.items()]
            lines.append(f"{label}  {items[0]}")
            lines.extend(f"{' ' * width}  {item}" for item in items[1:])
        else:
            lines.append(f"{label}  {value_text(value)}")
    return "\n".join(lines)


def emit(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> None:
    """Print ``data`` as one JSON document with --json, else as ``render(data)``."""
    if args.json:
        print(json.dumps(to_json(data), indent=2))
    else:
        print(render(data))


def note(message: str) -> None:
    """A progress line on stderr, kept apart from the command's output."""
    print(f"leasekit: {message}", file=sys.stderr, flush=True)
