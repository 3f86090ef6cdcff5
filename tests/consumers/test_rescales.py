"""Consumers and groups across rescales (K5, K6): parent first, a group assigning
sealed buckets until drained and new buckets once their parents are, new buckets read from
their beginning, and describe_group covering sealed buckets until drained."""

from __future__ import annotations

import time

import pandas as pd
import pytest

import leasekit as lk

TB = lk.TableBucket


class Keys:
    """Appends to every key with increasing sequence numbers, and checks what was delivered:
    every record once at least, none skipped, per key in sequence order (a parent's records
    before its children's, K2 K5)."""

    def __init__(self, table, keys: int = 60):
        self.table, self.keys, self.seq, self.got = table, keys, 0, []

    def append(self, rounds: int = 1) -> None:
        for _ in range(rounds):
            self.seq += 1
            self.table.append([{"k": k, "seq": self.seq} for k in range(self.keys)])

    def take(self, batch) -> None:
        for data in batch.values():
            self.got += zip(data.column("k").to_pylist(), data.column("seq").to_pylist())

    def check(self) -> None:
        wanted = {(k, s) for k in range(self.keys) for s in range(1, self.seq + 1)}
        assert set(self.got) == wanted  # none skipped
        first: dict[int, list[int]] = {}
        for k, s in dict.fromkeys(self.got):  # each record's first delivery, in order
            first.setdefault(k, []).append(s)
        assert all(seqs == sorted(seqs) for seqs in first.values())  # per-key order kept


@pytest.fixture
def table(conn):
    return conn.create_table("t", "k BIGINT, seq BIGINT", "k", buckets=10)


