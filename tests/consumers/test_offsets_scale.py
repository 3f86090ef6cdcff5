"""Commits and claims of a group member over more buckets than one ZooKeeper transaction holds
(B4, C11): each transaction carries the ownership checks of its own buckets only, so a
commit of 6,000 offsets takes a few transactions instead of one per offset."""

from __future__ import annotations

import time

import leasekit as lk
from leasekit.testing import context

BUCKETS = 6000


def test_a_member_of_6000_buckets_claims_and_commits_them_in_a_few_transactions(conn):
    table = conn.create_table("wide", "id BIGINT, v STRING", "id", buckets=BUCKETS)
    consumer = conn.consumer(table, group_id="wide", enable_auto_commit=False)
    try:
        deadline = time.monotonic() + 60
        while len(consumer.assignment()) < BUCKETS:  # claims chunked to ZooKeeper's limits
            consumer.poll("0.2s")
            assert time.monotonic() < deadline, "the member did not get every bucket"
        offsets = {tb: lk.OffsetAndMetadata(0, "m") for tb in table.buckets}  # reads the table
        store = context(conn).store
        trips = store.round_trips
        consumer.commit(offsets)
        assert store.round_trips - trips <= 6  # C11-fenced; was one transaction per offset
    finally:
        consumer.close()
    frame = conn.describe_group("wide")
    assert len(frame) == BUCKETS and (frame["current_offset"] == 0).all()
