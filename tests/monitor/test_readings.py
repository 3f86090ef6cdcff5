"""One reading of every consumer group (docs/monitoring.md): the same rows as describe_group for
each group, read for all groups at once in a fixed number of pipelined round trips."""

from __future__ import annotations

import pandas as pd
import pytest

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag.readings import read_all_groups

TB = lk.TableBucket


def _commit(conn, offsets, group):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=3)
    table.append([{"id": i, "v": "a"} for i in range(30)])
    return table


def test_reading_matches_describe_group_for_every_group(conn, orders):
    # docs/monitoring.md, docs/consumers.md: the bulk reading
    # gives each group the rows describe_group gives it
    _commit(conn, {TB("orders", 0): 1, TB("orders", 1): 2}, "a")
    _commit(conn, {TB("orders", 2): 0}, "b")
    orders.append([{"id": 100 + i, "v": "b"} for i in range(30)])
    readings = read_all_groups(testing.context(conn))
    assert [r.group for r in readings] == ["a", "b"]
    for reading in readings:
        frame = conn.describe_group(reading.group)
        assert [
            (b.table_bucket.table, b.table_bucket.bucket, b.current_offset, b.log_end_offset)
            for b in reading.buckets
        ] == [
            (
                r.table,
                r.bucket,
                None if pd.isna(r.current_offset) else r.current_offset,
                r.log_end_offset,
            )
            for r in frame.itertuples()
        ]
        assert [b.lag for b in reading.buckets] == [None if pd.isna(x) else x for x in frame["lag"]]
        assert [b.status for b in reading.buckets] == [
            None if pd.isna(x) else x for x in frame["status"]
        ]
        for b, t in zip(reading.buckets, frame["time_lag"]):
            assert (b.time_lag_ms is None) == pd.isna(t)
            if b.time_lag_ms is not None:
                assert abs(b.time_lag_ms - t / pd.Timedelta(milliseconds=1)) < 5_000
        assert reading.state == "empty" and reading.members == () and reading.status == "OK"
        assert reading.retention_ms == {"orders": 7 * 86_400_000}
    a = readings[0]
    assert a.total_lag == sum(b.lag or 0 for b in a.buckets) and a.tables == ["orders"]


def test_reading_shows_live_members_and_owners(conn, orders):
    # docs/monitoring.md: members, generation and owners of a live group
    with conn.consumer("orders", group_id="live", auto_offset_reset="earliest") as c:
        c.poll(timeout="5s")
        c.commit()
        (reading,) = read_all_groups(testing.context(conn))
        assert reading.state == "live" and len(reading.members) == 1
        assert reading.generation is not None and reading.generation >= 0
        assert {b.consumer_id for b in reading.buckets} == {c.member_id}
        assert all(b.lag == 0 and b.time_lag_ms == 0 for b in reading.buckets)


def test_reading_is_a_fixed_number_of_round_trips(conn, orders):
    # docs/monitoring.md: one pipelined pass, not round trips per group
    for g in range(20):
        _commit(conn, {TB("orders", b): b for b in range(3)}, f"g{g}")
    ctx = testing.context(conn)
    before = ctx.store.round_trips
    readings = read_all_groups(ctx)
    assert len(readings) == 20
    assert ctx.store.round_trips - before <= 7


def test_a_corrupt_group_is_skipped_and_said(conn, orders):
    # docs/security.md: garbage in one group's znode does not hide the others
    _commit(conn, {TB("orders", 0): 1}, "good")
    _commit(conn, {TB("orders", 0): 1}, "bad")
    ctx = testing.context(conn)
    path = ctx.paths.group_offsets("bad")
    name = ctx.store.children(path)[0]
    ctx.store.set(f"{path}/{name}", b"garbage")
    skipped: list[str] = []
    readings = read_all_groups(ctx, skipped=skipped)
    assert [r.group for r in readings] == ["good"]
    assert len(skipped) == 1 and "bad" in skipped[0]
    with pytest.raises(lk.CorruptMetadataError):
        read_all_groups(ctx)
