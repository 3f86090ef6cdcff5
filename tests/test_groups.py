"""Consumer groups (DESIGN §6.5, C9–C11, C14, C15) on the real ZooKeeper: the oldest member
assigns, members split the buckets, a join moves only what it must and a commit is fenced by
membership and ownership."""

from __future__ import annotations

import time

import pytest

import leasekit as lk
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
    c = conn.consumer("orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False,
                      listener=listener)
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
    assert a.assignment() | b.assignment() == set(orders.buckets) and not a.assignment() & b.assignment()
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
    a = member(conn)
    a.poll()
    tb = TB("orders", 0)
    a.commit({tb: 5})
    conn.store.commit([Delete(conn.paths.member("g", a.member_id))])  # as when its session expires
    with pytest.raises(lk.CommitFailedError):
        a.commit({tb: 7})
    assert a.committed(tb) == 5
    a.close()
