"""Parsing and checking of user-supplied durations, names and ids.

Durations are accepted as ``timedelta``, a number of seconds, or strings like
``"500ms" "90s" "30m" "2h" "7d"``.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from .errors import (
    InvalidArgumentError,
    InvalidDurationError,
    InvalidLeaseIdError,
    InvalidTypeError,
)

__all__ = [
    "parse_duration",
    "format_duration",
    "check_table_name",
    "check_id",
    "check_namespace",
]

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# Matched with fullmatch: "$" would also accept a trailing newline.
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*")
_TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def parse_duration(value: object, *, what: str = "duration") -> timedelta:
    """Return ``value`` as a non-negative ``timedelta``; raise ``InvalidDurationError`` otherwise."""
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise InvalidDurationError(f"{what} must be a timedelta, seconds or a string like '30s', not {value!r}")
    elif isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise InvalidDurationError(f"{what} must be finite, got {value!r}")
        if abs(value) > 1e12:
            raise InvalidDurationError(f"{what} is out of range: {value!r}")
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if not match:
            raise InvalidDurationError(
                f"{what} {value!r} is not a duration; use a number and a unit: 500ms, 90s, 30m, 2h, 7d"
            )
        amount = float(match.group(1))
        if amount > 1e12:
            raise InvalidDurationError(f"{what} is out of range: {value!r}")
        result = timedelta(milliseconds=amount * _UNITS_MS[match.group(2)])
    else:
        raise InvalidDurationError(
            f"{what} must be a timedelta, seconds or a string like '30s', not {type(value).__name__}"
        )
    if result < timedelta(0):
        raise InvalidDurationError(f"{what} must not be negative, got {value!r}")
    return result


def parse_timestamp(text: str, *, what: str = "timestamp") -> datetime:
    """An ISO 8601 date-time (``Z`` accepted; UTC when no offset is given)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise InvalidArgumentError(f"{what} {text!r} is not an ISO 8601 date-time") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def to_ms(duration: timedelta) -> int:
    """Whole milliseconds of ``duration``."""
    return duration // timedelta(milliseconds=1)


def format_duration(duration: timedelta) -> str:
    """The shortest exact string form (``"7d"``, ``"90s"``, ``"500ms"``)."""
    ms = to_ms(duration)
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_MS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def check_table_name(name: object) -> str:
    """Return ``name`` if it is a valid table name, else raise ``InvalidArgumentError``."""
    if not isinstance(name, str):
        raise InvalidTypeError(f"table name must be a str, not {type(name).__name__}")
    if not _TABLE_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"invalid table name {name!r}: use 1-128 of [A-Za-z0-9_.-], not starting with . or -"
        )
    return name


def check_id(value: object, *, what: str = "lease id", error: type[InvalidArgumentError] = InvalidLeaseIdError) -> str:
    """Return ``value`` if it follows the id rule (1-128 of [A-Za-z0-9._-], not . or ..)."""
    if not isinstance(value, str):
        raise error(f"{what} must be a str, not {type(value).__name__}")
    if not _ID.fullmatch(value) or value in (".", ".."):
        raise error(f"invalid {what} {value!r}: use 1-128 of [A-Za-z0-9._-], not '.' or '..'")
    return value


def check_namespace(value: object) -> str:
    """Return ``value`` if it is a valid namespace (the id rule)."""
    return check_id(value, what="namespace", error=InvalidArgumentError)
