"""Oversized and out-of-range numbers at the consumer and group entry points (docs/security.md):
huge timeouts wait, huge intervals never fire, offsets and timestamps >= 2**63 are typed errors
before anything is written, reset_offsets clamps to [beginning, end] as kafka-consumer-groups
does, and stored offsets out of range are reported, never a TypeError."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from helpers import run_cli

import leasekit as lk
from leasekit import testing
from leasekit.durations import MAX_DURATION
from leasekit.zk import SetData
from leasekit.zk.formats import Commit, OffsetRecord

TB = lk.TableBucket
HUGE = 2**64


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(10)])
    return table


@pytest.mark.parametrize("call", ["poll", "getone"])
def test_a_huge_timeout_waits_until_records_come(conn, orders, call):
    # docs/security.md: a timeout too long to wait on is "until records come", not an OverflowError
    with conn.consumer("orders") as consumer:
        threading.Timer(0.3, lambda: orders.append([{"id": 100}])).start()
        got = getattr(consumer, call)(timeout=1e12)
        ids = (
            [got.value["id"]]
            if call == "getone"
            else [i for t in got.values() for i in t.column("id").to_pylist()]
        )
        assert ids == [100]


def test_the_longest_max_poll_interval_never_fires_and_keeps_its_timer(conn, orders):
    # max_poll_interval (docs/consumers.md, docs/security.md): the longest accepted (MAX_DURATION;
    # longer ones are typed errors) never fires in practice, and the timer thread must not die of it
    errors = []
    old = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        with conn.consumer("orders", group_id="g", max_poll_interval=MAX_DURATION) as consumer:
            consumer.poll(timeout="1s")
            time.sleep(0.3)
            timers = [t for t in threading.enumerate() if t.name == "leasekit-max-poll-interval"]
            assert timers and all(t.is_alive() for t in timers)
            assert consumer.member_id in {m.member_id for m in conn.group_members("g")}
    finally:
        threading.excepthook = old
    assert errors == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"session_timeout": "999999999999d"},
        {"max_poll_interval": "999999999999d"},
        {"auto_commit_interval": "999999999999d"},
        {"session_timeout": 1e12},
        {"session_timeout": "30d"},
        {"max_poll_interval": 1e12},
    ],
)
def test_durations_out_of_range_are_typed_errors_at_construction(conn, orders, kwargs):
    # docs/security.md: typed errors, before any I/O (a
    # session timeout ZooKeeper cannot take included)
    with pytest.raises(lk.InvalidArgumentError):
        conn.consumer("orders", group_id="g", **kwargs)
    assert conn.group_members("g") == []


def test_offsets_of_2_63_and_more_are_refused_before_anything_is_written(conn, orders):
    # C2, C3, C6, C7: typed errors, nothing written
    tb = TB("orders", 0)
    consumer = conn.consumer(group_id="g", auto_offset_reset="earliest")
    consumer.assign([tb])
    for offsets in ({tb: HUGE}, {tb: 2**63}, {tb: lk.OffsetAndMetadata(HUGE, "m")}):
        with pytest.raises(lk.InvalidArgumentError, match="2\\*\\*63|out of range"):
            consumer.commit(offsets)
    assert consumer.committed(tb) is None
    with pytest.raises(lk.InvalidArgumentError):
        consumer.seek(tb, HUGE)
    for stamp in (HUGE, 2**63, -1):
        with pytest.raises(lk.InvalidArgumentError):
            consumer.offsets_for_times({tb: stamp})
    assert consumer.offsets_for_times({tb: 2**63 - 1}) == {tb: None}
    consumer.commit({tb: 2**63 - 1})  # the largest offset is taken
    assert consumer.committed(tb) == 2**63 - 1
    consumer.close()


def test_reset_offsets_refuses_2_63_and_writes_nothing(conn, orders):
    # docs/security.md: typed error before the write; describe still works
    with pytest.raises(lk.InvalidArgumentError):
        conn.reset_offsets("g", tables=["orders"], to=2**63, dry_run=False)
    with pytest.raises(lk.InvalidArgumentError):
        conn.reset_offsets("g", tables=["orders"], shift_by=-HUGE, dry_run=False)
    assert "g" not in conn.consumer_groups()
    assert conn.describe_group("g").empty


def test_reset_offsets_clamps_to_the_log_and_shows_it_in_the_plan(
    conn, orders, capsys, zookeeper, warehouse, namespace
):
    # docs/security.md: to=int, datetime, timedelta and shift_by are clamped to [beginning, end]
    tb = TB("orders", 0)
    plan = conn.reset_offsets("g", tables=["orders"], to=999_999_999, dry_run=False)
    assert list(plan.columns[:5]) == ["group", "table", "bucket", "current_offset", "new_offset"]
    assert plan["new_offset"].tolist() == [10] and plan["clamped"].tolist() == [True]
    row = conn.describe_group("g").iloc[0]
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (10, 10, 0)
    cases = [
        ({"to": 3}, 3, False),
        ({"shift_by": 10**12}, 10, True),
        ({"shift_by": -(2**62)}, 0, True),
        ({"to": datetime(1970, 1, 1, tzinfo=timezone.utc)}, 0, False),
        ({"to": datetime(9999, 1, 1, tzinfo=timezone.utc)}, 10, False),
        ({"to": timedelta(days=999_999_999)}, 0, False),
    ]
    for kwargs, new, clamped in cases:
        plan = conn.reset_offsets("g", tables=["orders"], **kwargs)
        assert (plan["new_offset"].tolist(), plan["clamped"].tolist()) == ([new], [clamped]), kwargs
    code, out, err = run_cli(
        capsys,
        "--zookeeper",
        zookeeper,
        "--warehouse",
        warehouse,
        "--namespace",
        namespace,
        "consumer",
        "reset-offsets",
        "g",
        "--to-offset",
        "999999999",
        "--execute",
    )
    assert code == 0, err
    assert conn.describe_group("g").loc[0, "current_offset"] == 10
    assert conn.group_status("g").buckets[tb] == "OK"


def _store_offset(conn, orders, offset):
    ctx = testing.context(conn)
    tb = TB("orders", 0)
    consumer = conn.consumer(group_id="g")
    consumer.assign([tb])
    consumer.commit({tb: 1})
    consumer.close()
    path = ctx.paths.offset("g", orders.table_id, 0)
    record = OffsetRecord(offset, "", "orders", (Commit(ctx.server_time_ms(), offset, 10),))
    ctx.store.commit([SetData(path, record.encode())])
    return path


def test_a_stored_offset_of_2_63_is_corrupt_metadata_naming_its_path(
    conn, orders, capsys, zookeeper, warehouse, namespace
):
    # docs/security.md, docs/architecture.md: a value an older
    # version or a hostile client wrote; never a TypeError
    path = _store_offset(conn, orders, 2**63)
    for read in (conn.describe_group, conn.group_status):
        with pytest.raises(lk.CorruptMetadataError, match=path):
            read("g")
    code, out, err = run_cli(
        capsys,
        "--zookeeper",
        zookeeper,
        "--warehouse",
        warehouse,
        "--namespace",
        namespace,
        "consumer",
        "describe",
        "g",
    )
    assert code != 0 and path in err and "Traceback" not in err


def test_a_stored_offset_beyond_the_log_end_is_shown_as_stored_with_no_lag(conn, orders):
    # docs/consumers.md: shown sanely (the stored offset, lag 0), never a TypeError
    _store_offset(conn, orders, 999_999_999)
    row = conn.describe_group("g").iloc[0]
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (999_999_999, 10, 0)
    assert conn.group_status("g").status in ("OK", "WARN", "ERR")
