"""leasekit: KV snapshot leases, Spark reads over pinned snapshots, consumer positions and
explained retention for a live, bucketed table store (metadata in ZooKeeper, data in Parquet).

``import leasekit`` is light: Spark and the ZooKeeper client load on first use.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .consumers.listener import BucketRebalanceListener
from .errors import *  # noqa: F403
from .errors import __all__ as _error_names
from .structs import (
    AcquireResult,
    BucketLineage,
    CommittedOffset,
    GroupStatus,
    LeaseInfo,
    LogCompaction,
    LogSegment,
    MemberInfo,
    OffsetAndMetadata,
    OffsetRange,
    Record,
    RetentionItem,
    RetentionPlan,
    RetentionReport,
    Snapshot,
    TableBucket,
)

if TYPE_CHECKING:
    from .connection import Connection, connect
    from .table import Table

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [  # noqa: F405 - lazy names resolve in __getattr__
    "connect",
    "Connection",
    "Table",
    "spark_session",
    "TableBucket",
    "BucketLineage",
    "OffsetRange",
    "Snapshot",
    "LogCompaction",
    "LogSegment",
    "AcquireResult",
    "LeaseInfo",
    "OffsetAndMetadata",
    "CommittedOffset",
    "GroupStatus",
    "MemberInfo",
    "Record",
    "RetentionItem",
    "RetentionPlan",
    "RetentionReport",
    "BucketRebalanceListener",
    "KvSnapshotLease",
    *_error_names,
]

_LAZY = {
    "connect": ("connection", "connect"),
    "Connection": ("connection", "Connection"),
    "Table": ("table", "Table"),
    "KvSnapshotLease": ("leases.lease", "KvSnapshotLease"),
    "spark_session": ("spark", "spark_session"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    if name in ("spark", "janitor", "widgets"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'leasekit' has no attribute {name!r}")
