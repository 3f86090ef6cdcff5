"""Fuzzed arguments for the public entry points: only LeasekitError, ValueError or TypeError
come out, never a kazoo, Py4J or pyarrow exception (DESIGN section 9)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import leasekit as lk
from leasekit import spark as lks

ALLOWED = (lk.LeasekitError, ValueError, TypeError)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.binary(max_size=20),
    st.timedeltas(min_value=timedelta(days=-10), max_value=timedelta(days=10)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=10), inner, max_size=4),
        st.tuples(inner, inner),
    ),
    max_leaves=8,
)
buckets = st.builds(
    lk.TableBucket,
    st.one_of(st.text(max_size=12), st.just("t")),
    st.one_of(st.integers(-3, 10), st.just(0)),
)
snapshot_maps = st.one_of(
    values,
    st.dictionaries(
        st.one_of(buckets, scalars), st.one_of(scalars, st.integers(-2, 5)), max_size=4
    ),
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


SPARK_FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


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
@given(
    lease_id=values, duration=values, keepalive=values, ids=snapshot_maps, tables=values, bs=values
)
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
        lk.connect(
            zookeeper, str(tmp_path / "wh"), namespace=namespace, auth=auth, timeout=timeout
        ).close()
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
@given(
    target=st.one_of(values, st.just("the table")),
    ids=snapshot_maps,
    offsets=st.one_of(st.none(), snapshot_maps),
    df=values,
)
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
    calls = {
        "read_snapshots": lambda: lks.read_snapshots(spark, "t", {lk.TableBucket("t", 0): 1}),
        "read_at": lambda: lks.read_at(spark, "t"),
        "write": lambda: lks.write(frame, "t"),
    }
    with pytest.raises(
        lk.InvalidTypeError, match=r"table must be a Table object, e.g. conn.table\('t'\), not str"
    ):
        calls[call]()


offset_maps = st.one_of(
    values,
    st.dictionaries(
        st.one_of(buckets, scalars),
        st.one_of(
            scalars,
            st.integers(-2, 50),
            st.builds(
                lk.OffsetAndMetadata, st.integers(-2, 50), st.one_of(st.text(max_size=20), scalars)
            ),
        ),
        max_size=4,
    ),
)


@FUZZ
@given(
    group=values,
    reset=values,
    auto=values,
    interval=values,
    records=values,
    assignor=values,
    timeout=values,
    listener=st.one_of(st.none(), values, st.just(lk.BucketRebalanceListener())),
)
def test_fuzz_consumer_construction(
    conn, table, group, reset, auto, interval, records, assignor, timeout, listener
):
    # §9: conn.consumer and every keyword
    try:
        consumer = conn.consumer(
            "t",
            group_id=group,
            auto_offset_reset=reset,
            enable_auto_commit=auto,
            auto_commit_interval=interval,
            max_poll_records=records,
            assignor=assignor,
            session_timeout=timeout,
            max_poll_interval=timeout,
            listener=listener,
        )
    except ALLOWED:
        return
    _call(consumer.poll)
    consumer.close()


@FUZZ
@given(
    offsets=offset_maps,
    tb=st.one_of(buckets, values),
    offset=values,
    timeout=values,
    limit=values,
    times=offset_maps,
    tbs=st.lists(st.one_of(buckets, scalars), max_size=3),
)
def test_fuzz_consumer_calls(conn, table, offsets, tb, offset, timeout, limit, times, tbs):
    # §9: every public method of a consumer
    with conn.consumer(
        "t", group_id="fuzz", auto_offset_reset="earliest", enable_auto_commit=False
    ) as c:
        c.poll(max_records=1)  # joins: its buckets are assigned
        _call(c.commit, offsets)
        _call(c.committed, tb)
        _call(c.seek, tb, offset)
        _call(c.position, tb)
        _call(c.poll, timeout="0s", max_records=limit)
        _call(
            c.poll,
            timeout=timeout if isinstance(timeout, (int, float)) and abs(timeout) < 0.01 else "0s",
        )
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
@given(
    tables=st.one_of(values, st.lists(st.one_of(st.just("t"), scalars), max_size=3)),
    pattern=regexes,
    listener=st.one_of(st.none(), values, st.just(lk.BucketRebalanceListener())),
    group=st.sampled_from([None, "fz"]),
)
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
    _call(
        conn.reset_offsets, group, to=to, shift_by=shift, tables=tables, buckets=bkts, dry_run=dry
    )
    _call(conn.delete_offsets, group, bkts)
    _call(conn.delete_group, group)


# -- oversized numbers: durations, timeouts, offsets up to 2**70 (§9) --------------------------

huge_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -(2**63), -(2**70)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, -1e300, 1e308, float("inf"), float("-inf"), float("nan")]),
)
duration_texts = st.one_of(
    st.from_regex(r"[0-9]{1,30}(\.[0-9]{1,6})?(ms|s|m|h|d)", fullmatch=True),
    st.sampled_from(
        [
            "999999999999d",
            "9" * 400 + "s",
            "1" * 5000 + "d",
            "1e300s",
            "inf",
            "nan",
            "-1s",
            "100000d",
            "100001d",
            f"{2**63}ms",
            f"{2**64}ms",
        ]
    ),
)
durations = st.one_of(
    huge_numbers,
    duration_texts,
    st.timedeltas(),
    st.sampled_from([0, 1, 0.5, "0s", "1s", "500ms", "2h"]),
)
offsets = st.one_of(huge_numbers, st.integers(-3, 50))
BIG_FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _short(value, limit=0.02):
    """``value`` if it is not a valid wait longer than ``limit`` seconds (a valid long timeout,
    or one beyond MAX_DURATION, which waits until records come, would only make the test
    wait), else "0s"."""
    from leasekit.durations import parse_wait

    try:
        return "0s" if parse_wait(value) > limit else value
    except ALLOWED:
        return value


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(durations, values))
def test_fuzz_parse_duration(value):
    # §9: a duration is a timedelta within MAX_DURATION that converts to ms, or a typed error
    from leasekit.durations import MAX_DURATION, parse_duration, to_ms

    try:
        result = parse_duration(value)
    except lk.InvalidDurationError:
        return
    assert timedelta(0) <= result <= MAX_DURATION
    assert 0 <= to_ms(result) < 2**63


@BIG_FUZZ
@given(timeout=durations)
@example(timeout="30d")
@example(timeout="100000d")
@example(timeout="999999999999d")
def test_fuzz_connect_timeout(zookeeper, warehouse, namespace, timeout):
    # §9, §6.1: a reachable server; any timeout connects or is refused with a typed error
    try:
        conn = lk.connect(zookeeper, warehouse, namespace=namespace, timeout=timeout)
    except ALLOWED:
        return
    with conn:
        conn.tables()
        conn.settings()


@BIG_FUZZ
@given(duration=durations, renew=durations, limit=durations)
@example(duration="999999999999d", renew=timedelta.max, limit="100000d")
@example(duration="100000d", renew="100000d", limit="100000d")
def test_fuzz_lease_durations(conn, table, duration, renew, limit):
    # §9, L2: lease, renew and the Fluss-shaped calls with any duration; whatever is written
    # stays readable (expiry a datetime)
    _call(conn.update_settings, {"lease.max-duration": limit})
    try:
        lease = conn.lease("fz", duration)
    except ALLOWED:
        lease = None
    if lease is not None:
        _call(lease.acquire_latest, "t")
        _call(lease.renew, renew)
        _call(lease.drop)
    _call(conn.acquire_kv_snapshot_lease, "fk", {lk.TableBucket("t", 0): 1}, duration)
    _call(conn.renew_kv_snapshot_lease, "fk", renew)
    for info in conn.leases():
        assert info.expires_at.year >= 2026
    _call(conn.drop_kv_snapshot_lease, "fk")


@BIG_FUZZ
@given(
    key=st.sampled_from(["lease.max-duration", "lease.expiry-grace", "orphan.min-age"]),
    value=st.one_of(durations, offsets, values),
    replace=st.booleans(),
)
@example(key="lease.expiry-grace", value="999999999999d", replace=False)
@example(key="orphan.min-age", value=timedelta.max, replace=True)
def test_fuzz_update_settings(conn, table, key, value, replace):
    # §9, §6.1: a stored setting always reads back, and retention can use it
    _call(conn.update_settings, {key: value}, replace=replace)
    conn.settings()
    conn.retention_plan()
    conn.expire_leases()


@BIG_FUZZ
@given(
    key=st.sampled_from(
        ["log.retention", "log.segment.max-rows", "kv.snapshot.num-retained", "log.retention.bytes"]
    ),
    value=st.one_of(durations, offsets, st.builds(str, offsets), values),
)
@example(key="log.retention", value="999999999999d")
@example(key="log.retention", value=timedelta.max)
@example(key="log.segment.max-rows", value=2**64)
@example(key="log.retention.bytes", value=str(2**63))
def test_fuzz_table_properties(conn, table, key, value):
    # §9, §7.5: a table created with any property value is readable and retention plans it
    try:
        created = conn.create_table(
            "p", "id BIGINT, v STRING", "id", buckets=1, properties={key: value}
        )
    except ALLOWED:
        assert conn.tables() == ["t"]
        return
    try:
        created.append([{"id": 1, "v": "a"}])
        assert key in conn.table("p").properties
        conn.retention_plan("p")
    finally:
        conn.drop_table("p", force=True)


@BIG_FUZZ
@given(
    interval=durations,
    session=durations,
    poll_interval=durations,
    records=offsets,
    group=st.sampled_from([None, "fz"]),
)
@example(interval="999999999999d", session="1s", poll_interval="1s", records=1, group=None)
@example(interval="1s", session="30d", poll_interval=timedelta.max, records=2**64, group="fz")
def test_fuzz_consumer_durations(conn, table, interval, session, poll_interval, records, group):
    # §9, §6.5: every duration keyword of conn.consumer, and max_poll_records
    try:
        consumer = conn.consumer(
            "t",
            group_id=group,
            auto_commit_interval=interval,
            session_timeout=session,
            max_poll_interval=poll_interval,
            max_poll_records=records,
            enable_auto_commit=False,
        )
    except ALLOWED:
        return
    with consumer:
        consumer.poll(timeout="0s")


@BIG_FUZZ
@given(offset=offsets, times=offsets)
def test_fuzz_seek_and_offsets_for_times(conn, table, offset, times):
    # §9, C6, C7
    with conn.consumer("t", auto_offset_reset="earliest") as c:
        tb = lk.TableBucket("t", 0)
        _call(c.seek, tb, offset)
        _call(c.offsets_for_times, {tb: times})
        c.poll(timeout="0s")


@BIG_FUZZ
@given(timeout=durations, records=offsets)
@example(timeout="999999999999d", records=2**64)
@example(timeout=float("nan"), records=2**63)
def test_fuzz_poll_timeouts(conn, table, timeout, records):
    # §9, §6.5: poll(timeout, max_records) and getone(timeout)
    with conn.consumer("t", auto_offset_reset="earliest") as c:
        _call(c.poll, timeout=_short(timeout), max_records=records)
        _call(c.getone, timeout=_short(timeout))


@BIG_FUZZ
@given(offset=offsets, metadata=st.one_of(st.text(max_size=8), values))
def test_fuzz_commit_offsets(conn, table, offset, metadata):
    # §9, C2, C3: a commit of any offset is stored or refused with a typed error
    with conn.consumer(
        "t", group_id="fz", auto_offset_reset="earliest", enable_auto_commit=False
    ) as c:
        c.poll(max_records=1)
        tb = lk.TableBucket("t", 0)
        _call(c.commit, {tb: offset})
        _call(c.commit, {tb: lk.OffsetAndMetadata(offset, metadata)})
        c.committed(tb)
    conn.describe_group("fz")


@pytest.fixture
def committed(conn, table):
    """Group "fz" with committed offsets and no live member."""
    with conn.consumer(
        "t", group_id="fz", auto_offset_reset="earliest", enable_auto_commit=False
    ) as c:
        while not c.assignment():
            c.poll(timeout="0.05s")
        c.commit({tb: 0 for tb in c.assignment()})
    return "fz"


@BIG_FUZZ
@given(
    to=st.one_of(offsets, durations, st.sampled_from(["earliest", "latest", "current"])),
    shift=offsets,
)
def test_fuzz_reset_offsets_dry_run(conn, committed, to, shift):
    # §9, C13: a dry run with any target or shift is a plan or a typed error
    _call(conn.reset_offsets, committed, to=to, dry_run=True)
    _call(conn.reset_offsets, committed, shift_by=shift, dry_run=True)


@BIG_FUZZ
@given(stop_after=durations, stall_after=durations)
@example(stop_after="999999999999d", stall_after=timedelta.max)
def test_fuzz_group_status_thresholds(conn, committed, stop_after, stall_after):
    # §9, §6.6
    _call(conn.group_status, committed, stop_after=stop_after, stall_after=stall_after)


@BIG_FUZZ
@given(interval=durations)
@example(interval="999999999999d")
@example(interval=timedelta.max)
def test_fuzz_janitor_interval(conn, interval):
    # §9, §6.7: with the stop event set, run returns at once, or refuses the interval
    import threading

    from leasekit import janitor

    stop = threading.Event()
    stop.set()
    _call(janitor.run, conn, interval, stop)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(offset=st.one_of(huge_numbers, st.integers(-3, -1), st.integers(3, 50)))
def test_fuzz_read_at_offsets(spark, snapshotted, offset):
    # §9, §6.4: offsets outside [0, end] are refused before any Spark job
    _call(lks.read_at, spark, snapshotted, {lk.TableBucket("t", 0): offset})
