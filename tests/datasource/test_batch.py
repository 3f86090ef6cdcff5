"""Batch reads of ``format("leasekit")`` (D1): the union read, lease reads with their checks, the
latest or chosen snapshots, across deletes, log tails and a rescale; pushed filters prune
buckets; bad options fail with ``InvalidArgumentError``."""

from __future__ import annotations

import re
import time

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThan, In

import leasekit as lk
from leasekit import spark as lks
from leasekit.datasource.batch import check_batch, plan_parts
from leasekit.datasource.options import parse_options

TB = lk.TableBucket
FILTER = re.compile(r"\bFilter\b")
"""A Filter node of a physical plan (not its scan's ``RuntimeFilters``)."""


@pytest.fixture
def fmt(spark, zookeeper, warehouse, namespace):
    """``spark.read.format("leasekit")`` pointed at the test's namespace, with options."""
    lks.register(spark)

    def read(table: str = "orders", **options: str):
        reader = (
            spark.read.format("leasekit")
            .option("zookeeper", zookeeper)
            .option("warehouse", warehouse)
            .option("namespace", namespace)
        )
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load(table)

    return read


@pytest.fixture
def opts(zookeeper, warehouse, namespace):
    def make(table: str = "orders", **options: str):
        given = {"path": table, "zookeeper": zookeeper, "warehouse": warehouse}
        return parse_options({**given, "namespace": namespace, **options})

    return make


def rows(df):
    return sorted(tuple(r) for r in df.collect())


@pytest.fixture
def orders(conn, spark):
    """Three buckets: two snapshots, upserts and deletes after them (a log tail)."""
    table = conn.create_table("orders", "id BIGINT, status STRING, qty INT", "id", buckets=3)
    table.append([{"id": i, "status": "new", "qty": i} for i in range(120)])
    table.snapshot(spark)
    table.append([{"id": i, "status": "paid", "qty": -i} for i in range(0, 120, 3)])
    table.delete([{"id": i} for i in range(0, 120, 7)])
    table.snapshot(spark)
    table.append([{"id": i, "status": "sent", "qty": 1} for i in range(0, 140, 5)])
    table.delete([{"id": i} for i in range(1, 120, 11)])
    table.append([{"id": 11, "status": "back", "qty": 2}])  # deleted, then written again
    return table


def test_union_read_equals_read_at_across_a_rescale(conn, spark, fmt, orders):
    # D1, S1, K3: the default read is read_at at the end offsets now
    assert rows(fmt()) == rows(lks.read_at(spark, orders))
    orders.split_bucket(1)
    orders.append([{"id": i, "status": "split", "qty": 3} for i in range(0, 160, 4)])
    orders.delete([{"id": i} for i in range(2, 160, 9)])
    before = rows(fmt())
    assert before == rows(lks.read_at(spark, orders))
    orders.snapshot(spark)  # the new buckets' first snapshots materialise their parent's share
    orders.append([{"id": i, "status": "after", "qty": 4} for i in range(0, 160, 6)])
    assert rows(fmt()) == rows(lks.read_at(spark, orders))
    # D1: read_snapshots of the latest (sealed buckets' too, as read_snapshots reads them)
    latest = orders.latest_snapshots()
    assert rows(fmt(snapshots="latest")) == rows(lks.read_snapshots(spark, orders, latest))
    chosen = {TB("orders", 0): 1, TB("orders", 2): 2}
    ids = '{"0": 1, "2": 2}'
    assert rows(fmt(snapshots=ids)) == rows(lks.read_snapshots(spark, orders, chosen))


