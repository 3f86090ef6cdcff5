"""B3: lease metadata bytes per pinned bucket at 100,000 buckets (target <= 8 B), beside
the JSON equivalent and ZooKeeper's bytes per pin with the pin znodes counted.

``acquire_latest`` pins a 100,000-bucket table (one empty snapshot per bucket, registered
straight in ZooKeeper by ``seed_empty_snapshots``). The lease's own metadata is its record
znode plus its pin arrays (``/<ns>/leases/<id>/pins/<table_id>.<chunk>``, one znode per
1,000 buckets); the figure is the sum of their stored value sizes, read back with
``testing.context(conn).store.get_many``, divided by the number of buckets. The JSON equivalent is
``json.dumps({"table/bucket": snapshot_id, ...})`` of the same pins.

The pins themselves are empty child znodes of the snapshot znodes (one per pinned bucket),
counted and checked for empty data here. Their cost is reported beside the target as
ZooKeeper bytes per pin: the growth of the server's ``approximate_data_size`` (mntr; path
plus data bytes of every znode the acquire created: the pins and the lease's own znodes),
plus ``ZNODE_RECORD_BYTES`` for each znode added (mntr ``znode_count``), over the pins. The
sum of the pin paths' and the lease znodes' path and data bytes is computed from the paths
too, as a cross-check of the server's figure.

Each run uses a fresh warehouse (its own embedded ZooKeeper, seeded anew) and a fresh
lease; the byte figures are deterministic, the acquire time is not.
"""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Any

from leasekit import testing
from leasekit.testing import seed_empty_snapshots

from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    load_average,
    log,
    median,
    spread,
    temp_warehouse,
    timed,
    zk_monitor,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit import Table
    from leasekit.connection import Connection

__all__ = ["BENCHMARK", "run", "lease_metadata"]

FULL = {"buckets": 100_000, "snapshot_id": 1, "lease_duration": "1h"}
QUICK = {**FULL, "buckets": 10_000}
TABLE = "orders"
LARGE_ID = 70_000
"""A snapshot id >= 65,536: msgpack stores it in 5 bytes instead of 1 (ids < 128)."""
ZNODE_RECORD_BYTES = 76
"""Fixed bytes of one znode in ZooKeeper's snapshot files besides its path and data
(``DataTree.serializeNode``): path and data length prefixes (4 + 4), the ACL reference (8)
and the persisted stat (60: czxid, mzxid, ctime, mtime, pzxid, ephemeralOwner as 8 bytes;
version, cversion, aversion as 4). The server's heap holds more per znode (Java objects,
the parent's child set); that is not counted."""


def lease_metadata(conn: Connection, lease_id: str) -> dict[str, Any]:
    """Stored value sizes of the lease's record, its pins parent and its pin arrays (and the
    bytes of those znodes' paths)."""
    ctx = testing.context(conn)
    from leasekit.zk.formats import PinChunk

    paths = ctx.paths
    names = ctx.store.children(paths.lease_pins(lease_id)) or []
    array_paths = [f"{paths.lease_pins(lease_id)}/{name}" for name in names]
    record, parent, *arrays = ctx.store.get_many(
        [paths.lease(lease_id), paths.lease_pins(lease_id), *array_paths]
    )
    if record is None or parent is None or any(a is None for a in arrays):
        raise RuntimeError(f"lease {lease_id} changed while measuring it")
    array_bytes = sum(len(a.data) for a in arrays if a is not None)
    path_bytes = sum(
        len(path.encode())
        for path in [paths.lease(lease_id), paths.lease_pins(lease_id), *array_paths]
    )
    large = 0
    for path, node in zip(array_paths, arrays):
        if node is None:
            continue
        chunk = PinChunk.decode(node, path, *paths.parse_lease_chunk(path.rsplit("/", 1)[1]))
        large += len(chunk._replace(ids=[LARGE_ID if i else 0 for i in chunk.ids]).encode())
    return {
        "record_bytes": len(record.data),
        "pins_parent_bytes": len(parent.data),
        "array_znodes": len(arrays),
        "array_bytes": array_bytes,
        "array_bytes_at_large_ids": large,
        "total_bytes": len(record.data) + len(parent.data) + array_bytes,
        "path_bytes": path_bytes,
    }


