"""Reading lag-history segment files with pyarrow: the rows of some groups, file by file on a
few threads, each file's rows kept in a bounded in-process cache (segment files never change,
so a view that reads the same hours again reads only the files it has not seen)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import pyarrow as pa

from ..log.segments import log_schema

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["read_files", "clear_cache", "CACHE_BYTES"]

CACHE_BYTES = 64 * 2**20
"""Bytes of decoded rows the cache keeps, least recently used first out."""
_THREADS = 4

_cache: OrderedDict[tuple[str, tuple[str, ...]], pa.Table] = OrderedDict()
_cached = 0
_lock = threading.Lock()


def read_files(
    table: TableInfo, files: Sequence[str], groups: Sequence[str], columns: Sequence[str]
) -> pa.Table:
    """The rows of ``groups`` in the history segment ``files`` (URIs, at least one),
    ``columns`` only."""
    import pyarrow.dataset as ds

    key_groups = tuple(sorted(set(groups)))
    wanted = list(dict.fromkeys([*columns]))
    parts: dict[str, pa.Table] = {}
    with _lock:
        for f in files:
            hit = _cache.get((f, key_groups))
            if hit is not None and set(wanted) <= set(hit.column_names):
                _cache.move_to_end((f, key_groups))
                parts[f] = hit.select(wanted)
    missing = [f for f in files if f not in parts]
    if missing:
        warehouse = table.context.warehouse
        schema = log_schema(table)
        where = ds.field("group").isin(list(key_groups))
        full = [n for n in schema.names if n != "_op"]

        def read(uri: str) -> pa.Table:
            fragment = ds.dataset(
                warehouse.fs_path(warehouse.relative(uri)),
                schema=schema,
                format="parquet",
                filesystem=warehouse.fs,
            )
            return fragment.to_table(columns=full, filter=where, use_threads=False)

        with ThreadPoolExecutor(_THREADS, thread_name_prefix="leasekit-history") as pool:
            read_parts = dict(zip(missing, pool.map(read, missing)))
        _keep(read_parts, key_groups)
        parts.update((f, t.select(wanted)) for f, t in read_parts.items())
    return pa.concat_tables([parts[f] for f in files])


def _keep(parts: dict[str, pa.Table], key_groups: tuple[str, ...]) -> None:
    global _cached
    with _lock:
        for f, data in parts.items():
            key = (f, key_groups)
            if key in _cache:
                continue
            _cache[key] = data
            _cached += data.nbytes
        while _cached > CACHE_BYTES and _cache:
            _, old = _cache.popitem(last=False)
            _cached -= old.nbytes


def clear_cache() -> None:
    """Forget every cached file's rows (benchmarks time cold reads with it)."""
    global _cached
    with _lock:
        _cache.clear()
        _cached = 0
