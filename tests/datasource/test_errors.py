"""The errors a person meets first through ``format("leasekit")`` (D1, D2): options, namespace,
table and lease are checked when the read is loaded, before Spark plans anything, and Spark
reports leasekit's typed error as one line right after its own words, with no Python
traceback."""

from __future__ import annotations

import time
import uuid

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException

import leasekit as lk
import leasekit.spark
from leasekit.connection import namespaces

SPARK_SAYS = "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
"""What Spark puts before any error of a data source's ``schema()``: no data source can drop it."""


def said(failed: pytest.ExceptionInfo, spark_says: str = SPARK_SAYS) -> str:
    """What leasekit said: the error's first line after Spark's own words, once it is checked
    that the error is short and carries no traceback."""
    text = str(failed.value)
    assert "Traceback" not in text, text
    first = text.splitlines()[0]
    assert spark_says in first, text
    return first.split(spark_says, 1)[1]


@pytest.fixture
def source(spark, zookeeper, warehouse, namespace):
    """``spark.read`` (or ``spark.readStream``) of ``format("leasekit")`` in the test's
    namespace, with options."""
    leasekit.spark.register(spark)

    def load(table: str = "orders", stream: bool = False, **options: str):
        reader = (spark.readStream if stream else spark.read).format("leasekit")
        given = {"zookeeper": zookeeper, "warehouse": warehouse, "namespace": namespace}
        return reader.options(**{**given, **options}).load(table)

    return load


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    table.append([{"id": i, "v": "x"} for i in range(10)])
    return table


def test_a_bad_option_fails_load_with_leasekits_sentence(source, orders):
    # D1: refused when the read is loaded, not when a query runs it; the error is one line
    with pytest.raises(AnalysisException) as failed:
        source(colour="red")
    assert said(failed).startswith(
        "leasekit.errors.InvalidArgumentError: format('leasekit') has no option 'colour' for "
        "batch reads (options: table, zookeeper, warehouse, namespace, lease, snapshots"
    )
    assert len(str(failed.value)) < 400


def test_a_missing_table_is_named_with_its_namespace_and_the_tables_there(
    source, orders, namespace
):
    # D1: TableNotFoundError names the namespace looked in and what it holds
    with pytest.raises(AnalysisException) as failed:
        source("ordres")
    assert said(failed) == (
        f"leasekit.errors.TableNotFoundError: table 'ordres' does not exist in namespace "
        f"{namespace!r} (its tables: orders)"
    )


def test_a_missing_namespace_is_refused_naming_those_there_and_is_not_made(
    source, orders, zookeeper, warehouse, namespace
):
    # D1: a mistyped namespace is not created by a read; the error names the namespaces that
    # the warehouse holds
    typo = f"nope-{uuid.uuid4().hex[:8]}"
    with pytest.raises(AnalysisException) as failed:
        source(namespace=typo)
    assert said(failed) == (
        f"leasekit.errors.TableNotFoundError: table 'orders' does not exist in namespace "
        f"{typo!r}: the namespace does not exist in the warehouse {warehouse} (its namespaces: "
        f"{namespace})"
    )
    with pytest.raises(AnalysisException, match="the namespace does not exist"):
        source(namespace=typo, stream=True, group="etl")
    assert namespaces(zookeeper, warehouse) == [namespace]


def test_a_lease_never_made_is_not_found_and_an_expired_one_expired(spark, conn, source, orders):
    # D1, L8, L12: as lease.read says it: a lease never made is LeaseNotFoundError (not
    # "expired or dropped"); one that lived and expired is LeaseExpiredError
    with pytest.raises(AnalysisException) as failed:
        source(lease="never-made")
    assert said(failed).startswith(
        "leasekit.errors.LeaseNotFoundError: lease 'never-made' does not exist"
    )
    with pytest.raises(lk.LeaseNotFoundError):
        conn.lease("never-made").read(spark, "orders")
    orders.snapshot(spark)
    conn.lease("short", "1s").acquire_latest("orders")  # expiry on the ZooKeeper clock: Spark's
    time.sleep(1.3)  # planner has its own connection, which the test's clock does not reach
    with pytest.raises(AnalysisException) as failed:
        source(lease="short")
    assert said(failed).startswith("leasekit.errors.LeaseExpiredError: lease 'short' expired at")


def test_bad_stream_options_fail_load_with_leasekits_sentence(source, orders):
    # D2: a stream's options are checked when it is loaded, before the query starts
    with pytest.raises(AnalysisException) as failed:
        source(stream=True, group="etl", startingOffsets="soon")
    assert said(failed) == (
        "leasekit.errors.InvalidArgumentError: startingOffsets must be one of committed, "
        "earliest, latest, not 'soon'"
    )
    with pytest.raises(AnalysisException) as failed:
        source(stream=True, startingOffsets="earliest")
    assert said(failed).startswith(
        "leasekit.errors.InvalidArgumentError: option 'startingoffsets' is for streaming reads, "
        "and a stream of format('leasekit') reads as a consumer group: give it one"
    )
    with pytest.raises(AnalysisException, match="option 'lease' is for batch reads"):
        source(stream=True, group="etl", lease="q3")


def test_a_stream_without_a_group_fails_its_query_with_leasekits_sentence_alone(
    source, orders, tmp_path
):
    # D2, D3: nothing tells load() that a read with no option but its table is a stream; its
    # query fails at the start with the one line, not PySpark's UnboundLocalError of 'reader'
    query = (
        source(stream=True)
        .writeStream.foreachBatch(lambda df, batch_id: None)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException) as failed:
            query.awaitTermination(60)
    finally:
        query.stop()
    text = str(failed.value)
    assert "UnboundLocalError" not in text
    assert said(failed, "Failed when Python streaming data source perform initialOffset: ") == (
        "leasekit.errors.InvalidArgumentError: a stream of format('leasekit') reads as a "
        "consumer group: give it one, e.g. "
        "spark.readStream.format('leasekit').option('group', 'etl').load('orders')"
    )
