"""B2: ``lease.acquire_latest`` over 10,000 buckets vs bare kazoo transactions creating the
same number of empty znodes (target ratio <= 1.25, <= 1 ZooKeeper round trip per 1,000 pins).

The table has one empty snapshot per bucket, registered straight in ZooKeeper
(``seed_empty_snapshots``): acquire_latest then pins one snapshot per bucket, i.e. creates
one empty pin znode per bucket plus the lease's record and pin arrays.

The baseline creates the same number of empty znodes, with paths of the same length and
shape as the pins (``/<ns>/bare/<tid>/<bucket>/snapshots/0000000001/<lease>``), through the
connection's own kazoo client; their parents are created once, untimed, so only the leaf
creates are timed. 10,000 such creates serialize to about 1.5 MB, over ZooKeeper's 1 MB
request limit (jute.maxbuffer), so the baseline sends the fewest transactions that fit
(2 at 10,000 buckets), pipelined: all sent, then all awaited.

Each run uses a fresh lease id (dropped untimed afterwards) and a fresh leaf name for the
baseline (deleted untimed afterwards); the sides alternate which goes first. Round trips
are the connection's ``store.round_trips`` deltas (``leasekit.testing.context``) around
acquire_latest (a pipelined batch or a transaction counts once).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from leasekit.testing import context, seed_empty_snapshots

from .common import (
    ORDERS_DDL,
    Benchmark,
    Outcome,
    Timer,
    alternate,
    cpu_figures,
    instrumented,
    load_average,
    log,
    median,
    ratio_or_none,
    settle,
    spread,
    temp_warehouse,
    timed,
    zk_cpu_seconds,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit import Table
    from leasekit.connection import Connection

__all__ = ["BENCHMARK", "run", "BareCreates"]

FULL = {"buckets": 10_000, "snapshot_id": 1, "lease_duration": "1h"}
QUICK = {**FULL, "buckets": 2_000}
TABLE = "orders"

JUTE_MAXBUFFER = 0xFFFFF
"""ZooKeeper's default request size limit (jute.maxbuffer), header included."""
REQUEST_HEADER = 8  # xid and op type, before the transaction body

# Where acquire_latest spends its time (exclusive seconds per label); the rest is Python
# (validation, building results) and glue. A transaction is sent, the next one planned while
# ZooKeeper works on it, then its answer awaited.
PROFILE = {
    "zk_transactions": "leasekit.zk:ZkStore.commit",
    "zk_send_transactions": "leasekit.zk:ZkStore.submit",
    "zk_await_transactions": "leasekit.zk.txn:Pending.result",
    "plan_transactions": "leasekit.leases.acquire:plan_batch",
    "zk_read_with_clock": "leasekit.zk:ZkStore.read_with_clock",
    "zk_get_many": "leasekit.zk:ZkStore.get_many",
    "zk_get": "leasekit.zk:ZkStore.get",
    "zk_exists": "leasekit.zk:ZkStore.exists",
    "zk_server_time": "leasekit.zk:ZkStore.server_time_ms",
}


