"""Committed offsets of consumer groups, as stored (C2, C3, C4): validated,
written in one transaction while it fits, never rewritten unchanged, with the commit history
lag health reads."""

from __future__ import annotations

import pytest

import leasekit as lk
from leasekit import testing
from leasekit.consumers import offsets
from leasekit.zk.formats import HISTORY

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=4)
    table.append([{"id": i, "v": "x"} for i in range(40)])
    return table


def test_commit_then_fetch_with_metadata_time_and_log_end(conn, orders):
    # C2: the committed offset is the next one to consume, with its metadata; before any
    # commit there is none
    ctx = testing.context(conn)
    tables = {"orders": orders}
    assert offsets.fetch(ctx, "g", tables, [TB("orders", 0)]) == {}
    ends = orders.end_offsets()
    before = ctx.now_ms()
    offsets.commit(
        ctx,
        "g",
        {TB("orders", 0): lk.OffsetAndMetadata(3, "batch 7"), TB("orders", 1): 0},
        tables,
    )
    got = offsets.fetch(ctx, "g", tables, [TB("orders", b) for b in range(4)])
    assert {tb: (r.offset, r.metadata) for tb, r in got.items()} == {
        TB("orders", 0): (3, "batch 7"),
        TB("orders", 1): (0, ""),
    }
    record = got[TB("orders", 0)]
    assert before <= record.commit_ms <= ctx.now_ms()
    assert record.history[-1].log_end == ends[TB("orders", 0)]
    assert record.table == "orders"
    assert set(offsets.fetch_group(ctx, "g")) == {
        (orders.table_id, 0),
        (orders.table_id, 1),
    }


def test_unchanged_offsets_are_not_written(conn, orders):
    # C3: a commit that changes nothing writes nothing; a changed one writes only itself
    ctx = testing.context(conn)
    tables = {"orders": orders}
    offsets.commit(ctx, "g", {TB("orders", b): 5 for b in range(4)}, tables)
    versions = {
        tb: r.stat.version
        for tb, r in offsets.fetch(ctx, "g", tables, [TB("orders", b) for b in range(4)]).items()
    }
    assert offsets.commit(ctx, "g", {TB("orders", b): 5 for b in range(4)}, tables) == {}
    written = offsets.commit(ctx, "g", {TB("orders", 0): 6, TB("orders", 1): 5}, tables)
    assert set(written) == {TB("orders", 0)}
    after = {
        tb: r.stat.version
        for tb, r in offsets.fetch(ctx, "g", tables, [TB("orders", b) for b in range(4)]).items()
    }
    assert after == {**versions, TB("orders", 0): versions[TB("orders", 0)] + 1}


def test_history_keeps_the_last_commits_with_the_log_end_at_each(conn, orders):
    # docs/concepts.md: the lag-health window is the last 10 commits, each with its time and log end
    ctx = testing.context(conn)
    tables = {"orders": orders}
    tb = TB("orders", 2)
    for offset in range(HISTORY + 3):
        if offset == 5:
            orders.append([{"id": i, "v": "y"} for i in range(40)])
        offsets.commit(ctx, "g", {tb: offset}, tables)
    record = offsets.fetch(ctx, "g", tables, [tb])[tb]
    assert [c.offset for c in record.history] == list(range(3, HISTORY + 3))
    assert [c.time_ms for c in record.history] == sorted(c.time_ms for c in record.history)
    ends = [c.log_end for c in record.history]
    assert ends[0] < ends[-1] == orders.end_offsets()[tb]


def test_a_thousand_offsets_in_two_round_trips(conn):
    # B4, C3: read (offsets, log ends, clock) pipelined, then one transaction
    ctx = testing.context(conn)
    table = conn.create_table("wide", "id BIGINT", "id", buckets=1000)
    tables = {"wide": table}
    before = ctx.store.round_trips
    offsets.commit(ctx, "g", {TB("wide", b): 1 for b in range(1000)}, tables)
    assert ctx.store.round_trips - before <= 2
    before = ctx.store.round_trips
    offsets.commit(ctx, "g", {TB("wide", b): 1 for b in range(1000)}, tables)
    assert ctx.store.round_trips - before == 1  # the read; nothing written


def test_commits_beyond_one_transaction_write_every_offset_whole(conn):
    # docs/architecture.md: 1,000 offsets with 4 KB metadata each (4 MB) go in several transactions
    ctx = testing.context(conn)
    table = conn.create_table("wide", "id BIGINT", "id", buckets=1000)
    tables = {"wide": table}
    metadata = "m" * offsets.MAX_METADATA_BYTES
    offsets.commit(
        ctx,
        "g",
        {TB("wide", b): lk.OffsetAndMetadata(b, metadata) for b in range(1000)},
        tables,
    )
    got = offsets.fetch(ctx, "g", tables, [TB("wide", b) for b in range(1000)])
    assert {tb: (r.offset, r.metadata) for tb, r in got.items()} == {
        TB("wide", b): (b, metadata) for b in range(1000)
    }


@pytest.mark.parametrize(
    "bad, error",
    [
        ({}, lk.InvalidArgumentError),
        ({("orders", 0): 1}, TypeError),
        ({TB("orders", 0): -1}, lk.InvalidArgumentError),
        ({TB("orders", 0): "1"}, TypeError),
        ({TB("orders", 0): True}, TypeError),
        ({TB("orders", 0): lk.OffsetAndMetadata(1, "é" * 2049)}, lk.InvalidArgumentError),
        ({TB("orders", 0): lk.OffsetAndMetadata(1, b"x")}, TypeError),
        ([1], TypeError),
    ],
)
def test_bad_offsets_are_refused_before_any_write(bad, error):
    # C2, C3: validation errors are typed
    with pytest.raises(error):
        offsets.check_offsets(bad)


def test_metadata_of_exactly_4096_bytes_is_accepted():
    # C2
    assert offsets.check_offsets({TB("t", 0): lk.OffsetAndMetadata(1, "é" * 2048)})


@pytest.mark.parametrize("group", ["", ".", "..", "a/b", "x" * 129, 7, None])
def test_group_ids_follow_the_lease_id_rule(group):
    with pytest.raises(lk.InvalidArgumentError):
        offsets.check_group_id(group)
