"""The demo's scenario: write the orders in batches while the group reads at half the pace,
snapshot, pin and read through a lease, let a consumer leave, split the hottest bucket and let
the group follow it (parent first), run retention; then the checks of what happened against
what was written.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..errors import TableNotFoundError
from ..monitor.lag.history import sample
from ..structs import TableBucket
from .demo_workload import BUCKETS, GROUP_SIZE, PROPERTIES, SCHEMA, STATUSES, ConsumerGroup, Orders

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession

    from ..connection import Connection
    from ..leases.lease import KvSnapshotLease
    from ..structs import AcquireResult, GroupStatus, LeaseInfo, RetentionPlan, RetentionReport
    from ..table import Table

__all__ = ["Outcome", "play", "checks"]

ReadSummary = tuple[int, int, dict[str, int]]
"""(rows, distinct keys, rows by status) of a read of the orders."""


@dataclass
class Tally:
    """What the writes did so far."""

    written: int = 0
    """Order upserts written."""
    deleted: int = 0
    """Orders deleted."""
    snapshots: int = 0
    """Bucket snapshots taken."""


@dataclass(frozen=True)
class Pinned:
    """What the analyst pinned halfway, and read through the lease then."""

    acquired: AcquireResult
    """The lease's acquire of the latest snapshots."""
    expected: dict[str, int]
    """Live orders by status when pinned."""
    first_read: ReadSummary
    """The read through the lease right after pinning."""


@dataclass(frozen=True)
class Aftermath:
    """What the demo saw once every batch was written, before the lease was dropped."""

    lag: pd.DataFrame
    """The group's describe table (``describe_group``)."""
    health: GroupStatus
    """The group's health."""
    plan: RetentionPlan
    """The retention plan before the run."""
    report: RetentionReport
    """What retention deleted."""
    second_read: ReadSummary
    """The read through the lease after retention ran."""
    lease_info: LeaseInfo
    """The lease, still held."""
    log_left: dict[TableBucket, int]
    """First log offset still stored, per bucket (every bucket ever), after retention."""
    committed: dict[int, int | None]
    """The group's committed offset per bucket number, every bucket ever (None where none)."""


@dataclass
class Rescale:
    """The split of the hottest bucket after the lease pinned, and how the group followed it."""

    parent: TableBucket
    """The bucket split: the active one with the most records."""
    children: tuple[TableBucket, TableBucket]
    sealed_at: int
    """The parent's end offset when split (its seal)."""
    after_batch: int
    """The batch (from 1) after which it was split."""
    copied: int
    """Files in the table's directory the split added (K3: none; nothing else writes then)."""
    followed: dict[str, Any] | None = None
    """Once the group drained the parent and settled: who drained it, the children's owners,
    the generation and the seconds it took (``ConsumerGroup.follow_split``)."""


@dataclass(frozen=True)
class Outcome:
    """Everything the demo did and saw, for the checks and the report."""

    table: Table
    group_id: str
    pin_after: int
    """Index of the batch after which the lease pinned and a consumer left."""
    tally: Tally
    expected: dict[str, int]
    """Live orders by status at the end (what was written)."""
    audit: ConsumerGroup
    """The consumer group, with every offset each member read."""
    log_start: dict[TableBucket, int]
    joined: list[dict[str, Any]]
    """The assignment once the group first settled, one row per member."""
    join_seconds: float
    takeover: dict[str, Any]
    """The takeover: who left, the generations, the buckets moved and where they resumed."""
    pinned: Pinned
    rescale: Rescale
    after: Aftermath
    final_read: ReadSummary
    """A Spark read of the latest snapshots at the end."""


