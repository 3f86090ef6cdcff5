"""Fuzzed arguments for the public entry points: only LeasekitError, ValueError or TypeError
come out, never a kazoo, Py4J or pyarrow exception (DESIGN section 9)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import leasekit as lk
from leasekit import spark as lks

ALLOWED = (lk.LeasekitError, ValueError, TypeError)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True), st.text(max_size=40), st.binary(max_size=20),
    st.timedeltas(min_value=timedelta(days=-10), max_value=timedelta(days=10)),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4),
    st.tuples(inner, inner),
), max_leaves=8)
buckets = st.builds(lk.TableBucket, st.one_of(st.text(max_size=12), st.just("t")),
                    st.one_of(st.integers(-3, 10), st.just(0)))
snapshot_maps = st.one_of(values, st.dictionaries(st.one_of(buckets, scalars), st.one_of(scalars, st.integers(-2, 5)),
                                                    max_size=4))

FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


SPARK_FUZZ = settings(max_examples=25, deadline=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture
def table(conn):
    t = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    t.append([{"id": 1, "v": "a"}])
    return t


def _call(func, *args, **kwargs):
    try:
        func(*args, **kwargs)
    except ALLOWED:
        pass


@FUZZ
@given(name=values, schema=values, key=values, n=values, props=values)
def test_fuzz_create_table(conn, name, schema, key, n, props):
    _call(conn.create_table, name, schema, key, n, props)


@FUZZ
@given(rows=values)
def test_fuzz_append_and_delete(table, rows):
    _call(table.append, rows)
    _call(table.delete, rows)


@FUZZ
@given(lease_id=values, duration=values, keepalive=values, ids=snapshot_maps, tables=values, bs=values)
def test_fuzz_lease_handle(conn, table, lease_id, duration, keepalive, ids, tables, bs):
    try:
        lease = conn.lease(lease_id, duration, keepalive=keepalive)
    except ALLOWED:
        return
    _call(lease.acquire, ids)
    _call(lease.acquire_latest, tables)
    _call(lease.renew, duration)
    _call(lease.release, bs)
    _call(lease.drop)


@FUZZ
@given(lease_id=values, ids=snapshot_maps, duration=values, bs=values)
def test_fuzz_fluss_shaped_lease_api(conn, table, lease_id, ids, duration, bs):
    _call(conn.acquire_kv_snapshot_lease, lease_id, ids, duration)
    _call(conn.renew_kv_snapshot_lease, lease_id, duration)
    _call(conn.release_kv_snapshot_lease, lease_id, bs)
    _call(conn.drop_kv_snapshot_lease, lease_id)


@FUZZ
@given(name=values, mapping=values, dry=values, force=values)
def test_fuzz_admin(conn, table, name, mapping, dry, force):
    _call(conn.table, name)
    _call(conn.update_settings, mapping)
    _call(conn.retention_plan, name)
    _call(conn.run_retention, name, dry_run=dry if not isinstance(dry, bool) else True)
    _call(conn.drop_table, name if name != "t" else "nope", force=force)
    _call(table.snapshots, name)


@FUZZ
@given(zookeeper=values, namespace=values, auth=values, timeout=values)
def test_fuzz_connect_arguments(tmp_path, zookeeper, namespace, auth, timeout):
    from leasekit.durations import parse_duration

    if zookeeper is None or (isinstance(zookeeper, str) and zookeeper.strip()):
        zookeeper = "127.0.0.1:1"  # no embedded server, no address made up by the fuzzer
    try:
        if parse_duration(timeout) > timedelta(seconds=1):
            timeout = "1s"  # a valid long timeout would only make the unreachable server slow
    except ALLOWED:
        pass
    try:
        lk.connect(zookeeper, str(tmp_path / "wh"), namespace=namespace, auth=auth, timeout=timeout).close()
    except ALLOWED:
        pass


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
    # §9, §6.4: read_changes refuses what is not a Table or not a group id with typed errors
    table = snapshotted if target == "the table" else target
    _call(lks.read_changes, spark, table, group)


@SPARK_FUZZ
@given(target=st.one_of(values, st.just("the table")), ids=snapshot_maps, offsets=st.one_of(st.none(), snapshot_maps),
       df=values)
def test_fuzz_spark_functions(spark, snapshotted, target, ids, offsets, df):
    # DESIGN §9 fuzz, §6.4: leasekit.spark takes a Table object; anything else is a TypeError
    table = snapshotted if target == "the table" else target
    _call(lks.read_snapshots, spark, table, ids)
    _call(lks.read_at, spark, table, offsets)
    _call(lks.write, df, snapshotted)  # df is never a DataFrame here: refused before any Spark job
    frame = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    if table is not snapshotted:
        _call(lks.write, frame, table)


@pytest.mark.parametrize("call", ["read_snapshots", "read_at", "write"])
def test_spark_functions_given_a_table_name_say_what_to_pass(spark, snapshotted, call):
    # DESIGN §6.4 (table is a Table object), §6.10 (TypeError where the type is wrong)
    frame = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    calls = {"read_snapshots": lambda: lks.read_snapshots(spark, "t", {lk.TableBucket("t", 0): 1}),
             "read_at": lambda: lks.read_at(spark, "t"),
             "write": lambda: lks.write(frame, "t")}
    with pytest.raises(lk.InvalidTypeError, match=r"table must be a Table object, e.g. conn.table\('t'\), not str"):
        calls[call]()


offset_maps = st.one_of(values, st.dictionaries(st.one_of(buckets, scalars),
                                                st.one_of(scalars, st.integers(-2, 50),
                                                          st.builds(lk.OffsetAndMetadata, st.integers(-2, 50),
                                                                    st.one_of(st.text(max_size=20), scalars))),
                                                max_size=4))


@FUZZ
@given(group=values, reset=values, auto=values, interval=values, records=values, assignor=values, timeout=values,
       listener=st.one_of(st.none(), values, st.just(lk.BucketRebalanceListener())))
def test_fuzz_consumer_construction(conn, table, group, reset, auto, interval, records, assignor, timeout, listener):
    # §9: conn.consumer and every keyword
    try:
        consumer = conn.consumer("t", group_id=group, auto_offset_reset=reset, enable_auto_commit=auto,
                                 auto_commit_interval=interval, max_poll_records=records, assignor=assignor,
                                 session_timeout=timeout, max_poll_interval=timeout, listener=listener)
    except ALLOWED:
        return
    _call(consumer.poll)
    consumer.close()


@FUZZ
@given(offsets=offset_maps, tb=st.one_of(buckets, values), offset=values, timeout=values, limit=values,
       times=offset_maps, tbs=st.lists(st.one_of(buckets, scalars), max_size=3))
def test_fuzz_consumer_calls(conn, table, offsets, tb, offset, timeout, limit, times, tbs):
    # §9: every public method of a consumer
    with conn.consumer("t", group_id="fuzz", auto_offset_reset="earliest", enable_auto_commit=False) as c:
        c.poll(max_records=1)  # joins: its buckets are assigned
        _call(c.commit, offsets)
        _call(c.committed, tb)
        _call(c.seek, tb, offset)
        _call(c.position, tb)
        _call(c.poll, timeout="0s", max_records=limit)
        _call(c.poll, timeout=timeout if isinstance(timeout, (int, float)) and abs(timeout) < 0.01 else "0s")
        _call(c.getone, timeout="0s")
        _call(c.seek_to_beginning, *[x for x in tbs if not isinstance(x, lk.TableBucket)] or tbs)
        _call(c.seek_to_end, *tbs)
        _call(c.seek_to_committed, *tbs)
        _call(c.beginning_offsets, tbs)
        _call(c.end_offsets, tbs)
        _call(c.offsets_for_times, times)
        _call(c.highwater, tb)
        _call(c.last_poll_timestamp, tb)
        _call(c.pause, *tbs)
        _call(c.resume, *tbs)
        _call(c.assign, tbs)
        _call(c.subscribe, tbs, listener=offset)
        _call(c.poll)
        _call(c.unsubscribe)


regexes = st.one_of(st.none(), values, st.text(alphabet="^$.*+?()[]{}|\\d_tx0-9,", max_size=12))


@FUZZ
@given(tables=st.one_of(values, st.lists(st.one_of(st.just("t"), scalars), max_size=3)), pattern=regexes,
       listener=st.one_of(st.none(), values, st.just(lk.BucketRebalanceListener())), group=st.sampled_from([None, "fz"]))
def test_fuzz_subscribe(conn, table, tables, pattern, listener, group):
    # §9, C17: subscribe with any tables, pattern and listener: a clear error, or a subscription
    # whose assignment (once polled) has buckets of the tables it names or matches only
    with conn.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        try:
            c.subscribe(tables, pattern=pattern, listener=listener)
        except ALLOWED:
            assert c.assignment() == set()
            return
        for _ in range(20):
            c.poll(timeout="0.05s")
            if c.assignment() or group is None:
                break
        if pattern is not None:
            import re

            regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
            assert c.assignment() == (set(table.buckets) if regex.fullmatch("t") else set())
        else:
            assert c.assignment() == set(table.buckets)
        _call(c.subscribe, tables, pattern=pattern, listener=listener)
        _call(c.unsubscribe)


@FUZZ
@given(group=values, to=values, shift=values, tables=values, bkts=values, dry=values)
def test_fuzz_consumer_admin(conn, table, group, to, shift, tables, bkts, dry):
    # §9: the administration calls
    _call(conn.describe_group, group)
    _call(conn.group_members, group)
    _call(conn.group_status, group, stop_after=to, stall_after=shift)
    _call(conn.reset_offsets, group, to=to, shift_by=shift, tables=tables, buckets=bkts, dry_run=dry)
    _call(conn.delete_offsets, group, bkts)
    _call(conn.delete_group, group)
