"""A consumer that meets a table already rescaled (K5, K6, C5): a new bucket
is read from 0 only by a group (or a consumer without a group) that consumed its parents up to
their seals; otherwise the reset policy applies to it too, and a position that the reset puts
at a parent's seal drains that parent, whatever the commit settings."""

from __future__ import annotations

import time

import pytest

import leasekit as lk

TB = lk.TableBucket
KEYS = 40


@pytest.fixture
def table(conn):
    return conn.create_table("t", "k BIGINT, seq BIGINT", "k", buckets=4)


def append(table, seq: int) -> None:
    table.append([{"k": k, "seq": seq} for k in range(KEYS)])


def everything(*seqs: int) -> set[tuple[int, int]]:
    return {(k, s) for k in range(KEYS) for s in seqs}


class Reader:
    """Polls a consumer, keeping what it got in order and, with ``commit_records``, committing
    the offsets of the records it got only (a manual commit after processing)."""

    def __init__(self, consumer, *, commit_records: bool = False):
        self.consumer, self.commit_records = consumer, commit_records
        self.got: list[tuple[int, int]] = []
        self.order: list[TB] = []

    def poll(self) -> None:
        batch = self.consumer.poll(timeout="0.05s")
        for tb, data in batch.items():
            self.got += zip(data.column("k").to_pylist(), data.column("seq").to_pylist())
            self.order.append(tb)
        if self.commit_records and batch:
            self.consumer.commit(
                {tb: data.column("_offset").to_pylist()[-1] + 1 for tb, data in batch.items()}
            )

    def until(self, done, seconds: float = 20.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()
            if done():
                return
        raise AssertionError(
            f"not there in time: assignment {sorted(self.consumer.assignment())}, "
            f"{len(self.got)} records"
        )

    def more(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.poll()

    def positioned(self, buckets) -> None:
        """Wait until ``buckets`` are assigned, then give each its starting position."""
        self.until(lambda: set(buckets) <= self.consumer.assignment())
        for tb in buckets:
            self.consumer.position(tb)


def split_with_history(table) -> tuple[TB, set[TB]]:
    """Bucket 1 with records (seq 1), split, its children with records (seq 2)."""
    append(table, 1)
    parent = TB("t", 1)
    children = set(table.split_bucket(parent))
    append(table, 2)
    assert all(table.end_offsets()[tb] > 0 for tb in children)
    return parent, children


def test_a_new_group_with_latest_and_auto_commit_skips_the_children_s_history(conn, table):
    # K6, C5: a group that never consumed the parent joins "now": the new buckets start by its
    # reset policy ("latest"), not from 0; what is appended after it joined is delivered
    parent, children = split_with_history(table)
    c = conn.consumer("t", group_id="g", auto_offset_reset="latest", auto_commit_interval="0.1s")
    r = Reader(c)
    r.positioned(children)
    assert parent not in c.assignment()
    assert c.committed(min(children)) is None or c.committed(min(children)) > 0
    append(table, 3)
    r.until(lambda: set(r.got) >= everything(3))
    r.more(0.5)
    assert set(r.got) == everything(3)  # none of seq 1 (parent) or 2 (children's history)
    c.close()


def test_a_new_group_with_latest_and_manual_commits_gets_the_children_assigned(conn, table):
    # K5, C5: the reset puts the new member at the parent's seal; that drains the parent for
    # the group although the member commits only records it got, so the new buckets are
    # assigned and the records appended after it joined are delivered (K6: not from 0)
    parent, children = split_with_history(table)
    c = conn.consumer("t", group_id="g", auto_offset_reset="latest", enable_auto_commit=False)
    r = Reader(c, commit_records=True)
    r.positioned(children)
    assert c.committed(min(children)) is None or c.committed(min(children)) > 0
    # drained at its seal: it left describe_group (K6)
    assert parent.bucket not in set(conn.describe_group("g")["bucket"])
    append(table, 3)
    r.until(lambda: set(r.got) >= everything(3))
    r.more(0.5)
    assert set(r.got) == everything(3)
    c.close()


def test_a_new_group_with_earliest_reads_the_parent_then_the_children_from_0(conn, table):
    # K5, K6, C5: "earliest" on a new group reads the whole history, the parent first
    parent, children = split_with_history(table)
    append(table, 3)
    c = conn.consumer("t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False)
    r = Reader(c, commit_records=True)
    r.until(lambda: set(r.got) == everything(1, 2, 3))
    last_parent = max(i for i, tb in enumerate(r.order) if tb == parent)
    assert last_parent < min(i for i, tb in enumerate(r.order) if tb in children)
    c.close()


def test_a_group_that_was_inside_the_parent_continues_it_then_the_children_from_0(conn, table):
    # K5, K6: a group with a committed offset in the middle of the parent (latest or not)
    # reads the rest of the parent, then the new buckets from 0: nothing skipped
    append(table, 1)
    first = conn.consumer("t", group_id="g", auto_offset_reset="earliest")
    r = Reader(first)
    r.until(lambda: set(r.got) == everything(1))
    first.close()  # commits the positions (C8)
    append(table, 2)  # the parent's share stays unconsumed
    children = set(table.split_bucket(1))
    append(table, 3)
    c = conn.consumer("t", group_id="g", auto_offset_reset="latest", enable_auto_commit=False)
    r = Reader(c, commit_records=True)
    r.until(lambda: set(r.got) == everything(2, 3))
    assert children <= c.assignment()
    c.close()


def test_a_new_group_meets_a_merge_by_its_reset_policy(conn, table):
    # K5, K6, C5: two parents merged into one bucket; a new group with "latest" and manual
    # commits gets the merged bucket assigned and only what is appended after it joined
    append(table, 1)
    low, high = table.split_bucket(2)
    append(table, 2)
    merged = table.merge_buckets(low, high)
    append(table, 3)
    assert table.end_offsets()[merged] > 0
    c = conn.consumer("t", group_id="g", auto_offset_reset="latest", enable_auto_commit=False)
    r = Reader(c, commit_records=True)
    r.positioned([merged])
    append(table, 4)
    r.until(lambda: set(r.got) >= everything(4))
    r.more(0.5)
    assert set(r.got) == everything(4)
    c.close()


def test_a_group_that_consumed_both_parents_reads_the_merged_bucket_from_0(conn, table):
    # K5, K6: a group that committed both parents to their seals reads the merged bucket
    # from 0 even with "latest"
    append(table, 1)
    low, high = table.split_bucket(2)
    append(table, 2)
    first = conn.consumer("t", group_id="g", auto_offset_reset="earliest")
    r = Reader(first)
    r.until(lambda: set(r.got) == everything(1, 2))
    first.close()
    merged = table.merge_buckets(low, high)
    append(table, 3)
    c = conn.consumer("t", group_id="g", auto_offset_reset="latest", enable_auto_commit=False)
    r = Reader(c, commit_records=True)
    r.until(lambda: set(r.got) == everything(3))
    assert merged in c.assignment()
    c.close()


def test_without_a_group_a_new_consumer_applies_latest_to_the_children(conn, table):
    # K6, C5: a consumer without a group created after the split reads from "now": the
    # parent's seal, then the new buckets from their ends, not from 0
    parent, children = split_with_history(table)
    c = conn.consumer("t", auto_offset_reset="latest")
    r = Reader(c)
    r.positioned(children)
    assert parent not in c.assignment()
    append(table, 3)
    r.until(lambda: set(r.got) >= everything(3))
    r.more(0.5)
    assert set(r.got) == everything(3)
    c.close()


def test_without_a_group_earliest_reads_the_parent_then_the_children_from_0(conn, table):
    # K5, K6: a consumer without a group, "earliest": the whole history, parent first
    parent, children = split_with_history(table)
    c = conn.consumer("t", auto_offset_reset="earliest")
    r = Reader(c)
    r.until(lambda: set(r.got) == everything(1, 2))
    last_parent = max(i for i, tb in enumerate(r.order) if tb == parent)
    assert last_parent < min(i for i, tb in enumerate(r.order) if tb in children)
    c.close()


def test_which_new_buckets_are_read_from_0_follows_what_was_consumed():
    # K6, C5: from 0 only after a consumed parent (one of a merge's two is enough); a parent the
    # reset put at its seal (False) or without an offset (None) leaves the reset policy; a
    # parent sealed empty without an offset stands for its own parents, and one the table was
    # created with gives the default
    from leasekit.consumers.lineage import from_beginning
    from leasekit.tables.layout import BucketLayout

    layout, (b2, b3) = BucketLayout.initial(2).split(0, 5)
    layout, (b4, b5) = layout.split(b2, 0)  # sealed empty
    assert from_beginning(layout, b3, {0: True}.get, False)
    assert not from_beginning(layout, b3, {0: False}.get, True)
    assert not from_beginning(layout, b3, {}.get, True)
    assert from_beginning(layout, b4, {0: True}.get, False)  # through the empty b2
    assert not from_beginning(layout, b4, {0: False}.get, True)
    assert not from_beginning(layout, 1, {}.get, True)  # not made by a rescale
    layout, b6 = layout.merge(b4, b5, 0, 0)
    assert from_beginning(layout, b6, {0: True}.get, False)
    empty, (c1, _) = BucketLayout.initial(2).split(1, 0)  # bucket 1 sealed empty at creation
    assert from_beginning(empty, c1, {}.get, True) and not from_beginning(empty, c1, {}.get, False)
    merged, (m1, m2) = BucketLayout.initial(1).split(0, 4)
    merged, m3 = merged.merge(m1, m2, 2, 3)
    assert from_beginning(merged, m3, {0: False, m1: False, m2: True}.get, False)  # one is enough
    assert not from_beginning(merged, m3, {0: False, m1: False, m2: False}.get, True)


def test_a_manual_commit_member_positioned_before_a_split_moves_on_to_the_children(conn, table):
    # K5, K6, C5: a new group with "latest" and manual commits, positioned at bucket 1's end
    # by its reset before bucket 1 was split and handed nothing of it since: its position is
    # the seal, so the group moves on to the children and reads them from 0 (it was inside the
    # parent, so nothing written after it joined is skipped)
    append(table, 1)
    with conn.consumer("t", group_id="late", auto_offset_reset="latest",
                       enable_auto_commit=False) as consumer:  # fmt: skip
        reader = Reader(consumer, commit_records=True)
        reader.positioned([TB("t", b) for b in range(4)])
        children = set(table.split_bucket(1))
        append(table, 2)
        reader.until(lambda: set(reader.got) >= everything(2))
        assert set(reader.got) == everything(2) and children <= consumer.assignment()
