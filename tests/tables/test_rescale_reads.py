"""Reads across rescales: the table's rows are the same before and after a split or merge, by
every read path, and a new bucket's first snapshot materialises its share of its parents (K3);
leases pin, for a bucket with no snapshot yet, what its state is built from (K4)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from helpers import warehouse_files

import leasekit as lk
from leasekit import spark as lks
from leasekit.tables.bucketing import murmur3_hash

DDL = "k BIGINT, v STRING"


def _rows(df) -> list[tuple]:
    return sorted((r.k, r.v) for r in df.select("k", "v").collect())


def _model(model: dict) -> list[tuple]:
    return sorted(model.items())


def _write(table, model, keys, tag):
    """Upsert ``keys`` with value ``tag``-k, recording them in ``model``."""
    table.append([{"k": k, "v": f"{tag}-{k}"} for k in keys])
    model.update({k: f"{tag}-{k}" for k in keys})


def _delete(table, model, keys):
    table.delete([{"k": k} for k in keys])
    for k in keys:
        model.pop(k, None)


def _history(table) -> dict:
    """Upserts, updates and deletes over 200 keys, with a snapshot in between."""
    model: dict = {}
    _write(table, model, range(200), "a")
    _delete(table, model, range(0, 200, 7))
    table.snapshot()
    _write(table, model, range(0, 200, 3), "b")
    _delete(table, model, range(1, 200, 11))
    return model


def test_split_keeps_every_read_the_same_and_copies_no_file(conn, spark):  # K3
    table = conn.create_table("t", DDL, "k", buckets=2)
    model = _history(table)
    before = table.end_offsets()
    assert _rows(lks.read_at(spark, table)) == _model(model)
    files = warehouse_files(conn)
    c1, c2 = table.split_bucket(0)
    assert warehouse_files(conn) == files  # K3: a rescale copies no data file
    assert _rows(lks.read_at(spark, table)) == _model(model)
    assert _rows(lks.read_at(spark, table, before)) == _model(model)
    old_model = dict(model)
    # K3: the sealed bucket's own snapshot is still read as it was
    (old,) = table.snapshots(0)
    rows = _rows(lks.read_snapshots(spark, table, {lk.TableBucket("t", 0): old.snapshot_id}))
    assert rows and rows == _rows(lks.read_at(spark, table, {0: old.log_offset}))
    with pytest.raises(lk.InvalidArgumentError):  # the parent and its child both named
        lks.read_at(spark, table, table.end_offsets())
    with pytest.raises(lk.OffsetOutOfRangeError):  # a sealed bucket ends at its seal
        lks.read_at(spark, table, {0: before[lk.TableBucket("t", 0)] + 1})
    # K2: keys updated in the parent and again in a child, deleted in a child, new keys
    _write(table, model, range(0, 200, 5), "c")
    _delete(table, model, range(0, 200, 13))
    _write(table, model, range(200, 260), "d")
    assert _rows(lks.read_at(spark, table)) == _model(model)
    new = table.snapshot(spark)
    assert {c1, c2} <= set(new) and lk.TableBucket("t", 0) not in new  # sealed: not compacted
    assert _rows(lks.read_at(spark, table)) == _model(model)
    assert _rows(
        lks.read_snapshots(spark, table, {tb: s.snapshot_id for tb, s in new.items()})
    ) == (_model(model))
    assert _rows(lks.read_at(spark, table, before)) == _model(old_model)


def test_first_snapshot_of_a_new_bucket_materialises_its_share(conn, spark):  # K3
    table = conn.create_table("t", DDL, "k", buckets=1)
    model = _history(table)
    c1, c2 = table.split_bucket(0)
    assert table.end_offsets()[c1] == table.end_offsets()[c2] == 0
    snaps = table.snapshot(spark)
    assert set(snaps) == {c1, c2}  # no record of their own, but a share of their parent's
    assert snaps[c1].log_offset == snaps[c2].log_offset == 0
    halves = [
        _rows(lks.read_snapshots(spark, table, {tb: snaps[tb].snapshot_id})) for tb in (c1, c2)
    ]
    assert halves[0] and halves[1] and not set(halves[0]) & set(halves[1])
    assert sorted(halves[0] + halves[1]) == _model(model)
    assert snaps[c1].row_count + snaps[c2].row_count == len(model)
    assert table.snapshot(spark) == {}  # nothing advanced since
    assert _rows(lks.read_at(spark, table)) == _model(model)


def test_split_twice_and_merge_back_keep_the_rows(conn, spark):  # K3, K2
    table = conn.create_table("t", DDL, "k", buckets=2)
    model = _history(table)
    history = [(table.end_offsets(), dict(model))]
    _, c2 = table.split_bucket(0)  # 0 -> 2, 3
    _write(table, model, range(0, 300, 4), "e")
    history.append((table.end_offsets(), dict(model)))
    g1, g2 = table.split_bucket(c2)  # 3 -> 4, 5: 0's keys now come from 0, 3 and 5 levels
    _write(table, model, range(0, 300, 6), "f")
    _delete(table, model, range(0, 300, 17))
    assert _rows(lks.read_at(spark, table)) == _model(model)
    history.append((table.end_offsets(), dict(model)))
    merged = table.merge_buckets(g1, g2)  # 4, 5 -> 6: a bucket with two parents
    _write(table, model, range(0, 300, 9), "g")
    assert _rows(lks.read_at(spark, table)) == _model(model)
    one = table.snapshot(spark)  # the merged bucket's first snapshot: its parents' states
    assert merged in one
    _delete(table, model, range(0, 300, 10))
    assert _rows(lks.read_at(spark, table)) == _model(model)
    table.snapshot(spark)
    assert _rows(lks.read_at(spark, table)) == _model(model)
    for ends, then in history:  # K3: the state as of then, named by the offsets of then
        assert _rows(lks.read_at(spark, table, _frontier(table, ends))) == _model(then)


def _frontier(table, ends):
    """The buckets of ``ends`` that were active then: those none of the others descends from
    (end_offsets lists every bucket ever, sealed ones included)."""
    lineage = {lin.table_bucket: lin for lin in table.lineage()}
    parents = {lk.TableBucket(table.name, p) for tb in ends for p in lineage[tb].parents}
    return {tb: o for tb, o in ends.items() if tb not in parents}


def test_each_child_read_alone_gets_its_share_of_the_parent(conn, spark):  # K3
    table = conn.create_table("t", DDL, "k", buckets=1)
    model = _history(table)
    c1, c2 = table.split_bucket(0)
    _write(table, model, range(0, 400, 3), "h")
    ends = table.end_offsets()
    # each child alone: the parent's state restricted to the child's keys, then its own log
    only = _rows(lks.read_at(spark, table, {c1: ends[c1]}))
    other = _rows(lks.read_at(spark, table, {c2: ends[c2]}))
    assert not set(only) & set(other) and sorted(only + other) == _model(model)
    table.snapshot(spark)
    _write(table, model, range(1, 400, 5), "i")
    assert _rows(lks.read_at(spark, table)) == _model(model)


# -- K4: leases ---------------------------------------------------------------------------


def test_acquire_latest_pins_the_parent_until_the_children_have_snapshots(conn, spark):  # K4
    table = conn.create_table("t", DDL, "k", buckets=2)
    model = _history(table)
    _write(table, model, range(300, 320), "j")  # past the parent's snapshot: not in it
    parent = {tb.bucket: s for tb, s in table.latest_snapshots().items()}
    as_snapshotted = lks.read_at(spark, table, {b: s for b, s in _offsets(table, parent).items()})
    expected = _rows(as_snapshotted)
    c1, c2 = table.split_bucket(0)
    lease = conn.lease("k4")
    result = lease.acquire_latest("t")
    assert result.acquired == {lk.TableBucket("t", 0): parent[0], lk.TableBucket("t", 1): parent[1]}
    assert result.unavailable == {}
    assert _rows(lease.read(spark, table)) == expected
    snaps = table.snapshot(spark)
    result = lease.acquire_latest("t")
    assert set(result.acquired) == {lk.TableBucket("t", 1), c1, c2}
    assert result.acquired[c1] == snaps[c1].snapshot_id
    assert lk.TableBucket("t", 0) in lease.info().pins  # K4: the earlier pin stays until released
    assert _rows(lease.read(spark, table)) == _model(model)  # the children's, not the parent's
    lease.release([lk.TableBucket("t", 0)])
    assert _rows(lease.read(spark, table)) == _model(model)


def _offsets(table, snapshot_ids):
    """The log offset of each bucket's snapshot ``snapshot_ids[bucket]``."""
    return {
        b: next(s.log_offset for s in table.snapshots(b) if s.snapshot_id == sid)
        for b, sid in snapshot_ids.items()
    }


