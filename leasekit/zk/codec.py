"""The msgpack codec of the ZooKeeper layer: every stored value carries its format version
under key "v"; values over MAX_VALUE_BYTES are refused; ZooKeeper times become datetimes.
Only the format modules call it: each kind of znode has its own record type and version."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import msgpack

from ..errors import CorruptMetadataError, MetadataTooLargeError

FORMAT_VERSION = 1
"""The first format version of every kind of value (each kind bumps its own in ``formats``)."""

MAX_VALUE_BYTES = 900 * 1024


def encode(value: dict[str, Any], version: int = FORMAT_VERSION) -> bytes:
    """msgpack bytes of ``value`` with its format version under key ``"v"``."""
    data = msgpack.packb({"v": version, **value}, use_bin_type=True)
    if len(data) > MAX_VALUE_BYTES:
        raise MetadataTooLargeError(
            f"metadata value of {len(data)} bytes exceeds {MAX_VALUE_BYTES}"
        )
    return data


def decode(
    data: bytes, path: str, version: int | tuple[int, ...] = FORMAT_VERSION
) -> dict[str, Any]:
    """The value stored at ``path``; ``CorruptMetadataError`` for garbage or another version
    (``version`` may name several a kind reads)."""
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise CorruptMetadataError(f"cannot decode metadata at {path}: {exc}", path) from None
    if not isinstance(value, dict) or "v" not in value:
        raise CorruptMetadataError(f"metadata at {path} is not a versioned record", path)
    versions = version if isinstance(version, tuple) else (version,)
    if value["v"] not in versions or isinstance(value["v"], bool):
        shown = " or ".join(map(str, versions))
        raise CorruptMetadataError(
            f"metadata at {path} has format version {value['v']!r}; this leasekit reads {shown}",
            path,
        )
    return value


def to_datetime(ms: int) -> datetime:
    """UTC datetime of epoch milliseconds."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
