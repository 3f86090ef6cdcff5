"""Subscription by pattern (C17) on the real ZooKeeper: consumers and groups
follow the tables whose names match as they are created and dropped, noticed through a watch."""

from __future__ import annotations

import time

import pytest
from helpers import Recorder

import leasekit as lk
from leasekit import testing

TB = lk.TableBucket


def day(conn, n, buckets=2, rows=10):
    table = conn.create_table(f"day_{n}", "id BIGINT", "id", buckets=buckets)
    if rows:
        table.append([{"id": i} for i in range(rows)])
    return table


def poll_until(consumers, until, seconds=15.0, got=None):
    """Poll every consumer until ``until()``; the (table, bucket, offset) of every record read."""
    got = [] if got is None else got
    deadline = time.monotonic() + seconds
    while True:
        for c in consumers:
            for tb, data in c.poll(timeout="0.05s").items():
                got.extend((tb, o) for o in data.column("_offset").to_pylist())
        if until():
            return got
        if time.monotonic() > deadline:
            raise AssertionError("not reached in time")


def group_consumer(conn, pattern=r"day_\d+", group="g", listener=None, **kw):
    c = conn.consumer(group_id=group, auto_offset_reset="earliest", **kw)
    c.subscribe(pattern=pattern, listener=listener)
    return c


def test_bad_arguments_are_refused_and_the_subscription_kept(conn):
    # C17: exactly one of tables and pattern; a pattern that does not compile is refused
    day(conn, 1)
    with conn.consumer("day_1") as c:
        before = c.assignment()
        with pytest.raises(lk.InvalidArgumentError, match="not both"):
            c.subscribe(["day_1"], pattern="day_.*")
        with pytest.raises(lk.InvalidArgumentError, match="at least one table"):
            c.subscribe()
        with pytest.raises(lk.InvalidArgumentError, match="not a valid regular expression"):
            c.subscribe(pattern="day_(")
        with pytest.raises(lk.InvalidArgumentError):
            c.subscribe(pattern="a{99999999999999999999}")
        with pytest.raises(lk.InvalidTypeError):
            c.subscribe(pattern=5)
        with pytest.raises(lk.InvalidTypeError):
            c.subscribe(pattern=b"day_.*")
        with pytest.raises(lk.InvalidTypeError):
            c.subscribe(pattern="day_.*", listener=object())
        assert c.assignment() == before  # nothing lost: the last subscription stands
    with conn.consumer() as c:
        c.assign([TB("day_1", 0)])
        with pytest.raises(lk.IllegalStateError):
            c.subscribe(pattern="day_.*")  # docs/consumers.md: assign and subscribe do not mix


def test_a_dropped_table_is_no_offset_out_of_range(conn):
    # C17 with C5: the log of a dropped table is gone, not moved: no reset policy applies (with
    # "none", no OffsetOutOfRangeError), its buckets just leave the subscription
    day(conn, 1)
    keep = day(conn, 2)
    c = conn.consumer(auto_offset_reset="none")
    c.subscribe(pattern="day_.*")
    for tb in c.assignment():
        c.seek(tb, 0)
    got = poll_until([c], lambda: len(got) == 20, got=(got := []))
    conn.drop_table("day_1")
    poll_until([c], lambda: c.assignment() == set(keep.buckets))
    c.close()


def test_a_dropped_listed_table_is_not_read_or_waited_on(conn):
    # C17 with C5: a consumer without a group keeps a listed table's buckets after the drop,
    # but neither resets them nor spins on them: a poll waits its timeout quietly
    ctx = testing.context(conn)
    table = day(conn, 1)
    c = conn.consumer("day_1", auto_offset_reset="none")
    for tb in table.buckets:
        c.seek(tb, 0)
    got = poll_until([c], lambda: len(got) == 10, got=(got := []))
    conn.drop_table("day_1")
    c.poll(timeout="0.5s")
    before, started = ctx.store.round_trips, time.monotonic()
    assert c.poll(timeout="1s") == {}
    assert time.monotonic() - started >= 0.9 and ctx.store.round_trips - before <= 2
    c.close()


