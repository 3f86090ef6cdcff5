"""Consumer groups (C9–C11, C14, C15) on the real ZooKeeper: the oldest member
assigns, members split the buckets, a join moves only what it must and a commit is fenced by
membership and ownership."""

from __future__ import annotations

import threading
import time

import pytest

import leasekit as lk
from leasekit import testing
from leasekit.zk import Delete

TB = lk.TableBucket


class Recorder(lk.BucketRebalanceListener):
    def __init__(self):
        self.calls, self.consumer = [], None

    def on_buckets_revoked(self, revoked):
        self.calls.append(("revoked", set(revoked)))
        self.consumer.commit({tb: self.consumer.position(tb) for tb in revoked})  # C10: accepted

    def on_buckets_assigned(self, assigned):
        self.calls.append(("assigned", set(assigned)))


def member(conn, listener=None):
    c = conn.consumer(
        "orders",
        group_id="g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        listener=listener,
    )
    if listener is not None:
        listener.consumer = c
    return c


def poll_all(consumers, until, seconds=15.0):
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            for tb, data in c.poll(timeout="0.05s").items():
                got.extend((tb, o) for o in data.column("_offset").to_pylist())
        if until():
            return got
    raise AssertionError("the group did not settle in time")


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    table.append([{"id": i} for i in range(40)])
    return table


