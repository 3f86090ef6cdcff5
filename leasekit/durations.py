"""Durations: parsing user-supplied values and formatting them, one way everywhere.

Durations are accepted as ``timedelta``, a number of seconds, or strings like
``"500ms" "90s" "30m" "2h" "7d"``.
"""

from __future__ import annotations

import math
import numbers
import re
from datetime import datetime, timedelta, timezone

from .errors import (
    InvalidArgumentError,
    InvalidDurationError,
)

__all__ = [
    "MAX_DURATION",
    "parse_duration",
    "parse_wait",
    "to_ms",
    "format_duration",
    "human_duration",
    "eta_text",
    "headroom_text",
    "NO_LIMIT",
]

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# Matched with fullmatch: "$" would also accept a trailing newline.
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")


MAX_DURATION = timedelta(days=100_000)
"""The longest duration accepted anywhere (about 273 years): in milliseconds, in pandas'
nanoseconds (int64) and as a thread timeout it stays in range, and so does a time that far from
now."""

_MAX_MS = MAX_DURATION // timedelta(milliseconds=1)


def _shown(value: object) -> str:
    """``repr(value)``, shortened for messages (a huge number or string stays readable;
    repr() refuses ints of more than 4300 digits)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit number"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}...({len(text)} chars)"


def _out_of_range(what: str, value: object) -> InvalidDurationError:
    return InvalidDurationError(
        f"{what} {_shown(value)} is out of range: at most {MAX_DURATION.days}d"
    )


def parse_duration(value: object, *, what: str = "duration") -> timedelta:
    """A user-supplied duration as a ``timedelta`` in ``[0, MAX_DURATION]``.

    Arguments:
        value: a ``timedelta``, a number of seconds, or a string like ``"500ms" "90s" "30m"
            "2h" "7d"``.
        what: names the argument in messages.

    Returns:
        The duration.

    Raises:
        InvalidDurationError: the value is of another type, not a duration, negative, not
            finite, or longer than ``MAX_DURATION`` (so never an ``OverflowError`` later).
    """
    if isinstance(value, timedelta):
        result = value
        if result > MAX_DURATION:
            raise _out_of_range(what, value)
    elif isinstance(value, bool):
        raise InvalidDurationError(
            f"{what} must be a timedelta, seconds or a string like '30s', not {value!r}"
        )
    elif isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidDurationError(f"{what} must be finite, got {value!r}")
        if value > MAX_DURATION.total_seconds():
            raise _out_of_range(what, value)
        if value < 0:
            raise InvalidDurationError(f"{what} must not be negative, got {_shown(value)}")
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if not match:
            raise InvalidDurationError(
                f"{what} {_shown(value)} is not a duration; use a number and a unit: "
                "500ms, 90s, 30m, 2h, 7d"
            )
        ms = float(match.group(1)) * _UNITS_MS[match.group(2)]  # inf for absurdly long digits
        if not ms <= _MAX_MS:
            raise _out_of_range(what, value)
        result = timedelta(milliseconds=ms)
    else:
        raise InvalidDurationError(
            f"{what} must be a timedelta, seconds or a string like '30s', "
            f"not {type(value).__name__}"
        )
    if result < timedelta(0):
        raise InvalidDurationError(f"{what} must not be negative, got {_shown(value)}")
    return result


def parse_wait(value: object, *, what: str = "timeout") -> float:
    """Seconds to wait for ``value``, a duration as ``parse_duration`` takes it, where one longer
    than ``MAX_DURATION`` (``math.inf`` included) means no limit: ``math.inf``.

    Raises:
        InvalidDurationError: the value is not a duration, is negative or is nan.
    """
    try:
        return parse_duration(value, what=what).total_seconds()
    except InvalidDurationError:
        if _too_long(value):
            return math.inf
        raise


def _too_long(value: object) -> bool:
    """Whether ``value`` is a well-formed duration longer than ``MAX_DURATION``."""
    if isinstance(value, timedelta):
        return value > MAX_DURATION
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value > MAX_DURATION.total_seconds()  # nan compares False
    if isinstance(value, str):
        match = _DURATION.fullmatch(value)
        return bool(match) and float(match.group(1)) * _UNITS_MS[match.group(2)] > _MAX_MS
    return False


def parse_timestamp(text: str, *, what: str = "timestamp") -> datetime:
    """An ISO 8601 date-time (``Z`` accepted; UTC when no offset is given)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise InvalidArgumentError(f"{what} {text!r} is not an ISO 8601 date-time") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def to_ms(duration: timedelta) -> int:
    """Whole milliseconds of ``duration``.

    Raises:
        InvalidDurationError: ``duration`` is longer than ``MAX_DURATION`` either way.
    """
    ms = duration // timedelta(milliseconds=1)
    if abs(ms) > _MAX_MS:
        raise _out_of_range("duration", duration)
    return ms


def format_duration(duration: timedelta) -> str:
    """The shortest exact string form (``"7d"``, ``"90s"``, ``"500ms"``)."""
    ms = to_ms(duration)
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_MS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def human_duration(duration: timedelta | float | int) -> str:
    """``duration`` (a ``timedelta`` or seconds) for people, the same in panels, the CLI and
    notebooks: its two largest units, truncated, like ``"4m 40s"``, ``"2h 5m"``, ``"3d 4h"``;
    ``"25.9s"`` under a minute, ``"350ms"`` under a second; negative durations get a ``-``.
    Exact forms for settings are ``format_duration``'s."""
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
    if math.isnan(seconds):
        return "-"
    if seconds < 0:
        return "-" + human_duration(-seconds)
    if seconds < 1:
        return f"{int(seconds * 1000)}ms"
    if seconds < 60:
        return f"{math.floor(seconds * 10) / 10:g}s"
    whole = int(min(seconds, MAX_DURATION.total_seconds()))
    units = (("d", 86_400, "h", 3_600), ("h", 3_600, "m", 60), ("m", 60, "s", 1))
    big, size, small, small_size = next(u for u in units if whole >= u[1])
    rest = (whole % size) // small_size
    return f"{whole // size}{big} {rest}{small}" if rest else f"{whole // size}{big}"


def eta_text(eta: object, consume_rate: object) -> str:
    """A group's time to catch up (``group_overview``'s ``eta``) for people, the same in panels
    and the CLI (M6): ``human_duration`` of it; ``"never"`` when it is NaT although the rates
    are known (the group is not catching up); ``"-"`` only when they are not (fewer than two
    lag samples in the rate window)."""
    import pandas as pd

    if eta is not None and not pd.isna(eta):
        return human_duration(pd.Timedelta(eta).to_pytimedelta())
    known = consume_rate is not None and not pd.isna(consume_rate)
    return "never" if known else "-"


NO_LIMIT = "\u221e"
"""How people read a retention headroom with no limit ("∞", in panels, the CLI and notebooks);
JSON has null there, metrics +Inf."""


def headroom_text(headroom: object) -> str:
    """A group's retention headroom (``group_overview``'s ``retention_headroom``) for people:
    ``human_duration`` of it; ``NO_LIMIT`` ("∞") where retention can delete nothing the group
    has not consumed (NaT, None, an infinite number, or a century and more)."""
    import pandas as pd

    if headroom is None or pd.isna(headroom):
        return NO_LIMIT
    if isinstance(headroom, numbers.Real) and not isinstance(headroom, bool):  # numpy's too
        if math.isinf(headroom):
            return NO_LIMIT
        headroom = timedelta(seconds=float(headroom))
    value = pd.Timedelta(headroom).to_pytimedelta()
    return NO_LIMIT if value >= timedelta(days=36_500) else human_duration(value)
