"""Fuzzed arguments for leasekit.spark (docs/security.md, docs/spark.md): only LeasekitError,
ValueError or TypeError come out, never a Py4J or pyarrow exception, and offsets outside
[0, end] are refused before any Spark job."""

from __future__ import annotations

import pytest
from fuzz_cases import SPARK_FUZZ, _call, huge_numbers, snapshot_maps, values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import leasekit as lk
from leasekit import spark as lks


@pytest.fixture
def snapshotted(conn):
    """Table "t" with snapshot 1 of both buckets (written without a Spark job)."""
    from helpers import grow

    t = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    grow(t, 1)
    return t


@SPARK_FUZZ
@given(target=st.one_of(values, st.just("the table")), group=values)
def test_fuzz_read_changes(spark, snapshotted, target, group):
    # docs/security.md, docs/spark.md: read_changes refuses
    # what is not a Table or not a group id with typed errors
    table = snapshotted if target == "the table" else target
    _call(lks.read_changes, spark, table, group)


@SPARK_FUZZ
@given(
    target=st.one_of(values, st.just("the table")),
    ids=snapshot_maps,
    offsets=st.one_of(st.none(), snapshot_maps),
    df=values,
)
def test_fuzz_spark_functions(spark, snapshotted, target, ids, offsets, df):
    # fuzz (docs/security.md, docs/spark.md): leasekit.spark
    # takes a Table object; anything else is a TypeError
    table = snapshotted if target == "the table" else target
    _call(lks.read_snapshots, spark, table, ids)
    _call(lks.read_at, spark, table, offsets)
    _call(lks.write, df, snapshotted)  # df is never a DataFrame here: refused before any Spark job
    frame = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    if table is not snapshotted:
        _call(lks.write, frame, table)


@pytest.mark.parametrize("call", ["read_snapshots", "read_at", "write"])
def test_spark_functions_given_a_table_name_say_what_to_pass(spark, snapshotted, call):
    # docs/spark.md (table is a Table object), docs/concepts.md (TypeError where the type is wrong)
    frame = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    calls = {
        "read_snapshots": lambda: lks.read_snapshots(spark, "t", {lk.TableBucket("t", 0): 1}),
        "read_at": lambda: lks.read_at(spark, "t"),
        "write": lambda: lks.write(frame, "t"),
    }
    with pytest.raises(
        lk.InvalidTypeError, match=r"table must be a Table object, e.g. conn.table\('t'\), not str"
    ):
        calls[call]()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(offset=st.one_of(huge_numbers, st.integers(-3, -1), st.integers(3, 50)))
def test_fuzz_read_at_offsets(spark, snapshotted, offset):
    # docs/security.md, docs/spark.md: offsets outside [0, end] are refused before any Spark job
    _call(lks.read_at, spark, snapshotted, {lk.TableBucket("t", 0): offset})
