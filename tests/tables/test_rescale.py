"""Rescaling online: a split or merge seals its parents at their end offsets in one ZooKeeper
transaction (K1); keys keep one bucket each, the same in every write path (K2); refusals are
typed (K8)."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pyarrow as pa
import pytest
from helpers import read_log

import leasekit as lk
from leasekit import testing
from leasekit.tables import catalog, rescale
from leasekit.tables.bucketing import murmur3_hash


def _depths(table) -> dict[int, int]:
    """Each bucket's depth in the lineage: a parent's records precede its children's (K2)."""
    depth: dict[int, int] = {}
    for lin in table.lineage():
        b = lin.table_bucket.bucket
        depth[b] = 1 + max((depth[p] for p in lin.parents), default=-1)
    return depth


def _check_sealed_logs(table) -> dict[int, list[dict]]:
    """Every sealed bucket's log ends exactly at its seal; the logs, per bucket."""
    logs = read_log(table)
    ends = table.end_offsets()
    for lin in table.lineage():
        b = lin.table_bucket.bucket
        if lin.state == "sealed":
            assert ends[lin.table_bucket] == lin.sealed_at, f"bucket {b} grew past its seal"
            assert all(r["_offset"] < lin.sealed_at for r in logs.get(b, []))
    return logs


def test_split_seals_the_parent_and_halves_its_keys(conn):  # K1, K2
    table = conn.create_table("t", "k BIGINT, v BIGINT", "k", buckets=3)
    table.append([{"k": k, "v": 0} for k in range(300)])
    before = table.end_offsets()
    c1, c2 = table.split_bucket(1)
    assert (c1, c2) == (lk.TableBucket("t", 3), lk.TableBucket("t", 4))
    assert table.num_buckets == 4 and table.buckets == [
        lk.TableBucket("t", b) for b in (0, 2, 3, 4)
    ]
    lineage = {lin.table_bucket.bucket: lin for lin in table.lineage()}
    assert lineage[1] == lk.BucketLineage(
        lk.TableBucket("t", 1), "sealed", (), (3, 4), before[lk.TableBucket("t", 1)]
    )
    assert lineage[3].parents == (1,) and lineage[3].state == "active"
    assert conn.table("t").num_buckets == 4  # another handle reads the same layout
    written = table.append([{"k": k, "v": 1} for k in range(300)])
    assert lk.TableBucket("t", 1) not in written  # the sealed bucket takes no append
    ends = table.end_offsets()
    assert ends[lk.TableBucket("t", 1)] == before[lk.TableBucket("t", 1)]
    assert ends[c1] + ends[c2] == before[lk.TableBucket("t", 1)]  # its keys, split in two
    assert 0.3 < ends[c1] / (ends[c1] + ends[c2]) < 0.7
    merged = table.merge_buckets(c2, c1)
    assert merged == lk.TableBucket("t", 5) and table.num_buckets == 3
    table.append([{"k": k, "v": 2} for k in range(300)])
    ends = table.end_offsets()
    assert ends[merged] == before[lk.TableBucket("t", 1)]
    _check_sealed_logs(table)


def test_rows_route_like_the_layout_in_python_and_spark(conn, spark):  # K2, W4
    table = conn.create_table("t", "k BIGINT, s STRING", "k, s", buckets=2)
    table.split_bucket(0)
    table.split_bucket(2)
    rows = pa.table({"k": np.arange(2000, dtype=np.int64), "s": [f"s{i}" for i in range(2000)]})
    expected = table.layout.route(murmur3_hash(rows, ["k", "s"]))
    table.append(rows)
    lk.spark.write(spark.createDataFrame(rows.to_pandas()), table)
    for bucket, records in read_log(table).items():
        assert len(records) == 2 * int(np.sum(expected == bucket))
        keys = {(r["k"], r["s"]) for r in records}
        assert all(expected[k] == bucket for k, _ in keys)


def test_a_stale_handle_routes_again_after_a_rescale(conn):  # K1: no append into a sealed bucket
    table = conn.create_table("t", "k BIGINT, v BIGINT", "k", buckets=2)
    stale = conn.table("t")
    table.append([{"k": k, "v": 0} for k in range(100)])
    table.split_bucket(0)
    table.split_bucket(1)
    written = stale.append([{"k": k, "v": 1} for k in range(100)])
    assert {tb.bucket for tb in written} == {2, 3, 4, 5}
    assert stale.layout == table.layout  # the handle learnt the new layout
    _check_sealed_logs(table)