def test_a_pin_on_a_sealed_bucket_stays_valid(conn, spark):  # K4
    table = conn.create_table("t", DDL, "k", buckets=1, properties={"kv.snapshot.num-retained": 1})
    _history(table)
    (snap,) = table.snapshots(0)
    lease = conn.lease("sealed")
    lease.acquire({lk.TableBucket("t", 0): snap.snapshot_id})
    expected = _rows(lks.read_snapshots(spark, table, {0: snap.snapshot_id}))
    c1, c2 = table.split_bucket(0)
    table.snapshot(spark)
    result = lease.acquire({lk.TableBucket("t", 0): snap.snapshot_id})  # pinning it again
    assert result.acquired == {lk.TableBucket("t", 0): snap.snapshot_id}
    assert lease.info().pins == {lk.TableBucket("t", 0): snap.snapshot_id}
    conn.run_retention("t")  # K4: a pin keeps the sealed bucket's snapshot and its files
    assert _rows(lks.read_snapshots(spark, table, {0: snap.snapshot_id})) == expected
    assert _rows(lease.read(spark, table)) == expected  # the parent's pin covers both children
    # one child pinned: the parent's snapshot stands only for the other child's keys
    own = table.latest_snapshots()[c1]
    lease.acquire({c1: own})
    mine = _rows(lks.read_snapshots(spark, table, {c1: own}))
    keys = pa.table({"k": np.array([k for k, _ in expected], dtype=np.int64)})
    routed = table.layout.route(murmur3_hash(keys, ["k"]))
    rest = [row for row, b in zip(expected, routed.tolist()) if b == c2.bucket]
    assert _rows(lease.read(spark, table)) == sorted(mine + rest)


