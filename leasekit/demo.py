"""The end-to-end demo behind ``leasekit demo``: write a changing orders table, snapshot it
with Spark, pin the snapshots with a lease, read through it and check against what was written;
meanwhile a group of three consumers splits the table's buckets and reads its log at half the
rate it is written; one of them leaves halfway and the others take its buckets over from the
committed offsets. The group's describe table shows lag, time lag and health, and retention
keeps the log it has not read.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .cli.output import format_fields, format_table, frame_rows
from .consumers.listener import BucketRebalanceListener
from .errors import IllegalStateError, InvalidArgumentError, InvalidTypeError, TableNotFoundError
from .structs import TableBucket

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from .connection import Connection
    from .consumers.consumer import Consumer

__all__ = ["run", "SCHEMA", "STATUSES"]

SCHEMA = (
    "order_id BIGINT NOT NULL, customer STRING, status STRING, amount DOUBLE, updated_at TIMESTAMP"
)
BUCKETS = 8
PROPERTIES = {
    "kv.snapshot.num-retained": 1,
    "log.retention": "0s",
    "log.retention.respect-consumers": True,
}
"""Keep only the newest snapshot and no older log than the consumer group still needs, so the
plan shows what the lease and the group keep."""
GROUP_SIZE = 3
"""Consumers in the demo's group: 8 buckets split 3/3/2, then 4/4 once one has left."""
_SETTLE_SECONDS = 30.0  # a join or takeover not done by then is an error, not a wait
LAG_COLUMNS = [
    "bucket",
    "current_offset",
    "log_end_offset",
    "lag",
    "time_lag",
    "consumer_id",
    "last_commit",
    "status",
]
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