class BareCreates:
    """The baseline: the same number of empty znodes, created with bare kazoo transactions.

    Parents (``/<ns>/bare/<tid>/<bucket>/snapshots/<id>``) are created once, untimed; each
    ``create(name)`` creates the leaf ``name`` under every parent.
    """

    def __init__(self, conn: Connection, buckets: int, snapshot_id: int) -> None:
        from leasekit.zk import Create

        self.store = context(conn).store
        self.client = self.store.client
        tid = uuid.uuid4().hex  # same length as a table id
        root = context(conn).paths.root
        base = f"{root}/bare/{tid}"
        self.parents = [f"{base}/{b}/snapshots/{snapshot_id:010d}" for b in range(buckets)]
        ops = [Create(f"{root}/bare"), Create(base)]
        for b, parent in enumerate(self.parents):
            ops += [Create(f"{base}/{b}"), Create(parent.rsplit("/", 1)[0]), Create(parent)]
        self.store.commit_chunked(ops)
        self.transactions, self.request_bytes = self._fewest_transactions(f"lease-{'0' * 16}")

    def _groups(self, count: int) -> list[slice]:
        n = len(self.parents)
        bounds = [n * i // count for i in range(count + 1)]
        return [slice(a, b) for a, b in zip(bounds, bounds[1:])]

    def _fewest_transactions(self, name: str) -> tuple[int, list[int]]:
        """The fewest transactions, of equal size, whose requests fit jute.maxbuffer, and the
        request sizes (bytes) for a leaf name of ``name``'s length."""
        from kazoo.protocol.serialization import Create as KCreate
        from kazoo.protocol.serialization import Transaction
        from kazoo.security import OPEN_ACL_UNSAFE

        acl = self.client.default_acl or OPEN_ACL_UNSAFE
        for count in range(1, len(self.parents) + 1):
            sizes = [
                REQUEST_HEADER
                + len(
                    Transaction(
                        [KCreate(f"{p}/{name}", b"", acl, 0) for p in self.parents[group]]
                    ).serialize()
                )
                for group in self._groups(count)
            ]
            if max(sizes) <= JUTE_MAXBUFFER:
                return count, sizes
        raise AssertionError("unreachable: a single create always fits")

    def create(self, name: str) -> int:
        """Create ``name`` under every parent; returns how many creates failed."""
        pending = []
        for group in self._groups(self.transactions):
            txn = self.client.transaction()
            for parent in self.parents[group]:
                txn.create(f"{parent}/{name}")
            pending.append(txn.commit_async())
        failed = 0
        for result in pending:
            failed += sum(isinstance(r, BaseException) for r in result.get(timeout=60))
        return failed

    def delete(self, name: str) -> None:
        from leasekit.zk import Delete

        self.store.commit_chunked([Delete(f"{p}/{name}") for p in self.parents])


def _pins_created(conn: Connection, table: Table, lease_id: str, snapshot_id: int) -> int:
    """How many buckets of ``table`` have a pin znode of ``lease_id`` (untimed check)."""
    ctx, tid = context(conn), table.table_id
    paths = ctx.paths
    kids = ctx.store.children_many(
        [paths.snapshot(tid, b, snapshot_id) for b in range(table.num_buckets)]
    )
    return sum(1 for names in kids if names and lease_id in names)


class Sides:
    """The two timed sides of one B2 run, on one table and one baseline."""

    def __init__(
        self, conn: Connection, table: Table, bare: BareCreates, p: dict[str, Any]
    ) -> None:
        self.conn, self.table, self.bare, self.p = conn, table, bare, p
        self.n = table.num_buckets
        self.store = context(conn).store
        self.checks = {"all_pinned": True, "pins_created": True, "baseline_created": True}

    def leasekit(self, figures: dict[str, Any], timer: Timer | None) -> None:
        lease = self.conn.lease(duration=self.p["lease_duration"])
        before = self.store.round_trips
        if timer is None:
            seconds, result = timed(lambda: lease.acquire_latest(TABLE))
        else:
            with instrumented(timer, PROFILE):
                seconds, result = timed(lambda: lease.acquire_latest(TABLE))
        figures["leasekit_s"] = seconds
        figures["round_trips"] = self.store.round_trips - before
        figures["round_trips_per_1000_pins"] = figures["round_trips"] * 1000 / self.n
        self.checks["all_pinned"] &= len(result.acquired) == self.n and not result.unavailable
        if timer is None:  # the warm-up: check the pin znodes exist
            created = _pins_created(self.conn, self.table, lease.lease_id, self.p["snapshot_id"])
            self.checks["pins_created"] &= created == self.n
        lease.drop()

    def baseline(self, figures: dict[str, Any]) -> None:
        name = f"lease-{uuid.uuid4().hex[:16]}"
        figures["baseline_s"], failed = timed(lambda: self.bare.create(name))
        figures["baseline_round_trips"] = self.bare.transactions
        self.checks["baseline_created"] &= failed == 0
        self.bare.delete(name)

    def run(self, i: int, runs: int) -> dict[str, Any]:
        """One timed run: both sides, in alternating order."""
        figures: dict[str, Any] = {
            "order": alternate(i, ("leasekit", "baseline")),
            "load_average": load_average(),
        }
        timer = Timer()
        for side in figures["order"]:
            settle(None)
            cpu = zk_cpu_seconds(self.conn)
            if side == "leasekit":
                self.leasekit(figures, timer)
            else:
                self.baseline(figures)
            after = zk_cpu_seconds(self.conn)
            figures[f"{side}_cpu_s"] = (
                None if cpu is None or after is None else round(after - cpu, 3)
            )
        breakdown = {k: timer.seconds.get(k, 0.0) for k in PROFILE}
        breakdown["python_and_glue"] = figures["leasekit_s"] - sum(breakdown.values())
        figures["leasekit_breakdown_s"] = breakdown
        figures["zk_calls"] = dict(timer.calls)
        figures["ratio"] = figures["leasekit_s"] / figures["baseline_s"]
        figures["cpu_ratio"] = ratio_or_none(figures["leasekit_cpu_s"], figures["baseline_cpu_s"])
        log(
            f"B2: run {i + 1}/{runs} ({' then '.join(figures['order'])}): "
            f"leasekit {figures['leasekit_s'] * 1000:.0f} ms "
            f"({figures['round_trips']} round trips), "
            f"baseline {figures['baseline_s'] * 1000:.0f} ms, ratio {figures['ratio']:.3f}"
        )
        return figures


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    n = p["buckets"]
    with temp_warehouse("B2") as conn:
        table = conn.create_table(TABLE, ORDERS_DDL, "id", buckets=n)
        log(f"B2: seeding an empty snapshot for each of {n:,} buckets")
        seed_s, _ = timed(lambda: seed_empty_snapshots(context(conn), table, p["snapshot_id"]))
        bare = BareCreates(conn, n, p["snapshot_id"])
        log(
            f"B2: seeded in {seed_s:.1f}s; baseline needs {bare.transactions} transaction(s) of "
            f"{', '.join(f'{b:,}' for b in bare.request_bytes)} bytes (limit {JUTE_MAXBUFFER:,})"
        )
        sides = Sides(conn, table, bare, p)
        log("B2: warm-up (untimed)")
        warm: dict[str, Any] = {}
        sides.baseline(warm)
        sides.leasekit(warm, None)
        log(
            f"B2: warm-up leasekit {warm['leasekit_s'] * 1000:.0f} ms "
            f"({warm['round_trips']} round trips), baseline {warm['baseline_s'] * 1000:.0f} ms"
        )
        results = [sides.run(i, runs) for i in range(runs)]
    checks = sides.checks
    if not quick:  # at 2,000 pins the fixed reads and clock calls dominate: not the target's scale
        checks["round_trips_per_1000_pins_le_1"] = all(
            r["round_trips_per_1000_pins"] <= 1.0 for r in results
        )
    parameters = {
        **p,
        "runs": runs,
        "quick": quick,
        "baseline": f"{bare.transactions} pipelined kazoo transaction(s) of empty creates",
    }
    return Outcome(
        round(median([r["ratio"] for r in results]), 3),
        _summary(results, bare, n, seed_s),
        results,
        parameters,
        checks,
    )


def _summary(
    results: list[dict[str, Any]], bare: BareCreates, n: int, seed_s: float
) -> dict[str, Any]:
    """The headline figures over the runs: medians and spreads."""
    leasekit_s = median([r["leasekit_s"] for r in results])
    baseline_s = median([r["baseline_s"] for r in results])
    per_1000 = median([r["round_trips_per_1000_pins"] for r in results])
    breakdown = {
        k: round(median([r["leasekit_breakdown_s"][k] for r in results]), 4)
        for k in results[0]["leasekit_breakdown_s"]
    }
    plural = "s" if bare.transactions > 1 else ""
    return {
        "leasekit_s": round(leasekit_s, 4),
        "baseline_s": round(baseline_s, 4),
        "spread": spread([r["ratio"] for r in results]),
        "ratio_of_medians": round(leasekit_s / baseline_s, 3),
        "round_trips": int(median([r["round_trips"] for r in results])),
        "round_trips_per_1000_pins": round(per_1000, 3),
        "baseline_transactions": bare.transactions,
        "baseline_request_bytes": bare.request_bytes,
        "note": f"{per_1000:.2f} round trips per 1,000 pins; baseline {bare.transactions} "
        f"pipelined transaction{plural} (1 MB request limit)",
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
        **cpu_figures(results),
        "leasekit_breakdown_s": breakdown,
        "pins": n,
        "seed_s": round(seed_s, 1),
    }


BENCHMARK = Benchmark(
    id="B2",
    what=(
        "lease.acquire_latest over 10,000 buckets vs bare kazoo transactions creating as many "
        "znodes"
    ),
    metric="ratio",
    target=1.25,
    op="<=",
    run=run,
    target_note="≤ 1 ZooKeeper round trip per 1,000 pins",
    spark=False,
    default_runs=9,  # sub-second sides on a shared machine: 3 runs are mostly noise
    quick_full_size=True,  # at the quick size (2,000 pins) the fixed reads dominate
    quick_runs=5,
)