def test_lease_read_refuses_buckets_no_pin_covers(conn, spark):  # K4, L12
    table = conn.create_table("t", DDL, "k", buckets=2)
    _history(table)
    lease = conn.lease("partial")
    pin = table.latest_snapshots()[lk.TableBucket("t", 1)]
    lease.acquire({lk.TableBucket("t", 1): pin})
    c1, c2 = table.split_bucket(0)
    table.snapshot(spark)
    with pytest.raises(lk.NotPinnedError):
        lease.read(spark, table)
    ones = _rows(lease.read(spark, table, allow_partial=True))
    assert ones and ones == _rows(lks.read_at(spark, table, _offsets(table, {1: pin})))
    lease.acquire({c1: 1})
    with pytest.raises(lk.NotPinnedError, match=rf"buckets {c2.bucket}\)"):
        lease.read(spark, table)


def test_acquire_latest_reports_a_child_whose_lineage_has_no_snapshot(conn, spark):  # K4, L6
    table = conn.create_table("t", DDL, "k", buckets=2)
    table.append([{"k": k, "v": "x"} for k in range(50)])
    c1, c2 = table.split_bucket(0)
    result = conn.lease("none").acquire_latest("t")
    assert result.acquired == {}
    assert result.unavailable == {lk.TableBucket("t", 1): -1, c1: -1, c2: -1}


# -- read_changes across a split ------------------------------------------------------------


def test_read_changes_covers_sealed_buckets_not_yet_consumed(conn, spark):  # K3
    table = conn.create_table("t", DDL, "k", buckets=2)
    table.append([{"k": k, "v": "a"} for k in range(40)])
    c1, c2 = table.split_bucket(0)
    table.append([{"k": k, "v": "b"} for k in range(40)])
    batch = lks.read_changes(spark, table, "g")
    got = sorted((r.k, r.v) for r in batch.df.collect())
    assert got == sorted([(k, "a") for k in range(40)] + [(k, "b") for k in range(40)])
    batch.commit()
    assert lks.read_changes(spark, table, "g").df.count() == 0


def _siblings(table) -> list[tuple[int, int]]:
    """Pairs of active buckets one split made (they may merge back)."""
    lineage = table.lineage()
    made: dict[tuple[int, ...], list[int]] = {}
    for lin in lineage:
        if lin.state == "active" and len(lin.parents) == 1:
            made.setdefault(lin.parents, []).append(lin.table_bucket.bucket)
    return [tuple(pair) for pair in made.values() if len(pair) == 2]