def test_members_split_the_buckets_and_only_moving_buckets_are_revoked(conn, orders):
    # C9: every bucket exactly once, balanced; C14: one member assigns, with a generation;
    # C15: the first member loses only the buckets that move; C10: revoked before the new owner
    # starts, which resumes from the commit made in on_buckets_revoked: no record twice
    la, lb = Recorder(), Recorder()
    a = member(conn, la)
    first = a.poll()
    assert a.assignment() == set(orders.buckets) and a.generation == 0
    assert sum(t.num_rows for t in first.values()) == 40
    b = member(conn, lb)
    again = poll_all([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
    assert again == []  # b starts from what a committed while handing the buckets over
    assert (
        a.assignment() | b.assignment() == set(orders.buckets)
        and not a.assignment() & b.assignment()
    )
    assert a.generation == b.generation >= 1
    assert la.calls[:2] == [("assigned", set(orders.buckets)), ("revoked", b.assignment())]
    assert lb.calls == [("assigned", b.assignment())]
    orders.append([{"id": i} for i in range(40, 80)])
    new = []
    deadline = time.monotonic() + 10
    while len(new) < 40 and time.monotonic() < deadline:
        new += poll_all([a, b], lambda: True)
    assert len(new) == len(set(new)) == 40  # each new record once, by its bucket's owner
    assert {tb for tb, _ in new} == set(orders.buckets)
    members = {m.member_id for m in conn.group_members("g")}
    assert members == {a.member_id, b.member_id}
    b.close()
    poll_all([a], lambda: len(a.assignment()) == 4)
    a.close()


def test_a_commit_from_a_member_no_longer_in_the_group_is_refused(conn, orders):
    # C11: membership is checked inside the commit's transaction; nothing is written
    ctx = testing.context(conn)
    a = member(conn)
    a.poll()
    tb = TB("orders", 0)
    a.commit({tb: 5})
    ctx.store.commit([Delete(ctx.paths.member("g", a.member_id))])  # as when its session expires
    with pytest.raises(lk.CommitFailedError):
        a.commit({tb: 7})
    assert a.committed(tb) == 5
    a.close()


def test_a_fenced_commit_is_refused_even_when_the_offsets_are_already_stored(conn, orders):
    # C11: a member that lost its buckets has its commit refused even when the new owner has
    # stored the very same offsets already (nothing would be written: the fence still holds)
    ctx = testing.context(conn)
    a = member(conn)
    a.poll()
    tb = TB("orders", 0)
    a.commit({tb: 5})
    ctx.store.commit([Delete(ctx.paths.member("g", a.member_id))])  # as when its session expires
    conn.reset_offsets("g", to=7, buckets=[tb], dry_run=False)  # no live member left: allowed
    with pytest.raises(lk.CommitFailedError):
        a.commit({tb: 7})
    a.close()


def test_when_the_leader_leaves_the_next_oldest_member_assigns(conn, orders):
    # C14: one member at a time computes the assignment (the oldest); when it leaves, the next
    # oldest takes over and publishes the next generation naming itself as leader; C9 exact
    # coverage, balanced within 1
    ctx = testing.context(conn)
    a, b, c = member(conn), member(conn), member(conn)
    poll_all([a], lambda: a.assignment() == set(orders.buckets))
    poll_all([a, b, c], lambda: sorted(len(x.assignment()) for x in (a, b, c)) == [1, 1, 2])
    record = ctx.store.get(ctx.paths.group_assignment("g"))
    from leasekit.zk.formats import AssignmentRecord

    first = AssignmentRecord.decode(record, ctx.paths.group_assignment("g"))
    assert first.leader == a.member_id
    a.close()
    poll_all([b, c], lambda: len(b.assignment()) == len(c.assignment()) == 2)
    now = AssignmentRecord.decode(
        ctx.store.get(ctx.paths.group_assignment("g")), ctx.paths.group_assignment("g")
    )
    assert now.leader == b.member_id and now.generation > first.generation
    assert b.generation == c.generation == now.generation
    assert (
        b.assignment() | c.assignment() == set(orders.buckets)
        and not b.assignment() & c.assignment()
    )
    b.close()
    c.close()


def test_members_joining_together_make_one_generation(conn, orders):
    # C14: the leader waits briefly after a membership change, so joins close together are
    # assigned once (no rebalance storm): the generation goes up by one for three joins
    a = member(conn)
    poll_all([a], lambda: a.assignment() == set(orders.buckets))
    assert a.generation == 0
    others = [member(conn) for _ in range(3)]
    start = threading.Barrier(len(others))

    def join(o) -> None:
        start.wait()
        o.poll()

    joins = [threading.Thread(target=join, args=(o,)) for o in others]
    for t in joins:  # all three join at once, within the leader's debounce even on a busy machine
        t.start()
    for t in joins:
        t.join()
    poll_all([a, *others], lambda: all(len(x.assignment()) == 1 for x in (a, *others)))
    assert {x.generation for x in (a, *others)} == {1}
    for x in (a, *others):
        x.close()


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_other_assignors_split_every_table(conn, assignor):
    # C9: "range" (per table, within 1 per table) and "roundrobin" (within 1) in a real group
    for name in ("a", "b"):
        conn.create_table(name, "id BIGINT", "id", buckets=3).append([{"id": i} for i in range(9)])
    c1, c2 = (conn.consumer("a", "b", group_id="g", assignor=assignor) for _ in range(2))
    poll_all([c1], lambda: len(c1.assignment()) == 6)
    poll_all(
        [c1, c2],
        lambda: (
            len(c1.assignment()) + len(c2.assignment()) == 6
            and min(len(c1.assignment()), len(c2.assignment())) == 3 - (assignor == "range")
        ),
    )
    assert not c1.assignment() & c2.assignment()
    if assignor == "range":  # Kafka's range: the first member gets the extra bucket of each table
        for table in ("a", "b"):
            counts = sorted(
                len({tb for tb in c.assignment() if tb.table == table}) for c in (c1, c2)
            )
            assert counts == [1, 2]
    c1.close()
    c2.close()


def test_unsubscribe_leaves_and_subscribe_joins_again_as_a_new_member(conn, orders):
    # docs/consumers.md: unsubscribe hands the buckets back (listener told) and leaves at once; a
    # later subscribe joins as a new member at its next poll
    listener = Recorder()
    a = member(conn, listener)
    poll_all([a], lambda: a.assignment() == set(orders.buckets))
    first = a.member_id
    a.unsubscribe()
    assert a.assignment() == set() and a.member_id is None
    assert conn.group_members("g") == []
    a.subscribe(["orders"])
    poll_all([a], lambda: a.assignment() == set(orders.buckets))
    assert a.member_id not in (None, first)
    assert [kind for kind, _ in listener.calls] == ["assigned", "revoked", "assigned"]
    a.close()
