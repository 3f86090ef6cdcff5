"""Checks of user-supplied values: one helper per kind (ints, bools, names, ids), each raising
the typed error a user handles and naming the argument it checked."""

from __future__ import annotations

import re
from typing import Any

from .errors import InvalidArgumentError, InvalidLeaseIdError, InvalidTypeError

__all__ = [
    "check_bool",
    "check_int",
    "check_positive_int",
    "check_table_name",
    "is_internal_table",
    "is_namespace",
    "INTERNAL_TABLES",
    "LAG_HISTORY_TABLE",
    "check_id",
    "check_namespace",
    "check_host",
]

_TABLE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

RESERVED_PREFIX = "__"
"""Table names starting with it are leasekit's own (like Kafka's ``__consumer_offsets``)."""
LAG_HISTORY_TABLE = "__lag_history"
"""The internal table of a namespace's lag history (``leasekit.monitor.lag.history``)."""
INTERNAL_TABLES = frozenset({LAG_HISTORY_TABLE})
"""The internal tables leasekit itself creates and reads: the only reserved names it accepts,
and only where it asks for them (``internal=True``)."""


def check_bool(value: object, what: str) -> bool:
    """``value`` if it is a bool.

    Raises:
        InvalidTypeError: anything else (``1`` and ``None`` too), naming ``what``.
    """
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{what} must be a bool, not {type(value).__name__}")
    return value


def check_int(
    value: object,
    what: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    error: type[InvalidArgumentError] = InvalidArgumentError,
) -> int:
    """``value`` if it is an int (a bool is not) within ``[minimum, maximum]``; numpy integers
    are accepted and returned as ``int``.

    Raises:
        InvalidTypeError: ``value`` is not an int.
        InvalidArgumentError: (or ``error``) it is out of range; the message names ``what``.
    """
    if isinstance(value, bool) or not _is_int(value):
        raise InvalidTypeError(f"{what} must be an int, not {type(value).__name__}")
    number = int(value)  # type: ignore[call-overload]
    if minimum is not None and maximum is not None and not minimum <= number <= maximum:
        raise error(f"{what} must be between {minimum} and {maximum}, got {_shown(number)}")
    if minimum is not None and number < minimum:
        raise error(f"{what} must be >= {minimum}, got {_shown(number)}")
    if maximum is not None and number > maximum:
        raise error(f"{what} must be <= {maximum}, got {_shown(number)}")
    return number


def check_positive_int(value: object, what: str) -> int:
    """``value`` if it is an int >= 1 (``check_int`` with ``minimum=1``)."""
    return check_int(value, what, minimum=1)


def _is_int(value: Any) -> bool:
    if isinstance(value, int):
        return True
    module = type(value).__module__
    return module == "numpy" and hasattr(value, "dtype") and value.dtype.kind in "iu"


def _shown(number: int) -> str:
    return str(number) if number.bit_length() <= 128 else f"a {number.bit_length()}-bit number"


def check_table_name(name: object, *, internal: bool = False) -> str:
    """``name`` if it is a valid table name.

    Arguments:
        name: the name.
        internal: accept the names of leasekit's internal tables (``INTERNAL_TABLES``); user
            input never passes it.

    Raises:
        InvalidTypeError: ``name`` is not a str.
        InvalidArgumentError: it breaks the name rule (1-128 of [A-Za-z0-9_.-], not starting
            with . or -), or starts with ``__`` (reserved for leasekit's internal tables).
    """
    if not isinstance(name, str):
        raise InvalidTypeError(f"table name must be a str, not {type(name).__name__}")
    if not _TABLE_NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"invalid table name {name!r}: use 1-128 of [A-Za-z0-9_.-], not starting with . or -"
        )
    if name.startswith(RESERVED_PREFIX) and not (internal and name in INTERNAL_TABLES):
        raise InvalidArgumentError(
            f"invalid table name {name!r}: names starting with {RESERVED_PREFIX!r} are reserved "
            "for leasekit's internal tables"
        )
    return name


def is_internal_table(name: str) -> bool:
    """Whether ``name`` is of the reserved form of leasekit's internal tables."""
    return name.startswith(RESERVED_PREFIX)


def check_id(
    value: object,
    *,
    what: str = "lease id",
    error: type[InvalidArgumentError] = InvalidLeaseIdError,
) -> str:
    """Return ``value`` if it follows the id rule (1-128 of [A-Za-z0-9._-], not . or ..)."""
    if not isinstance(value, str):
        raise error(f"{what} must be a str, not {type(value).__name__}")
    if not _ID.fullmatch(value) or value in (".", ".."):
        raise error(f"invalid {what} {value!r}: use 1-128 of [A-Za-z0-9._-], not '.' or '..'")
    return value


def is_namespace(name: str) -> bool:
    """Whether ``name`` is a valid namespace name (``check_namespace`` accepts it)."""
    try:
        check_namespace(name)
    except InvalidArgumentError:
        return False
    return True


def check_namespace(value: object) -> str:
    """Return ``value`` if it is a valid namespace (the id rule)."""
    return check_id(value, what="namespace", error=InvalidArgumentError)


def check_host(value: object, what: str = "address") -> str:
    """``value`` if a socket can use it as a host: a host name or IP address ("" and "0.0.0.0"
    mean every interface) of printable characters that IDNA encodes, as the socket module does.

    Raises:
        InvalidTypeError: ``value`` is not a str.
        InvalidArgumentError: it holds control, direction or surrogate characters, or is no
            host name (a label over 63 characters, an empty label), naming ``what``.
    """
    if not isinstance(value, str):
        raise InvalidTypeError(f"{what} must be a str, not {type(value).__name__}")
    try:
        if not value.isprintable():
            raise ValueError(value)
        value.encode("idna")
    except (UnicodeError, ValueError):
        raise InvalidArgumentError(
            f"invalid {what} {value[:100]!r}: give a host name or IP address, like 127.0.0.1, "
            "0.0.0.0 or ::"
        ) from None
    return value
