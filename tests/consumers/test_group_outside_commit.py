"""Commits into a group from a consumer outside it (C13): a consumer with a manual
assignment and the group's id commits only while the group has no live members; once a member
is live, the commit raises ``GroupNotEmptyError`` and writes nothing, checked inside the
commit's ZooKeeper transaction."""

from __future__ import annotations

import logging
import time

import pytest

import leasekit as lk
from leasekit import testing

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(100)])
    return table


def live_member(conn):
    """A member of group g that consumed and committed the whole bucket (offset 100)."""
    member = conn.consumer(
        "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
    )
    deadline = time.monotonic() + 10
    while not (member.assignment() and member.position(TB("orders", 0)) >= 100):
        assert time.monotonic() < deadline, "the member got no records"
        member.poll(timeout="0.1s")
    member.commit()
    return member


def outsider(conn, **kwargs):
    consumer = conn.consumer(group_id="g", auto_offset_reset="earliest", **kwargs)
    consumer.assign([TB("orders", 0)])
    return consumer


def test_a_commit_from_outside_a_live_group_is_refused_and_writes_nothing(conn, orders):
    # docs/consumers.md: Kafka's coordinator refuses commits from non-members into a non-empty group
    member = live_member(conn)
    with outsider(conn, enable_auto_commit=False) as out:
        with pytest.raises(lk.GroupNotEmptyError, match="live member"):
            out.commit({TB("orders", 0): 0})
        with pytest.raises(lk.GroupNotEmptyError):
            out.commit({TB("orders", 0): 100})  # refused even when it would change nothing
    assert member.committed(TB("orders", 0)) == 100
    assert conn.group_status("g").buckets[TB("orders", 0)] != "REWIND"
    member.close()
    with outsider(conn, enable_auto_commit=False) as out:  # an empty group takes it again
        out.commit({TB("orders", 0): 40})
        assert out.committed(TB("orders", 0)) == 40


def test_a_member_joining_between_the_read_and_the_write_refuses_the_commit(
    conn, orders, zookeeper, warehouse, namespace, monkeypatch
):
    # docs/consumers.md, inside the transaction: the outsider reads
    # an empty group, then a member joins and is assigned the bucket
    # before the outsider's transaction runs: that transaction fails
    ctx = testing.context(conn)
    with lk.connect(zookeeper, warehouse, namespace=namespace) as other:
        joiner = other.consumer(
            "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
        )
        out = outsider(conn, enable_auto_commit=False)
        real = ctx.store.commit
        joined = []

        def commit(ops):
            if not joined and any("/offsets/" in op.path for op in ops):
                joined.append(True)
                deadline = time.monotonic() + 10
                while not joiner.assignment():  # joins and claims the bucket, the window open
                    assert time.monotonic() < deadline
                    joiner.poll(timeout="0.1s")
            return real(ops)

        monkeypatch.setattr(ctx.store, "commit", commit)
        with pytest.raises(lk.GroupNotEmptyError):
            out.commit({TB("orders", 0): 7})
        monkeypatch.undo()
        assert joined and joiner.committed(TB("orders", 0)) is None  # nothing was written
        out.close()
        joiner.close()


def test_reset_offsets_is_fenced_inside_its_transaction_too(
    conn, orders, zookeeper, warehouse, namespace, monkeypatch
):
    # C13: the reset's check of the group's members holds up to its write
    ctx = testing.context(conn)
    with outsider(conn, enable_auto_commit=False) as out:
        out.commit({TB("orders", 0): 10})
    with lk.connect(zookeeper, warehouse, namespace=namespace) as other:
        joiner = other.consumer(
            "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
        )
        real = ctx.store.commit

        def commit(ops):
            if any("/offsets/" in op.path for op in ops) and not joiner.assignment():
                deadline = time.monotonic() + 10
                while not joiner.assignment():
                    assert time.monotonic() < deadline
                    joiner.poll(timeout="0.1s")
            return real(ops)

        monkeypatch.setattr(ctx.store, "commit", commit)
        with pytest.raises(lk.GroupNotEmptyError):
            conn.reset_offsets("g", to="earliest", dry_run=False)
        monkeypatch.undo()
        assert joiner.committed(TB("orders", 0)) == 10
        joiner.close()


def test_auto_commit_and_close_of_an_outsider_skip_and_log(conn, orders, caplog):
    # C8: auto-commit from outside a live group logs and skips; close() raises nothing
    out = outsider(conn, auto_commit_interval="0.05s")
    assert sum(t.num_rows for t in out.poll(timeout="5s").values()) > 0
    member = live_member(conn)
    with caplog.at_level(logging.WARNING, logger="leasekit.consumers"):
        time.sleep(0.1)
        out.seek(TB("orders", 0), 3)
        out.poll()  # auto-commit due: refused by the group, not raised
        out.close()  # its final commit too
    assert "live member" in caplog.text
    assert member.committed(TB("orders", 0)) == 100
    member.close()
