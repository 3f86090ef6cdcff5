"""The end-to-end demo behind ``leasekit demo``: write a changing orders table, snapshot it
with Spark, pin the snapshots with a lease, read through it and check against what was written.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .cli.output import format_fields, format_table
from .errors import IllegalStateError, InvalidArgumentError, InvalidTypeError, TableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .connection import Connection

__all__ = ["run", "SCHEMA", "STATUSES"]

SCHEMA = (
    "order_id BIGINT NOT NULL, customer STRING, status STRING, amount DOUBLE, updated_at TIMESTAMP"
)
BUCKETS = 8
STATUSES = ("created", "paid", "shipped", "delivered", "cancelled")
_DELIVERED, _CANCELLED = 3, 4
_UPDATE_SHARE = 0.6  # of each batch after the first: status changes of open orders
_CANCEL_SHARE = 0.05  # of status changes: the order is cancelled instead of advancing
_DELETE_SHARE = 0.03  # of live orders deleted after each batch after the first
_CUSTOMERS = 5_000


class _Orders:
    """The orders the demo wrote, as the expected state: status per order id (-1: none)."""

    def __init__(self, capacity: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.status = np.full(capacity, -1, dtype=np.int8)
        self.customer = np.zeros(capacity, dtype=np.int64)
        self.amount = np.zeros(capacity, dtype=np.float64)
        self.next_id = 0

    def upserts(self, size: int, first: bool) -> np.ndarray:
        """Order ids of one batch: status changes of open orders, then new orders."""
        rng = self.rng
        open_ids = np.flatnonzero((self.status >= 0) & (self.status < _DELIVERED))
        changes = 0 if first else min(int(size * _UPDATE_SHARE), len(open_ids))
        changed = rng.choice(open_ids, size=changes, replace=False)
        cancel = rng.random(changes) < _CANCEL_SHARE
        self.status[changed] = np.where(cancel, _CANCELLED, self.status[changed] + 1)
        created = np.arange(self.next_id, self.next_id + size - changes)
        self.next_id += len(created)
        self.status[created] = 0
        self.customer[created] = rng.integers(0, _CUSTOMERS, len(created))
        self.amount[created] = np.round(rng.uniform(5, 500, len(created)), 2)
        return rng.permutation(np.concatenate([changed, created]))

    def deletes(self) -> np.ndarray:
        """Order ids to delete: a share of the live orders."""
        live = np.flatnonzero(self.status >= 0)
        gone = self.rng.choice(live, size=int(len(live) * _DELETE_SHARE), replace=False)
        self.status[gone] = -1
        return np.sort(gone)

    def frame(self, ids: np.ndarray, updated_at: pd.Timestamp) -> pd.DataFrame:
        return pd.DataFrame({
            "order_id": ids.astype(np.int64),
            "customer": np.char.mod("customer-%04d", self.customer[ids]).astype(object),
            "status": np.array(STATUSES, dtype=object)[self.status[ids]],
            "amount": self.amount[ids],
            "updated_at": updated_at,
        })  # fmt: skip

    def by_status(self) -> dict[str, int]:
        counts = np.bincount(self.status[self.status >= 0], minlength=len(STATUSES))
        return {s: int(n) for s, n in zip(STATUSES, counts) if n}


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise InvalidArgumentError(f"{name} must be at least {minimum}, got {value}")
    return value


def run(
    conn: Connection,
    spark: SparkSession | None,
    *,
    table: str = "demo_orders",
    rows: int = 100_000,
    batches: int = 5,
    out: Callable[[str], Any] = print,
    seed: int = 42,
) -> dict[str, Any]:
    """Write ``rows`` order upserts in ``batches`` (status changes, then deletes), snapshot
    them with Spark, read the latest snapshots back and check them; return the figures.

    The table is dropped first if it exists, so every run starts from scratch.
    """
    from pyspark.sql import functions as F
    from tqdm.auto import tqdm

    from . import spark as lks

    _check_count("rows", rows, 1)
    _check_count("batches", batches, 1)
    if batches > rows:
        raise InvalidArgumentError(f"batches ({batches}) must not exceed rows ({rows})")
    spark = lks.session(spark)
    started = time.perf_counter()

    if table in conn.tables():
        with contextlib.suppress(TableNotFoundError):
            conn.drop_table(table, force=True)  # the demo owns this table, leases of old runs too
    orders_table = conn.create_table(table, SCHEMA, "order_id", buckets=BUCKETS)
    out(f"demo: {rows} order upserts in {batches} batches into {table} ({BUCKETS} buckets)")

    orders = _Orders(rows, seed)
    sizes = np.full(batches, rows // batches)
    sizes[: rows % batches] += 1
    snapshot_after = {batches // 2 - 1, batches - 1} if batches > 1 else {0}
    written = deleted = snapshots = 0
    for i in tqdm(range(batches), desc=f"demo {table}", unit="batch", disable=None):
        now = pd.Timestamp(conn.server_time())
        ids = orders.upserts(int(sizes[i]), first=i == 0)
        orders_table.append(orders.frame(ids, now))
        written += len(ids)
        if i > 0:
            gone = orders.deletes()
            if len(gone):
                orders_table.delete(pd.DataFrame({"order_id": gone.astype(np.int64)}))
            deleted += len(gone)
        if i in snapshot_after:
            snapshots += len(orders_table.snapshot(spark))

    with conn.lease(f"{table}-report", duration="10m", keepalive=True) as lease:
        pinned = lease.acquire_latest(table)
        frame = lease.read(spark, orders_table)
        totals = frame.agg(
            F.count(F.lit(1)).alias("rows"), F.countDistinct("order_id").alias("keys")
        ).first()
        rows_read, keys_read = int(totals["rows"]), int(totals["keys"])
        by_status = {r["status"]: int(r["count"]) for r in frame.groupBy("status").count().collect()}
        lease_info = lease.info()
    by_status = {s: by_status[s] for s in sorted(by_status, key=_status_order)}
    expected = orders.by_status()
    live = sum(expected.values())
    if rows_read != live or keys_read != live or by_status != expected or pinned.unavailable:
        raise IllegalStateError(
            f"demo check failed: Spark read {rows_read} rows ({keys_read} keys) by status "
            f"{by_status} through lease {lease.lease_id} (unavailable: {pinned.unavailable}); "
            f"expected {live} live keys by status {expected}"
        )
    elapsed = time.perf_counter() - started

    result: dict[str, Any] = {
        "table": table,
        "rows_written": written,
        "deletes": deleted,
        "live_keys": live,
        "buckets": orders_table.num_buckets,
        "snapshots_taken": snapshots,
        "rows_read": rows_read,
        "lease": {
            "lease_id": lease_info.lease_id,
            "pinned_buckets": len(lease_info.pins),
            "snapshot_ids": sorted(set(lease_info.pins.values())),
            "expires_at": lease_info.expires_at.isoformat(),
        },
        "check": "passed",
        "count_by_status": by_status,
        "elapsed_s": round(elapsed, 1),
        "warehouse": conn.warehouse.location,
        "zookeeper": conn.zookeeper,
        "namespace": conn.namespace,
    }
    summary = {
        "rows written": written,
        "deletes": deleted,
        "live keys": live,
        "buckets": result["buckets"],
        "snapshots taken": snapshots,
        "lease": (f"{lease_info.lease_id}: {len(lease_info.pins)} buckets pinned (keepalive), "
                  f"expires {lease_info.expires_at:%H:%M:%S} UTC, dropped after the read"),
        "rows read by Spark": f"{rows_read} (through the lease)",
        "check": "passed (Spark count = live keys, count by status as written)",
        "elapsed": f"{elapsed:.1f} s",
        "warehouse": result["warehouse"],
        "zookeeper": f"{result['zookeeper']} (namespace {conn.namespace})",
    }
    counts = [{"status": s, "count": n} for s, n in by_status.items()]
    out(f"\n{format_fields(summary)}\n\nSpark: count by status\n{format_table(counts)}")
    return result


def _status_order(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)
