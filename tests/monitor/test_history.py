"""The lag history (M1) on the real ZooKeeper: samples of every group, live or
stopped, one per monitor.interval however many samplers run, kept in the internal table
``__lag_history`` (hidden from listings, cleaned by retention after monitor.retention), and
``lag_history`` reading them back by time."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest
from helpers import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import leasekit as lk
from leasekit import janitor, testing
from leasekit.monitor.lag import history
from leasekit.zk import Delete
from leasekit.zk.monitor_formats import SamplerRecord

TB = lk.TableBucket
HISTORY = history.HISTORY_TABLE


def _commit(conn, offsets, group):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=3)
    table.append([{"id": i, "v": "a"} for i in range(30)])
    return table


@pytest.fixture
def fast(conn):
    """Samples may be taken every 100 ms."""
    conn.update_settings({"monitor.interval": "100ms"})
    return testing.context(conn)


def _sample_again(ctx) -> int:
    time.sleep(0.12)
    return history.sample(ctx)


def test_monitor_settings_have_defaults_and_are_validated(conn):
    # M1: the monitor settings, validated like the others
    settings = conn.settings()
    assert settings["monitor.interval"] == timedelta(seconds=30)
    assert settings["monitor.retention"] == timedelta(days=7)
    assert settings["monitor.rate-window"] == timedelta(minutes=5)
    assert settings["monitor.risk-threshold"] == timedelta(hours=1)
    conn.update_settings({"monitor.interval": "10s", "monitor.risk-threshold": 0})
    assert conn.settings()["monitor.interval"] == timedelta(seconds=10)
    for bad in ({"monitor.interval": "0s"}, {"monitor.retention": "soon"}, {"monitor.x": "1s"}):
        with pytest.raises(lk.InvalidArgumentError):
            conn.update_settings(bad)


def test_a_sample_records_every_bucket_of_every_group(conn, orders, fast):
    # M1: every group, every bucket it reads; committed <NA> where never committed
    _commit(conn, {TB("orders", 0): 1, TB("orders", 1): 10}, "a")
    _commit(conn, {TB("orders", 2): 0}, "b")
    assert history.sample(fast) == 6
    frame = conn.lag_history("a", by_bucket=True)
    assert list(frame.columns) == ["time", "table", "bucket", "lag", "time_lag", "committed", "end"]
    ends = orders.end_offsets()
    assert frame["bucket"].tolist() == [0, 1, 2]
    assert frame["committed"].tolist()[:2] == [1, 10] and pd.isna(frame["committed"][2])
    assert frame["end"].tolist() == [ends[TB("orders", b)] for b in range(3)]
    assert frame["lag"].tolist()[:2] == [ends[TB("orders", 0)] - 1, ends[TB("orders", 1)] - 10]
    assert str(frame["time"].dtype).startswith("datetime64") and frame["time"].dt.tz is not None
    assert str(frame["time_lag"].dtype).startswith("timedelta64")
    assert frame["time_lag"][0] > pd.Timedelta(0) or frame["lag"][0] == 0
    total = conn.lag_history("a")
    assert list(total.columns) == ["time", "lag", "time_lag", "committed", "end"]
    assert total["lag"].tolist() == [frame["lag"][:2].sum()]
    assert total["committed"].tolist() == [11] and total["end"].tolist() == [sum(ends.values())]
    assert total["time_lag"][0] == frame["time_lag"].max()


def test_group_totals_count_only_committed_buckets(conn, orders):
    # M1: per sample, lag and committed summed over the committed buckets (<NA> where
    # none was), end over all, time lag the largest; oldest first, as Int64
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    history.append_rows(
        ctx,
        [
            history.HistoryRow(now - 30_000, "h", "orders", 0, 2, 9, 7, 1500),
            history.HistoryRow(now - 30_000, "h", "orders", 1, None, 8, None, None),
            history.HistoryRow(now - 30_000, "h", "orders", 2, 4, 9, 5, 900),
            history.HistoryRow(now - 60_000, "h", "orders", 0, None, 5, None, None),
            history.HistoryRow(now - 60_000, "h", "orders", 1, None, 7, None, None),
        ],
    )
    total = conn.lag_history("h", since="1h")
    assert total["end"].tolist() == [12, 26]
    first = total.iloc[0]
    assert pd.isna(first["lag"]) and pd.isna(first["committed"]) and pd.isna(first["time_lag"])
    assert total["lag"][1] == 12 and total["committed"][1] == 6
    assert total["time_lag"][1] == pd.Timedelta(milliseconds=1500)
    assert str(total["lag"].dtype) == str(total["committed"].dtype) == "Int64"


def test_a_stopped_group_keeps_being_recorded(conn, orders, fast):
    # M1: nothing consumes, the log grows: each sample records the lag measured then
    _commit(conn, {TB("orders", b): 0 for b in range(3)}, "stopped")
    lags = []
    for i in range(3):
        assert history.sample(fast) == 3
        orders.append([{"id": 1000 + 10 * i + k, "v": "b"} for k in range(10)])
        time.sleep(0.12)
        lags.append(30 + 10 * i)
    frame = conn.lag_history("stopped")
    assert frame["lag"].tolist() == lags  # oldest first, one row per sample
    assert frame["time"].is_monotonic_increasing and frame["time"].is_unique
    assert (frame["time_lag"].diff().dropna() > pd.Timedelta(0)).all()


def test_samples_are_not_taken_twice_in_one_interval(conn, orders):
    # M1: a second sampler inside the interval writes nothing
    _commit(conn, {TB("orders", 0): 1}, "g")
    ctx = testing.context(conn)
    assert history.sample(ctx) == 3
    assert history.sample(ctx) == 0
    assert len(conn.lag_history("g")) == 1


def test_racing_samplers_write_one_sample_per_interval(conn, orders, zookeeper, warehouse):
    # M1, a race in a loop: samplers on separate connections claim the same interval at once,
    # through the create of the sampler znode and through its compare-and-set
    _commit(conn, {TB("orders", b): 1 for b in range(3)}, "g")
    conn.update_settings({"monitor.interval": "1h"})
    ctx = testing.context(conn)
    others = [lk.connect(zookeeper, warehouse, namespace=conn.namespace) for _ in range(4)]
    try:
        rounds = 8
        for r in range(rounds):
            path = history.sampler_path(ctx)
            if r % 2 == 0:
                if ctx.store.get(path) is not None:
                    ctx.store.commit([Delete(path)])
            else:
                ctx.store.set(path, SamplerRecord(0, "test").encode())
            barrier = threading.Barrier(len(others))
            written = []

            def run(c, barrier=barrier, written=written):
                barrier.wait()
                written.append(history.sample(testing.context(c)))

            threads = [threading.Thread(target=run, args=(c,)) for c in others]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(written) == [0, 0, 0, 3], r
        frame = conn.lag_history("g", since="1h")
        assert len(frame) == rounds and frame["time"].is_unique
    finally:
        for c in others:
            c.close()


def test_lag_history_selects_by_time(conn, orders, fast):
    # docs/monitoring.md: since / until as datetimes or durations back from now; oldest first
    _commit(conn, {TB("orders", 0): 1}, "g")
    history.sample(fast)
    time.sleep(1.2)
    _sample_again(fast)
    both = conn.lag_history("g")
    assert len(both) == 2
    middle = both["time"][0] + (both["time"][1] - both["time"][0]) / 2
    assert conn.lag_history("g", since=middle.to_pydatetime())["time"].tolist() == [both["time"][1]]
    assert conn.lag_history("g", until=middle.to_pydatetime())["time"].tolist() == [both["time"][0]]
    naive = middle.to_pydatetime().astimezone(timezone.utc).replace(tzinfo=None)
    assert len(conn.lag_history("g", since=naive)) == 1  # a naive datetime is UTC
    assert len(conn.lag_history("g", since="1h")) == 2
    assert len(conn.lag_history("g", since=timedelta(milliseconds=500))) == 1
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert conn.lag_history("g", since=future, until=future + timedelta(hours=1)).empty
    with pytest.raises(lk.InvalidArgumentError):
        conn.lag_history("g", since="1h", until="2h")  # until before since
    with pytest.raises(lk.InvalidDurationError):
        conn.lag_history("g", since="yesterday")
    with pytest.raises(lk.InvalidTypeError):
        conn.lag_history("g", by_bucket="yes")


def test_lag_history_reads_only_the_segments_of_the_range(conn, orders, fast):
    # docs/monitoring.md: the segments' commit times decide which files are read
    _commit(conn, {TB("orders", 0): 1}, "g")
    history.sample(fast)
    time.sleep(1.2)
    _sample_again(fast)
    table = history.history_table(fast)
    times = conn.lag_history("g")["time"]
    newest = int(times[1].timestamp() * 1000)
    assert len(history._files(table, newest, newest)) == 1
    oldest = int(times[0].timestamp() * 1000)
    assert len(history._files(table, oldest, newest)) == 2


def test_unknown_group_is_an_error_and_a_group_without_samples_is_empty(conn, orders):
    # docs/monitoring.md: a group that does not exist and has no history -> a clear typed error
    with pytest.raises(lk.InvalidArgumentError, match="'nobody'"):
        conn.lag_history("nobody")
    with pytest.raises(lk.InvalidArgumentError):
        conn.lag_history("not a valid id!")
    _commit(conn, {TB("orders", 0): 1}, "new")
    empty = conn.lag_history("new")
    assert empty.empty and list(empty.columns) == ["time", "lag", "time_lag", "committed", "end"]
    assert conn.lag_history("new", by_bucket=True).empty


def test_history_of_a_deleted_group_stays_readable(conn, orders, fast):
    # M1: the history outlives the group (until monitor.retention)
    _commit(conn, {TB("orders", 0): 1}, "gone")
    history.sample(fast)
    conn.delete_group("gone")
    assert len(conn.lag_history("gone")) == 1


def test_the_history_table_is_internal(conn, orders, fast):
    # M1: a table of its own, hidden from listings and subscriptions, reserved to leasekit
    _commit(conn, {TB("orders", 0): 1}, "g")
    history.sample(fast)
    assert conn.tables() == ["orders"]
    for name in (HISTORY, "__mine"):
        with pytest.raises(lk.InvalidArgumentError, match="reserved"):
            conn.create_table(name, "id BIGINT", "id")
        with pytest.raises(lk.InvalidArgumentError, match="reserved"):
            conn.table(name)
    with pytest.raises(lk.InvalidArgumentError):
        conn.drop_table(HISTORY)
    with conn.consumer(group_id="all", auto_offset_reset="earliest") as c:
        c.subscribe(pattern=".*")
        wait_for(lambda: (c.poll(timeout="0.1s") or True) and c.assignment(), 15, "assignment")
        assert {tb.table for tb in c.assignment()} == {"orders"}
    plan = conn.retention_plan()
    assert any(i.table_bucket and i.table_bucket.table == HISTORY for i in plan.items)


def test_retention_deletes_history_older_than_monitor_retention(conn, orders, fast, clock):
    # M1: kept for monitor.retention and cleaned by retention, with a reason
    _commit(conn, {TB("orders", 0): 1}, "g")
    history.sample(fast)
    conn.update_settings({"monitor.retention": "1d"})

    def items():
        return [
            i
            for i in conn.retention_plan().items
            if i.table_bucket and i.table_bucket.table == HISTORY and i.kind == "segment"
        ]

    (kept,) = items()
    assert kept.action == "keep" and kept.reason.startswith(
        "lag history within monitor.retention 1d (age"
    )
    time.sleep(2)
    _sample_again(fast)
    clock.advance(timedelta(days=1, seconds=-1))  # the first is just over 1d old, the second not
    old, young = items()
    assert old.action == "delete"
    assert old.reason.startswith("lag history older than monitor.retention 1d (age 1d")
    assert young.action == "keep"
    assert young.reason.startswith("lag history within monitor.retention 1d (age 23h 59m")
    report = conn.run_retention()
    assert [i.item_id for i in report.deleted if i.table_bucket.table == HISTORY] == [old.item_id]
    assert [i.action for i in items()] == ["keep"]
    assert len(conn.lag_history("g", since="2d")) == 1  # the younger sample only


def test_the_janitor_samples_on_its_own_interval(conn, orders, janitor_stop):
    # M1: the leader samples every monitor.interval, independently of its retention interval
    _commit(conn, {TB("orders", 0): 1}, "g")
    conn.update_settings({"monitor.interval": "300ms"})
    thread = threading.Thread(
        target=janitor.run, args=(conn,), kwargs={"interval": "1h", "stop_event": janitor_stop}
    )
    thread.start()
    try:
        wait_for(lambda: len(conn.lag_history("g")) >= 3, 20, "three samples")
    finally:
        janitor_stop.set()
        thread.join(10)
    times = conn.lag_history("g")["time"]
    assert (times.diff().dropna() >= pd.Timedelta(milliseconds=280)).all()


@pytest.fixture
def janitor_stop():
    return threading.Event()


_WHEN = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.datetimes(timezones=st.sampled_from([None, timezone.utc])),
    st.timedeltas(),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(since=_WHEN, until=_WHEN)
def test_lag_history_fuzzed_times_raise_only_typed_errors(conn, since, until):
    # docs/security.md: fuzzed arguments give LeasekitError, ValueError or TypeError, nothing else
    if not conn.consumer_groups():
        _commit_group(conn)
    try:
        frame = conn.lag_history("g", since=since, until=until)
    except (lk.LeasekitError, ValueError, TypeError):
        return
    assert list(frame.columns) == ["time", "lag", "time_lag", "committed", "end"]


def _commit_group(conn):
    conn.create_table("fz", "id BIGINT", "id", buckets=1).append([{"id": 1}])
    _commit(conn, {TB("fz", 0): 0}, "g")
    history.sample(testing.context(conn))


def test_a_reader_without_credentials_cannot_sample(zookeeper, warehouse, namespace):
    # docs/security.md: a client without the credentials reads but does not write the history
    with lk.connect(zookeeper, warehouse, namespace=namespace, auth=("ops", "secret")) as owner:
        owner.update_settings({"monitor.interval": "100ms"})
        owner.create_table("t", "id BIGINT", "id", buckets=1).append([{"id": 1}])
        _commit(owner, {TB("t", 0): 0}, "g")
        assert history.sample(testing.context(owner)) == 1
        with lk.connect(zookeeper, warehouse, namespace=namespace) as reader:
            time.sleep(0.12)
            with pytest.raises(lk.PermissionDeniedError):
                history.sample(testing.context(reader))
            assert len(reader.lag_history("g")) == 1


def test_every_groups_history_read_at_once_equals_each_read_alone(conn, orders, fast):
    # M2: lag_histories (one read for the Overview's sparklines) gives each group exactly its
    # lag_history; a group without samples in the range gets an empty frame
    from leasekit.live import lag_histories

    _commit(conn, {TB("orders", b): 0 for b in range(3)}, "slow")
    _commit(conn, {TB("orders", 0): 5, TB("orders", 1): 10}, "partial")
    for i in range(3):
        history.sample(fast)
        orders.append([{"id": 2000 + 10 * i + k, "v": "c"} for k in range(10)])
        time.sleep(0.12)
    _commit(conn, {TB("orders", 2): 1}, "late")  # committed after the last sample
    together = lag_histories(conn, ["slow", "partial", "late", "slow"], since="1h")
    assert list(together) == ["slow", "partial", "late"]
    for group in ("slow", "partial"):
        alone = conn.lag_history(group, since="1h")
        assert len(alone) == 3
        pd.testing.assert_frame_equal(together[group], alone)
    assert together["late"].empty
    assert list(together["late"].columns) == list(conn.lag_history("slow").columns)
    assert lag_histories(conn, []) == {}
    with pytest.raises(lk.InvalidArgumentError):
        lag_histories(conn, ["no/such group"])
    with pytest.raises(lk.InvalidArgumentError):
        lag_histories(conn, ["slow"], since="1h", until="2h")
