"""The name and id rules of ``leasekit.durations``: ids (L1), table names and namespaces are
checked whole, before any ZooKeeper call."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest
from helpers import namespace_tree

import leasekit as lk
from leasekit import testing
from leasekit.durations import parse_duration, to_ms
from leasekit.validate import check_id

TRAILING = ["q3\n", "orders\n", "a.b\n", "x\n\n"]


@pytest.mark.parametrize("value", TRAILING)
def test_lease_ids_with_a_trailing_newline_are_refused_before_any_zookeeper_call(conn, value):
    # L1
    ctx = testing.context(conn)
    before = ctx.store.round_trips
    with pytest.raises(lk.InvalidLeaseIdError):
        conn.lease(value)
    with pytest.raises(lk.InvalidLeaseIdError):
        conn.acquire_kv_snapshot_lease(value, {}, "1h")
    with pytest.raises(lk.InvalidLeaseIdError):
        conn.drop_kv_snapshot_lease(value)
    assert ctx.store.round_trips == before


@pytest.mark.parametrize("value", TRAILING)
def test_group_like_ids_with_a_trailing_newline_are_refused(value):
    # L1 (group ids follow the lease-id rule and raise InvalidArgumentError)
    with pytest.raises(lk.InvalidArgumentError, match="invalid group id"):
        check_id(value, what="group id", error=lk.InvalidArgumentError)
    assert check_id(
        value.rstrip("\n"), what="group id", error=lk.InvalidArgumentError
    ) == value.rstrip("\n")


@pytest.mark.parametrize("value", TRAILING)
def test_table_names_with_a_trailing_newline_are_refused_before_any_zookeeper_call(conn, value):
    # L1 (the table name rule)
    ctx = testing.context(conn)
    before = ctx.store.round_trips
    for call in (
        lambda: conn.create_table(value, "id BIGINT", "id"),
        lambda: conn.table(value),
        lambda: conn.drop_table(value),
        lambda: conn.lease("q3").acquire_latest(value),
    ):
        with pytest.raises(lk.InvalidArgumentError, match="invalid table name"):
            call()
    assert ctx.store.round_trips == before
    assert conn.tables() == []


@pytest.mark.parametrize("value", TRAILING)
def test_namespaces_with_a_trailing_newline_are_refused_before_connecting(warehouse, value):
    # L1 (namespaces follow the id rule); an unreachable address shows no connection is tried
    with pytest.raises(lk.InvalidArgumentError, match="invalid namespace"):
        lk.connect("127.0.0.1:1", warehouse, namespace=value, timeout="1s")


# -- oversized durations (docs/security.md) ---------------------------------------------------

HUGE = [
    2**70,
    -(2**70),
    2**63,
    1e300,
    1e308,
    float("inf"),
    float("-inf"),
    float("nan"),
    "999999999999d",
    "99999999999999999999s",
    "9" * 400 + "ms",
    "1" * 5000 + "d",
    timedelta.max,
    timedelta(days=999_999_999),
    timedelta(days=200_000),
]


@pytest.mark.parametrize("value", HUGE, ids=repr)
def test_durations_that_do_not_fit_are_invalid_duration_errors(value):
    # docs/security.md: too large for timedelta, int64
    # milliseconds or a timeout: InvalidDurationError
    with pytest.raises(lk.InvalidDurationError, match="duration"):
        parse_duration(value)


def test_the_largest_duration_fits_every_use():
    # docs/security.md: the limit keeps ms, ns (pandas)
    # and thread timeouts in range, and a time near now
    import threading

    from leasekit.durations import MAX_DURATION

    assert parse_duration(MAX_DURATION) == MAX_DURATION
    assert parse_duration(f"{MAX_DURATION.days}d") == MAX_DURATION
    assert to_ms(MAX_DURATION) * 1_000_000 < 2**63
    assert MAX_DURATION.total_seconds() < threading.TIMEOUT_MAX
    assert datetime.now(timezone.utc) + MAX_DURATION < datetime.max.replace(tzinfo=timezone.utc)
    with pytest.raises(lk.InvalidDurationError):
        to_ms(MAX_DURATION + timedelta(milliseconds=1))


@pytest.mark.parametrize("value", ["999999999999d", 2**70, float("inf"), timedelta.max], ids=repr)
def test_oversized_durations_are_refused_at_every_entry_point_before_any_write(conn, value):
    # L2: a typed error before anything is written, whatever the entry point
    from leasekit import janitor

    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    tree = namespace_tree(conn)
    with pytest.raises(lk.InvalidDurationError):
        conn.lease("q3", value)
    with pytest.raises(lk.InvalidDurationError):
        conn.acquire_kv_snapshot_lease("q3", {lk.TableBucket("t", 0): 1}, value)
    with pytest.raises(lk.InvalidDurationError):
        conn.renew_kv_snapshot_lease("q3", value)
    with pytest.raises(lk.InvalidDurationError):
        conn.lease("q3", "1h").renew(value)
    for key in ("lease.max-duration", "lease.expiry-grace", "orphan.min-age"):
        with pytest.raises(lk.InvalidArgumentError, match=key):
            conn.update_settings({key: value})
    with pytest.raises(lk.InvalidArgumentError, match="log.retention"):
        conn.create_table("u", "id BIGINT", "id", properties={"log.retention": value})
    for keyword in ("session_timeout", "auto_commit_interval", "max_poll_interval"):
        with pytest.raises(lk.InvalidArgumentError):
            conn.consumer(table, **{keyword: value})
    stop = threading.Event()
    stop.set()
    with pytest.raises(lk.InvalidDurationError):
        janitor.run(conn, value, stop)
    assert namespace_tree(conn) == tree
    assert conn.tables() == ["t"]


@pytest.mark.parametrize(
    "key", ["kv.snapshot.num-retained", "log.segment.max-rows", "log.retention.bytes"]
)
@pytest.mark.parametrize("value", [2**63, 2**64, 2**70, str(2**64)], ids=repr)
def test_oversized_numeric_properties_are_refused(conn, key, value):
    # docs/security.md, docs/configuration.md: msgpack stores
    # no int >= 2**64 and int64 arithmetic none >= 2**63
    with pytest.raises(lk.InvalidArgumentError, match=key):
        conn.create_table("u", "id BIGINT", "id", properties={key: value})
    assert conn.tables() == []


def test_long_durations_within_the_limit_work(conn):
    # L2 with a large lease.max-duration: expiry stays a datetime
    conn.update_settings({"lease.max-duration": "36500d"})
    lease = conn.lease("long", "36500d")
    expires = lease.acquire({}).expires_at
    assert expires.year >= 2126
    assert conn.settings()["lease.max-duration"] == timedelta(days=36500)
    with pytest.raises(lk.InvalidDurationError, match="lease.max-duration"):
        conn.lease("longer", "36501d")