class _Member(BucketRebalanceListener):
    """A consumer of the demo's group, by a short name. While ``hold`` is set, the buckets it
    is assigned are paused: a takeover moves buckets without reading, so the group keeps its
    pace."""

    consumer: Consumer
    """Set once the consumer is made, with this member as its listener."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.hold = False

    def on_buckets_assigned(self, assigned: set[TableBucket]) -> None:
        if self.hold and assigned:
            self.consumer.pause(*assigned)


class _Group:
    """The demo's consumer group. Its consumers are polled in turn from the calling thread
    (each used by that thread alone), so the demo decides how much the group reads; every
    poll's offsets are kept, per bucket in the order read, with the member that read them."""

    def __init__(self, buckets: list[TableBucket]) -> None:
        self.buckets = set(buckets)
        self.members: list[_Member] = []
        self.live: list[_Member] = []
        self.reads: dict[TableBucket, list[tuple[str, np.ndarray]]] = {tb: [] for tb in buckets}
        self.consumed = 0

    def open(self, conn: Connection, table: str, group_id: str, size: int) -> None:
        """Create ``size`` consumers of ``table`` in ``group_id``; they join at their first poll."""
        for i in range(size):
            member = _Member(f"consumer-{i + 1}")
            member.consumer = conn.consumer(
                table,
                group_id=group_id,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                listener=member,
            )
            self.members.append(member)
            self.live.append(member)

    def close(self) -> None:
        for member in self.members:
            member.consumer.close()  # a second close does nothing

    def settle(self, what: str) -> float:
        """Poll the live members in turn until they follow one generation and own every
        bucket once; the seconds it took."""
        started = time.perf_counter()
        while not self.balanced():
            if time.perf_counter() - started > _SETTLE_SECONDS:
                owned = {
                    m.name: sorted(tb.bucket for tb in m.consumer.assignment()) for m in self.live
                }
                raise IllegalStateError(
                    f"{what}: the group did not settle in {_SETTLE_SECONDS:.0f} s; "
                    f"generations {[m.consumer.generation for m in self.live]}, "
                    f"buckets {owned}"
                )
            for member in self.live:
                self._count(member, member.consumer.poll(timeout="0.05s"))
        return time.perf_counter() - started

    def balanced(self) -> bool:
        generations = {m.consumer.generation for m in self.live}
        owned = [tb for m in self.live for tb in m.consumer.assignment()]
        return (
            len(generations) == 1
            and None not in generations
            and len(owned) == len(set(owned))
            and set(owned) == self.buckets
        )

    def assignment(self) -> list[dict[str, Any]]:
        """One row per live member: its name, member id, buckets and generation."""
        return [
            {
                "member": m.name,
                "member_id": m.consumer.member_id,
                "buckets": sorted(tb.bucket for tb in m.consumer.assignment()),
                "generation": m.consumer.generation,
            }
            for m in self.live
        ]

    def consume(self, records: int) -> int:
        """Read up to ``records`` records in small polls, the live members in turn, so each
        reads about as much, from each of its buckets; how many were read."""
        left = records
        chunk = max(1, records // (len(self.live) * len(self.buckets)))
        reading = list(self.live)
        while left > 0 and reading:
            for member in list(reading):
                got = self._count(
                    member, member.consumer.poll(timeout="1s", max_records=min(chunk, left))
                )
                if not got:
                    reading.remove(
                        member
                    )  # nothing new within a second: it has read its buckets up
                left -= got
                if left <= 0:
                    break
        return records - left

    def commit(self) -> None:
        for member in self.live:
            member.consumer.commit()

    def takeover(self) -> dict[str, Any]:
        """Close the oldest member (it commits, hands its buckets back and leaves: C10) and
        poll the others, holding their buckets, until they own every bucket."""
        leaving = self.live.pop(0)
        consumer = leaving.consumer
        moved = sorted(consumer.assignment())
        committed = {tb: consumer.committed(tb) for tb in moved}
        before, member_id = consumer.generation, consumer.member_id
        for member in self.live:
            member.hold = True
            member.consumer.pause(*member.consumer.assignment())
        started = time.perf_counter()
        consumer.commit()
        consumer.close()
        self.settle("takeover")
        seconds = time.perf_counter() - started
        owners = {tb: m for m in self.live for tb in m.consumer.assignment()}
        starts = {tb: owners[tb].consumer.position(tb) for tb in moved}
        for member in self.live:
            member.hold = False
            member.consumer.resume(*member.consumer.assignment())
        return {
            "closed": leaving.name,
            "member_id": member_id,
            "generation": [before, self.live[0].consumer.generation],
            "seconds": seconds,
            "moved": [
                {
                    "bucket": tb.bucket,
                    "from": leaving.name,
                    "to": owners[tb].name,
                    "committed": committed[tb],
                    "starts_at": starts[tb],
                }
                for tb in moved
            ],
        }

    def _count(self, member: _Member, batches: dict[TableBucket, pa.Table]) -> int:
        got = 0
        for tb, data in batches.items():
            self.reads[tb].append((member.name, data.column("_offset").to_numpy()))
            got += data.num_rows
        self.consumed += got
        return got

    def read_in_order(
        self, begin: dict[TableBucket, int], committed: dict[TableBucket, Any]
    ) -> bool:
        """C12: each bucket's records were returned once each, in order, from ``begin`` to its
        committed offset, whichever members read them."""
        for tb, reads in self.reads.items():
            end = begin[tb] if pd.isna(committed[tb]) else int(committed[tb])
            offsets = (
                np.concatenate([o for _, o in reads]) if reads else np.empty(0, dtype=np.int64)
            )
            if not np.array_equal(offsets, np.arange(begin[tb], end)):
                return False
        return True

    def first_read(self, tb: TableBucket, member: str) -> int | None:
        """The first offset ``member`` read of ``tb``; None if it read none."""
        return next((int(o[0]) for name, o in self.reads[tb] if name == member), None)


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
    orders_table = conn.create_table(
        table, SCHEMA, "order_id", buckets=BUCKETS, properties=PROPERTIES
    )
    out(f"demo: {rows} order upserts in {batches} batches into {table} ({BUCKETS} buckets)")

    orders = _Orders(rows, seed)
    sizes = np.full(batches, rows // batches)
    sizes[: rows % batches] += 1
    pin_after = (batches - 1) // 2  # also when one consumer leaves the group
    written = deleted = snapshots = 0
    group = f"{table}-audit"
    conn.delete_group(group)  # a previous run's offsets: the demo owns this group
    log_start = orders_table.beginning_offsets()
    audit = _Group(orders_table.buckets)
    with (
        contextlib.closing(audit),
        conn.lease(f"{table}-report", duration="10m", keepalive=True) as lease,
    ):
        audit.open(conn, table, group, GROUP_SIZE)
        join_seconds = audit.settle("join")  # before the first write: joining reads nothing
        joined = audit.assignment()
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
            audit.consume(
                int((sizes[: i + 1] // 2).sum()) - audit.consumed
            )  # the group keeps half the pace
            audit.commit()
            if i == pin_after:  # one consumer leaves; the others take its buckets over
                takeover = audit.takeover()
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
    for row in takeover["moved"]:
        row["resumed_at"] = audit.first_read(TableBucket(table, row["bucket"]), row["to"])
    shares = sorted(len(r["buckets"]) for r in joined)
    final_read = _summary(lks.read_snapshots(spark, orders_table, orders_table.latest_snapshots()))
    expected = orders.by_status()
    live = sum(expected.values())
    checks = {
        "read through the lease = state when pinned": first_read == _expected(expected_pinned),
        "same read after retention ran": second_read == first_read,
        "latest snapshots = live keys": final_read == _expected(expected),
        "every bucket pinned": not pinned.unavailable,
        "log the group has not read is kept": all(log_left[tb] <= committed[tb] for tb in log_left),
        "lag = log end - committed": bool(
            (lag["lag"] == lag["log_end_offset"] - lag["current_offset"]).all()
        ),
        f"{GROUP_SIZE} consumers split the buckets, each once, balanced within 1": sorted(
            b for r in joined for b in r["buckets"]
        )
        == list(range(BUCKETS))
        and shares[-1] - shares[0] <= 1,
        "the new owners resumed at the committed offsets": all(
            r["starts_at"] == r["committed"] and r["resumed_at"] in (None, r["committed"])
            for r in takeover["moved"]
        ),
        "every record up to the committed offsets read once, in order (none skipped)": audit.read_in_order(
            log_start, committed
        ),
    }
    if not all(checks.values()):
        raise IllegalStateError(
            f"demo check failed: {checks}; through the lease {first_read} then {second_read}, "
            f"expected {_expected(expected_pinned)}; latest {final_read}, expected {_expected(expected)}; "
            f"group {joined}, takeover {takeover}"
        )
    rows_read, by_status = final_read[0], final_read[2]
    elapsed = time.perf_counter() - started
    kept_by_lease = [
        i for i in plan.items if i.kind == "snapshot" and i.reason.startswith("pinned by lease")
    ]

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
            "deleted": {
                kind: sum(1 for i in report.deleted if i.kind == kind)
                for kind in ("snapshot", "segment", "orphan")
            },
            "freed_bytes": report.freed_bytes,
            "errors": report.errors,
        },
        "group": {
            "group_id": group,
            "members": len(joined),
            "joined": {"seconds": round(join_seconds, 3), "assignment": joined},
            "takeover": {
                **takeover,
                "after_batch": pin_after + 1,
                "seconds": round(takeover["seconds"], 3),
            },
            "read": {
                tb.bucket: {
                    "records": sum(len(o) for _, o in reads),
                    "by": list(dict.fromkeys(n for n, _ in reads)),
                }
                for tb, reads in audit.reads.items()
            },
            "records_consumed": audit.consumed,
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
        "warehouse": conn.warehouse,
        "zookeeper": conn.zookeeper,
        "namespace": conn.namespace,
    }
    summary = {
        "rows written": written,
        "deletes": deleted,
        "live keys": live,
        "buckets": result["buckets"],
        "snapshots taken": snapshots,
        "lease": (
            f"{lease_info.lease_id}: {len(lease_info.pins)} buckets pinned (keepalive), "
            f"expires {lease_info.expires_at:%H:%M:%S} UTC, dropped at the end"
        ),
        "read through the lease": f"{first_read[0]} rows, before and after retention",
        "consumer group": (
            f"{group}: {len(joined)} consumers read {audit.consumed} records at half the write "
            f"rate, lag {result['group']['lag']}, status {health.status}"
        ),
        "retention": (
            f"{len(kept_by_lease)} snapshots kept for the lease; deleted "
            + ", ".join(f"{n} {k}s" for k, n in result["retention"]["deleted"].items())
            + f" ({report.freed_bytes} bytes)"
        ),
        "rows read by Spark": f"{rows_read} (latest snapshots)",
        "check": "passed (" + "; ".join(checks) + ")",
        "elapsed": f"{elapsed:.1f} s",
        "warehouse": result["warehouse"],
        "zookeeper": f"{result['zookeeper']} (namespace {conn.namespace})",
    }
    counts = [{"status": s, "count": n} for s, n in by_status.items()]
    shown = [
        i
        for i in plan.items
        if i.kind in ("snapshot", "segment") and i.table_bucket and i.table_bucket.bucket == 0
    ]
    plan_rows = [
        {"item": f"{i.kind} {i.item_id}", "action": i.action, "reason": i.reason} for i in shown
    ]
    lag_rows = frame_rows(lag)
    stayed = ", ".join(m.name for m in audit.live)
    out(
        f"\n{format_fields(summary)}\n\n"
        f"Consumer group {group}: {len(joined)} consumers joined in {join_seconds:.2f} s, generation "
        f"{joined[0]['generation']}\n{format_table(joined)}\n\n"
        f"Takeover after batch {pin_after + 1}: {takeover['closed']} committed and closed; {stayed} own all "
        f"{BUCKETS} buckets at generation {takeover['generation'][1]} (was {takeover['generation'][0]}) after "
        f"{takeover['seconds'] * 1000:.0f} ms, resuming from the committed offsets\n"
        f"{format_table(takeover['moved'], ['bucket', 'from', 'to', 'committed', 'resumed_at'])}\n\n"
        f"Consumer group {group} (before retention)\n{format_table(lag_rows, LAG_COLUMNS)}\n"
        f"\nRetention plan, bucket 0 (before the run)\n"
        f"{format_table(plan_rows)}\n\nSpark: count by status\n{format_table(counts)}"
    )
    return result


def _summary(frame: Any) -> tuple[int, int, dict[str, int]]:
    """(rows, distinct keys, rows by status) of an orders DataFrame."""
    from pyspark.sql import functions as F

    totals = frame.agg(
        F.count(F.lit(1)).alias("rows"), F.countDistinct("order_id").alias("keys")
    ).first()
    by_status = {r["status"]: int(r["count"]) for r in frame.groupBy("status").count().collect()}
    return (
        int(totals["rows"]),
        int(totals["keys"]),
        {k: by_status[k] for k in sorted(by_status, key=_status_order)},
    )


def _expected(by_status: dict[str, int]) -> tuple[int, int, dict[str, int]]:
    live = sum(by_status.values())
    return live, live, by_status


def _status_order(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)