def _pin_znodes(
    conn: Connection, table: Table, lease_id: str, snapshot_id: int
) -> tuple[int, int, int]:
    """(pin znodes of ``lease_id`` under the table's snapshots, their data bytes, their path
    bytes)."""
    ctx = testing.context(conn)
    paths, tid = ctx.paths, table.table_id
    snaps = [paths.snapshot(tid, b, snapshot_id) for b in range(table.num_buckets)]
    kids = ctx.store.children_many(snaps)
    pins = [f"{s}/{lease_id}" for s, names in zip(snaps, kids) if names and lease_id in names]
    nodes = ctx.store.get_many(pins)
    found = [(p, n) for p, n in zip(pins, nodes) if n is not None]
    return len(found), sum(len(n.data) for _, n in found), sum(len(p.encode()) for p, _ in found)


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    results: list[dict[str, Any]] = []
    checks = {
        "all_pinned": True,
        "one_empty_pin_znode_per_bucket": True,
        "server_counts_match_paths": True,
    }
    seeds: list[float] = []
    for i in range(runs):
        # A fresh warehouse (and ZooKeeper server) per run: the embedded server keeps its
        # last 500 transactions in its 1 GB heap, and at 100,000 buckets the seeding plus a
        # few acquire/drop cycles of ~1 MB transactions fill it (full GCs, then ConnectionLoss).
        with temp_warehouse("B3") as conn:
            figures, seed_s = _one_run(conn, p, f"{i + 1}/{runs}", checks)
        results.append(figures)
        seeds.append(seed_s)
    figures = _summary(results, seeds, p["buckets"])
    parameters = {**p, "runs": runs, "quick": quick}
    return Outcome(figures["bytes_per_bucket"], figures, results, parameters, checks)


def _one_run(
    conn: Connection, p: dict[str, Any], run_no: str, checks: dict[str, bool]
) -> tuple[dict[str, Any], float]:
    """One run on a fresh warehouse: seed, acquire, measure; (its figures, the seeding time)."""
    n = p["buckets"]
    ctx = testing.context(conn)
    table = conn.create_table(TABLE, ORDERS_DDL, "id", buckets=n)
    log(f"B3: run {run_no}: seeding an empty snapshot for each of {n:,} buckets")
    seed_s, _ = timed(partial(seed_empty_snapshots, ctx, table, p["snapshot_id"]))
    lease = conn.lease(duration=p["lease_duration"])
    before, trips = zk_monitor(conn), ctx.store.round_trips
    acquire_s, result = timed(partial(lease.acquire_latest, TABLE))
    trips, after = ctx.store.round_trips - trips, zk_monitor(conn)
    checks["all_pinned"] &= len(result.acquired) == n and not result.unavailable
    meta = lease_metadata(conn, lease.lease_id)
    json_bytes = len(
        json.dumps({f"{tb.table}/{tb.bucket}": sid for tb, sid in result.acquired.items()}).encode()
    )
    pin_znodes, pin_bytes, pin_path_bytes = _pin_znodes(
        conn, table, lease.lease_id, p["snapshot_id"]
    )
    checks["one_empty_pin_znode_per_bucket"] &= pin_znodes == n and pin_bytes == 0
    figures: dict[str, Any] = {
        "bytes_per_bucket": meta["total_bytes"] / n,
        **meta,
        "json_bytes": json_bytes,
        "json_bytes_per_bucket": json_bytes / n,
        "bytes_per_bucket_at_large_ids": (
            meta["total_bytes"] - meta["array_bytes"] + meta["array_bytes_at_large_ids"]
        )
        / n,
        "pin_znodes": pin_znodes,
        "pin_data_bytes": pin_bytes,
        "pin_path_bytes": pin_path_bytes,
        "pin_path_bytes_per_pin": pin_path_bytes / n,
        # path + data bytes of every znode acquire created, from the paths themselves
        "created_path_and_data_bytes": pin_path_bytes
        + pin_bytes
        + meta["path_bytes"]
        + meta["total_bytes"],
        "acquire_s": acquire_s,
        "acquire_round_trips": trips,
        "load_average": load_average(),
    }
    _server_figures(figures, before, after, n, pin_znodes + 2 + meta["array_znodes"], checks)
    log(
        f"B3: run {run_no}: {meta['total_bytes']:,} bytes of lease metadata "
        f"({figures['bytes_per_bucket']:.3f} B per bucket; JSON "
        f"{figures['json_bytes_per_bucket']:.2f} B), "
        f"{pin_znodes:,} pin znodes ({pin_bytes} data bytes, {pin_path_bytes / n:.1f} path "
        "bytes each), "
        f"ZooKeeper {figures['zk_bytes_per_pin']:.1f} B per pin; acquire {acquire_s:.2f}s, "
        f"{trips} round trips"
    )
    lease.drop()
    return figures, seed_s


