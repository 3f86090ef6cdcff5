"""Reading lag-history segment files with pyarrow: the rows of some groups, file by file on a
few threads, each file's rows kept in a bounded in-process cache (segment files never change,
so a view that reads the same hours again reads only the files it has not seen)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ...log.segments import log_schema

if TYPE_CHECKING:
    from ...tables.info import TableInfo

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
        full = [n for n in log_schema(table).names if n != "_op"]
        wanted_set = pa.array(key_groups, pa.string())

        def read(uri: str) -> pa.Table:
            return _read_one(table, uri, key_groups, wanted_set, full)

        with ThreadPoolExecutor(_THREADS, thread_name_prefix="leasekit-history") as pool:
            read_parts = dict(zip(missing, pool.map(read, missing)))
        _keep(read_parts, key_groups)
        parts.update((f, t.select(wanted)) for f, t in read_parts.items())
    return pa.concat_tables([parts[f] for f in files])


def _read_one(
    table: TableInfo,
    uri: str,
    groups: tuple[str, ...],
    group_array: pa.Array,
    columns: list[str],
) -> pa.Table:
    """The rows of ``groups`` in one segment file: only the row groups whose statistics of
    the (sorted) group column can hold them are decoded. A file retention deleted since the
    segment was listed gives no rows."""
    import pyarrow.compute as pc

    warehouse = table.context.warehouse
    try:
        file = warehouse.open_parquet(warehouse.relative(uri))
    except FileNotFoundError:
        return pa.schema([log_schema(table).field(c) for c in columns]).empty_table()
    try:
        meta = file.metadata
        at = meta.schema.to_arrow_schema().get_field_index("group")
        chosen = [i for i in range(meta.num_row_groups) if _may_hold(meta.row_group(i), at, groups)]
        data = file.read_row_groups(chosen, columns=columns, use_threads=False)
    finally:
        file.close()
    return data.filter(pc.is_in(data.column("group"), value_set=group_array))


def _may_hold(row_group: Any, column: int, groups: tuple[str, ...]) -> bool:
    """Whether a row group's statistics of the group column allow one of ``groups``."""
    stats = row_group.column(column).statistics
    if stats is None or not stats.has_min_max:
        return True
    return any(stats.min <= g <= stats.max for g in groups)


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
