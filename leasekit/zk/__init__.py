"""The ZooKeeper layer, the only package that imports kazoo: the session, paths, the codec and
one typed format per znode kind, per-bucket arrays stored in chunks, transactions and their
conflict reasons, pipelined reads, the clock, watches, elections."""

from __future__ import annotations

from .changes import touch
from .clock import ServerClock
from .codec import MAX_VALUE_BYTES as MAX_VALUE_BYTES
from .codec import to_datetime as to_datetime
from .errors import ConflictReason, translated
from .ops import MAX_REQUEST_BYTES as MAX_REQUEST_BYTES
from .ops import MAX_TXN_BYTES as MAX_TXN_BYTES
from .ops import MAX_TXN_OPS as MAX_TXN_OPS
from .ops import (
    Check,
    Create,
    Delete,
    Node,
    Op,
    SetData,
    Stat,
    TxnConflict,
    chunk_ops,
    op_size,
    ops_size,
)
from .reads import READS_PER_REQUEST, GetChildren, GetData, ReadResult
from .store import MAX_SESSION_TIMEOUT as MAX_SESSION_TIMEOUT
from .store import ZkStore
from .watches import Watch

__all__ = [
    "MAX_VALUE_BYTES",
    "MAX_REQUEST_BYTES",
    "MAX_TXN_BYTES",
    "MAX_TXN_OPS",
    "READS_PER_REQUEST",
    "MAX_SESSION_TIMEOUT",
    "Stat",
    "Node",
    "Op",
    "Create",
    "SetData",
    "Delete",
    "Check",
    "TxnConflict",
    "ConflictReason",
    "chunk_ops",
    "op_size",
    "ops_size",
    "GetData",
    "GetChildren",
    "ReadResult",
    "ZkStore",
    "Watch",
    "ServerClock",
    "touch",
    "translated",
    "to_datetime",
]
