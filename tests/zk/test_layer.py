"""The ZooKeeper layer on the real server: typed stored formats, pipelined reads of mixed kinds
with per-item results, watches (removable, off kazoo's thread, debounced) and the server clock."""

from __future__ import annotations

import threading
import time

import msgpack
import pytest

import leasekit as lk
from leasekit.testing import context
from leasekit.zk import ConflictReason, Create, Delete, GetChildren, GetData, SetData, TxnConflict
from leasekit.zk.chunked import CHUNK, ChunkArray, chunks_for, group_by_chunk
from leasekit.zk.clock import ServerClock
from leasekit.zk.formats import (
    AssignmentRecord,
    BucketState,
    DroppedTable,
    LatestChunk,
    LayoutRecord,
    LeaseRecord,
    MemberRecord,
    MergeOp,
    OwnerRecord,
    PinChunk,
    SegmentRecord,
    SettingsRecord,
    SnapshotRecord,
    SplitOp,
    TableRecord,
)
from leasekit.zk.ops import Node, Stat

STAT = Stat(3, 1_000, 2_000, 0, 0)


def wait_for(check, seconds: float = 5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


# -- stored formats -------------------------------------------------------------------------

RECORDS = [
    (SettingsRecord({"orphan.min-age": 0}), lambda d: SettingsRecord.decode(d, "/p")),
    (
        TableRecord("abc", b"\x01\x02", ("id",), 4, {"log.retention": 0}),
        lambda d: TableRecord.decode(d, "/p"),
    ),
    (DroppedTable("t", "tables/t/abc"), lambda d: DroppedTable.decode(d, "/p")),
    (
        LayoutRecord(8, (SplitOp(3, 8, 10), MergeOp(3, 8, 4, 2**63 - 1))),
        lambda d: LayoutRecord.decode(d, "/p"),
    ),
    (BucketState(10, 2, 5_000, 3, 2, 8, STAT), lambda d: BucketState.decode(Node(d, STAT), "/p")),
    (
        SegmentRecord("tables/t/log/0/x.parquet", 10, 4096, 7),
        lambda d: SegmentRecord.decode(d, "/p"),
    ),
    (
        SnapshotRecord(10, 3, 4096, ("a.parquet", "b.parquet")),
        lambda d: SnapshotRecord.decode(d, "/p"),
    ),
    (LatestChunk([1, 0, 3]), lambda d: LatestChunk.decode(d, "/p")),
    (
        LeaseRecord(60_000, 5, "host:1", "live", STAT),
        lambda d: LeaseRecord.decode(Node(d, STAT), "/p"),
    ),
    (
        PinChunk("abc", 2, "t", [0] * 999 + [4], STAT),
        lambda d: PinChunk.decode(Node(d, STAT), "/p", "abc", 2),
    ),
    (MemberRecord("host:1", ("a", "b"), STAT), lambda d: MemberRecord.decode(Node(d, STAT), "/p")),
    (
        AssignmentRecord(7, "m-1", {"m-1": {"a": (0, 2)}, "m-2": {"a": (1,), "b": ()}}, STAT),
        lambda d: AssignmentRecord.decode(Node(d, STAT), "/p"),
    ),
    (OwnerRecord("m-1", 7, STAT), lambda d: OwnerRecord.decode(Node(d, STAT), "/p")),
]


@pytest.mark.parametrize("record, decode", RECORDS, ids=[type(r).__name__ for r, _ in RECORDS])
def test_every_format_round_trips_and_refuses_other_versions_and_garbage(record, decode):
    # section 5: msgpack with a format version; unknown versions or garbage raise naming the path
    data = record.encode()
    assert decode(data) == record
    raw = msgpack.unpackb(data, raw=False)
    assert raw["v"] == type(record).VERSION
    for bad in (
        msgpack.packb({**raw, "v": 99}, use_bin_type=True),
        b"\xc1garbage",
        msgpack.packb([1, 2]),
    ):
        with pytest.raises(lk.CorruptMetadataError) as info:
            decode(bad)
        assert info.value.path == "/p" and "/p" in str(info.value)


STRICT = [
    r for r in RECORDS if not isinstance(r[0], SettingsRecord)
]  # settings: every key optional


@pytest.mark.parametrize("record, decode", STRICT, ids=[type(r).__name__ for r, _ in STRICT])
def test_missing_or_ill_typed_fields_are_corrupt_metadata(record, decode):
    raw = msgpack.unpackb(record.encode(), raw=False)
    optional = {"props", "l"}  # a table's properties; a bucket's latest snapshot
    for key in [k for k in raw if k != "v"]:
        for value in (None, [{}]):
            if key in optional and value is None:
                continue
            with pytest.raises(lk.CorruptMetadataError, match="/p"):
                decode(msgpack.packb({**raw, key: value}, use_bin_type=True))
        if key in optional:
            continue
        with pytest.raises(lk.CorruptMetadataError, match="/p"):
            decode(msgpack.packb({k: v for k, v in raw.items() if k != key}, use_bin_type=True))


def test_lease_record_keeps_every_earlier_expiry_as_its_floor():
    # L7: renew only extends
    stored = LeaseRecord(60_000, 0, "a", "live", STAT)
    assert stored.expires_ms == 62_000
    shorter = stored.renewed(1_000, "b")
    assert shorter.floor_ms == 62_000 and shorter.owner == "b" and shorter.stat is None


def test_chunked_arrays_address_values_by_bucket():
    # per-bucket arrays (latest snapshots, pins) are stored as chunks of CHUNK buckets
    assert group_by_chunk([CHUNK + 1, 3, CHUNK, 3]) == {0: [3], 1: [CHUNK, CHUNK + 1]}
    assert list(chunks_for(2 * CHUNK + 1)) == [0, 1, 2] and list(chunks_for(0)) == []
    array = ChunkArray(1, [0, 7])  # trailing buckets without a value may be absent
    assert array.get(CHUNK + 1) == 7 and array.get(CHUNK) == 0 and array.get(2 * CHUNK - 1) == 0
    assert array.present([CHUNK, CHUNK + 1]) == {CHUNK + 1: 7}
    assert array.updated({CHUNK + 3: 9}).ids == [0, 7, 0, 9] and array.ids == [0, 7]
    assert list(array.items()) == [(CHUNK + 1, 7)]
    with pytest.raises(ValueError):
        array.get(3)
    filled = ChunkArray.filled(CHUNK + 2, 5)
    assert [(a.chunk, len(a.ids), set(a.ids)) for a in filled] == [(0, CHUNK, {5}), (1, 2, {5})]
    pins = PinChunk.decode(Node(PinChunk("t", 1, "orders", [0, 4]).encode(), STAT), "/p", "t", 1)
    assert dict(pins.array.items()) == {CHUNK + 1: 4}


def test_conflict_reasons_are_an_enum_that_compares_as_its_value(conn):
    path = f"{context(conn).paths.root}/r"
    with pytest.raises(TxnConflict) as info:
        context(conn).store.commit([SetData(path, b"x", 0)])
    assert info.value.reason is ConflictReason.NONODE and info.value.reason == "nonode"
    assert "failed: nonode" in str(info.value)


# -- pipelined reads --------------------------------------------------------------------------


def test_read_many_mixes_kinds_and_gives_each_read_its_own_result(conn):
    root = f"{context(conn).paths.root}/r"
    context(conn).store.commit(
        [Create(root, b"top"), Create(f"{root}/a", b"1"), Create(f"{root}/b", b"2")]
    )
    results = context(conn).store.read_many(
        [
            GetData(f"{root}/a"),
            GetChildren(root),
            GetData(f"{root}/missing"),
            GetChildren(f"{root}/missing"),
            GetData(root),
        ]
    )
    assert [r.error for r in results] == [None] * 5
    assert results[0].value.data == b"1"
    assert results[1].value == ["a", "b"]
    assert results[2].value is None and results[3].value is None  # missing: no error, batch goes on
    assert results[4].value.data == b"top"


def test_a_refused_read_fails_alone(zookeeper, warehouse, namespace, conn):
    # section 9 (auth): an ACL'd znode refuses this reader; the other reads of the batch succeed
    from kazoo.security import make_digest_acl

    with lk.connect(zookeeper, warehouse, namespace=f"{namespace}x", auth=("alice", "pw")) as alice:
        secret = f"{context(alice).paths.root}/secret"
        context(alice).store.client.create(
            secret, b"s", acl=[make_digest_acl("alice", "pw", all=True)]
        )  # no world read
        public = f"{context(conn).paths.root}/public"
        context(conn).store.commit([Create(public, b"p")])
        results = context(conn).store.read_many(
            [GetData(secret), GetData(public), GetChildren(secret)]
        )
        assert isinstance(results[0].error, lk.PermissionDeniedError) and results[0].value is None
        assert results[1].value.data == b"p" and results[1].error is None
        assert isinstance(results[2].error, lk.PermissionDeniedError)
        with pytest.raises(lk.PermissionDeniedError):
            context(conn).store.get_many([public, secret])


def test_reads_over_many_batches_keep_their_order(conn):
    root = f"{context(conn).paths.root}/many"
    context(conn).store.commit_chunked(
        [Create(root)] + [Create(f"{root}/{i:05d}", str(i).encode()) for i in range(1200)]
    )
    paths = [f"{root}/{i:05d}" for i in range(1200)]
    before = context(conn).store.round_trips
    nodes = context(conn).store.get_many(paths)
    assert (
        context(conn).store.round_trips - before == 1
    )  # three multiRead requests, one pipelined round trip
    assert [n.data for n in nodes] == [str(i).encode() for i in range(1200)]


# -- watches ------------------------------------------------------------------------------------


def test_data_watch_runs_off_kazoos_thread_sees_changes_and_stops_when_removed(conn):
    path = f"{context(conn).paths.root}/w"
    seen: list[bytes | None] = []
    threads: set[str] = set()

    def callback(data, stat):
        threads.add(threading.current_thread().name)
        context(conn).store.get(
            context(conn).paths.root
        )  # a ZooKeeper call from the callback does not deadlock
        seen.append(data)

    watch = context(conn).store.watch(path, callback)
    wait_for(lambda: seen == [None])  # absent at first
    context(conn).store.commit([Create(path, b"1")])
    wait_for(lambda: seen[-1:] == [b"1"])
    context(conn).store.set(path, b"2")
    wait_for(lambda: seen[-1:] == [b"2"])
    context(conn).store.commit([Delete(path)])
    wait_for(lambda: seen[-1:] == [None])
    watch.remove()
    assert not watch.active
    context(conn).store.commit([Create(path, b"3")])
    time.sleep(0.5)
    assert b"3" not in seen
    assert threads == {"leasekit-watches"}


def test_debounced_watch_delivers_a_burst_once_with_the_newest_value(conn):
    path = f"{context(conn).paths.root}/d"
    context(conn).store.commit([Create(path, b"0")])
    seen: list[bytes] = []
    watch = context(conn).store.watch(path, lambda data, stat: seen.append(data), debounce=0.5)
    wait_for(lambda: seen == [b"0"])
    for i in range(1, 21):
        context(conn).store.set(path, str(i).encode())
    wait_for(lambda: seen[-1:] == [b"20"], 5)
    time.sleep(0.7)
    assert len(seen) <= 3  # 20 changes, a few deliveries
    watch.remove()


def test_children_watch_follows_children_and_ends_on_delete(conn):
    path = f"{context(conn).paths.root}/c"
    context(conn).store.commit([Create(path)])
    seen: list[list[str] | None] = []
    watch = context(conn).store.watch_children(path, seen.append)
    wait_for(lambda: seen == [[]])
    context(conn).store.commit([Create(f"{path}/b"), Create(f"{path}/a")])
    wait_for(lambda: seen[-1:] == [["a", "b"]])
    context(conn).store.commit([Delete(f"{path}/a")])
    wait_for(lambda: seen[-1:] == [["b"]])
    context(conn).store.commit(
        [Delete(f"{path}/b"), Create(f"{path}/b")]
    )  # the same names, another child (C17)
    wait_for(lambda: seen[-2:] == [["b"], ["b"]])
    context(conn).store.commit([Delete(f"{path}/b"), Delete(path)])
    wait_for(lambda: seen[-1:] == [None])
    assert not watch.active


def test_a_watch_set_hears_every_change_of_what_was_read_until_closed(conn):
    # what a panel relies on: watch exactly the znodes a reading touched, each re-armed as it
    # fires, znodes missing when read included (their creation is heard), none left on close
    root = context(conn).paths.root
    data, kids, missing = f"{root}/d", f"{root}/k", f"{root}/later"
    context(conn).store.commit([Create(data, b"1"), Create(kids)])
    with context(conn).store.recording() as seen:
        context(conn).store.read_many([GetData(data), GetChildren(kids)])
        context(conn).store.children(missing)
    assert seen.data == {data} and seen.children == {kids, missing}
    heard: list[str | None] = []
    watches = context(conn).store.watch_set(heard.append)
    assert watches.update(seen.data, seen.children)  # new paths: the caller reads once more
    wait_for(lambda: watches.registered() == 3)
    context(conn).store.set(data, b"2")
    wait_for(lambda: heard == [data])
    context(conn).store.set(data, b"3")  # re-armed after it fired
    wait_for(lambda: heard == [data, data])
    context(conn).store.commit([Create(f"{kids}/x")])
    wait_for(lambda: heard[-1:] == [kids])
    context(conn).store.commit([Create(missing)])  # its creation...
    wait_for(lambda: heard[-1:] == [missing])
    context(conn).store.commit(
        [Create(f"{missing}/y")]
    )  # ...then, watched as a parent now, its children
    wait_for(lambda: heard.count(missing) == 2)
    assert not watches.update(seen.data, seen.children)  # nothing new
    watches.close()
    assert watches.registered() == 0
    count = len(heard)
    context(conn).store.set(data, b"4")
    context(conn).store.commit([Create(f"{kids}/z")])
    time.sleep(0.5)
    assert len(heard) == count


def test_data_watches_read_many_znodes_in_one_round_trip_and_deliver_each_newer_value(conn):
    # what a consumer of many buckets relies on: the first values of every bucket state in one
    # pipelined round trip (not one per znode), then every change delivered off kazoo's
    # thread, in order, missing znodes included (their creation is heard), none after removal
    store, root = context(conn).store, context(conn).paths.root
    paths = [f"{root}/dw{i}" for i in range(300)]
    store.commit([Create(p, b"0") for p in paths[:-1]])  # the last one is missing
    heard: list[tuple[str, bytes | None]] = []
    threads: set[str] = set()

    def callback(path, node):
        threads.add(threading.current_thread().name)
        heard.append((path, None if node is None else node.data))

    watches = store.data_watches(callback)
    trips = store.round_trips
    nodes = watches.add(paths)
    assert store.round_trips - trips == 1
    assert [n.data for n in nodes[:-1]] == [b"0"] * 299 and nodes[-1] is None
    store.set(paths[0], b"1")
    store.set(paths[0], b"2")
    wait_for(lambda: heard[-1:] == [(paths[0], b"2")])
    assert [d for p, d in heard if p == paths[0]] in ([b"1", b"2"], [b"2"])  # never older
    store.commit([Create(paths[-1], b"new")])
    wait_for(lambda: (paths[-1], b"new") in heard)
    store.commit([Delete(paths[5])])
    wait_for(lambda: (paths[5], None) in heard)
    watches.remove([paths[1]])
    count = len(heard)
    store.set(paths[1], b"unheard")
    time.sleep(0.5)
    assert len(heard) == count
    watches.close()
    store.set(paths[2], b"closed")
    time.sleep(0.5)
    assert len(heard) == count and threads == {"leasekit-watches"}


def test_watch_on_a_closed_connection_is_a_typed_error(zookeeper, warehouse, namespace):
    other = lk.connect(zookeeper, warehouse, namespace=namespace)
    other.close()
    with pytest.raises(lk.IllegalStateError):
        context(other).store.watch(context(other).paths.settings, lambda data, stat: None)


# -- the server clock -----------------------------------------------------------------------------


def test_server_time_does_not_write_on_every_read(conn):
    # section 5 (write load): the clock znode is written at most every few seconds for display
    ctx = context(conn)
    conn.server_time()
    version = ctx.store.get(ctx.paths.clock).stat.version
    times = [conn.server_time() for _ in range(50)]
    assert ctx.store.get(ctx.paths.clock).stat.version == version
    assert times == sorted(times)
    # L7/L11: a decision reads the ZooKeeper clock itself, with a write
    decided = ctx.now_ms()
    assert ctx.store.get(ctx.paths.clock).stat.version == version + 1
    assert abs(decided - ctx.server_time_ms()) < 1_000


def test_clock_estimate_refreshes_after_max_age():
    local = [100.0]
    readings = iter([1_000_000, 1_005_500])
    clock = ServerClock(lambda: next(readings), max_age=5.0, monotonic=lambda: local[0])
    assert clock.estimate_ms() is None
    assert clock.now_ms() == 1_000_000  # first reading
    local[0] += 2.0
    assert clock.now_ms() == 1_002_000  # estimated: no read
    local[0] += 3.5
    assert clock.now_ms() == 1_005_500  # older than max_age: read again
    clock.observe(1_010_000)
    assert clock.estimate_ms() == 1_010_000


def test_settings_watch_keeps_other_clients_current(zookeeper, warehouse, namespace, conn):
    with lk.connect(zookeeper, warehouse, namespace=namespace) as other:
        conn.update_settings({"lease.max-duration": "2h"})
        wait_for(
            lambda: context(other).cached_settings()["lease.max-duration"].total_seconds() == 7200
        )


def test_set_on_a_changed_version_is_a_conflict(conn):
    path = f"{context(conn).paths.root}/v"
    context(conn).store.commit([Create(path, b"a")])
    context(conn).store.set(path, b"b", 0)
    with pytest.raises(lk.LeasekitError):
        context(conn).store.commit([SetData(path, b"c", 0)])


def test_a_sequential_create_returns_the_numbered_path(conn):
    # section 5: group members are sequential ephemeral znodes (their order elects the leader)
    parent = context(conn).paths.root + "/seq"
    context(conn).store.ensure_path(parent)
    (first,) = context(conn).store.commit(
        [Create(parent + "/m-", b"", ephemeral=True, sequence=True)]
    )
    (second,) = context(conn).store.commit(
        [Create(parent + "/m-", b"", ephemeral=True, sequence=True)]
    )
    assert first.startswith(parent + "/m-") and len(first.rsplit("-", 1)[1]) == 10
    assert second > first and sorted(context(conn).store.children(parent)) == [
        first.rsplit("/", 1)[1],
        second.rsplit("/", 1)[1],
    ]


# -- transactions on the wire -----------------------------------------------------------------


def test_transactions_serialize_exactly_as_kazoo_would():
    # section 2 (atomic metadata writes): leasekit writes its multi requests itself (one pass,
    # the ACL serialized once); every op kind, flag and chroot must give kazoo's own bytes
    from kazoo.protocol import serialization as wire
    from kazoo.security import ACL, Id

    from leasekit.zk import Check
    from leasekit.zk.txn import Multi, acl_bytes

    acls = [ACL(31, Id("digest", "alice:hash=")), ACL(1, Id("world", "anyone"))]
    ops = [
        Check("/ns/leader", -1),
        Create("/ns/a", b"\x00\xffdata"),
        Create("/ns/e", b"", ephemeral=True),
        Create("/ns/s-", b"x" * 300, sequence=True),
        Create("/ns/es-", b"y", ephemeral=True, sequence=True),
        SetData("/ns/a", b"new", 7),
        Delete("/ns/b", 3),
        Delete("/ns/\u00e9t\u00e9", -1),
    ]
    for root in ("", "/chroot"):
        theirs = []
        for op in ops:
            path = root + op.path
            if isinstance(op, Create):
                flags = (1 if op.ephemeral else 0) | (2 if op.sequence else 0)
                theirs.append(wire.Create(path, op.data, acls, flags))
            elif isinstance(op, SetData):
                theirs.append(wire.SetData(path, op.data, op.version))
            elif isinstance(op, Delete):
                theirs.append(wire.Delete(path, op.version))
            else:
                theirs.append(wire.CheckVersion(path, op.version))
        expected = wire.Transaction(theirs).serialize()
        assert Multi(tuple(ops), acl_bytes(acls), root).serialize() == expected
        assert Multi.type == wire.Transaction.type


def test_segment_paths_are_told_apart_by_their_place_not_a_substring():
    # a live view skips segment records (immutable once written) by this test of the layout;
    # a namespace or table id spelled "log" must not make every znode look like one
    from leasekit.zk.paths import Paths

    for namespace in ("leasekit", "log"):
        paths = Paths(namespace)
        assert paths.is_segment(paths.segment("t1", 3, 42))
        assert not paths.is_segment(paths.bucket("t1", 3))
        assert not paths.is_segment(paths.log("t1", 3))
        assert not paths.is_segment(paths.snapshot("log", 3, 1))
        assert not paths.is_segment(paths.settings)
        assert not paths.is_segment(paths.lease("log"))
