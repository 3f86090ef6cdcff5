"""The options of ``format("leasekit")``: which table, where its metadata and files are (as
``connect()`` takes them), and what to read; checked on the driver before any I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ..consumers.offsets import check_group_id
from ..errors import InvalidArgumentError
from ..validate import check_positive_int

__all__ = [
    "SourceOptions",
    "parse_options",
    "StreamRequest",
    "check_stream",
    "STREAM_ONLY",
    "BATCH_ONLY",
    "CONNECTION",
    "NAMING",
    "STARTS",
]

NAMING = ("path", "table")
"""Options naming the table: ``load(name)`` (Spark's ``path``) or ``table``."""
CONNECTION = ("zookeeper", "warehouse", "namespace")
"""Connection options; a missing one defaults as ``connect()`` does (``LEASEKIT_*``, the
embedded server)."""

STREAM_ONLY = ("group", "startingoffsets", "maxrecordspertrigger")
"""Options only a streaming read takes (lower case: Spark's options are case-insensitive)."""

BATCH_ONLY = ("lease", "snapshots", "allowpartial")
"""Options only a batch read takes."""
STARTS = ("committed", "earliest", "latest")
"""``startingOffsets`` of a new query (a restarted one resumes from its checkpoint)."""


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
        """Whether the options are those of a streaming read (its ``group`` or another option
        only a stream takes): Spark asks a data source for its schema without saying whether
        the read is a stream, and a stream has the columns ``_bucket``, ``_offset``,
        ``_timestamp`` and ``_op`` besides the table's."""
        return any(key in self.options for key in STREAM_ONLY)

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


class StreamRequest(NamedTuple):
    """What a streaming read reads, from its options."""

    group: str
    """The consumer group the stream reads as (D3)."""
    start: str
    """``startingOffsets`` of a new query: one of ``STARTS``."""
    cap: int | None
    """``maxRecordsPerTrigger``: records one micro-batch reads at most; None: all."""


def check_stream(opts: SourceOptions) -> StreamRequest:
    """The streaming read ``opts`` ask for, checked before any I/O.

    Raises:
        InvalidArgumentError: no ``group`` (or a bad one), a batch-only or unknown option, or a
            bad ``startingOffsets`` or ``maxRecordsPerTrigger``.
    """
    group = opts.get("group")
    if group is None:
        given = [key for key in opts.options if key in STREAM_ONLY]
        what = f"option {given[0]!r} is for streaming reads, and a stream" if given else "a stream"
        raise InvalidArgumentError(
            f"{what} of format('leasekit') reads as a consumer group: give it one, e.g. "
            f"spark.readStream.format('leasekit').option('group', 'etl').load({opts.table!r})"
        )
    for key in opts.options:
        if key in BATCH_ONLY:
            raise InvalidArgumentError(
                f"option {key!r} is for batch reads (spark.read), not spark.readStream"
            )
        if key not in (*NAMING, *CONNECTION, *STREAM_ONLY):
            known = ", ".join(
                ("table", *CONNECTION, "group", "startingOffsets", "maxRecordsPerTrigger")
            )
            raise InvalidArgumentError(
                f"format('leasekit') has no option {key!r} for streaming reads (options: {known})"
            )
    check_group_id(group)
    start = (opts.get("startingOffsets") or "committed").strip().lower()
    if start not in STARTS:
        raise InvalidArgumentError(
            f"startingOffsets must be one of {', '.join(STARTS)}, not {start!r}"
        )
    raw = opts.get("maxRecordsPerTrigger")
    cap = None
    if raw is not None:
        try:
            cap = check_positive_int(int(raw), "maxRecordsPerTrigger")
        except ValueError:
            raise InvalidArgumentError(
                f"maxRecordsPerTrigger must be a positive integer, not {raw!r}"
            ) from None
    return StreamRequest(group, start, cap)
