"""A bucket's offsets: the bucket znodes read in pipelined batches (one ``BucketState`` each,
see ``zk.formats``): end offset, beginning offset, timestamp floor and snapshot counters."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..zk.formats import BucketState

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["read_states"]


def read_states(table: TableInfo, buckets: Iterable[int]) -> list[BucketState | None]:
    """Bucket states, pipelined; None for buckets never written."""
    paths = [table.context.paths.bucket(table.table_id, b) for b in buckets]
    nodes = table.context.store.get_many(paths)
    return [None if n is None else BucketState.decode(n, p) for p, n in zip(paths, nodes)]
