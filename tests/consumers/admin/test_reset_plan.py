"""Executing a previewed reset (docs/consumers.md): ``reset_offsets(plan=...)`` applies
exactly the offsets a dry run showed, or refuses with ``CommitFailedError`` naming the buckets
whose committed offset changed since, checked in the commit's own transaction; nothing is
written then."""

from __future__ import annotations

import random
import threading
import time

import pandas as pd
import pytest

import leasekit as lk
from leasekit.consumers import offsets
from leasekit.testing import context

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=3)
    table.append([{"id": i, "v": "a"} for i in range(300)])
    return table


@pytest.fixture
def other(zookeeper, warehouse, namespace):
    """Another client of the namespace (another shell, another analyst)."""
    with lk.connect(zookeeper, warehouse, namespace=namespace) as connection:
        yield connection


def _commit(conn, offsets, group="g"):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


def _committed(conn, group="g"):
    frame = conn.describe_group(group)
    return {
        TB(t, int(b)): o
        for t, b, o in zip(frame["table"], frame["bucket"], frame["current_offset"])
    }


def test_execute_applies_exactly_the_plan_previewed_even_after_appends(conn, orders):
    # docs/consumers.md: what was previewed is what is applied: "latest" as it was at the preview
    _commit(conn, {tb: 10 for tb in orders.buckets})
    ends = orders.end_offsets()
    plan = conn.reset_offsets("g", to="latest")
    orders.append([{"id": 1000 + i, "v": "b"} for i in range(60)])  # the ends move on
    assert orders.end_offsets() != ends
    applied = conn.reset_offsets("g", plan=plan, dry_run=False)
    assert applied.equals(plan)
    assert _committed(conn) == ends  # the previewed ends, not today's


def test_a_preview_gone_stale_is_refused_and_nothing_changes(conn, orders, other):
    # the scenario seen: preview "shift by -100", another shell resets the group to latest,
    # Execute -> refused (it used to apply 1640 -> 1540)
    _commit(conn, {tb: 100 for tb in orders.buckets})
    plan = conn.reset_offsets("g", shift_by=-50)
    assert plan["new_offset"].tolist() == [50, 50, 50]
    other.reset_offsets("g", to="latest", dry_run=False)
    latest = orders.end_offsets()
    with pytest.raises(lk.CommitFailedError) as refused:
        conn.reset_offsets("g", plan=plan, dry_run=False)
    message = str(refused.value)
    for b in range(3):
        assert f"orders/{b} (planned from 100, now {latest[TB('orders', b)]})" in message
    assert "nothing was written" in message
    assert _committed(conn) == latest  # unchanged
    with pytest.raises(lk.CommitFailedError):  # a dry run of the plan checks it too
        conn.reset_offsets("g", plan=plan)


def test_one_changed_bucket_refuses_the_whole_plan(conn, orders, other):
    _commit(conn, {tb: 30 for tb in orders.buckets})
    plan = conn.reset_offsets("g", to="earliest")
    _commit(other, {TB("orders", 2): 31})  # one bucket moves
    with pytest.raises(lk.CommitFailedError, match=r"orders/2 \(planned from 30, now 31\)"):
        conn.reset_offsets("g", plan=plan, dry_run=False)
    assert _committed(conn) == {TB("orders", 0): 30, TB("orders", 1): 30, TB("orders", 2): 31}


def test_a_plan_from_never_committed_buckets_is_refused_once_someone_commits(conn, orders, other):
    _commit(conn, {TB("orders", 0): 5})
    plan = conn.reset_offsets("g", to="earliest", tables=["orders"])
    assert plan["current_offset"].isna().tolist() == [False, True, True]
    check = conn.reset_offsets("g", plan=plan)  # a dry run with a plan only checks it
    assert check.equals(plan) and _committed(conn)[TB("orders", 0)] == 5
    _commit(other, {TB("orders", 1): 7})
    with pytest.raises(lk.CommitFailedError, match=r"orders/1 \(planned from None, now 7\)"):
        conn.reset_offsets("g", plan=plan, dry_run=False)
    conn.reset_offsets("g", plan=conn.reset_offsets("g", to="earliest"), dry_run=False)
    assert set(_committed(conn).values()) == {0}


def test_plan_is_checked_before_anything_is_read_or_written(conn, orders):
    _commit(conn, {tb: 10 for tb in orders.buckets})
    plan = conn.reset_offsets("g", to="earliest")
    for kwargs in ({"to": "latest"}, {"shift_by": 1}, {"buckets": [TB("orders", 0)]}):
        with pytest.raises(lk.InvalidArgumentError, match="plan="):
            conn.reset_offsets("g", plan=plan, dry_run=False, **kwargs)
    with pytest.raises(lk.InvalidArgumentError, match="of group 'g', not 'h'"):
        conn.reset_offsets("h", plan=plan, dry_run=False)
    with pytest.raises(lk.InvalidArgumentError, match="lacks the columns"):
        conn.reset_offsets("g", plan=plan.drop(columns=["current_offset"]), dry_run=False)
    with pytest.raises(lk.InvalidArgumentError, match="twice"):
        conn.reset_offsets("g", plan=plan.iloc[[0, 0]], dry_run=False)
    with pytest.raises(TypeError):
        conn.reset_offsets("g", plan=[1, 2], dry_run=False)
    beyond = plan.assign(new_offset=plan["new_offset"] + 10_000)  # edited past the log's end
    with pytest.raises(lk.CommitFailedError, match="no longer fits the log"):
        conn.reset_offsets("g", plan=beyond, dry_run=False)
    assert set(_committed(conn).values()) == {10}


