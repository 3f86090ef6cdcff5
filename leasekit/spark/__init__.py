"""Spark, the public functions: reads of snapshots, union reads at log offsets, change reads of a
group, bulk writes, and the session with ``format("leasekit")`` registered.

A face only: each name loads from where it lives (``sparkio``, ``datasource``,
``consumers.admin.changes``) on first use, so ``import leasekit.spark`` loads neither pyspark
nor the rest of the library. Library calls take ``spark=None`` and use the active session;
nothing here forces a master.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..consumers.admin.changes import ChangeBatch, read_changes
    from ..datasource import register, spark_session
    from ..sparkio.reads import read_at, read_snapshots
    from ..sparkio.writes import write

__all__ = [
    "spark_session",
    "register",
    "read_snapshots",
    "read_at",
    "read_changes",
    "ChangeBatch",
    "write",
]


def __getattr__(name: str) -> Any:
    """A public name, loaded from its module on first use."""
    if name in ("spark_session", "register"):
        from .. import datasource as home
    elif name in ("read_snapshots", "read_at"):
        from ..sparkio import reads as home
    elif name == "write":
        from ..sparkio import writes as home
    elif name in ("read_changes", "ChangeBatch"):
        from ..consumers.admin import changes as home
    else:
        raise AttributeError(f"module 'leasekit.spark' has no attribute {name!r}")
    value = getattr(home, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