def test_tasks_are_per_file_and_pushed_keys_prune_buckets(conn, spark, fmt, opts, orders, capsys):
    # D1: one task per snapshot file and per bucket's log tail; id = 5 plans one bucket's
    orders.split_bucket(0)
    orders.append([{"id": i, "status": "split", "qty": 3} for i in range(0, 90, 2)])
    every = plan_parts(conn, opts())
    snaps = {s.table_bucket.bucket: s for s in orders.snapshots()}
    files = sum(len(snaps[b].files) for b in (0, 1, 2))
    assert sum(not p.log for p in every) == files
    assert all(len(p.rows) == 1 for p in every if not p.log)
    one = plan_parts(conn, opts(), [EqualTo(("id",), 5)])
    assert 0 < len(one) < len(every)
    assert plan_parts(conn, opts(), [In(("id",), (5, 6)), EqualTo(("id",), 7)]) == []
    assert len(plan_parts(conn, opts(), [GreaterThan(("id",), 5)])) == len(every)
    # the pushed filters give Spark's rows, and Spark does not filter again
    expected = rows(lks.read_at(spark, orders).where("id in (5, 6, 30) and qty > 0"))
    df = fmt().where("id in (5, 6, 30) and qty > 0")
    assert rows(df) == expected
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "BatchScan leasekit" in plan and not FILTER.search(plan), plan
    capsys.readouterr()
    df.explain("formatted")
    (pushed,) = [x for x in capsys.readouterr().out.splitlines() if "PushedFilters" in x]
    assert "In(id" in pushed and "GreaterThan(qty" in pushed, pushed
    kept = fmt().where("status like '%ai%'")  # not pushed: Spark filters
    assert FILTER.search(kept._jdf.queryExecution().executedPlan().toString())
    assert rows(kept) == rows(lks.read_at(spark, orders).where("status like '%ai%'"))


def test_composite_key_needs_every_key_column_to_prune(conn, spark, fmt, opts):
    # D1: equality on all key columns prunes; on part of the key it only filters rows
    table = conn.create_table("pairs", "a INT, b STRING, v INT", ["a", "b"], buckets=4)
    table.append([{"a": i % 5, "b": f"k{i}", "v": i} for i in range(60)])
    table.snapshot(spark)
    table.append([{"a": i % 5, "b": f"k{i}", "v": -i} for i in range(0, 60, 4)])
    every = plan_parts(conn, opts("pairs"))
    pinned = plan_parts(conn, opts("pairs"), [EqualTo(("a",), 3), In(("b",), ("k3", "k8"))])
    assert len(pinned) < len(every)
    assert len(plan_parts(conn, opts("pairs"), [EqualTo(("a",), 3)])) == len(every)
    df = fmt("pairs").where("a = 3 and b in ('k3', 'k8', 'k13')")
    assert rows(df) == rows(lks.read_at(spark, table).where("a = 3 and b in ('k3', 'k8', 'k13')"))
    assert rows(fmt("pairs")) == rows(lks.read_at(spark, table))


def test_lease_reads_and_their_errors(conn, spark, fmt, orders):
    # D1, L12: = lease.read, with the same checks and errors
    lease = conn.lease("q3-report", "1h")
    lease.acquire_latest("orders")
    assert rows(fmt(lease="q3-report")) == rows(lease.read(spark, "orders"))
    lease.release([TB("orders", 2)])
    with pytest.raises(Exception, match="NotPinnedError") as failed:
        fmt(lease="q3-report").collect()
    assert "does not pin 1 of 3 buckets" in str(failed.value)
    partial = fmt(lease="q3-report", allowPartial="true")
    assert rows(partial) == rows(lease.read(spark, "orders", allow_partial=True))
    lease.drop()
    # L8: by id alone a dropped lease does not exist; the handle that held it says it is gone
    with pytest.raises(Exception, match="LeaseNotFoundError") as failed:
        fmt(lease="q3-report").collect()
    assert "does not exist: it was never acquired, or it was dropped" in str(failed.value)
    with pytest.raises(lk.LeaseExpiredError):
        lease.read(spark, "orders")


