"""Spark, the public functions: reads of snapshots, union reads at log offsets, change reads of a
group, bulk writes, and the session with ``format("leasekit")`` registered.

Library calls take ``spark=None`` and use the active session; nothing here forces a master.
"""

from __future__ import annotations

from ..consumers.changes import ChangeBatch, read_changes
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
