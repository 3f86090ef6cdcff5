"""Byte sizes for people: the one format of panels, CLI tables and notebooks ("512 B",
"1.5 KiB", "3.2 GiB"); JSON and metrics carry plain numbers of bytes."""

from __future__ import annotations

from typing import Any

__all__ = ["human_bytes"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def human_bytes(n: Any) -> str:
    """``n`` bytes as people read them: "512 B", "1.5 KiB", "3.2 GiB" (binary units, one
    decimal); ``"-"`` for a missing value (None, NaN, pandas' NA). Negative sizes keep their
    sign."""
    if n is None or _missing(n):
        return "-"
    value, unit = float(n), 0
    while abs(value) >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{value:.0f} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def _missing(n: Any) -> bool:
    try:
        return bool(n != n)  # NaN, and pandas' NA (whose comparison is NA: bool() raises)
    except TypeError:
        return True
