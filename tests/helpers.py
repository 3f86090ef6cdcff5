"""Test helpers that look at what a user cannot see directly: znodes, files, raw log records."""

from __future__ import annotations


def namespace_tree(conn) -> dict[str, bytes]:
    """Every znode of the connection's namespace with its data (the clock excluded)."""
    paths = [p for p in conn.store.descendants(conn.paths.root) if p != conn.paths.clock]
    nodes = conn.store.get_many(paths)
    return {p: n.data for p, n in zip(paths, nodes) if n is not None}


def warehouse_files(conn) -> set[str]:
    """Every data file below the warehouse root (the embedded ZooKeeper's directory excluded)."""
    return {e.path for e in conn.warehouse.list("tables")}


def read_log(table) -> dict[int, list[dict]]:
    """Every stored log record per bucket, with ``_offset`` and ``_timestamp_ms``, read with pyarrow."""
    import pyarrow.parquet as pq

    from leasekit.log import list_segments

    out: dict[int, list[dict]] = {}
    for bucket, segs in list_segments(table, range(table.num_buckets)).items():
        rows = []
        for seg in segs:
            for i, rec in enumerate(pq.read_table(seg.file).to_pylist()):
                rec["_offset"] = seg.base_offset + i
                rec["_timestamp_ms"] = seg.timestamp_ms
                rows.append(rec)
        out[bucket] = rows
    return out
