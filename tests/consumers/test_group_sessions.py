"""A group member whose ZooKeeper connection is cut and restored (C16), and one that stops
polling for longer than max_poll_interval, on the real ZooKeeper: a suspended member returns
no records and commits nothing; a member whose session was lost meanwhile, or that left for
not polling, hears its whole assignment revoked and rejoins as a new member."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import Recorder, TcpProxy

import leasekit as lk
from leasekit import testing

TB = lk.TableBucket


@pytest.fixture
def proxy(zookeeper):
    p = TcpProxy(zookeeper)
    yield p
    p.close()


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=4)
    table.append([{"id": i} for i in range(40)])
    return table


@pytest.fixture
def behind_proxy(proxy, warehouse, namespace):
    """A connection whose every ZooKeeper session runs through the proxy."""
    with lk.connect(proxy.address, warehouse, namespace=namespace) as c:
        yield c


def consumed(batch):
    return [(tb, o) for tb, t in batch.items() for o in t.column("_offset").to_pylist()]


def poll_until(consumers, until, seconds=20.0):
    got = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            got += consumed(c.poll(timeout="0.05s"))
        if until():
            return got
    raise AssertionError("the condition was not reached in time")


def test_a_suspended_member_returns_no_records_and_commits_nothing_then_carries_on(
    conn, behind_proxy, proxy, orders
):
    # C16: while the connection is cut the member returns no records and commits nothing;
    # restored within its session it carries on as the same member, owning the same buckets
    listener = Recorder()
    c = behind_proxy.consumer(
        "orders",
        group_id="g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout="8s",
        listener=listener,
    )
    first = poll_until([c], lambda: c.assignment() == set(orders.buckets))
    first += poll_until([c], lambda: True)
    assert len(first) == 40
    c.commit()
    member, generation = c.member_id, c.generation
    committed = {tb: conn.consumer(group_id="g").committed(tb) for tb in orders.buckets}

    proxy.cut()
    orders.append([{"id": i} for i in range(40, 80)])  # through the direct connection
    deadline = time.monotonic() + 10
    while not c._coordinator.suspended and time.monotonic() < deadline:
        assert c.poll(timeout="0.1s") == {}
    assert c._coordinator.suspended, "kazoo never reported the cut connection"
    for _ in range(5):
        assert c.poll(timeout="0.1s") == {}  # records are there, the member returns none
    with pytest.raises(lk.CommitFailedError):
        c.commit({TB("orders", 0): 1})
    assert {tb: conn.consumer(group_id="g").committed(tb) for tb in orders.buckets} == committed

    proxy.restore()
    later = []
    deadline = time.monotonic() + 15
    while len(later) < 40 and time.monotonic() < deadline:
        later += consumed(c.poll(timeout="0.2s"))
    assert sorted(o for _, o in later) == sorted(o for _, o in consumed_offsets(orders, 40))
    assert c.member_id == member and c.generation == generation  # the same member, not a new one
    assert listener.calls == [("assigned", set(orders.buckets))]  # nothing revoked
    c.close()


def consumed_offsets(orders, since_id):
    """(bucket, offset) of the records with ``id >= since_id``, read from the log."""
    from helpers import read_log

    return [
        (b, r["_offset"])
        for b, rows in read_log(orders).items()
        for r in rows
        if r["id"] >= since_id
    ]


def test_a_member_whose_session_is_lost_hears_everything_revoked_and_rejoins(
    conn, behind_proxy, proxy, orders
):
    # C16: cut past its session timeout, the member's buckets move to the other member (C12);
    # when the connection returns it treats its whole assignment as revoked (listener called,
    # no record returned while cut) and rejoins as a new member; no record is skipped
    la, lb = Recorder(), Recorder()
    a = behind_proxy.consumer(
        "orders",
        group_id="g",
        auto_offset_reset="earliest",
        session_timeout="2s",
        listener=la,
        auto_commit_interval="0.2s",
    )
    b = conn.consumer(
        "orders",
        group_id="g",
        auto_offset_reset="earliest",
        session_timeout="2s",
        listener=lb,
        auto_commit_interval="0.2s",
    )
    seen = poll_until([a], lambda: a.assignment() == set(orders.buckets))
    seen += poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
    mine, old_member = a.assignment(), a.member_id
    time.sleep(0.3)
    a.poll()  # auto-commit its positions
    proxy.cut()
    orders.append([{"id": i} for i in range(40, 80)])
    cut_at = time.monotonic()
    during = []
    while b.assignment() != set(orders.buckets):
        assert time.monotonic() - cut_at < 2 + 5, (
            "the lost member's buckets did not move in time"
        )  # C12
        during += consumed(a.poll(timeout="0.05s"))
        seen += consumed(b.poll(timeout="0.05s"))
    assert during == []  # suspended: nothing returned
    proxy.restore()
    seen += poll_until(
        [a, b],
        lambda: (
            a.member_id not in (None, old_member)
            and len(a.assignment()) == 2
            and len(b.assignment()) == 2
        ),
    )
    seen += poll_until([a, b], lambda: {o for tb, o in seen} >= set(range(20)), seconds=10)
    assert ("revoked", mine) in la.calls  # the whole assignment, told to the listener
    assert la.calls.index(("revoked", mine)) < len(la.calls) - 1  # then assigned again
    ends = orders.end_offsets()
    for tb in orders.buckets:  # at least once: every offset of every bucket returned
        assert {o for t, o in seen if t == tb} >= set(range(ends[tb])), tb
    a.close()
    b.close()


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(conn, orders):
    # max_poll_interval (docs/consumers.md; Kafka's max.poll.interval.ms): a member outside poll
    # that long leaves the group, its buckets go to the others; its next poll hears them revoked and
    # rejoins; time spent blocked inside poll does not count
    la = Recorder()
    a = conn.consumer(
        "orders",
        group_id="g",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_interval="1.5s",
        listener=la,
    )
    b = conn.consumer(
        "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
    )
    poll_until([a], lambda: a.assignment() == set(orders.buckets))
    assert a.poll(timeout="2.5s") == {}  # blocked in poll longer than the interval: still a member
    first = a.member_id
    assert {m.member_id for m in conn.group_members("g")} == {first}
    poll_until(
        [b], lambda: b.assignment() == set(orders.buckets), seconds=15
    )  # a is idle meanwhile
    assert first not in {m.member_id for m in conn.group_members("g")}
    with pytest.raises(lk.CommitFailedError):
        a.commit()  # not a member any more: nothing written
    a.poll()
    assert ("revoked", set(orders.buckets)) in la.calls and a.member_id not in (None, first)
    poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
    a.close()
    b.close()


def test_under_auto_commit_a_refused_commit_never_reaches_user_code(conn, orders):
    # C11: with auto-commit, a member no longer in the group (its znode gone, as after a
    # session expiry) rejoins instead of raising, from poll and from close alike
    ctx = testing.context(conn)
    from leasekit.zk import Delete

    a = conn.consumer(
        "orders", group_id="g", auto_offset_reset="earliest", auto_commit_interval="0.1s"
    )
    poll_until([a], lambda: a.assignment() == set(orders.buckets))
    first = a.member_id
    ctx.store.commit([Delete(ctx.paths.member("g", first))])
    time.sleep(0.2)
    poll_until(
        [a], lambda: a.member_id not in (None, first) and a.assignment() == set(orders.buckets)
    )
    b = conn.consumer(
        "orders", group_id="g", auto_offset_reset="earliest", auto_commit_interval="1h"
    )
    poll_until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 2)
    orders.append([{"id": i} for i in range(40, 80)])
    poll_until(
        [b],
        lambda: all(
            b.position(tb) == e for tb, e in orders.end_offsets().items() if tb in b.assignment()
        ),
    )
    ctx.store.commit([Delete(ctx.paths.member("g", b.member_id))])
    b.close()  # its closing commit is refused: nothing raised, nothing written
    a.close()


MEMBER = str(Path(__file__).resolve().parents[1] / "group_member.py")


def _lines(path):
    return [line.split(" ") for line in path.read_text().splitlines()] if path.exists() else []


def _wait(what, until, process, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not until():
        assert process.poll() is None, f"the member exited with {process.returncode}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_member_paused_past_its_session_hands_out_none_of_what_it_had_buffered(
    conn, proxy, zookeeper, warehouse, namespace, tmp_path
):
    # C16 (Kafka's consumer drops its fetch buffer when it finds its membership lost): a member
    # that read ahead (records buffered, not handed out) is stopped with SIGSTOP past its
    # session; the other member takes its buckets over and reads them from the committed
    # offsets. Resumed, the first member hears its whole assignment revoked before it hands
    # out anything, and never hands out the records it had buffered: the new owner has them.
    # (Its connections go through the proxy, held while it is stopped: resumed, its ZooKeeper
    # client hears nothing of the expiry until its own ping times out, which makes the window
    # between resuming and hearing of it, otherwise a race with the server's closing of the
    # connection, last about a second.)
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(400)])  # one segment of ~200 records per bucket
    events = tmp_path / "a.events"
    a = subprocess.Popen(
        [sys.executable, MEMBER, proxy.address, warehouse, namespace, str(events)]
        + ["--session-timeout", "2s", "--getone", "5", "--pause", "1.0"]
    )
    b = None
    try:
        _wait("a to hand out records", lambda: sum(f[0] == "R" for f in _lines(events)) >= 5, a)
        a.send_signal(signal.SIGSTOP)  # between two bursts: the rest of a segment buffered
        proxy.hold()
        handed = {(int(f[1]), int(f[2])) for f in _lines(events) if f[0] == "R"}
        b = conn.consumer(
            "orders",
            group_id="g",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout="2s",
        )
        ends = {tb.bucket: end for tb, end in table.end_offsets().items()}
        got = poll_until(
            [b],
            lambda: (
                all(b.position(tb) == ends[tb.bucket] for tb in b.assignment())
                and len(b.assignment()) == 2
            ),
            seconds=20,
        )
        b.commit()  # what a reads after rejoining starts from the end
        resumed_at = len(_lines(events))
        a.send_signal(signal.SIGCONT)
        _wait(
            "a to hear its buckets revoked",
            lambda: any(f[0] == "REVOKED" for f in _lines(events)[resumed_at:]),
            a,
            seconds=15,
        )
        time.sleep(1.0)  # a goes on taking records meanwhile
        after = _lines(events)[resumed_at:]
        again = {(int(f[1]), int(f[2])) for f in after if f[0] == "R"}
        from_b = {(tb.bucket, o) for tb, o in got}
        assert handed and handed <= from_b  # b read what a had handed out too (C12)
        assert again & from_b == set(), f"a handed out {len(again & from_b)} buffered records"
        assert after[0][0] == "REVOKED"  # before anything else (C16)
    finally:
        a.send_signal(signal.SIGCONT)
        a.kill()
        a.wait(timeout=30)
        if b is not None:
            b.close()