def test_a_consumer_without_a_group_follows_created_and_dropped_tables(conn):
    # C17: fullmatch on names; a table created later joins within seconds (a watch, no
    # polling loop), a non-matching one never does, a dropped one leaves; the listener is told
    # inside poll
    first = day(conn, 1)
    conn.create_table("day_1_archive", "id BIGINT", "id", buckets=2)  # "day_\d+" does not fullmatch
    listener = Recorder()
    c = conn.consumer(auto_offset_reset="earliest")
    c.subscribe(pattern=r"day_\d+", listener=listener)
    assert c.assignment() == set(first.buckets)
    got = poll_until([c], lambda: len(got) == 10, got=(got := []))
    second = day(conn, 2, buckets=3, rows=12)
    conn.create_table("night_2", "id BIGINT", "id", buckets=1).append([{"id": 1}])
    started = time.monotonic()
    poll_until(
        [c],
        lambda: c.assignment() == set(first.buckets) | set(second.buckets) and len(got) == 22,
        got=got,
    )
    assert time.monotonic() - started < 5
    assert {tb.table for tb, _ in got} == {"day_1", "day_2"}
    assert len(set(got)) == 22
    assert listener.calls == [("assigned", set(second.buckets))]
    dropped = set(first.buckets)  # (a dropped table's handle cannot list its buckets)
    conn.drop_table("day_1")
    poll_until([c], lambda: c.assignment() == set(second.buckets))
    assert listener.calls[-1] == ("revoked", dropped)
    c.close()


def test_a_group_consumes_a_matching_table_created_later_split_between_members(conn):
    # C17: the elected member rebalances when the matching set changes; two members split the
    # new buckets, no bucket is owned by two members at once and no record is read twice
    day(conn, 1, buckets=2)
    a, b = group_consumer(conn), group_consumer(conn)
    got = poll_until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 1)
    conn.create_table("other", "id BIGINT", "id", buckets=4).append([{"id": i} for i in range(20)])
    new = day(conn, 2, buckets=4, rows=40)
    overlaps = []

    def settled():
        members = conn.group_members("g")
        owned = [tb for m in members for tb in m.buckets]
        overlaps.append(len(owned) - len(set(owned)))
        return len(got) == 50 and len(a.assignment()) == len(b.assignment()) == 3

    poll_until([a, b], settled, got=got)
    assert set(overlaps) == {0}
    assert len(set(got)) == 50 and {tb.table for tb, _ in got} == {"day_1", "day_2"}
    assert a.assignment() | b.assignment() == set(new.buckets) | {TB("day_1", 0), TB("day_1", 1)}
    assert not a.assignment() & b.assignment()
    # which member gives up which bucket is the sticky assignor's choice: the members may see
    # the new table a moment apart, and the leader assigns each change as it hears of it
    # docs/consumers.md: describe_group lists every bucket
    # of the tables the group subscribes to by pattern
    a.commit()
    b.commit()
    described = conn.describe_group("g")
    assert sorted(zip(described.table, described.bucket)) == sorted(
        [("day_1", 0), ("day_1", 1)] + [("day_2", i) for i in range(4)]
    )
    assert set(described.consumer_id) == {a.member_id, b.member_id}
    a.close()
    b.close()


def test_a_dropped_table_leaves_the_group_assignment_and_its_commit_is_refused(conn):
    # C17: the listener sees the dropped table's buckets revoked (and only those: C15), the
    # positions of the rest are still committed, and a commit naming the dropped table's bucket
    # is refused with a clear error, writing nothing
    listener = Recorder()
    one, two = day(conn, 1), day(conn, 2)
    c = group_consumer(conn, listener=listener, enable_auto_commit=False)
    got = poll_until([c], lambda: len(got) == 20, got=(got := []))
    assert c.assignment() == set(one.buckets) | set(two.buckets)
    c.commit()
    dropped = set(one.buckets)  # (a dropped table's handle cannot list its buckets)
    conn.drop_table("day_1")
    poll_until([c], lambda: c.assignment() == set(two.buckets))
    assert listener.revoked() == dropped
    with pytest.raises(lk.TableNotFoundError, match="day_1' was dropped"):
        c.commit({TB("day_1", 0): 3})
    c.commit()  # the positions: only those of the tables that exist
    assert {r.table for r in conn.describe_group("g").itertuples()} == {"day_2"}
    c.close()


