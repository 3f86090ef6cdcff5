"""The ZooKeeper layer: the only package that imports kazoo. Owns the session, the msgpack
codec with its format version, transactions, compare-and-set, pipelined reads, the clock and errors."""

from __future__ import annotations

from .codec import MAX_VALUE_BYTES as MAX_VALUE_BYTES
from .codec import to_datetime as to_datetime
from .ops import MAX_REQUEST_BYTES as MAX_REQUEST_BYTES
from .ops import MAX_TXN_BYTES as MAX_TXN_BYTES
from .ops import MAX_TXN_OPS as MAX_TXN_OPS
from .ops import Check, Create, Delete, Node, SetData, Stat, TxnConflict
from .ops import Op as Op
from .ops import chunk_ops as chunk_ops
from .ops import op_size as op_size
from .reads import READS_PER_REQUEST as READS_PER_REQUEST
from .reads import MultiRead as MultiRead
from .store import ZkStore
from .store import translated as translated

__all__ = [
    "Stat",
    "Node",
    "Create",
    "SetData",
    "Delete",
    "Check",
    "TxnConflict",
    "ZkStore",
]