def test_a_plan_is_refused_while_the_group_has_live_members(conn, orders):
    _commit(conn, {tb: 10 for tb in orders.buckets})
    plan = conn.reset_offsets("g", to="earliest")
    member = conn.consumer(orders, group_id="g", enable_auto_commit=False)
    member.poll(timeout="2s")
    try:
        with pytest.raises(lk.GroupNotEmptyError):
            conn.reset_offsets("g", plan=plan, dry_run=False)
    finally:
        member.close()
    assert set(_committed(conn).values()) == {10}


def test_executing_a_plan_while_another_client_commits_never_overwrites_its_commit(
    conn, orders, other
):
    # the race, looped: a commit landing between the preview and the execute's transaction
    # makes the execute refuse; an execute that succeeds wrote right after the previewed offset
    tb = TB("orders", 0)
    rng = random.Random(7)
    outcomes = {"applied": 0, "refused": 0}
    with other.consumer(group_id="g", enable_auto_commit=False) as rival:
        rival.assign([tb])
        for i in range(40):
            base, theirs, ours = i, 20 + i, 40 + i  # all inside the log ([0, ~100))
            _commit(conn, {tb: base})
            plan = conn.reset_offsets("g", to=ours, buckets=[tb])
            delay = rng.choice([0.0, 0.001, 0.003, 0.006, 0.01, 0.02])

            def commit_theirs(delay=delay, theirs=theirs):
                time.sleep(delay)
                rival.commit({tb: theirs})

            racer = threading.Thread(target=commit_theirs)
            racer.start()
            try:
                conn.reset_offsets("g", plan=plan, dry_run=False)
                applied = True
            except lk.CommitFailedError:
                applied = False
            racer.join()
            window = offsets.fetch(context(conn), "g", {"orders": orders}, [tb])[tb]
            offsets_seen = [c.offset for c in window.history]  # its commit window, oldest first
            since = offsets_seen[len(offsets_seen) - 1 - offsets_seen[::-1].index(base) :]
            if applied:
                outcomes["applied"] += 1
                assert since[:2] == [base, ours], since  # written on the previewed offset
                assert since == [base, ours, theirs], since  # and theirs came after
            else:
                outcomes["refused"] += 1
                assert since == [base, theirs], since  # ours never written
    assert outcomes["applied"] + outcomes["refused"] == 40


def test_a_commit_between_the_last_read_and_the_transaction_refuses_it(
    conn, orders, other, monkeypatch
):
    # the check is the transaction's own (the versions read): a commit that lands after every
    # read of the execute and just before its transaction still refuses it
    _commit(conn, {tb: 10 for tb in orders.buckets})
    plan = conn.reset_offsets("g", to="earliest")
    store = context(conn).store
    real_commit = store.commit
    landed = []

    def commit_after_a_rival(ops, *args, **kwargs):
        if not landed:  # the rival's commit, through its own connection, first
            landed.append(True)
            _commit(other, {TB("orders", 1): 11})
        return real_commit(ops, *args, **kwargs)

    monkeypatch.setattr(store, "commit", commit_after_a_rival)
    with pytest.raises(lk.CommitFailedError, match=r"orders/1 \(planned from 10, now 11\)"):
        conn.reset_offsets("g", plan=plan, dry_run=False)
    monkeypatch.undo()
    assert landed and _committed(conn) == {
        TB("orders", 0): 10,
        TB("orders", 1): 11,
        TB("orders", 2): 10,
    }


def test_buckets_alone_reset_a_table_the_group_never_committed(conn, orders):
    # C13: buckets= names its tables, as kafka-consumer-groups --topic orders:0 does; before,
    # a group without offsets of the table got an empty plan and nothing written
    other_table = conn.create_table("other", "id BIGINT, v STRING", "id", buckets=1)
    other_table.append([{"id": 1, "v": "a"}])
    _commit(conn, {TB("other", 0): 1})
    plan = conn.reset_offsets("g", to=5, buckets=[TB("orders", 0)], dry_run=False)
    assert list(zip(plan["table"], plan["bucket"], plan["new_offset"])) == [("orders", 0, 5)]
    committed = {tb: o for tb, o in _committed(conn).items() if o is not pd.NA}
    assert committed == {TB("other", 0): 1, TB("orders", 0): 5}
    with pytest.raises(lk.errors.InvalidArgumentError, match="orders:7|orders.*7"):
        conn.reset_offsets("g", to=5, buckets=[TB("orders", 7)])
    with pytest.raises(lk.errors.TableNotFoundError):
        conn.reset_offsets("g", to=5, buckets=[TB("missing", 0)])
