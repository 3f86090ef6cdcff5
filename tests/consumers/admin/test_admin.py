"""Consumer administration (C13, docs/consumers.md): groups, describe with lag and time lag
measured now, lag health, offset resets (dry run by default), deletion."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

import leasekit as lk
from leasekit import testing
from leasekit.consumers.admin.group_admin import DESCRIBE_COLUMNS, RESET_COLUMNS
from leasekit.zk import Delete

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
    # docs/consumers.md: lag = log end now - committed (a stopped consumer shows its real lag); a
    # bucket never committed is <NA>, not huge lag; time_lag 0 when lag is 0
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
    assert (
        rows[1].lag == now_ends[TB("orders", 1)] - ends[TB("orders", 1)]
    )  # measured now, not at commit
    assert pd.isna(rows[2].current_offset) and pd.isna(rows[2].lag) and pd.isna(rows[2].time_lag)
    assert str(frame["time_lag"].dtype).startswith("timedelta64")
    assert isinstance(rows[0].last_commit, pd.Timestamp) and rows[0].status == "OK"
    _commit(conn, {TB("orders", 0): now_ends[TB("orders", 0)]})
    caught_up = conn.describe_group("g").set_index("bucket").loc[0]
    assert caught_up["lag"] == 0 and caught_up["time_lag"] == pd.Timedelta(0)
    assert conn.consumer_groups() == ["g"]


def test_group_status_reports_the_worst_bucket(conn, orders):
    # docs/concepts.md: with no live member and no commit
    # for longer than stop_after, lagging buckets STOP
    _commit(conn, {TB("orders", 0): 1, TB("orders", 1): orders.end_offsets()[TB("orders", 1)]})
    status = conn.group_status("g")
    assert status.status == "OK" and set(status.buckets) == {TB("orders", 0), TB("orders", 1)}
    stopped = conn.group_status("g", stop_after="0s")
    assert stopped.status == "ERR" and stopped.buckets == {
        TB("orders", 0): "STOP",
        TB("orders", 1): "OK",
    }


def test_reset_is_a_dry_run_unless_asked(conn, orders):
    # C13
    _commit(conn, {TB("orders", b): 5 for b in range(3)})
    plan = conn.reset_offsets("g", to="earliest")
    assert list(plan.columns) == [*RESET_COLUMNS, "clamped"]  # docs/security.md: the clamp is shown
    assert plan["clamped"].tolist() == [False, False, False]
    assert plan["new_offset"].tolist() == [0, 0, 0] and plan["current_offset"].tolist() == [5, 5, 5]
    assert conn.describe_group("g")["current_offset"].tolist() == [5, 5, 5]
    conn.reset_offsets("g", to="latest", buckets=[TB("orders", 1)], dry_run=False)
    frame = conn.describe_group("g").set_index("bucket")
    assert frame.loc[1, "current_offset"] == orders.end_offsets()[TB("orders", 1)]
    assert frame.loc[0, "current_offset"] == 5


def test_reset_targets(conn, orders):
    # docs/consumers.md: shift_by clamped to [beginning, end]; by duration = earliest offset with
    # timestamp >= now - duration; to a datetime; to an offset
    ends = orders.end_offsets()
    _commit(conn, {TB("orders", b): 2 for b in range(3)})
    shifted = conn.reset_offsets("g", shift_by=-10)
    assert shifted["new_offset"].tolist() == [0, 0, 0]
    forward = conn.reset_offsets("g", shift_by=10_000)
    assert forward["new_offset"].tolist() == [ends[TB("orders", b)] for b in range(3)]
    assert conn.reset_offsets("g", to=timedelta(hours=1))["new_offset"].tolist() == [0, 0, 0]
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert conn.reset_offsets("g", to=future)["new_offset"].tolist() == [
        ends[TB("orders", b)] for b in range(3)
    ]
    assert conn.reset_offsets("g", to=3, tables=["orders"])["new_offset"].tolist() == [3, 3, 3]
    assert conn.reset_offsets("g", to="current")["new_offset"].tolist() == [2, 2, 2]
    assert conn.reset_offsets("g", to=4, tables=orders)["new_offset"].tolist() == [
        4,
        4,
        4,
    ]  # docs/consumers.md: a Table too


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({}, lk.InvalidArgumentError),
        ({"to": "earliest", "shift_by": 1}, lk.InvalidArgumentError),
        ({"to": "smallest"}, lk.InvalidArgumentError),
        ({"to": -1}, lk.InvalidArgumentError),
        ({"to": datetime(2020, 1, 1)}, lk.InvalidArgumentError),
        ({"shift_by": "1"}, TypeError),
        ({"to": "earliest", "dry_run": "no"}, TypeError),
        ({"to": "earliest", "tables": 5}, TypeError),
        ({"to": "earliest", "buckets": TB("orders", 0)}, TypeError),
        ({"to": "earliest", "buckets": [("orders", 0), 1]}, TypeError),
    ],
)
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
    # C13: describe names the member owning each bucket; a reset or delete is refused
    # while it lives; it leaves on close
    ctx = testing.context(conn)
    consumer = conn.consumer("orders", group_id="live", auto_offset_reset="earliest")
    consumer.poll()
    consumer.commit()
    members = conn.group_members("live")
    assert [m.member_id for m in members] == [consumer.member_id]
    assert (
        members[0].buckets == {TB("orders", b) for b in range(3)} and members[0].host == ctx.owner
    )
    frame = conn.describe_group("live")
    assert (
        frame["consumer_id"].tolist() == [consumer.member_id] * 3
        and frame["host"].tolist() == [ctx.owner] * 3
    )
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
    # lag health's STOP and STALL (docs/concepts.md): the same idle
    # lagging bucket is STALL while a member owns it, STOP after
    consumer = conn.consumer(
        "orders", group_id="idle", auto_offset_reset="earliest", enable_auto_commit=False
    )
    consumer.poll(max_records=1)
    consumer.commit()
    lagging = next(tb for tb in consumer.assignment() if consumer.committed(tb) == 1)
    assert conn.group_status("idle", stall_after="0s", stop_after="0s").buckets[lagging] == "STALL"
    consumer.close()
    assert conn.group_status("idle", stall_after="0s", stop_after="0s").buckets[lagging] == "STOP"


def _poll_all(consumers, until, seconds=15.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(timeout="0.05s")
        if until():
            return
    raise AssertionError("the group did not settle in time")


@pytest.fixture
def pair(conn):
    """Makes two members of group "g" over a table, each owning half of its buckets (C9);
    both are closed at the end."""
    made = []

    def make(table, **options):
        a = conn.consumer(table.name, group_id="g", auto_offset_reset="earliest", **options)
        made.append(a)
        a.poll()
        b = conn.consumer(table.name, group_id="g", auto_offset_reset="earliest", **options)
        made.append(b)
        half = table.num_buckets // 2
        _poll_all([a, b], lambda: len(a.assignment()) == half and len(b.assignment()) == half)
        return a, b

    yield make
    for consumer in made:
        consumer.close()


@pytest.fixture
def four(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=4)
    table.append([{"id": i, "v": "a"} for i in range(40)])
    return table


def _owner_column(frame):
    return {
        TB(r.table, r.bucket): None if pd.isna(r.consumer_id) else r.consumer_id
        for r in frame.itertuples()
    }


def test_members_describe_and_status_show_who_owns_each_bucket_now(conn, four, pair):
    # C9, C10, C14: each member's own buckets (owner znodes naming it), not every bucket of
    # the tables it subscribes to; one generation; the oldest member leads
    a, b = pair(four)
    mine_a, mine_b = a.assignment(), b.assignment()
    members = conn.group_members("g")
    assert [m.member_id for m in members] == [a.member_id, b.member_id]  # oldest first
    ma, mb = members
    assert (ma.buckets, mb.buckets) == (mine_a, mine_b)
    assert not ma.buckets & mb.buckets and ma.buckets | mb.buckets == set(
        four.buckets
    )  # C9: each once
    assert (ma.assigned, mb.assigned) == (mine_a, mine_b)
    assert ma.generation == mb.generation == a.generation == b.generation >= 1
    assert ma.leader and not mb.leader and ma.host == mb.host == testing.context(conn).owner

    frame = conn.describe_group("g")
    assert (
        list(frame.columns) == DESCRIBE_COLUMNS
    )  # docs/consumers.md: generation and leader are attrs, not columns
    assert frame.attrs == {"generation": a.generation, "leader": a.member_id}
    assert _owner_column(frame) == {
        tb: a.member_id if tb in mine_a else b.member_id for tb in four.buckets
    }
    status = conn.group_status("g")
    assert status.generation == a.generation and status.unowned == frozenset()

    generation = a.generation
    b.close()  # it releases its buckets and leaves; a claims them at its next poll only (C10)
    frame = conn.describe_group("g")
    assert _owner_column(frame) == {
        tb: a.member_id if tb in mine_a else None for tb in four.buckets
    }
    assert frame.set_index("bucket").loc[sorted(tb.bucket for tb in mine_b), "host"].isna().all()
    assert conn.group_status("g").unowned == mine_b
    deadline = time.monotonic() + 10  # the leader publishes the next generation from its watch
    while conn.group_members("g")[0].generation == generation and time.monotonic() < deadline:
        time.sleep(0.05)
    (alone,) = conn.group_members("g")
    assert alone.buckets == mine_a and alone.assigned == set(
        four.buckets
    )  # handed over, not yet claimed
    assert alone.generation > generation and alone.leader

    _poll_all([a], lambda: len(a.assignment()) == 4)
    (alone,) = conn.group_members("g")
    assert alone.buckets == alone.assigned == set(four.buckets) and alone.generation == a.generation
    assert _owner_column(conn.describe_group("g")) == {tb: a.member_id for tb in four.buckets}
    status = conn.group_status("g")
    assert status.unowned == frozenset() and status.generation == a.generation


def test_an_owner_znode_naming_a_member_that_is_gone_is_not_ownership(conn, four, pair):
    # C12, lag health's STOP: a member whose session ended (its znode gone) owns nothing, though its
    # owner znodes still name it; with no live member, no bucket is owned and none is reported
    # unowned in GroupStatus (nothing is subscribed)
    ctx = testing.context(conn)
    a, b = pair(four, enable_auto_commit=False)  # nothing to commit when they close
    a.commit()
    b.commit()
    ctx.store.commit([Delete(ctx.paths.member("g", b.member_id))])  # as when its session expires
    frame = conn.describe_group("g")
    assert _owner_column(frame) == {
        tb: a.member_id if tb in a.assignment() else None for tb in four.buckets
    }
    assert [m.member_id for m in conn.group_members("g")] == [a.member_id]
    assert conn.group_status("g").unowned == b.assignment()
    ctx.store.commit([Delete(ctx.paths.member("g", a.member_id))])
    assert _owner_column(conn.describe_group("g")) == dict.fromkeys(four.buckets)
    assert conn.group_members("g") == [] and conn.group_status("g").unowned == frozenset()
    assert conn.describe_group("g").attrs["leader"] is None


@pytest.mark.parametrize("group", ["bad/name", "", 5, None])
def test_admin_reads_refuse_bad_group_ids(conn, group):
    # group ids follow the lease-id rule (L1)
    for call in (conn.group_members, conn.describe_group, conn.group_status):
        with pytest.raises(lk.InvalidArgumentError):
            call(group)


def test_admin_reads_take_few_round_trips(conn, four, pair):
    # docs/architecture.md (ZooKeeper is not a log): a group
    # is read in pipelined batches, not znode by znode
    ctx = testing.context(conn)
    a, b = pair(four)
    # members, owners, offsets and the assignment listed, then read; bucket states with the clock;
    # describe also lists and reads the log segments of the table for time lag
    for call, most in ((conn.group_members, 2), (conn.group_status, 3), (conn.describe_group, 5)):
        before = ctx.store.round_trips
        call("g")
        assert ctx.store.round_trips - before <= most, call.__name__