def _server_figures(
    figures: dict[str, Any],
    before: dict[str, int],
    after: dict[str, int],
    n: int,
    znodes: int,
    checks: dict[str, bool],
) -> None:
    """Add ZooKeeper's own counts (``mntr`` before and after the acquire) to ``figures``;
    ``znodes``: how many znodes the acquire created, from their paths."""
    if before and after:
        figures["zk_znodes_added"] = after["znode_count"] - before["znode_count"]
        figures["zk_approximate_data_size_growth"] = (
            after["approximate_data_size"] - before["approximate_data_size"]
        )
        figures["zk_approximate_bytes_per_pin"] = figures["zk_approximate_data_size_growth"] / n
        figures["zk_bytes_per_pin"] = (
            figures["zk_approximate_data_size_growth"]
            + ZNODE_RECORD_BYTES * figures["zk_znodes_added"]
        ) / n
        checks["server_counts_match_paths"] &= (
            figures["zk_znodes_added"] == znodes
            and figures["zk_approximate_data_size_growth"] == figures["created_path_and_data_bytes"]
        )
    else:  # no mntr answer: the same sum from the paths
        figures["zk_bytes_per_pin"] = (
            figures["created_path_and_data_bytes"] + ZNODE_RECORD_BYTES * znodes
        ) / n


def _summary(results: list[dict[str, Any]], seeds: list[float], n: int) -> dict[str, Any]:
    """The figures over every run: medians and spreads, the last run's exact counts."""
    last = results[-1]
    figures = {
        "bytes_per_bucket": round(median([r["bytes_per_bucket"] for r in results]), 3),
        "spread": spread([r["bytes_per_bucket"] for r in results]),
        "zk_bytes_per_pin": round(median([r["zk_bytes_per_pin"] for r in results]), 1),
        "zk_bytes_per_pin_spread": spread([r["zk_bytes_per_pin"] for r in results], 1),
        "zk_bytes_per_pin_counts": (
            f"growth of ZooKeeper's approximate_data_size (path + data bytes of the "
            f"{n:,} pin znodes and the lease's own znodes) + {ZNODE_RECORD_BYTES} B "
            "per znode added (length prefixes, ACL reference, persisted stat in "
            "ZooKeeper's snapshot format), over the pins; heap overhead not counted"
        ),
        "znode_record_bytes": ZNODE_RECORD_BYTES,
        "json_bytes_per_bucket": round(median([r["json_bytes_per_bucket"] for r in results]), 3),
        "bytes_per_bucket_at_large_ids": round(
            median([r["bytes_per_bucket_at_large_ids"] for r in results]), 3
        ),
        "total_bytes": last["total_bytes"],
        "record_bytes": last["record_bytes"],
        "array_znodes": last["array_znodes"],
        "array_bytes": last["array_bytes"],
        "json_bytes": last["json_bytes"],
        "pin_znodes": last["pin_znodes"],
        "pin_data_bytes": last["pin_data_bytes"],
        "pin_path_bytes_per_pin": round(last["pin_path_bytes_per_pin"], 1),
        "zk_approximate_bytes_per_pin": (
            round(median([r["zk_approximate_bytes_per_pin"] for r in results]), 1)
            if "zk_approximate_bytes_per_pin" in last
            else None
        ),
        "zk_znodes_added": last.get("zk_znodes_added"),
        "acquire_s": round(median([r["acquire_s"] for r in results]), 3),
        "acquire_s_spread": spread([r["acquire_s"] for r in results]),
        "acquire_round_trips": last["acquire_round_trips"],
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
        "seed_s": round(median(seeds), 1),
    }
    figures["note"] = (
        f"ZooKeeper {figures['zk_bytes_per_pin']:.1f} B per pin counting the pin znodes "
        f"({figures['pin_path_bytes_per_pin']:.0f} B path + {ZNODE_RECORD_BYTES} B per znode); "
        f"JSON {figures['json_bytes_per_bucket']:.1f} B; "
        f"{figures['bytes_per_bucket_at_large_ids']:.2f} B with snapshot ids ≥ 65,536"
    )
    return figures


BENCHMARK = Benchmark(
    id="B3",
    what=(
        "lease metadata bytes per pinned bucket at 100,000 buckets (record + pin arrays); JSON "
        "and ZooKeeper bytes per pin (pin znodes counted) beside it"
    ),
    metric="value",
    target=8.0,
    op="<=",
    run=run,
    unit="B",
    target_note="ZooKeeper bytes per pin with the pin znodes reported",
    spark=False,
    quick_full_size=True,  # the bytes per pin depend on the size; they are deterministic
    quick_runs=1,
)
