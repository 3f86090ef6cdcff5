"""The options of ``format("leasekit")``: which table, where its metadata and files are (as
``connect()`` takes them), and what to read; checked on the driver before any I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..errors import InvalidArgumentError

__all__ = ["SourceOptions", "parse_options", "STREAM_ONLY", "BATCH_ONLY", "CONNECTION"]

CONNECTION = ("zookeeper", "warehouse", "namespace")
"""Connection options; a missing one defaults as ``connect()`` does (``LEASEKIT_*``, the
embedded server)."""

STREAM_ONLY = ("group", "startingoffsets", "maxrecordspertrigger")
"""Options only a streaming read takes (lower case: Spark's options are case-insensitive)."""

BATCH_ONLY = ("lease", "snapshots", "allowpartial")
"""Options only a batch read takes."""


class SourceOptions(NamedTuple):
    """What ``format("leasekit")`` was given, checked."""

    table: str
    """The table's name: ``load(name)``, ``start(name)`` or the ``table`` option."""
    zookeeper: str | None
    """ZooKeeper connect string; None: ``LEASEKIT_ZOOKEEPER`` or the embedded server."""
    warehouse: str | None
    """Warehouse path or URI; None: ``LEASEKIT_WAREHOUSE`` or ``./leasekit-warehouse``."""
    namespace: str
    """The namespace (``leasekit`` by default)."""
    options: Mapping[str, str]
    """Every option, keys in lower case."""

    @property
    def streaming(self) -> bool:
        """Whether the options are those of a streaming read (its ``group``): Spark asks a data
        source for its schema without saying whether the read is a stream, and a stream has the
        columns ``_bucket``, ``_offset``, ``_timestamp`` and ``_op`` besides the table's."""
        return "group" in self.options

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.options.get(key.lower(), default)


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check ``options`` (Spark's, case-insensitive) and name the table.

    Raises:
        InvalidArgumentError: no table, or both ``path`` and ``table`` naming different ones,
            or an empty connection option.
    """
    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    path, named = lowered.get("path"), lowered.get("table")
    if path and named and path != named:
        raise InvalidArgumentError(
            f"format('leasekit') got two tables: load({path!r}) and option table={named!r}"
        )
    table = path or named
    if not table:
        raise InvalidArgumentError(
            "format('leasekit') needs a table: load('orders') (or start('orders') for a sink)"
        )
    for key in CONNECTION:
        if key in lowered and not lowered[key].strip():
            raise InvalidArgumentError(f"option {key!r} is empty")
    return SourceOptions(
        table,
        lowered.get("zookeeper") or None,
        lowered.get("warehouse") or None,
        lowered.get("namespace") or "leasekit",
        lowered,
    )
