"""Oversized numbers for the public entry points (docs/security.md): durations, timeouts and
offsets up to 2**70 give a working call or a typed error, only LeasekitError, ValueError or
TypeError."""

from __future__ import annotations

from datetime import timedelta

import pytest
from fuzz_cases import ALLOWED, _call, huge_numbers, values
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import leasekit as lk

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
    # docs/security.md: a duration is a timedelta within
    # MAX_DURATION that converts to ms, or a typed error
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
    # docs/security.md, docs/configuration.md: a reachable server;
    # any timeout connects or is refused with a typed error
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
    # L2: lease, renew and the Fluss-shaped calls with any duration; whatever is written
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
    # docs/security.md, docs/configuration.md: a stored
    # setting always reads back, and retention can use it
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
    # docs/security.md, docs/configuration.md: a table created
    # with any property value is readable and retention plans it
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
    # docs/security.md, docs/consumers.md: every duration
    # keyword of conn.consumer, and max_poll_records
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
    # C6, C7
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
    # docs/security.md, docs/consumers.md: poll(timeout, max_records) and getone(timeout)
    with conn.consumer("t", auto_offset_reset="earliest") as c:
        _call(c.poll, timeout=_short(timeout), max_records=records)
        _call(c.getone, timeout=_short(timeout))


@BIG_FUZZ
@given(offset=offsets, metadata=st.one_of(st.text(max_size=8), values))
def test_fuzz_commit_offsets(conn, table, offset, metadata):
    # C2, C3: a commit of any offset is stored or refused with a typed error
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
    # C13: a dry run with any target or shift is a plan or a typed error
    _call(conn.reset_offsets, committed, to=to, dry_run=True)
    _call(conn.reset_offsets, committed, shift_by=shift, dry_run=True)


@BIG_FUZZ
@given(stop_after=durations, stall_after=durations)
@example(stop_after="999999999999d", stall_after=timedelta.max)
def test_fuzz_group_status_thresholds(conn, committed, stop_after, stall_after):
    # docs/security.md, docs/consumers.md
    _call(conn.group_status, committed, stop_after=stop_after, stall_after=stall_after)


@BIG_FUZZ
@given(interval=durations)
@example(interval="999999999999d")
@example(interval=timedelta.max)
def test_fuzz_janitor_interval(conn, interval):
    # docs/security.md, docs/retention.md: with the stop
    # event set, run returns at once, or refuses the interval
    import threading

    from leasekit import janitor

    stop = threading.Event()
    stop.set()
    _call(janitor.run, conn, interval, stop)
