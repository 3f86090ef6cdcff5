"""The consumer (docs/consumers.md): positions (C1), commits (C2, C3), reset policy (C5), seeks
(C6), offset queries that never move (C7), auto-commit (C8); behaviours users know from aiokafka."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

import leasekit as lk
from leasekit import testing
from leasekit.log.segments import list_segments

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    table.append([{"id": i, "v": f"a{i}"} for i in range(20)])
    return table


def _ids(batches):
    return sorted(i for t in batches.values() for i in t.column("id").to_pylist())


def test_poll_returns_every_record_once_with_log_columns(conn, orders):
    # C1: position = next offset to return; poll gives only buckets with records
    with conn.consumer("orders", auto_offset_reset="earliest") as consumer:
        assert consumer.assignment() == {TB("orders", 0), TB("orders", 1)}
        got = consumer.poll()
        assert _ids(got) == list(range(20))
        for tb, data in got.items():
            assert data.schema.names == ["_offset", "_timestamp", "_op", "id", "v"]
            assert data.schema.field("_timestamp").type == pa.timestamp("ms", tz="UTC")
            assert data.column("_offset").to_pylist() == list(range(data.num_rows))
            assert consumer.position(tb) == data.num_rows
            assert consumer.highwater(tb) == data.num_rows
            assert consumer.last_poll_timestamp(tb) is not None
        assert consumer.poll() == {}


def test_latest_starts_at_the_end_and_sees_new_appends(conn, orders):
    # C5 "latest", and a blocking poll woken by the ZooKeeper watch on the bucket state
    with conn.consumer("orders") as consumer:
        assert consumer.poll() == {}
        threading.Timer(0.3, lambda: orders.append([{"id": 100, "v": "new"}])).start()
        start = time.monotonic()
        got = consumer.poll(timeout="10s")
        assert _ids(got) == [100] and time.monotonic() - start < 5


def test_max_records_and_getone(conn, orders):
    with conn.consumer("orders", auto_offset_reset="earliest", max_poll_records=3) as consumer:
        assert sum(t.num_rows for t in consumer.poll().values()) <= 3
        assert sum(t.num_rows for t in consumer.poll(max_records=1).values()) == 1
    with conn.consumer("orders", auto_offset_reset="earliest") as consumer:
        records = [consumer.getone(timeout="1s") for _ in range(20)]
        assert sorted(r.value["id"] for r in records) == list(range(20))
        first = records[0]
        assert (
            isinstance(first, lk.Record)
            and first.op == "upsert"
            and isinstance(first.timestamp_ms, int)
        )
        assert (
            consumer.position(first.table_bucket)
            == max(r.offset for r in records if r.table_bucket == first.table_bucket) + 1
        )  # C1
        assert consumer.getone(timeout="0.2s") is None


def test_committed_none_before_commit_then_new_consumer_resumes(conn, orders):
    # C2, C3, C4: a new consumer in the same group starts from the committed offsets
    tb = TB("orders", 0)
    with conn.consumer(
        "orders", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
    ) as c:
        assert c.committed(tb) is None
        c.poll()
        c.commit()
        assert c.committed(tb) == c.position(tb)
        c.commit({tb: lk.OffsetAndMetadata(2, "checkpoint")})
        assert c.committed(tb) == 2
    with conn.consumer("orders", group_id="g", auto_offset_reset="latest") as c:
        got = c.poll()  # joins the group, then reads from the committed offsets
        assert list(got) == [tb] and got[tb].column("_offset").to_pylist()[0] == 2
        assert c.position(TB("orders", 1)) == orders.end_offsets()[TB("orders", 1)]


def test_commit_errors(conn, orders):
    # C3
    with conn.consumer("orders", group_id="g") as c:
        with pytest.raises(lk.InvalidArgumentError):
            c.commit({})
        with pytest.raises(TypeError):
            c.commit({("orders", 0): 1})
        with pytest.raises(lk.IllegalStateError):
            c.commit({TB("other", 0): 1})
        with pytest.raises(lk.InvalidArgumentError):
            c.commit({TB("orders", 0): lk.OffsetAndMetadata(1, "x" * 4097)})
    with conn.consumer("orders") as c, pytest.raises(lk.IllegalOperationError):
        c.commit()


def test_reset_none_and_bad_policy(conn, orders):
    # C5
    with pytest.raises(lk.InvalidArgumentError):
        conn.consumer("orders", auto_offset_reset="smallest")
    with conn.consumer("orders", group_id="g", auto_offset_reset="none") as c:
        with pytest.raises(lk.NoOffsetForBucketError):
            c.poll()
        c.seek(TB("orders", 0), 10_000)
        c.seek(TB("orders", 1), 0)
        with pytest.raises(lk.OffsetOutOfRangeError):
            c.poll()


def test_seeks(conn, orders):
    # C6: ints >= 0 only, unassigned buckets refused, seek_to_committed honours 0
    tb = TB("orders", 0)
    with conn.consumer("orders", group_id="g", enable_auto_commit=False) as c:
        with pytest.raises(lk.IllegalStateError):  # not assigned before the poll that joins
            c.seek(tb, 0)
        assert c.poll() == {}  # "latest": at the end
        with pytest.raises(lk.InvalidArgumentError):
            c.seek(tb, -1)
        with pytest.raises(TypeError):
            c.seek(tb, "1")
        with pytest.raises(lk.IllegalStateError):
            c.seek_to_end(TB("orders", 5))
        c.seek_to_beginning(tb)
        assert c.position(tb) == 0
        c.seek_to_end()
        assert c.position(tb) == orders.end_offsets()[tb]
        c.commit({tb: 0})
        c.seek_to_committed(tb)
        assert c.position(tb) == 0
        c.seek(tb, 3)
        got = c.poll()
        assert got[tb].column("_offset").to_pylist()[0] == 3


def test_seek_to_end_then_a_new_append_arrives(conn, orders):
    with conn.consumer("orders", auto_offset_reset="earliest") as c:
        c.seek_to_end()
        orders.append([{"id": 500, "v": "late"}])
        assert _ids(c.poll(timeout="5s")) == [500]


def test_offset_queries_never_move_positions(conn, orders):
    # C7
    with conn.consumer("orders", auto_offset_reset="earliest") as c:
        tb = TB("orders", 0)
        before = c.position(tb)
        ends = orders.end_offsets()
        assert c.end_offsets([tb]) == {tb: ends[tb]}
        assert c.beginning_offsets([tb]) == {tb: 0}
        first = list_segments(orders, [0])[0][0]
        orders.append([{"id": i, "v": "b"} for i in range(100, 120)])
        second = list_segments(orders, [0])[0][1]
        times = c.offsets_for_times({tb: 0, TB("orders", 1): 2**62})
        assert times == {
            tb: 0,
            TB("orders", 1): None,
        }  # earliest offset with timestamp >= t, None if none
        assert c.offsets_for_times({tb: first.timestamp_ms}) == {tb: 0}
        if second.timestamp_ms > first.timestamp_ms:
            assert c.offsets_for_times({tb: first.timestamp_ms + 1}) == {tb: second.base_offset}
        with pytest.raises(lk.InvalidArgumentError):
            c.offsets_for_times({tb: -1})
        assert c.position(tb) == before


def test_pause_and_resume(conn, orders):
    with conn.consumer("orders", auto_offset_reset="earliest") as c:
        c.pause(TB("orders", 0))
        assert c.paused() == {TB("orders", 0)}
        assert set(c.poll()) == {TB("orders", 1)}
        c.resume(TB("orders", 0))
        assert set(c.poll()) == {TB("orders", 0)}


def test_auto_commit_on_interval_and_on_close(conn, orders):
    # C8
    tb = TB("orders", 0)
    c = conn.consumer(
        "orders", group_id="auto", auto_offset_reset="earliest", auto_commit_interval="0.2s"
    )
    c.poll()
    time.sleep(0.3)
    c.poll()
    assert c.committed(tb) == c.position(tb)
    c.seek(tb, 1)
    c.close()
    with conn.consumer("orders", group_id="auto", enable_auto_commit=False) as again:
        assert again.committed(tb) == 1
    with pytest.raises(lk.IllegalStateError):
        c.poll()


def test_assign_and_subscribe_do_not_mix(conn, orders):
    with conn.consumer(group_id="g") as c:
        c.assign([TB("orders", 1)])
        assert c.assignment() == {TB("orders", 1)}
        with pytest.raises(lk.IllegalStateError):
            c.subscribe(["orders"])
        c.unsubscribe()
        c.subscribe(["orders"])
        with pytest.raises(lk.IllegalStateError):
            c.assign([TB("orders", 0)])
        with pytest.raises(lk.BucketNotFoundError):
            conn.consumer().assign([TB("orders", 9)])


@pytest.mark.parametrize("policy", ["earliest", "latest", "none"])
def test_segment_deleted_under_a_consumer_follows_the_reset_policy(conn, policy):
    # C5: retention deletes the segment at the consumer's position (its znode, the new
    # log beginning, then its file): the reset policy decides, never a crash or a silent gap
    from leasekit.log.segments import delete_segments

    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(10)])
    table.append([{"id": i} for i in range(10, 15)])
    tb = TB("t", 0)
    with conn.consumer(group_id="g", auto_offset_reset=policy, enable_auto_commit=False) as c:
        c.assign([tb])
        c.seek(tb, 2)
        assert c.poll(max_records=1)[tb].column("_offset").to_pylist() == [2]
        delete_segments(table, 0, [0])
        time.sleep(0.5)  # the consumer's watch on the bucket state delivers the new beginning
        if policy == "none":
            with pytest.raises(lk.OffsetOutOfRangeError):
                c.poll()
            return
        got = c.poll()
        offsets = got[tb].column("_offset").to_pylist() if got else []
        assert offsets == ([10, 11, 12, 13, 14] if policy == "earliest" else [])
        assert c.position(tb) == 15


def test_polls_without_new_records_make_no_zookeeper_calls(conn, orders):
    # docs/consumers.md: new records are noticed through watches, not by polling ZooKeeper in a loop
    ctx = testing.context(conn)
    with conn.consumer("orders", auto_offset_reset="earliest") as c:
        c.poll()
        before = ctx.store.round_trips
        for _ in range(5):
            assert c.poll(timeout="0.05s") == {}
        assert ctx.store.round_trips == before
        orders.append([{"id": 900, "v": "n"}])
        assert _ids(c.poll(timeout="5s")) == [900]


class _Recorder(lk.BucketRebalanceListener):
    def __init__(self, consumer_box, calls):
        self.box, self.calls = consumer_box, calls

    def on_buckets_revoked(self, revoked):
        c = self.box[0]
        self.calls.append(("revoked", set(revoked), {tb: c.position(tb) for tb in revoked}))
        c.commit({tb: lk.OffsetAndMetadata(c.position(tb), "from revoke") for tb in revoked})

    def on_buckets_assigned(self, assigned):
        self.calls.append(("assigned", set(assigned)))


def test_a_group_subscription_is_assigned_in_poll_and_the_listener_hears_every_change(conn, orders):
    # docs/consumers.md: with a group_id, poll drives membership; rebalance callbacks run inside
    # poll. C10: revoked before assigned, and a commit made in on_buckets_revoked is accepted.
    # C15: on_buckets_assigned at the end of every rebalance, with the new buckets only.
    other = conn.create_table("other", "id BIGINT", "id", buckets=1)
    other.append([{"id": 1}])
    calls, box = [], []
    c = conn.consumer(
        "orders",
        group_id="lg",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        listener=_Recorder(box, calls),
    )
    box.append(c)
    assert c.assignment() == set() and c.member_id is None
    with pytest.raises(lk.IllegalStateError, match="poll"):
        c.position(TB("orders", 0))
    got = c.poll()
    assert c.assignment() == {TB("orders", 0), TB("orders", 1)} and c.member_id is not None
    assert calls == [("assigned", {TB("orders", 0), TB("orders", 1)})]
    assert [m.member_id for m in conn.group_members("lg")] == [c.member_id]
    assert sum(t.num_rows for t in got.values()) > 0
    calls.clear()
    c.subscribe(["other"])
    assert c.assignment() == {TB("orders", 0), TB("orders", 1)}  # nothing moves until the next poll
    c.poll()
    revoked = {TB("orders", 0), TB("orders", 1)}
    assert [k[0] for k in calls] == ["revoked", "assigned"] and calls[0][1] == revoked
    assert calls[1] == ("assigned", {TB("other", 0)})
    assert c.assignment() == {TB("other", 0)}
    for tb, position in calls[0][2].items():  # the commit made while revoking was stored
        assert c.committed(tb) == position
    calls.clear()
    c.unsubscribe()
    assert calls[0][:2] == ("revoked", {TB("other", 0)})
    assert conn.group_members("lg") == [] and c.member_id is None
    c.subscribe(["other"])
    c.poll()
    assert calls[-1] == ("assigned", {TB("other", 0)}) and len(conn.group_members("lg")) == 1
    calls.clear()
    c.close()
    assert calls[0][:2] == ("revoked", {TB("other", 0)})
    assert conn.group_members("lg") == []


def test_a_consumer_without_a_group_is_assigned_its_tables_at_once(conn, orders):
    # docs/consumers.md: group_id=None assigns every bucket of the tables, no membership, no commits
    with conn.consumer("orders") as c:
        assert c.assignment() == {TB("orders", 0), TB("orders", 1)}
        assert c.member_id is None and c.generation is None and c.group_id is None
        with pytest.raises(lk.IllegalOperationError):
            c.committed(TB("orders", 0))
        with pytest.raises(lk.IllegalOperationError):
            c.seek_to_committed()
        c.unsubscribe()
        assert c.assignment() == set()
        c.assign([])
        c.subscribe(["orders"])  # an empty manual assignment is an unsubscribe
        assert len(c.assignment()) == 2