def test_expired_lease_is_refused(conn, spark, fmt, orders):
    # D1, L12: the data source's own connection decides expiry on the ZooKeeper clock (the
    # test's injected clock does not reach Spark's planner), so the lease lives 1 s
    lease = conn.lease("short", "1s")
    lease.acquire_latest("orders")
    time.sleep(1.3)
    with pytest.raises(Exception, match="LeaseExpiredError") as failed:
        fmt(lease="short").collect()
    assert "'short' expired at" in str(failed.value)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"group": "etl"}, "option 'group' is for streaming reads"),
        ({"startingOffsets": "earliest"}, "option 'startingoffsets' is for streaming reads"),
        ({"maxRecordsPerTrigger": "10"}, "option 'maxrecordspertrigger' is for streaming"),
        ({"colour": "red"}, "has no option 'colour'"),
        ({"lease": "q3", "snapshots": "latest"}, "options 'lease' and 'snapshots'"),
        ({"allowPartial": "yes", "lease": "q3"}, "must be true or false"),
        ({"allowPartial": "true"}, "applies to lease reads only"),
        ({"lease": " "}, "option 'lease' is empty"),
    ],
)
def test_bad_options(opts, options, message):
    # D1: a clear InvalidArgumentError, before any I/O
    with pytest.raises(lk.InvalidArgumentError, match=message):
        check_batch(opts(**options))


def test_bad_options_reach_the_user_through_spark(conn, fmt, opts, orders):
    # D1: errors raised inside Spark carry our message and error class
    with pytest.raises(Exception, match="InvalidArgumentError") as failed:
        fmt(colour="red").collect()
    assert "has no option 'colour'" in str(failed.value)
    for bad in ("{", "[1]", '{"x": 1}', '{"0": 0}'):
        with pytest.raises(lk.InvalidArgumentError):
            plan_parts(conn, opts(snapshots=bad))
    with pytest.raises(lk.BucketNotFoundError):
        plan_parts(conn, opts(snapshots='{"9": 1}'))
    with pytest.raises(lk.SnapshotNotFoundError):
        plan_parts(conn, opts(snapshots='{"0": 9}'))
    with pytest.raises(lk.TableNotFoundError):
        plan_parts(conn, opts("nope"))


def test_plans_beside_the_native_parquet_scan_of_read_snapshots(spark, fmt, orders, capsys):
    # D1 / issue: the same query over format("leasekit") and over leasekit.spark's
    # read_snapshots (a native Parquet scan of the same snapshot files). Both scans take the
    # key filter; only the native one prunes columns, as Spark's Python Data Source API has no
    # hook for it: the data source's scan reads every column of the table.
    latest = orders.latest_snapshots()
    ours = fmt(snapshots="latest").where("id = 5").select("status")
    native = lks.read_snapshots(spark, orders, latest).where("id = 5").select("status")
    assert rows(ours) == rows(native)

    def formatted(df):
        capsys.readouterr()
        df.explain("formatted")
        return capsys.readouterr().out

    plan, native_plan = formatted(ours), formatted(native)
    assert "BatchScan leasekit" in plan and not FILTER.search(plan), plan
    (pushed,) = [x for x in plan.splitlines() if "PushedFilters" in x]
    assert "EqualTo(id" in pushed, plan  # pushed to the scan: one bucket's files planned
    assert "Scan parquet" in native_plan, native_plan
    (native_pushed,) = [x for x in native_plan.splitlines() if "PushedFilters" in x]
    assert "EqualTo(id,5)" in native_pushed, native_plan
    assert "ReadSchema: struct<id:bigint,status:string>" in native_plan  # 2 of 3 columns
    (output,) = [x for x in plan.splitlines() if x.startswith("Output") and "qty" in x]
    assert "status" in output  # the data source's scan outputs every column, qty included


@pytest.mark.parametrize(
    "bad",
    ["[" * 100_000, '{"0":' * 50_000, '{"0": ' + "[" * 100_000 + "]" * 100_000 + "}"],
)
def test_deeply_nested_snapshots_option_is_a_typed_error(conn, opts, orders, bad):
    # D1: JSON nested past the parser's depth is bad input like any other, an
    # InvalidArgumentError, never Python's RecursionError
    with pytest.raises(lk.InvalidArgumentError, match="option 'snapshots'"):
        plan_parts(conn, opts(snapshots=bad))