def test_a_commit_for_a_dropped_table_is_refused_before_the_consumer_notices(conn):
    # C17: the commit's transaction checks the table is still the one named: a bucket assigned
    # by hand whose table was dropped has its commit refused and nothing is stored
    ctx = testing.context(conn)
    table = day(conn, 1)
    c = conn.consumer(group_id="g", auto_offset_reset="earliest")
    c.assign(list(table.buckets))
    c.poll(timeout="1s")
    c.commit({TB("day_1", 0): 2})
    offsets_before = sorted(ctx.store.children(ctx.paths.group_offsets("g")))
    conn.drop_table("day_1")
    with pytest.raises(lk.TableNotFoundError, match="day_1' was dropped"):
        c.commit({TB("day_1", 0): 4})
    c.commit()  # the positions: a dropped table's are left out, nothing raised
    assert sorted(ctx.store.children(ctx.paths.group_offsets("g"))) == offsets_before
    c.close()  # auto-commit on close: nothing raised either


def test_pattern_and_list_members_in_one_group_are_each_assigned_only_their_tables(conn):
    # C17 with C9: members that list tables and members that subscribe by pattern mix in one
    # group; each is assigned buckets of its own tables only, also after a new table matches
    orders = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    first = day(conn, 1, buckets=4)
    listed = conn.consumer("orders", group_id="g", auto_offset_reset="earliest")
    by_pattern = group_consumer(conn)
    poll_until(
        [listed, by_pattern],
        lambda: (
            listed.assignment() == set(orders.buckets)
            and by_pattern.assignment() == set(first.buckets)
        ),
    )
    second = day(conn, 2, buckets=2)
    poll_until(
        [listed, by_pattern],
        lambda: by_pattern.assignment() == set(first.buckets) | set(second.buckets),
    )
    assert listed.assignment() == set(orders.buckets)
    both = group_consumer(conn, pattern="orders|day_2")
    poll_until(
        [listed, by_pattern, both],
        lambda: (
            len(both.assignment()) > 0
            and len(listed.assignment()) + len(by_pattern.assignment()) + len(both.assignment())
            == 10
        ),
    )
    assert {tb.table for tb in both.assignment()} <= {"orders", "day_2"}
    assert {tb.table for tb in listed.assignment()} <= {"orders"}
    assert {tb.table for tb in by_pattern.assignment()} <= {"day_1", "day_2"}
    for c in (listed, by_pattern, both):
        c.close()


def test_a_listed_table_that_is_dropped_leaves_the_group_assignment(conn):
    # C17 for listed tables too: the elected member watches the namespace's tables, so a
    # dropped table's buckets leave the assignment while the member's list still names it
    one, two = day(conn, 1), day(conn, 2)
    listener = Recorder()
    c = conn.consumer("day_1", "day_2", group_id="g", listener=listener)
    poll_until([c], lambda: c.assignment() == set(one.buckets) | set(two.buckets))
    dropped = set(one.buckets)  # (a dropped table's handle cannot list its buckets)
    conn.drop_table("day_1")
    poll_until([c], lambda: c.assignment() == set(two.buckets))
    assert listener.revoked() == dropped
    c.close()


