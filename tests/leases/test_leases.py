"""KV snapshot leases: ids and durations (L1, L2), atomic pins (L3-L6), expiry on the
ZooKeeper clock (L7, L8, L11), release and drop (L9, L10), reads (L12), keepalive (L13)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from helpers import namespace_tree

import leasekit as lk
from leasekit import spark as lks
from leasekit import testing
from leasekit.snapshots.catalog import delete_snapshot

TB = lk.TableBucket


def test_the_copied_snapshots_hold_the_state_of_the_log(conn, orders, spark):
    # S1: each generation's snapshots hold the KV state of the log up to their offsets, and
    # live in the table's own warehouse under its ids 1 and 2
    for sid in (1, 2):
        snaps = {s.table_bucket: s for s in orders.snapshots() if s.snapshot_id == sid}
        assert sorted(tb.bucket for tb in snaps) == [0, 1, 2, 3]
        assert all(f.startswith(conn.warehouse) for s in snaps.values() for f in s.files)
        ends = {tb.bucket: s.log_offset for tb, s in snaps.items()}
        replayed = sorted(map(tuple, lks.read_at(spark, orders, ends).collect()))
        read = sorted(
            map(tuple, lks.read_snapshots(spark, orders, {b: sid for b in range(4)}).collect())
        )
        assert read == replayed and len(read) == 200


def both(table, sid):
    return {TB(table.name, b): sid for b in range(table.num_buckets)}


# -- L1, L2: ids and durations ---------------------------------------------------------

BAD_IDS = ["", ".", "..", "a/b", "x" * 129, "with space", "ünïcode", "a\nb", "q3\n", "q3\r\n"]


@pytest.mark.parametrize("lease_id", BAD_IDS)
def test_invalid_lease_ids_fail_before_any_zookeeper_call(conn, lease_id):
    # L1
    ctx = testing.context(conn)
    before = ctx.store.round_trips
    calls = [
        lambda: conn.lease(lease_id),
        lambda: conn.acquire_kv_snapshot_lease(lease_id, {}, "1h"),
        lambda: conn.renew_kv_snapshot_lease(lease_id, "1h"),
        lambda: conn.release_kv_snapshot_lease(lease_id, []),
        lambda: conn.drop_kv_snapshot_lease(lease_id),
    ]
    for call in calls:
        with pytest.raises(lk.InvalidLeaseIdError):
            call()
    assert ctx.store.round_trips == before


@pytest.mark.parametrize("lease_id", [None, 7, b"bytes"])
def test_non_string_lease_ids(conn, lease_id):
    # L1 (None means "make one" only for conn.lease)
    with pytest.raises(lk.InvalidLeaseIdError):
        conn.drop_kv_snapshot_lease(lease_id)
    if lease_id is None:
        assert conn.lease().lease_id.startswith("lease-")


def test_valid_lease_id_edge_cases(conn):
    # L1
    for lease_id in ["a", "x" * 128, "q3-report_2026.v1", "..."]:
        assert conn.lease(lease_id).lease_id == lease_id
        assert conn.drop_kv_snapshot_lease(lease_id) is False


@pytest.mark.parametrize(
    "duration", [0, -1, "0s", "-5m", "8d", timedelta(0), "soon", float("nan"), True, [1]]
)
def test_invalid_durations(conn, duration):
    # L2
    ctx = testing.context(conn)
    before = ctx.store.round_trips
    with pytest.raises(lk.InvalidDurationError):
        conn.lease("x", duration)
    assert ctx.store.round_trips == before
    with pytest.raises(lk.InvalidDurationError):
        conn.acquire_kv_snapshot_lease("x", {}, duration)
    with pytest.raises(lk.InvalidDurationError):
        conn.renew_kv_snapshot_lease("x", duration)


def test_max_duration_is_a_namespace_setting(conn, zookeeper, warehouse, namespace):
    # L2
    assert conn.lease("x", "7d").lease_id == "x"
    with lk.connect(zookeeper, warehouse, namespace=namespace) as admin:
        admin.update_settings({"lease.max-duration": "1h"})
    deadline = time.monotonic() + 5
    while (
        testing.context(conn).cached_settings()["lease.max-duration"] != timedelta(hours=1)
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    with pytest.raises(lk.InvalidDurationError):
        conn.lease("x", "2h")
    assert conn.lease("x", "59m").lease_id == "x"


def test_durations_in_every_form(conn, orders):
    # L2, L7
    for duration, seconds in [
        (timedelta(minutes=5), 300),
        (90, 90),
        (1.5, 1.5),
        ("500ms", 0.5),
        ("2h", 7200),
    ]:
        result = conn.acquire_kv_snapshot_lease("forms", {TB("orders", 0): 2}, duration)
        info = conn.leases()[0]
        assert info.duration == timedelta(seconds=seconds)
        assert result.expires_at >= info.renewed_at
        conn.drop_kv_snapshot_lease("forms")


# -- L3-L6: pins --------------------------------------------------------------------------


def test_acquire_pins_and_protects_from_deletion(conn, orders):
    # L3
    lease = conn.lease("q3", "1h")
    result = lease.acquire({TB("orders", 0): 1, TB("orders", 1): 1})
    assert result.acquired == {TB("orders", 0): 1, TB("orders", 1): 1}
    assert result.unavailable == {}
    with pytest.raises(lk.IllegalStateError, match="pinned by lease"):
        delete_snapshot(orders, 0, 1)
    delete_snapshot(orders, 2, 1)  # not pinned: deletable
    assert [s.snapshot_id for s in orders.snapshots(2)] == [2]


def test_missing_or_deleted_snapshots_are_unavailable_and_not_pinned(conn, orders):
    # L3
    delete_snapshot(orders, 1, 1)
    result = conn.acquire_kv_snapshot_lease(
        "q3", {TB("orders", 0): 1, TB("orders", 1): 1, TB("orders", 2): 99}, "1h"
    )
    assert result.acquired == {TB("orders", 0): 1}
    assert result.unavailable == {TB("orders", 1): 1, TB("orders", 2): 99}
    assert conn.leases()[0].pins == {TB("orders", 0): 1}


def test_acquiring_another_snapshot_moves_the_pin(conn, orders):
    # L4
    lease = conn.lease("q3", "1h")
    lease.acquire({TB("orders", 0): 1})
    lease.acquire({TB("orders", 0): 2})
    assert lease.info().pins == {TB("orders", 0): 2}
    delete_snapshot(orders, 0, 1)  # the old pin is gone
    with pytest.raises(lk.IllegalStateError):
        conn.drop_table("orders")


def test_several_leases_pin_one_snapshot_until_the_last_goes(conn, orders):
    # L5
    a, b = conn.lease("a", "1h"), conn.lease("b", "1h")
    a.acquire({TB("orders", 3): 1})
    b.acquire({TB("orders", 3): 1})
    a.drop()
    with pytest.raises(lk.IllegalStateError, match="pinned by lease"):
        delete_snapshot(orders, 3, 1)
    b.release([TB("orders", 3)])
    delete_snapshot(orders, 3, 1)


def test_acquire_latest_pins_newest_and_empty_buckets_as_empty(conn, spark):
    # L6, L15 (buckets with records but no snapshot: test_empty_buckets.py)
    table = conn.create_table("sparse", "id BIGINT", "id", buckets=8)
    table.append([{"id": 1}])
    table.snapshot(spark)
    other = conn.create_table("other", "id BIGINT", "id", buckets=2)
    lease = conn.lease("q3", "1h")
    result = lease.acquire_latest(["sparse", "other"])
    written = table.latest_snapshots()
    assert len(written) == 1 and not result.unavailable
    assert result.acquired == {tb: written.get(tb, 0) for tb in table.buckets + other.buckets}
    assert lease.acquire_latest("sparse").acquired == {  # a str is one table
        tb: sid for tb, sid in result.acquired.items() if tb.table == "sparse"
    }


def test_acquire_latest_retries_when_the_latest_disappears(conn, orders, spark, monkeypatch):
    # L6: between reading the latest ids and pinning, a newer snapshot arrives and the one
    # just read is deleted; acquire_latest must pin the newer one instead.
    import leasekit.leases.acquire as handle

    real = handle.read_latest
    calls = []

    def racing_read_latest(table, buckets=None):
        ids = real(table, buckets)
        if not calls:
            orders.append([{"id": 5000 + i, "status": "late"} for i in range(40)])
            orders.snapshot(spark)
            for b in range(orders.num_buckets):
                delete_snapshot(orders, b, ids[b])
        calls.append(buckets)
        return ids

    monkeypatch.setattr(handle, "read_latest", racing_read_latest)
    result = conn.lease("q3", "1h").acquire_latest("orders")
    assert result.acquired == both(orders, 3)
    assert result.unavailable == {}
    assert len(calls) == 2


# -- L7, L8, L11: expiry on the ZooKeeper clock ----------------------------------------


def test_expiry_is_zookeeper_time_of_acquire_plus_duration(conn, orders):
    # L7
    lease = conn.lease("q3", "10m")
    result = lease.acquire({TB("orders", 0): 2})
    info = lease.info()
    assert info.expires_at == info.renewed_at + timedelta(minutes=10) == result.expires_at
    assert abs(info.renewed_at - conn.server_time()) < timedelta(seconds=5)
    assert info.created_at == info.renewed_at
    assert info.owner == testing.context(conn).owner


def test_renew_only_extends(conn, orders):
    # L7
    lease = conn.lease("q3", "1h")
    first = lease.acquire({TB("orders", 0): 2}).expires_at
    assert lease.renew("1s") == first  # a shorter renew cannot shorten
    assert lease.info().expires_at == first
    longer = lease.renew("2h")
    assert longer >= first + timedelta(minutes=59)
    assert lease.info().expires_at == longer
    assert conn.renew_kv_snapshot_lease("q3", "1m") == longer


def test_lease_expires_on_the_real_zookeeper_clock(conn, orders, spark):
    # L7, L8, L12: no injected time; the lease lives 2 s of ZooKeeper time
    lease = conn.lease("short", "2s")
    lease.acquire_latest("orders")
    assert lease.alive
    assert lease.read(spark, "orders").count() == 200
    time.sleep(2.6)
    assert not lease.alive
    with pytest.raises(lk.LeaseExpiredError):
        lease.read(spark, "orders")
    with pytest.raises(lk.LeaseExpiredError):
        lease.renew()
    with pytest.raises(lk.LeaseExpiredError):
        lease.acquire({TB("orders", 0): 2})


def test_expired_lease_with_injected_clock(conn, clock, orders):
    # L8: renew or acquire of an expired lease fails; nothing is recreated
    conn.acquire_kv_snapshot_lease("q3", {TB("orders", 0): 1}, "1h")
    clock.advance(3_600 + 1)
    with pytest.raises(lk.LeaseExpiredError):
        conn.renew_kv_snapshot_lease("q3", "1h")
    with pytest.raises(lk.LeaseExpiredError):
        conn.acquire_kv_snapshot_lease("q3", {TB("orders", 1): 1}, "1h")
    assert conn.leases()[0].pins == {TB("orders", 0): 1}


def test_renew_unknown_lease_is_not_recreated(conn):
    # L8
    with pytest.raises(lk.LeaseNotFoundError):
        conn.renew_kv_snapshot_lease("ghost", "1h")
    with pytest.raises(lk.LeaseNotFoundError):
        conn.lease("ghost").renew()
    assert conn.leases() == []


def test_first_acquire_creates_the_lease(conn, orders):
    # L8
    assert conn.leases() == []
    conn.acquire_kv_snapshot_lease("new", {}, "1h")
    assert [i.lease_id for i in conn.leases()] == ["new"]
    assert conn.leases()[0].pins == {}


def test_expire_respects_grace_and_reclaims_eagerly(conn, clock, orders):
    # L11 (injected clock): not before expires_at + grace, then pins go at once
    conn.acquire_kv_snapshot_lease("q3", {TB("orders", 0): 1}, "1h")
    conn.update_settings({"lease.expiry-grace": "30s"})
    clock.advance(3_600 + 29)
    assert conn.expire_leases() == []
    with pytest.raises(lk.IllegalStateError):
        delete_snapshot(orders, 0, 1)
    clock.advance(2)  # an hour and 31 s ahead: past the grace
    assert conn.expire_leases() == ["q3"]
    assert conn.leases() == []
    delete_snapshot(orders, 0, 1)  # no new snapshot needed: the pin went with the lease


def test_expire_on_the_real_clock(conn, orders):
    # L11 (real clock): a 1 s lease with a 1 s grace is reclaimed after 2 s, not before
    conn.update_settings({"lease.expiry-grace": "1s"})
    conn.acquire_kv_snapshot_lease("q3", {TB("orders", 0): 1}, "1s")
    assert conn.expire_leases() == []
    time.sleep(2.3)
    assert conn.expire_leases() == ["q3"]
    delete_snapshot(orders, 0, 1)


def test_renew_racing_expiry_wins_or_fails_cleanly(conn, clock, orders):
    # L11: the reclaim is a compare-and-set on the lease's version
    conn.acquire_kv_snapshot_lease("q3", {TB("orders", 0): 1}, "1h")
    clock.advance(3_600 + 31)
    assert conn.expire_leases() == ["q3"]
    clock.advance(-(3_600 + 31))  # back to the ZooKeeper clock
    with pytest.raises(lk.LeaseNotFoundError):
        conn.renew_kv_snapshot_lease("q3", "1h")


# -- L9, L10: release and drop ----------------------------------------------------------


def test_release_is_idempotent_and_keeps_the_lease(conn, orders):
    # L9
    lease = conn.lease("q3", "1h")
    lease.acquire(both(orders, 2))
    lease.release([TB("orders", 0), TB("orders", 1)])
    lease.release([TB("orders", 0), TB("orders", 1)])
    assert lease.info().pins == {TB("orders", 2): 2, TB("orders", 3): 2}
    lease.release(orders.buckets)
    assert lease.info().pins == {}
    assert [i.lease_id for i in conn.leases()] == ["q3"]


def test_release_ignores_bucket_numbers_the_table_does_not_have(conn, orders):
    # L9: buckets the lease does not pin are ignored, bucket numbers the table does not have
    # included
    lease = conn.lease("q3", "1h")
    lease.acquire(both(orders, 2))
    lease.release([TB("orders", 7), TB("orders", -1), TB("orders", 0)])
    assert lease.info().pins == {TB("orders", b): 2 for b in (1, 2, 3)}
    before = namespace_tree(conn)
    conn.release_kv_snapshot_lease("q3", [TB("orders", 4), TB("orders", 10**9)])
    assert namespace_tree(conn) == before
    conn.release_kv_snapshot_lease("q3", [TB("orders", 1), TB("orders", 99)])
    assert lease.info().pins == {TB("orders", 2): 2, TB("orders", 3): 2}


def test_drop_removes_lease_and_pins_in_one_step(conn, orders):
    # L10
    lease = conn.lease("q3", "1h")
    lease.acquire(both(orders, 1))
    assert lease.drop() is True
    assert conn.leases() == []
    for b in range(4):
        delete_snapshot(orders, b, 1)
    assert lease.drop() is False
    assert conn.drop_kv_snapshot_lease("never-existed") is False


# -- L12: reads ---------------------------------------------------------------------------


def test_read_returns_exactly_the_pinned_snapshot_rows(conn, orders, spark):
    # L12
    lease = conn.lease("q3", "1h")
    lease.acquire(both(orders, 1))
    expected = sorted(
        map(tuple, lks.read_snapshots(spark, orders, {b: 1 for b in range(4)}).collect())
    )
    orders.append([{"id": i, "status": "late"} for i in range(300)])
    orders.snapshot(spark)
    rows = sorted(map(tuple, lease.read(spark, orders).collect()))
    assert rows == expected
    assert all(status == "new" for _, status in rows)
    assert lease.read(spark, "orders").columns == ["id", "status"]


def test_read_refuses_unpinned_buckets_unless_partial(conn, orders, spark):
    # L12
    lease = conn.lease("q3", "1h")
    lease.acquire({TB("orders", 0): 2})
    with pytest.raises(lk.NotPinnedError, match="3 of 4"):
        lease.read(spark, "orders")
    partial = lease.read(spark, "orders", allow_partial=True)
    assert partial.count() == lks.read_snapshots(spark, orders, {0: 2}).count()


def test_read_after_drop_is_expired(conn, orders, spark):
    # L12
    lease = conn.lease("q3", "1h")
    lease.acquire_latest("orders")
    lease.drop()
    assert not lease.alive
    with pytest.raises(lk.LeaseExpiredError):
        lease.read(spark, "orders")


# -- L13: keepalive ---------------------------------------------------------------------


def test_keepalive_renews_in_the_background(conn, orders, spark):
    # L13: a 2 s lease used for 4 s stays valid
    with conn.lease("kept", "2s", keepalive=True) as lease:
        first = lease.acquire_latest("orders").expires_at
        time.sleep(4)
        assert lease.alive
        assert lease.info().expires_at > first + timedelta(seconds=1)
        assert lease.read(spark, "orders").count() == 200
    assert conn.leases() == []  # dropped on exit


def test_keepalive_failure_flips_alive_and_the_next_call_raises(conn, orders):
    # L13
    with conn.lease("kept", "1500ms", keepalive=True, drop_on_exit=False) as lease:
        lease.acquire_latest("orders")
        conn.drop_kv_snapshot_lease("kept")  # someone else drops it
        deadline = time.monotonic() + 5
        while lease.alive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not lease.alive
        with pytest.raises(lk.LeaseExpiredError):
            lease.acquire_latest("orders")


def test_context_manager_keeps_lease_when_asked(conn, orders):
    with conn.lease("kept", "1h", drop_on_exit=False) as lease:
        lease.acquire_latest("orders")
    assert [i.lease_id for i in conn.leases()] == ["kept"]
