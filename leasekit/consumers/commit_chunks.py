"""How a fenced commit of many offsets is split into transactions: each carries the owner
checks of its own buckets only, so the checks do not repeat in every transaction (C11)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from ..zk import MAX_TXN_BYTES, MAX_TXN_OPS, Check, Op, op_size

__all__ = ["fenced_chunks"]


def fenced_chunks(
    ops: list[Op], owners: Mapping[str, Check], fixed: list[Op]
) -> Iterator[list[Op]]:
    """``ops`` in order, in lists whose transaction (with ``fixed`` and the owner checks of
    their buckets, an offset znode and its owner znode sharing the name ``<table id>.<bucket>``)
    fits ZooKeeper's limits."""
    room_ops, room_bytes = MAX_TXN_OPS - len(fixed), MAX_TXN_BYTES - sum(map(op_size, fixed))
    chunk: list[Op] = []
    count = size = 0
    for op in ops:
        check = owners.get(op.path.rsplit("/", 1)[1])
        n, b = 1 + (check is not None), op_size(op) + (0 if check is None else op_size(check))
        if chunk and (count + n > room_ops or size + b > room_bytes):
            yield chunk
            chunk, count, size = [], 0, 0
        chunk.append(op)
        count, size = count + n, size + b
    if chunk:
        yield chunk
