"""Records a consumer fetched but has not handed out (C1, C8): ``getone`` and
iteration move the position one record at a time, commits count only what was handed out, and
seeks, pauses and revocations respect the records still buffered."""

from __future__ import annotations

import time

import pytest

import leasekit as lk

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(10)])
    return table


def group_consumer(conn, **kwargs):
    kwargs.setdefault("enable_auto_commit", False)
    return conn.consumer("orders", group_id="g", auto_offset_reset="earliest", **kwargs)


def offsets(batches):
    return [o for t in batches.values() for o in t.column("_offset").to_pylist()]


def test_getone_moves_the_position_by_one_and_commit_counts_only_what_was_returned(conn, orders):
    # C1: after returning offset o the position is o+1; docs/consumers.md: commit() counts only
    # records handed to the caller, never the rest of the fetched batch
    tb = TB("orders", 0)
    with group_consumer(conn) as consumer:
        first = consumer.getone(timeout="5s")
        assert first.offset == 0 and consumer.position(tb) == 1
        for expected in range(1, 5):
            assert consumer.getone(timeout="5s").offset == expected
        assert consumer.position(tb) == 5
        consumer.commit()
        assert consumer.committed(tb) == 5


def test_iteration_commits_only_the_records_iterated(conn, orders):
    # C1 for `for record in consumer`
    tb = TB("orders", 0)
    with group_consumer(conn) as consumer:
        seen = []
        for record in consumer:
            seen.append(record.offset)
            if len(seen) == 3:
                break
        assert seen == [0, 1, 2] and consumer.position(tb) == 3
        consumer.commit()
        assert consumer.committed(tb) == 3


def test_poll_after_getone_returns_the_buffered_records_first_without_gaps_or_repeats(conn, orders):
    # C1: mixing getone and poll hands out every record once, in order
    tb = TB("orders", 0)
    with group_consumer(conn) as consumer:
        assert consumer.getone(timeout="5s").offset == 0
        assert offsets(consumer.poll(max_records=3)) == [1, 2, 3]
        assert consumer.position(tb) == 4
        assert consumer.getone(timeout="5s").offset == 4
        orders.append([{"id": i} for i in range(10, 15)])
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 10 and time.monotonic() < deadline:
            got += offsets(consumer.poll(timeout="1s"))
        assert got == list(range(5, 15)) and consumer.position(tb) == 15


def test_auto_commit_and_close_count_only_records_handed_out(conn, orders):
    # C8: auto-commit and the commit on close count only records returned
    tb = TB("orders", 0)
    consumer = group_consumer(conn, enable_auto_commit=True, auto_commit_interval="0.05s")
    assert consumer.getone(timeout="5s").offset == 0
    time.sleep(0.1)
    assert consumer.getone(timeout="5s").offset == 1  # auto-commit due inside this call
    assert consumer.committed(tb) in (None, 1)
    time.sleep(0.1)
    assert consumer.getone(timeout="5s").offset == 2
    assert consumer.committed(tb) in (1, 2)
    consumer.close()
    with group_consumer(conn) as again:
        assert again.committed(tb) == 3
        assert again.getone(timeout="5s").offset == 3  # at least once: nothing skipped


def test_seek_after_getone_discards_the_buckets_buffered_records(conn, orders):
    # C6 with C1: the next record returned is the one sought
    tb = TB("orders", 0)
    with conn.consumer("orders", auto_offset_reset="earliest") as consumer:
        assert consumer.getone(timeout="5s").offset == 0
        consumer.seek(tb, 7)
        assert consumer.getone(timeout="5s").offset == 7
        consumer.seek(tb, 2)
        assert offsets(consumer.poll()) == list(range(2, 10))


def test_a_paused_buckets_buffered_records_wait_until_it_is_resumed(conn, orders):
    # pause (docs/consumers.md): nothing of a paused bucket
    # is returned, buffered or not, and its position stays
    tb = TB("orders", 0)
    with conn.consumer("orders", auto_offset_reset="earliest") as consumer:
        assert consumer.getone(timeout="5s").offset == 0
        consumer.pause(tb)
        assert consumer.getone(timeout="0.2s") is None and consumer.poll() == {}
        assert consumer.position(tb) == 1
        consumer.resume(tb)
        assert consumer.getone(timeout="5s").offset == 1


def test_a_revoked_buckets_buffered_records_are_never_returned_or_committed(conn):
    # C1, C10, C12: a member's buffered records of a bucket that moves away are
    # dropped; the new owner starts from what was handed out, so no record is skipped
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(40)])
    a = group_consumer(conn, enable_auto_commit=True)
    first = a.getone(timeout="5s")
    handed = [(first.table_bucket, first.offset)]
    b = group_consumer(conn, enable_auto_commit=True)
    deadline = time.monotonic() + 15
    while not (len(a.assignment()) == 1 and len(b.assignment()) == 1):
        assert time.monotonic() < deadline, "the group did not rebalance"
        for tb, data in a.poll(
            timeout="0.05s", max_records=1
        ).items():  # (the rebalance runs in poll)
            handed += [(tb, o) for o in data.column("_offset").to_pylist()]
        for tb, data in b.poll(timeout="0.05s").items():
            handed += [(tb, o) for o in data.column("_offset").to_pylist()]
    moved = next(iter(b.assignment()))
    deadline = time.monotonic() + 10
    while len(handed) < 40 and time.monotonic() < deadline:
        record = a.getone(timeout="0.05s")
        if record is not None:
            assert record.table_bucket != moved  # never a record of the revoked bucket
            handed.append((record.table_bucket, record.offset))
        for tb, data in b.poll(timeout="0.05s").items():
            handed += [(tb, o) for o in data.column("_offset").to_pylist()]
    ends = table.end_offsets()
    expected = [(tb, o) for tb in sorted(ends) for o in range(ends[tb])]
    assert sorted(handed) == expected  # each record once: none skipped, none twice
    a.close()
    b.close()
