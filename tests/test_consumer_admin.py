"""Consumer administration (DESIGN §6.6, C13): groups, describe with lag and time lag
measured now, lag health, offset resets (dry run by default), deletion."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

import leasekit as lk
from leasekit.consumers.admin import DESCRIBE_COLUMNS, RESET_COLUMNS

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=3)
    table.append([{"id": i, "v": "a"} for i in range(30)])
    return table


def _commit(conn, offsets, group="g"):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


def test_describe_measures_lag_now_and_marks_never_committed_buckets_na(conn, orders):
    # §6.6: lag = log end now - committed (a stopped consumer shows its real lag); a bucket
    # never committed is <NA>, not huge lag; time_lag 0 when lag is 0
    ends = orders.end_offsets()
    _commit(conn, {TB("orders", 0): 1, TB("orders", 1): ends[TB("orders", 1)]})
    orders.append([{"id": 1000 + i, "v": "b"} for i in range(30)])
    frame = conn.describe_group("g")
    assert list(frame.columns) == DESCRIBE_COLUMNS
    rows = {r.bucket: r for r in frame.itertuples()}
    now_ends = orders.end_offsets()
    assert rows[0].current_offset == 1 and rows[0].lag == now_ends[TB("orders", 0)] - 1
    assert rows[0].log_end_offset == now_ends[TB("orders", 0)]
    assert rows[0].time_lag > pd.Timedelta(0)
    assert rows[1].lag == now_ends[TB("orders", 1)] - ends[TB("orders", 1)]  # measured now, not at commit
    assert pd.isna(rows[2].current_offset) and pd.isna(rows[2].lag) and pd.isna(rows[2].time_lag)
    assert str(frame["time_lag"].dtype).startswith("timedelta64")
    assert isinstance(rows[0].last_commit, pd.Timestamp) and rows[0].status == "OK"
    _commit(conn, {TB("orders", 0): now_ends[TB("orders", 0)]})
    caught_up = conn.describe_group("g").set_index("bucket").loc[0]
    assert caught_up["lag"] == 0 and caught_up["time_lag"] == pd.Timedelta(0)
    assert conn.consumer_groups() == ["g"]


def test_group_status_reports_the_worst_bucket(conn, orders):
    # §6.6: with no live member and no commit for longer than stop_after, lagging buckets STOP
    _commit(conn, {TB("orders", 0): 1, TB("orders", 1): orders.end_offsets()[TB("orders", 1)]})
    status = conn.group_status("g")
    assert status.status == "OK" and set(status.buckets) == {TB("orders", 0), TB("orders", 1)}
    stopped = conn.group_status("g", stop_after="0s")
    assert stopped.status == "ERR" and stopped.buckets == {TB("orders", 0): "STOP", TB("orders", 1): "OK"}


def test_reset_is_a_dry_run_unless_asked(conn, orders):
    # C13
    _commit(conn, {TB("orders", b): 5 for b in range(3)})
    plan = conn.reset_offsets("g", to="earliest")
    assert list(plan.columns) == RESET_COLUMNS
    assert plan["new_offset"].tolist() == [0, 0, 0] and plan["current_offset"].tolist() == [5, 5, 5]
    assert conn.describe_group("g")["current_offset"].tolist() == [5, 5, 5]
    conn.reset_offsets("g", to="latest", buckets=[TB("orders", 1)], dry_run=False)
    frame = conn.describe_group("g").set_index("bucket")
    assert frame.loc[1, "current_offset"] == orders.end_offsets()[TB("orders", 1)]
    assert frame.loc[0, "current_offset"] == 5


def test_reset_targets(conn, orders):
    # §6.6: shift_by clamped to [beginning, end]; by duration = earliest offset with
    # timestamp >= now - duration; to a datetime; to an offset
    ends = orders.end_offsets()
    _commit(conn, {TB("orders", b): 2 for b in range(3)})
    shifted = conn.reset_offsets("g", shift_by=-10)
    assert shifted["new_offset"].tolist() == [0, 0, 0]
    forward = conn.reset_offsets("g", shift_by=10_000)
    assert forward["new_offset"].tolist() == [ends[TB("orders", b)] for b in range(3)]
    assert conn.reset_offsets("g", to=timedelta(hours=1))["new_offset"].tolist() == [0, 0, 0]
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert conn.reset_offsets("g", to=future)["new_offset"].tolist() == [ends[TB("orders", b)] for b in range(3)]
    assert conn.reset_offsets("g", to=3, tables=["orders"])["new_offset"].tolist() == [3, 3, 3]
    assert conn.reset_offsets("g", to="current")["new_offset"].tolist() == [2, 2, 2]


@pytest.mark.parametrize("kwargs, error", [
    ({}, lk.InvalidArgumentError),
    ({"to": "earliest", "shift_by": 1}, lk.InvalidArgumentError),
    ({"to": "smallest"}, lk.InvalidArgumentError),
    ({"to": -1}, lk.InvalidArgumentError),
    ({"to": datetime(2020, 1, 1)}, lk.InvalidArgumentError),
    ({"shift_by": "1"}, TypeError),
    ({"to": "earliest", "dry_run": "no"}, TypeError),
])
def test_reset_bad_input(conn, orders, kwargs, error):
    _commit(conn, {TB("orders", 0): 1})
    with pytest.raises(error):
        conn.reset_offsets("g", **kwargs)


def test_delete_offsets_and_group(conn, orders):
    _commit(conn, {TB("orders", 0): 1, TB("orders", 1): 1})
    assert conn.delete_offsets("g", [TB("orders", 0), TB("orders", 2)]) == 1
    assert conn.describe_group("g")["current_offset"].isna().tolist() == [True, False, True]
    assert conn.delete_group("g") is True
    assert conn.consumer_groups() == [] and conn.delete_group("g") is False
    with pytest.raises(lk.InvalidArgumentError):
        conn.delete_group("bad/name")


def test_a_subscribed_group_consumer_is_a_live_member(conn, orders):
    # §6.6, C13: describe names the member owning each bucket; a reset or delete is refused
    # while it lives; it leaves on close
    consumer = conn.consumer("orders", group_id="live", auto_offset_reset="earliest")
    consumer.poll()
    consumer.commit()
    members = conn.group_members("live")
    assert [m.member_id for m in members] == [consumer.member_id]
    assert members[0].buckets == {TB("orders", b) for b in range(3)} and members[0].host == conn.owner
    frame = conn.describe_group("live")
    assert frame["consumer_id"].tolist() == [consumer.member_id] * 3 and frame["host"].tolist() == [conn.owner] * 3
    assert conn.consumer_groups() == ["live"]
    with pytest.raises(lk.GroupNotEmptyError):
        conn.reset_offsets("live", to="earliest")
    with pytest.raises(lk.GroupNotEmptyError):
        conn.delete_group("live")
    consumer.close()
    assert conn.group_members("live") == [] and consumer.member_id is None
    assert conn.describe_group("live")["consumer_id"].isna().all()
    conn.reset_offsets("live", to="earliest", dry_run=False)


def test_stall_needs_a_live_owner(conn, orders):
    # §6.6 rules 3 and 5: the same idle lagging bucket is STALL while a member owns it, STOP after
    consumer = conn.consumer("orders", group_id="idle", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.poll(max_records=1)
    consumer.commit()
    lagging = next(tb for tb in consumer.assignment() if consumer.committed(tb) == 1)
    assert conn.group_status("idle", stall_after="0s", stop_after="0s").buckets[lagging] == "STALL"
    consumer.close()
    assert conn.group_status("idle", stall_after="0s", stop_after="0s").buckets[lagging] == "STOP"