def test_random_rescales_writes_and_snapshots_keep_the_state(conn, spark):  # K3, K2
    rng = np.random.default_rng(11)
    table = conn.create_table("t", DDL, "k", buckets=2)
    model: dict = {}
    history = []
    script = "split split snapshot split merge split snapshot merge split split merge".split()
    for step, action in enumerate(script):
        if action == "split":
            table.split_bucket(int(rng.choice(table.layout.active)))
        elif action == "merge":
            pairs = _siblings(table)
            table.merge_buckets(*pairs[int(rng.integers(len(pairs)))])
        else:
            table.snapshot(spark)
        _write(table, model, rng.choice(300, 60, replace=False).tolist(), f"s{step}")
        _delete(table, model, rng.choice(300, 15, replace=False).tolist())
        history.append((table.end_offsets(), dict(model)))
        assert _rows(lks.read_at(spark, table)) == _model(model), f"step {step}: {action}"
    for ends, then in history[::3]:
        assert _rows(lks.read_at(spark, table, _frontier(table, ends))) == _model(then)
    table.snapshot(spark)
    assert _rows(lks.read_at(spark, table)) == _model(model)
    lease = conn.lease("all")
    assert lease.acquire_latest("t").unavailable == {}
    assert _rows(lease.read(spark, table)) == _model(model)


def test_two_children_read_at_their_ends_read_their_parent_once(conn):  # K3
    from leasekit.snapshots.sources import plan_read

    table = conn.create_table("t", DDL, "k", buckets=1)
    table.append([{"k": k, "v": "a"} for k in range(50)])
    c1, c2 = table.split_bucket(0)
    table.split_bucket(c1.bucket)
    ends = {b: o for b, o in ((tb.bucket, o) for tb, o in table.end_offsets().items())}
    whole = plan_read(table, {b: ends[b] for b in table.active})
    assert [(s.bucket, s.within) for s in whole if s.bucket == 0] == [(0, None)]
    alone = plan_read(table, {c2.bucket: ends[c2.bucket]})
    (parent,) = [s for s in alone if s.bucket == 0]
    assert parent.within == (table.layout.residue_class(c2.bucket),)


# -- "latest" across a split -------------------------------------------------------------------


def test_latest_snapshots_after_a_split_read_the_table_once(conn, spark):  # K3, D1
    table = conn.create_table("t", DDL, "k", buckets=1)
    model: dict = {}
    _write(table, model, range(10), "a")
    table.snapshot(spark)
    c1, c2 = table.split_bucket(0)
    # K3: right after the split, "latest" is the parent's snapshot standing for both children
    assert table.latest_snapshots() == {lk.TableBucket("t", 0): 1}
    assert _rows(lks.read_snapshots(spark, table, table.latest_snapshots())) == _model(model)
    _write(table, model, range(5), "b")
    _delete(table, model, [9])
    snaps = table.snapshot(spark)
    latest = table.latest_snapshots()
    assert latest == {tb: s.snapshot_id for tb, s in snaps.items()} == {c1: 1, c2: 1}
    expected = _rows(lks.read_at(spark, table))
    assert expected == _model(model) and len(expected) == 9
    assert _rows(lks.read_snapshots(spark, table, latest)) == expected
    lks.register(spark)
    fmt = spark.read.format("leasekit").options(
        zookeeper=conn.zookeeper, warehouse=conn.warehouse, namespace=conn.namespace
    )
    assert _rows(fmt.option("snapshots", "latest").load("t")) == expected  # D1
    # a lease pinning the parent keeps its snapshot: "latest" still names only the children
    conn.lease("old").acquire({lk.TableBucket("t", 0): 1})
    conn.run_retention("t")
    assert table.latest_snapshots() == {c1: 1, c2: 1}


def test_a_parent_snapshot_stands_only_for_the_children_not_named(conn, spark):  # K3
    table = conn.create_table("t", DDL, "k", buckets=1)
    model: dict = {}
    _write(table, model, range(40), "a")
    table.snapshot(spark)
    c1, c2 = table.split_bucket(0)
    _write(table, model, range(0, 40, 3), "b")
    table.snapshot(spark)
    # the parent's snapshot with one child's: the parent counts only for the other child
    both = {lk.TableBucket("t", 0): 1, c1: 1}
    rows = _rows(lks.read_snapshots(spark, table, both))
    assert len(rows) == len({k for k, _ in rows}) == 40
    # naming a parent beside every bucket built from it reads it for no key: refused
    with pytest.raises(lk.InvalidArgumentError, match="sealed bucket 0"):
        lks.read_snapshots(spark, table, {**both, c2: 1})
