"""The end-to-end demo behind ``leasekit demo``: write a changing orders table, snapshot it
with Spark, pin the snapshots with a lease, read through it and check against what was written;
meanwhile a consumer group reads the table's log at half the rate it is written, so its
describe table shows lag, time lag and health, and retention keeps the log it has not read.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .cli.output import format_fields, format_table, frame_rows
from .errors import IllegalStateError, InvalidArgumentError, InvalidTypeError, TableNotFoundError
from .records import TableBucket

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .connection import Connection

__all__ = ["run", "SCHEMA", "STATUSES"]

SCHEMA = (
    "order_id BIGINT NOT NULL, customer STRING, status STRING, amount DOUBLE, updated_at TIMESTAMP"
)
BUCKETS = 8
PROPERTIES = {"kv.snapshot.num-retained": 1, "log.retention": "0s", "log.retention.respect-consumers": True}
"""Keep only the newest snapshot and no older log than the consumer group still needs, so the
plan shows what the lease and the group keep."""
LAG_COLUMNS = ["bucket", "current_offset", "log_end_offset", "lag", "time_lag", "consumer_id", "last_commit", "status"]
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
    orders_table = conn.create_table(table, SCHEMA, "order_id", buckets=BUCKETS, properties=PROPERTIES)
    out(f"demo: {rows} order upserts in {batches} batches into {table} ({BUCKETS} buckets)")

    orders = _Orders(rows, seed)
    sizes = np.full(batches, rows // batches)
    sizes[: rows % batches] += 1
    pin_after = (batches - 1) // 2
    written = deleted = snapshots = consumed = 0
    group = f"{table}-audit"
    conn.delete_group(group)  # a previous run's offsets: the demo owns this group
    audit = conn.consumer(table, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False)
    with audit, conn.lease(f"{table}-report", duration="10m", keepalive=True) as lease:
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
            consumed += _consume(audit, int(sizes[i]) // 2)  # the group keeps half the pace
            audit.commit()
            if i >= pin_after:
                snapshots += len(orders_table.snapshot(spark))
            if i == pin_after:  # the analyst pins this state and reads it while the table moves on
                pinned = lease.acquire_latest(table)
                expected_pinned = orders.by_status()
                first_read = _summary(lease.read(spark, orders_table))
        lag = conn.describe_group(group)
        health = conn.group_status(group)
        plan = conn.retention_plan(table)
        report = conn.run_retention(table)
        second_read = _summary(lease.read(spark, orders_table))
        lease_info = lease.info()
        log_left = orders_table.beginning_offsets()
        committed = {TableBucket(table, b): o for b, o in zip(lag["bucket"], lag["current_offset"])}
    final_read = _summary(lks.read_snapshots(spark, orders_table, orders_table.latest_snapshots()))
    expected = orders.by_status()
    live = sum(expected.values())
    checks = {
        "read through the lease = state when pinned": first_read == _expected(expected_pinned),
        "same read after retention ran": second_read == first_read,
        "latest snapshots = live keys": final_read == _expected(expected),
        "every bucket pinned": not pinned.unavailable,
        "log the group has not read is kept": all(log_left[tb] <= committed[tb] for tb in log_left),
        "lag = log end - committed": bool((lag["lag"] == lag["log_end_offset"] - lag["current_offset"]).all()),
    }
    if not all(checks.values()):
        raise IllegalStateError(
            f"demo check failed: {checks}; through the lease {first_read} then {second_read}, "
            f"expected {_expected(expected_pinned)}; latest {final_read}, expected {_expected(expected)}"
        )
    rows_read, by_status = final_read[0], final_read[2]
    elapsed = time.perf_counter() - started
    kept_by_lease = [i for i in plan.items if i.kind == "snapshot" and i.reason.startswith("pinned by lease")]

    result: dict[str, Any] = {
        "table": table,
        "rows_written": written,
        "deletes": deleted,
        "live_keys": live,
        "buckets": orders_table.num_buckets,
        "snapshots_taken": snapshots,
        "rows_read": rows_read,
        "rows_read_through_lease": first_read[0],
        "retention": {
            "snapshots_kept_by_lease": len(kept_by_lease),
            "deleted": {kind: sum(1 for i in report.deleted if i.kind == kind) for kind in ("snapshot", "segment", "orphan")},
            "freed_bytes": report.freed_bytes,
            "errors": report.errors,
        },
        "group": {
            "group_id": group,
            "records_consumed": consumed,
            "lag": int(lag["lag"].sum()),
            "max_time_lag_s": round(lag["time_lag"].max().total_seconds(), 1),
            "status": health.status,
        },
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
                  f"expires {lease_info.expires_at:%H:%M:%S} UTC, dropped at the end"),
        "read through the lease": f"{first_read[0]} rows, before and after retention",
        "consumer group": (f"{group}: {consumed} records read at half the write rate, lag "
                           f"{result['group']['lag']}, status {health.status}"),
        "retention": (f"{len(kept_by_lease)} snapshots kept for the lease; deleted "
                      + ", ".join(f"{n} {k}s" for k, n in result["retention"]["deleted"].items())
                      + f" ({report.freed_bytes} bytes)"),
        "rows read by Spark": f"{rows_read} (latest snapshots)",
        "check": "passed (" + "; ".join(checks) + ")",
        "elapsed": f"{elapsed:.1f} s",
        "warehouse": result["warehouse"],
        "zookeeper": f"{result['zookeeper']} (namespace {conn.namespace})",
    }
    counts = [{"status": s, "count": n} for s, n in by_status.items()]
    shown = [i for i in plan.items if i.kind in ("snapshot", "segment") and i.table_bucket and i.table_bucket.bucket == 0]
    plan_rows = [{"item": f"{i.kind} {i.item_id}", "action": i.action, "reason": i.reason} for i in shown]
    lag_rows = frame_rows(lag)
    out(f"\n{format_fields(summary)}\n\nConsumer group {group} (before retention)\n{format_table(lag_rows, LAG_COLUMNS)}\n"
        f"\nRetention plan, bucket 0 (before the run)\n"
        f"{format_table(plan_rows)}\n\nSpark: count by status\n{format_table(counts)}")
    return result


def _consume(consumer: Any, records: int) -> int:
    """Poll until ``records`` records were returned (or none are left); how many were."""
    got = 0
    while got < records:
        batches = consumer.poll(timeout="1s", max_records=records - got)
        if not batches:
            break
        got += sum(b.num_rows for b in batches.values())
    return got


def _summary(frame: Any) -> tuple[int, int, dict[str, int]]:
    """(rows, distinct keys, rows by status) of an orders DataFrame."""
    from pyspark.sql import functions as F

    totals = frame.agg(F.count(F.lit(1)).alias("rows"), F.countDistinct("order_id").alias("keys")).first()
    by_status = {r["status"]: int(r["count"]) for r in frame.groupBy("status").count().collect()}
    return int(totals["rows"]), int(totals["keys"]), {k: by_status[k] for k in sorted(by_status, key=_status_order)}


def _expected(by_status: dict[str, int]) -> tuple[int, int, dict[str, int]]:
    live = sum(by_status.values())
    return live, live, by_status


def _status_order(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)