def poll_until(consumers, keys, until, seconds=20.0, commit=True):
    """Poll each consumer in turn (committing what it got) until ``until()`` holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for c in consumers:
            batch = c.poll(timeout="0.05s")
            keys.take(batch)
            if commit and c.group_id is not None and c.assignment():
                c.commit()
        if until():
            return
    raise AssertionError("the consumers did not get there in time")


def poll_for(consumers, keys, seconds):
    """Poll each consumer in turn (committing what it got) for ``seconds``."""
    deadline = time.monotonic() + seconds
    poll_until(consumers, keys, lambda: time.monotonic() >= deadline, seconds + 5)


def sizes(consumers) -> list[int]:
    return sorted((len(c.assignment()) for c in consumers), reverse=True)


def member(conn, **options):
    options.setdefault("auto_offset_reset", "earliest")
    return conn.consumer("t", group_id="g", enable_auto_commit=False, **options)


def test_a_group_assigns_a_split_bucket_after_its_parent_4_3_3_then_4_4_3_then_6_5(conn, table):
    # K5 (DataHub's scenario), C9, C15: 10 buckets over A, B, C (sticky) 4/3/3; one of A's
    # buckets split: while the parent is not drained A keeps it and no member gets the new
    # buckets; once A committed the parent to its seal, the new buckets are assigned: 4/4/3;
    # C stops: 6/5. Every record delivered, none skipped, each key's records in order.
    keys = Keys(table)
    keys.append(2)
    group = [member(conn) for _ in range(3)]
    poll_until(group, keys, lambda: sizes(group) == [4, 3, 3] and len(keys.got) == 120)
    a = next(c for c in group if len(c.assignment()) == 4)
    parent = min(a.assignment())
    a.pause(parent)  # A does not drain the parent yet
    keys.append(1)
    kept = {c.member_id: c.assignment() for c in group}
    children = set(table.split_bucket(parent))
    keys.append(2)
    sealed_at = table.end_offsets()[parent]
    poll_for(group, keys, 2.0)  # the leader had the rescale and every commit since
    assert {c.member_id: c.assignment() for c in group} == kept  # nothing moved
    assert not children & set().union(*(c.assignment() for c in group))
    assert a.committed(parent) < sealed_at
    a.resume(parent)
    poll_until(group, keys, lambda: sizes(group) == [4, 4, 3])
    assert a.committed(parent) == sealed_at
    assert parent not in set().union(*(c.assignment() for c in group))
    assert children <= set().union(*(c.assignment() for c in group))
    assert all(kept[c.member_id] - {parent} <= c.assignment() for c in group)  # C15
    keys.append(2)
    c = min((c for c in group if c is not a), key=lambda c: c.member_id)
    c.close()
    rest = [m for m in group if m is not c]
    poll_until(rest, keys, lambda: sizes(rest) == [6, 5])
    keys.append(1)
    poll_until(rest, keys, lambda: len(set(keys.got)) == 60 * keys.seq)
    keys.check()
    for m in rest:
        m.close()


def test_without_a_group_the_parent_is_read_to_its_seal_before_any_child(conn, table):
    # K5: a consumer without a group reads a split bucket's parent to its seal before any
    # record of the new buckets, then drops the parent; K6: the new buckets are read from 0
    # although auto_offset_reset is "latest" (records written between the split and the drain
    # are not skipped)
    keys = Keys(table)
    consumer = conn.consumer("t", auto_offset_reset="latest", max_poll_records=5)
    consumer.poll()  # positions at the log ends
    keys.append(2)
    parent = TB("t", 3)
    children = set(table.split_bucket(parent))
    keys.append(2)
    sealed_at = table.end_offsets()[parent]
    order = []
    deadline = time.monotonic() + 20
    while len(set(keys.got)) < 4 * 60 and time.monotonic() < deadline:
        batch = consumer.poll(timeout="0.1s")
        keys.take(batch)
        order += [tb for tb in batch]
        if consumer.assignment() & children:
            assert parent not in consumer.assignment()  # the drained parent left
        if parent in consumer.assignment() and parent in batch:
            assert not consumer.assignment() & children
    keys.check()
    written = {tb for tb in children if table.end_offsets()[tb] > 0}
    assert parent in order and written and written <= set(order)
    assert max(i for i, tb in enumerate(order) if tb == parent) < min(
        i for i, tb in enumerate(order) if tb in children
    )
    assert consumer.assignment() == set(table.buckets)
    assert sealed_at > 0
    consumer.close()


def test_parent_first_false_reads_the_new_buckets_at_once(conn, table):
    # K5: with parent_first=False the new buckets are read at once, the parent still to its seal
    keys = Keys(table)
    keys.append(3)
    consumer = conn.consumer("t", auto_offset_reset="earliest", parent_first=False)
    parent = TB("t", 0)
    consumer.pause(parent)
    keys.take(consumer.poll())
    children = set(table.split_bucket(parent))
    keys.append(1)
    deadline = time.monotonic() + 10
    while not children <= consumer.assignment() and time.monotonic() < deadline:
        keys.take(consumer.poll(timeout="0.1s"))
    assert children | {parent} <= consumer.assignment()
    consumer.resume(parent)
    deadline = time.monotonic() + 10
    while len(set(keys.got)) < 4 * 60 and time.monotonic() < deadline:
        keys.take(consumer.poll(timeout="0.1s"))
    assert set(keys.got) == {(k, s) for k in range(60) for s in range(1, 5)}
    keys.take(consumer.poll(timeout="0.5s"))
    assert parent not in consumer.assignment()  # drained: it left
    with pytest.raises(lk.InvalidTypeError):
        conn.consumer("t", parent_first="yes")
    consumer.close()


def test_describe_group_shows_a_sealed_bucket_with_its_lag_until_drained(conn, table):
    # K6: describe_group and group_status cover a sealed bucket until the group committed it
    # to its seal (its lag is not hidden by the rescale), the new buckets with theirs; then the
    # sealed bucket leaves them
    keys = Keys(table)
    keys.append(2)
    c = member(conn)
    poll_until([c], keys, lambda: len(keys.got) == 120)
    parent = TB("t", 4)
    c.pause(parent)
    keys.append(1)
    poll_for([c], keys, 0.5)
    children = table.split_bucket(parent)
    keys.append(1)
    sealed_at = table.end_offsets()[parent]
    rows = conn.describe_group("g").set_index("bucket")
    assert set(rows.index) == set(range(12))  # ten active, the sealed parent, the new ones
    assert rows.loc[4, "log_end_offset"] == sealed_at
    assert rows.loc[4, "current_offset"] == c.committed(parent) < sealed_at
    assert rows.loc[4, "lag"] == sealed_at - c.committed(parent) > 0
    for tb in children:  # not assigned yet, never committed: their log ends show
        assert pd.isna(rows.loc[tb.bucket, "current_offset"])
        assert rows.loc[tb.bucket, "log_end_offset"] == table.end_offsets()[tb] > 0
    assert parent in conn.group_status("g").buckets
    assert set(children) <= conn.group_status("g").unowned
    c.resume(parent)
    poll_until([c], keys, lambda: parent not in c.assignment() and set(children) <= c.assignment())
    poll_until([c], keys, lambda: len(set(keys.got)) == 60 * keys.seq)
    rows = conn.describe_group("g").set_index("bucket")
    assert 4 not in rows.index and {tb.bucket for tb in children} <= set(rows.index)
    assert (rows["lag"] == 0).all()
    assert parent not in conn.group_status("g").buckets
    keys.check()
    c.close()


def test_a_pattern_subscription_follows_a_rescale(conn, table):
    # K5, C17: a group subscribed by pattern gets the new buckets once the parent is drained,
    # and so does a consumer without a group subscribed by pattern
    grouped = conn.consumer(group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    grouped.subscribe(pattern="t|other")
    alone = conn.consumer(auto_offset_reset="earliest")
    alone.subscribe(pattern="t.*")
    ga, al = Keys(table), Keys(table)
    ga.append(2)
    al.seq = ga.seq
    poll_until([grouped], ga, lambda: len(ga.got) == 120)
    poll_until([alone], al, lambda: len(al.got) == 120)
    children = set(table.split_bucket(7))
    ga.append(1)
    al.seq = ga.seq
    for consumer, keys in ((grouped, ga), (alone, al)):
        poll_until(
            [consumer],
            keys,
            lambda c=consumer, k=keys: children <= c.assignment() and len(set(k.got)) == 180,
        )
        assert TB("t", 7) not in consumer.assignment()
        keys.check()
    grouped.close()
    alone.close()


def test_what_a_consumer_reads_follows_the_lineage_of_splits_and_merges():
    # K5: sealed buckets until drained; a new bucket once every ancestor is drained (a parent
    # sealed empty counts as drained, its own parents still first); a merged bucket after both
    # parents; parent_first=False reads new buckets at once; K6: undrained sealed buckets
    from leasekit.consumers.lineage import to_read, undrained
    from leasekit.tables.layout import BucketLayout

    layout, (b2, b3) = BucketLayout.initial(2).split(0, 5)
    layout, (b4, b5) = layout.split(b2, 0)  # split again before any append: sealed empty
    assert to_read(layout, {}) == (0, 1)
    assert to_read(layout, {0: 4}) == (0, 1)
    assert to_read(layout, {0: 5}) == (1, b3, b4, b5)
    assert to_read(layout, {}, parent_first=False) == (0, 1, b3, b4, b5)
    assert undrained(layout, {}) == (0,) and undrained(layout, {0: 5}) == ()
    layout, b6 = layout.merge(b4, b5, 3, 0)
    assert to_read(layout, {0: 5, b4: 2}) == (1, b3, b4)
    assert to_read(layout, {0: 5, b4: 3}) == (1, b3, b6)
    assert to_read(layout, {0: 5}, parent_first=False) == (1, b3, b4, b6)
    assert to_read(BucketLayout.initial(3), {}) == (0, 1, 2)


def test_a_group_reads_a_new_bucket_from_its_beginning_whatever_the_reset_policy(conn, table):
    # K6: a new bucket has no committed offset; once its parent is drained the group reads it
    # from 0 even with auto_offset_reset="latest", so records written to it between the split
    # and the assignment are not skipped
    keys = Keys(table)
    c = member(conn, auto_offset_reset="latest")
    poll_until([c], keys, lambda: len(c.assignment()) == 10)
    keys.append(1)
    poll_until([c], keys, lambda: len(keys.got) == 60)
    children = set(table.split_bucket(TB("t", 6)))
    keys.append(2)
    assert sum(table.end_offsets()[tb] for tb in children) > 0
    poll_until([c], keys, lambda: children <= c.assignment() and len(set(keys.got)) == 180)
    assert all(c.committed(tb) == table.end_offsets()[tb] for tb in children)
    keys.check()
    c.close()