def play(
    conn: Connection,
    spark: SparkSession,
    *,
    table: str,
    rows: int,
    batches: int,
    out: Callable[[str], Any],
    seed: int,
) -> Outcome:
    """Run the scenario on a fresh ``table`` (dropped first if it exists) and its group."""
    from ..sparkio.reads import read_snapshots

    orders_table = _fresh_table(conn, table)
    orders = Orders(rows, seed)
    sizes = np.full(batches, rows // batches)
    sizes[: rows % batches] += 1
    pin_after = (batches - 1) // 2  # also when one consumer leaves the group
    group_id = f"{table}-audit"
    conn.delete_group(group_id)  # a previous run's offsets: the demo owns this group
    log_start = orders_table.beginning_offsets()
    audit = ConsumerGroup(orders_table)
    tally = Tally()
    with (
        contextlib.closing(audit),
        conn.lease(f"{table}-report", duration="10m", keepalive=True) as lease,
    ):
        audit.open(conn, table, group_id, GROUP_SIZE)
        join_seconds = audit.settle("join")  # before the first write: joining reads nothing
        joined = audit.assignment()
        takeover, pinned, rescale = _write_batches(
            conn, spark, orders_table, orders, sizes, audit, lease, pin_after, tally
        )
        after = _aftermath(conn, spark, orders_table, group_id, lease, audit)
    for row in takeover["moved"]:
        row["resumed_at"] = audit.first_read(TableBucket(table, row["bucket"]), row["to"])
    latest = orders_table.latest_snapshots()  # the children's, not the sealed parent's
    return Outcome(
        orders_table, group_id, pin_after, tally, orders.by_status(), audit, log_start,
        joined, join_seconds, takeover, pinned, rescale, after,
        summarize(read_snapshots(spark, orders_table, latest)),
    )  # fmt: skip


def _fresh_table(conn: Connection, table: str) -> Table:
    if table in conn.tables():
        with contextlib.suppress(TableNotFoundError):
            conn.drop_table(table, force=True)  # the demo owns this table, leases of old runs too
    return conn.create_table(table, SCHEMA, "order_id", buckets=BUCKETS, properties=PROPERTIES)


def _write_batches(
    conn: Connection,
    spark: SparkSession,
    orders_table: Table,
    orders: Orders,
    sizes: np.ndarray,
    audit: ConsumerGroup,
    lease: KvSnapshotLease,
    pin_after: int,
    tally: Tally,
) -> tuple[dict[str, Any], Pinned, Rescale]:
    """Write the batches; after each, the group reads half of what was written so far and
    commits. After batch ``pin_after`` a consumer leaves, the lease pins the latest snapshots
    (taken from then on after every batch) and reads through them, and the hottest bucket is
    split. Before the last batch is read, the group drains the split bucket and takes on its
    children (parent first)."""
    from ..progress import progress

    name, last = orders_table.name, len(sizes) - 1
    rescale: Rescale | None = None
    for i in progress(range(len(sizes)), desc=f"demo {name}", unit="batch"):
        _write_batch(conn, orders_table, orders, int(sizes[i]), i, tally)
        if i == last and rescale is not None:
            rescale.followed = audit.follow_split(rescale.parent, rescale.sealed_at)
        audit.consume(int((sizes[: i + 1] // 2).sum()) - audit.consumed)  # half the pace
        audit.commit()
        sample(orders_table.context, force=True)  # M1: the Dashboard's lag chart has a history
        if i == pin_after:  # one consumer leaves; the others take its buckets over
            takeover = audit.takeover()
        if i >= pin_after:
            tally.snapshots += len(orders_table.snapshot(spark))
        if i == pin_after:  # the analyst pins this state and reads it while the table moves on
            acquired = lease.acquire_latest(name)
            pinned = Pinned(
                acquired, orders.by_status(), summarize(lease.read(spark, orders_table))
            )
            rescale = _split_hottest(orders_table, i + 1)
    assert rescale is not None  # split after batch pin_after
    if rescale.followed is None:  # split after the last batch: snapshot the children, follow
        tally.snapshots += len(orders_table.snapshot(spark))
        rescale.followed = audit.follow_split(rescale.parent, rescale.sealed_at)
    return takeover, pinned, rescale


def _split_hottest(orders_table: Table, after_batch: int) -> Rescale:
    """Split the active bucket with the most records (the lowest such id on a tie)."""
    ends = orders_table.end_offsets()
    hottest = max(orders_table.buckets, key=lambda tb: (ends[tb], -tb.bucket))
    warehouse = orders_table.context.warehouse
    before = {e.path for e in warehouse.list(orders_table.data_dir)}
    children = orders_table.split_bucket(hottest)
    copied = len({e.path for e in warehouse.list(orders_table.data_dir)} - before)
    sealed_at = orders_table.refresh().layout.sealed_at(hottest.bucket)
    return Rescale(hottest, children, sealed_at, after_batch, copied)


def _write_batch(
    conn: Connection, orders_table: Table, orders: Orders, size: int, index: int, tally: Tally
) -> None:
    """Upsert one batch of orders; after the first batch, delete a share of the live ones."""
    now = pd.Timestamp(conn.server_time())
    ids = orders.upserts(size, first=index == 0)
    orders_table.append(orders.frame(ids, now))
    tally.written += len(ids)
    if index > 0:
        gone = orders.deletes()
        if len(gone):
            orders_table.delete(pd.DataFrame({"order_id": gone.astype(np.int64)}))
        tally.deleted += len(gone)


def _aftermath(
    conn: Connection,
    spark: SparkSession,
    orders_table: Table,
    group_id: str,
    lease: KvSnapshotLease,
    audit: ConsumerGroup,
) -> Aftermath:
    """The group's lag and health, then retention's plan and run, then a read through the
    lease again."""
    name = orders_table.name
    sample(orders_table.context, force=True)  # the lag the demo leaves, in the history too
    lag = conn.describe_group(group_id)
    health = conn.group_status(group_id)
    plan = conn.retention_plan(name)
    report = conn.run_retention(name)
    second_read = summarize(lease.read(spark, orders_table))
    lease_info = lease.info()
    log_left = orders_table.beginning_offsets()
    committed = audit.committed()
    return Aftermath(lag, health, plan, report, second_read, lease_info, log_left, committed)


def checks(o: Outcome) -> dict[str, bool]:
    """What the demo checks, by what it says; all must hold."""
    lag, takeover, split = o.after.lag, o.takeover, o.rescale
    shares = sorted(len(r["buckets"]) for r in o.joined)
    spread = sorted(b for r in o.joined for b in r["buckets"]) == list(range(BUCKETS))
    log_left, committed = o.after.log_left, o.after.committed
    return {
        "read through the lease = state when pinned": o.pinned.first_read
        == expected_summary(o.pinned.expected),
        "same read after the split and retention": o.after.second_read == o.pinned.first_read,
        "latest snapshots = live keys": o.final_read == expected_summary(o.expected),
        "every bucket pinned": not o.pinned.acquired.unavailable,
        "log the group has not read is kept": all(
            log_left[tb] <= (committed[tb.bucket] or 0) for tb in log_left
        ),
        "lag = log end - committed": bool(
            (lag["lag"] == lag["log_end_offset"] - lag["current_offset"]).all()
        ),
        f"{GROUP_SIZE} consumers split the buckets, each once, balanced within 1": spread
        and shares[-1] - shares[0] <= 1,
        "the new owners resumed at the committed offsets": all(
            r["starts_at"] == r["committed"] and r["resumed_at"] in (None, r["committed"])
            for r in takeover["moved"]
        ),
        f"the group read bucket {split.parent.bucket} to its seal before its children": (
            committed[split.parent.bucket] == split.sealed_at
            and o.audit.read_parent_first(split.parent, split.sealed_at)
        ),
        "the split copied no file": split.copied == 0,
        "every record up to the committed offsets read once, in order (none skipped)": (
            o.audit.read_in_order(o.log_start, committed)
        ),
    }


def failure(o: Outcome, found: dict[str, bool]) -> str:
    """The message of a failed check: its first line names the checks that failed; the
    reads and the group's moves follow."""
    failed = [what for what, passed in found.items() if not passed]
    return (
        f"demo check failed: {'; '.join(failed)}\nthrough the lease {o.pinned.first_read} then "
        f"{o.after.second_read}, expected {expected_summary(o.pinned.expected)}; latest "
        f"{o.final_read}, expected {expected_summary(o.expected)}; "
        f"group {o.joined}, takeover {o.takeover}, split {o.rescale}"
    )


def summarize(frame: Any) -> ReadSummary:
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


def expected_summary(by_status: dict[str, int]) -> ReadSummary:
    """The summary a read of these live orders must give."""
    live = sum(by_status.values())
    return live, live, by_status


def _status_order(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)