@pytest.mark.parametrize("group", [None, "g"])
def test_a_table_dropped_and_created_again_is_read_as_the_new_table(conn, group):
    # C17: a table created under the name of a dropped one is another table: the consumer
    # reads the new one from its beginning (nothing of the old one, nothing of the new skipped)
    old = day(conn, 1, buckets=2, rows=10)
    c = conn.consumer(group_id=group, auto_offset_reset="earliest")
    c.subscribe(pattern="day_.*")
    got = poll_until([c], lambda: len(got) == 10, got=(got := []))
    if group:
        c.commit()
    conn.drop_table("day_1")
    new = conn.create_table("day_1", "id BIGINT", "id", buckets=3)
    assert new.table_id != old.table_id
    new.append([{"id": i} for i in range(100, 106)])
    fresh = poll_until(
        [c], lambda: c.assignment() == set(new.buckets) and len(fresh) == 6, got=(fresh := [])
    )
    assert sorted(o for _, o in fresh) == sorted(
        o for tb, n in new.end_offsets().items() for o in range(n)
    )
    c.close()


def test_unsubscribe_and_close_stop_the_watch(conn):
    # docs/consumers.md: a pattern subscription ends
    # with unsubscribe or close; no watch is left behind
    day(conn, 1)
    c = conn.consumer()
    c.subscribe(pattern="day_.*")
    watch = c._sub._pattern
    assert watch is not None and watch._watch.active
    c.unsubscribe()
    assert not watch._watch.active and c.assignment() == set()
    c.subscribe(pattern="day_.*")
    watch = c._sub._pattern
    c.subscribe(["day_1"])  # a list replaces the pattern
    assert not watch._watch.active
    c.subscribe(pattern="day_.*")
    watch = c._sub._pattern
    c.close()
    assert not watch._watch.active


def test_tables_created_and_dropped_under_two_consuming_members(conn):
    # C17 under churn: for 12 s a matching table is created every 0.3 s and appended to,
    # the oldest dropped while 4 exist (one name reused after its drop), while two members
    # consume by pattern with auto-commit. At every sample no bucket has two owners; poll and
    # commit raise nothing; every record of the tables left at the end is consumed
    import random
    import threading

    stop, errors, live = threading.Event(), [], {}

    def churn():
        n = 0
        try:
            while not stop.is_set():
                name = f"day_{0 if n == 10 else n}"  # day_0 was dropped at n == 4
                table = conn.create_table(name, "id BIGINT", "id", buckets=2)
                table.append([{"id": i} for i in range(6)])
                live[name] = table
                if (
                    len(live) > 4
                ):  # the oldest gets records just before its drop: positions not yet committed
                    oldest = live.pop(next(iter(live)))
                    oldest.append([{"id": i} for i in range(9, 12)])
                    stop.wait(random.uniform(0, 0.15))
                    conn.drop_table(oldest.name)
                for t in list(live.values())[-2:]:
                    t.append([{"id": i} for i in range(6, 9)])
                n += 1
                stop.wait(0.3)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    a = group_consumer(conn, pattern="day_.*", auto_commit_interval="0.2s")
    b = group_consumer(conn, pattern="day_.*", auto_commit_interval="0.2s")
    writer = threading.Thread(target=churn)
    writer.start()
    got, overlaps, samples = set(), 0, 0
    deadline = time.monotonic() + 12
    try:
        while time.monotonic() < deadline:
            for c in (a, b):
                for tb, data in c.poll(timeout="0.05s").items():
                    got.update((tb.table, tb.bucket, o) for o in data.column("_offset").to_pylist())
            owned = [tb for m in conn.group_members("g") for tb in m.buckets]
            overlaps += len(owned) - len(set(owned))
            samples += 1
    finally:
        stop.set()
        writer.join()
    assert not errors and overlaps == 0 and samples > 50
    wanted = {
        (t.name, tb.bucket, o)
        for t in live.values()
        for tb, end in t.end_offsets().items()
        for o in range(end)
    }
    poll_until(
        [a, b],
        lambda: (
            wanted <= got | {(tb.table, tb.bucket, o) for tb, o in rest}
            and {tb.table for c in (a, b) for tb in c.assignment()} == set(live)
        ),
        seconds=20,
        got=(rest := []),
    )
    a.close()
    b.close()