def test_appends_racing_rescales_commit_wholly_before_or_after(conn):  # K1, K2 (the race)
    table = conn.create_table("t", "k BIGINT, w INT, seq BIGINT", "k", buckets=2)
    acked: list[tuple[int, int]] = []  # (key, seq) acknowledged, in order per writer
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        handle = conn.table("t")  # each writer its own handle: stale after every rescale
        seq = 0
        try:
            while not stop.is_set():
                keys = [w * 1000 + i for i in range(40)]
                handle.append([{"k": k, "w": w, "seq": seq} for k in keys])
                acked.extend((k, seq) for k in keys)
                seq += 1
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    rng = random.Random(7)
    rescales = 0
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        active = table.buckets
        lineage = table.lineage()
        pairs = [
            lin.children
            for lin in lineage
            if len(lin.children) == 2
            and all(lk.TableBucket("t", c) in active for c in lin.children)
        ]
        if pairs and rng.random() < 0.4:
            table.merge_buckets(*rng.choice(pairs))
        else:
            table.split_bucket(rng.choice(active))
        rescales += 1
        time.sleep(rng.uniform(0, 0.05))
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert rescales >= 20
    logs = _check_sealed_logs(table)
    depth = _depths(table)
    found: dict[int, list[tuple[int, int, int]]] = {}
    for bucket, records in logs.items():
        for r in records:
            found.setdefault(r["k"], []).append((depth[bucket], r["_offset"], r["seq"]))
    stored = sorted((k, seq) for k, recs in found.items() for _, _, seq in recs)
    assert stored == sorted(acked), "an acknowledged record was lost or stored twice"
    for k, recs in found.items():
        seqs = [seq for _, _, seq in sorted(recs)]
        assert seqs == sorted(seqs), f"key {k}: records out of order across the rescales"


def test_refusals_are_typed(conn):  # K8
    table = conn.create_table("t", "k BIGINT", "k", buckets=4)
    c1, c2 = table.split_bucket(1)
    with pytest.raises(lk.IllegalStateError, match="sealed"):
        table.split_bucket(1)
    with pytest.raises(lk.IllegalStateError, match="sealed"):
        table.merge_buckets(1, c1)
    for unknown in (-1, 6, 10**9, 2**64):
        with pytest.raises(lk.BucketNotFoundError):
            table.split_bucket(unknown)
    with pytest.raises(lk.InvalidArgumentError, match="not siblings"):
        table.merge_buckets(0, 2)  # halves of (0, 2), but no split made them
    with pytest.raises(lk.InvalidArgumentError, match="itself"):
        table.merge_buckets(c1, c1)
    with pytest.raises(lk.InvalidArgumentError):
        table.split_bucket(lk.TableBucket("other", 0))
    with pytest.raises(lk.InvalidTypeError):
        table.split_bucket("0")
    assert table.num_buckets == 5  # nothing changed


def test_a_second_rescale_prepared_meanwhile_is_refused(conn):  # K8
    table = conn.create_table("t", "k BIGINT", "k", buckets=4)
    stale = conn.table("t")
    table.split_bucket(0)

    def change(layout, ends):  # the rescale ``stale`` prepared before the split committed
        return layout.split(1, ends[0])

    with pytest.raises(lk.IllegalStateError, match="another rescale"):
        rescale._rescale(stale, [1], change)
    assert [lin.state for lin in table.lineage()][:2] == ["sealed", "active"]


def test_a_table_being_dropped_or_dropped_is_not_rescaled(conn):  # K8
    table = conn.create_table("t", "k BIGINT", "k", buckets=2)
    fenced = catalog.mark_for_drop(testing.context(conn), table)
    with pytest.raises(lk.IllegalStateError, match="being dropped"):
        table.split_bucket(0)
    catalog.unmark_drop(testing.context(conn), fenced)
    conn.drop_table("t")
    with pytest.raises(lk.TableNotFoundError):
        table.split_bucket(0)
