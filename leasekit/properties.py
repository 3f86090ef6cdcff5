"""Table properties and namespace settings: keys, defaults, parsing and storage form.

Values are parsed from Python values or strings (as the CLI passes them) and stored as
msgpack-friendly scalars (durations as milliseconds).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, NamedTuple

from .durations import MAX_DURATION, parse_duration, to_ms
from .errors import CorruptMetadataError, InvalidArgumentError, InvalidDurationError

__all__ = [
    "TABLE_PROPERTIES",
    "NAMESPACE_SETTINGS",
    "parse_properties",
    "effective",
]


_MAX_MS = to_ms(MAX_DURATION)
_MAX_INT = 2**62
"""The largest integer property: int64 arithmetic on it (sums, offsets) cannot overflow."""


class Setting(NamedTuple):
    """One configurable key."""

    default: Any
    """The value when unset (user-facing form)."""
    parse: Callable[[str, Any], Any]
    """Turns user input into the stored form; raises InvalidArgumentError."""
    load: Callable[[Any], Any]
    """Turns the stored form into the user-facing value."""


def _shown(value: Any) -> str:
    """A value for a message, short (and repr() refuses ints of more than 4300 digits)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"a {value.bit_length()}-bit {'negative ' if value < 0 else ''}number"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(minimum: int) -> Callable[[str, Any], int]:
    def parse(key: str, value: Any) -> int:
        if isinstance(value, bool):
            raise InvalidArgumentError(f"{key} must be an integer, got {value!r}")
        if isinstance(value, str):
            try:
                value = int(value.strip().replace("_", ""))
            except ValueError:
                raise InvalidArgumentError(
                    f"{key} must be an integer, got {_shown(value)}"
                ) from None
        if not isinstance(value, int):
            raise InvalidArgumentError(f"{key} must be an integer, got {type(value).__name__}")
        if value < minimum:
            raise InvalidArgumentError(f"{key} must be >= {minimum}, got {_shown(value)}")
        if value > _MAX_INT:
            raise InvalidArgumentError(f"{key} must be at most 2**62, got {_shown(value)}")
        return value

    return parse


def _optional_int(minimum: int) -> Callable[[str, Any], int | None]:
    inner = _int(minimum)

    def parse(key: str, value: Any) -> int | None:
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "")):
            return None
        return inner(key, value)

    return parse


def _duration(positive: bool) -> Callable[[str, Any], int]:
    def parse(key: str, value: Any) -> int:
        try:
            duration = parse_duration(value, what=key)
        except InvalidDurationError as exc:
            raise InvalidArgumentError(str(exc)) from None
        if positive and duration <= timedelta(0):
            raise InvalidArgumentError(f"{key} must be greater than 0, got {value!r}")
        return to_ms(duration)

    return parse


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise InvalidArgumentError(f"{key} must be true or false, got {_shown(value)}")


def _same(value: Any) -> Any:
    return value


def _ms(value: Any) -> timedelta:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_MS:
        raise ValueError(f"expected a duration in milliseconds, got {_shown(value)}")
    return timedelta(milliseconds=value)


TABLE_PROPERTIES: dict[str, Setting] = {
    "kv.snapshot.num-retained": Setting(2, _int(1), _same),
    "log.retention": Setting(timedelta(days=7), _duration(False), _ms),
    "log.retention.bytes": Setting(None, _optional_int(0), _same),
    "log.retention.respect-consumers": Setting(False, _bool, _same),
    "log.segment.max-rows": Setting(1_000_000, _int(1), _same),
    "log.segment.target-bytes": Setting(16 * 1024 * 1024, _int(1), _same),
    "log.segment.min-merge": Setting(4, _int(2), _same),
}

NAMESPACE_SETTINGS: dict[str, Setting] = {
    "lease.max-duration": Setting(timedelta(days=7), _duration(True), _ms),
    "lease.expiry-grace": Setting(timedelta(seconds=30), _duration(False), _ms),
    "orphan.min-age": Setting(timedelta(hours=1), _duration(False), _ms),
    "monitor.interval": Setting(timedelta(seconds=30), _duration(True), _ms),
    "monitor.retention": Setting(timedelta(days=7), _duration(True), _ms),
    "monitor.rate-window": Setting(timedelta(minutes=5), _duration(True), _ms),
    "monitor.risk-threshold": Setting(timedelta(hours=1), _duration(False), _ms),
}


def parse_properties(
    values: Mapping[str, Any] | None, known: Mapping[str, Setting], *, what: str
) -> dict[str, Any]:
    """Stored form of ``values``; unknown keys or bad values raise ``InvalidArgumentError``.

    ``what`` names the kind of key in messages ("table property", "setting").
    """
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise InvalidArgumentError(
            f"{what} values must be a mapping of key to value, got {type(values).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise InvalidArgumentError(f"unknown {what} {key!r}; known: {', '.join(sorted(known))}")
        out[key] = known[key].parse(key, value)
    return out


def effective(
    stored: Mapping[str, Any], known: Mapping[str, Setting], *, path: str | None = None
) -> dict[str, Any]:
    """User-facing values of every key: stored ones loaded, the rest defaults.

    Keys this version does not know are ignored (a newer client may have set them).

    Raises:
        CorruptMetadataError: a stored value is not of its key's stored form (``path`` names
            the znode it came from).
    """
    out = {}
    for key, setting in known.items():
        if key not in stored:
            out[key] = setting.default
            continue
        try:
            out[key] = setting.load(stored[key])
        except (TypeError, ValueError, OverflowError) as exc:
            where = f" at {path}" if path else ""
            raise CorruptMetadataError(f"stored {key}{where} is invalid: {exc}", path) from None
    return out
