"""Bucket layout by residue classes (K2, W4): every hash has exactly one active bucket,
splits halve a bucket's keys and merges undo them, Python and Spark route alike, and the
stored form round-trips and refuses hostile values."""

from __future__ import annotations

import math
from fractions import Fraction

import msgpack
import numpy as np
import pyarrow as pa
import pytest

from leasekit import BucketLineage, TableBucket
from leasekit.errors import (
    BucketNotFoundError,
    CorruptMetadataError,
    IllegalStateError,
    InvalidArgumentError,
    InvalidTypeError,
)
from leasekit.tables.bucketing import bucket_ids, murmur3_hash
from leasekit.tables.layout import ACTIVE, SEALED, BucketLayout

PATH = "/leasekit/tables/t/layout"
EDGE_HASHES = np.array([-(2**31), -(2**31) + 1, -2, -1, 0, 1, 2, 2**31 - 2, 2**31 - 1], np.int32)


def _hashes(rng: np.random.Generator, size: int) -> np.ndarray:
    drawn = rng.integers(-(2**31), 2**31, size, dtype=np.int64).astype(np.int32)
    return np.concatenate([EDGE_HASHES, drawn])


def _keys(rng: np.random.Generator, size: int) -> pa.Table:
    """Varied primary keys: ints, strings of 0-20 characters, and the pair of both."""
    ints = rng.integers(-(2**62), 2**62, size, dtype=np.int64)
    lengths = rng.integers(0, 21, size)
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyzé日😀0123456789 "))
    strs = ["".join(rng.choice(alphabet, n)) for n in lengths]
    return pa.table({"i": ints, "s": pa.array(strs, pa.string()), "i32": ints.astype(np.int32)})


def _siblings(layout: BucketLayout) -> list[tuple[int, int]]:
    """Every pair of active buckets one split made."""
    active = set(layout.active)
    return [
        lin.children
        for lin in layout.lineage("t")
        if len(lin.children) == 2 and set(lin.children) <= active
    ]


def _random_layout(seed: int, initial: int, steps: int) -> BucketLayout:
    """A layout after ``steps`` random splits and merges of random active buckets."""
    rng = np.random.default_rng(seed)
    layout = BucketLayout.initial(initial)
    for step in range(steps):
        pairs = _siblings(layout)
        if pairs and rng.random() < 0.4:
            a, b = pairs[rng.integers(len(pairs))]
            layout, _ = layout.merge(a, b, 2 * step, 2 * step + 1)
        else:
            active = layout.active
            layout, _ = layout.split(active[rng.integers(len(active))], step)
    return layout


def _assert_partition(layout: BucketLayout, hashes: np.ndarray) -> None:
    """The active buckets' classes partition the integers, and ``route`` follows them."""
    classes = [layout.residue_class(b) for b in layout.active]
    assert sum(Fraction(1, m) for _, m in classes) == 1
    for i, (r1, m1) in enumerate(classes):
        for r2, m2 in classes[i + 1 :]:
            assert (r1 - r2) % math.gcd(m1, m2) != 0, f"({r1}, {m1}) meets ({r2}, {m2})"
    routed = layout.route(hashes)
    assert routed.dtype == np.int32 and set(routed.tolist()) <= set(layout.active)
    owner = dict(zip(layout.active, classes, strict=True))
    for b in np.unique(routed).tolist():
        r, m = owner[b]
        assert (np.mod(hashes[routed == b].astype(np.int64), m) == r).all()


@pytest.mark.parametrize("n", [1, 2, 7, 16, 1000, 100_000])
def test_initial_layout_routes_like_bucket_ids(n):  # K2: existing tables and files stay valid
    keys = _keys(np.random.default_rng(n), 5000)
    layout = BucketLayout.initial(n)
    assert layout.active == tuple(range(n))
    for cols in (["i"], ["s"], ["i", "s"]):
        expected = bucket_ids(keys, cols, n)
        np.testing.assert_array_equal(layout.route(murmur3_hash(keys, cols)), expected)
    assert all(
        lin == BucketLineage(TableBucket("t", b), ACTIVE, (), (), None)
        for b, lin in enumerate(layout.lineage("t"))
    )


@pytest.mark.parametrize("seed,initial", [(1, 1), (2, 6), (3, 16)])
def test_random_splits_and_merges_keep_one_bucket_per_hash(seed, initial):  # K2
    hashes = _hashes(np.random.default_rng(seed), 20_000)
    rng = np.random.default_rng(seed)
    layout = BucketLayout.initial(initial)
    for step in range(300):
        pairs = _siblings(layout)
        if pairs and rng.random() < 0.4:
            a, b = pairs[rng.integers(len(pairs))]
            before = layout.route(hashes)
            layout, c = layout.merge(a, b, step, step + 1)
            np.testing.assert_array_equal(layout.route(hashes) == c, np.isin(before, [a, b]))
        else:
            active = layout.active
            layout, _ = layout.split(active[rng.integers(len(active))], step)
        if step % 10 == 0:
            _assert_partition(layout, hashes)
    _assert_partition(layout, hashes)


def test_split_halves_a_bucket_and_leaves_the_others():  # K2: each child gets half its keys
    keys = _keys(np.random.default_rng(7), 100_000)
    hashes = murmur3_hash(keys, ["i", "s"])
    layout = BucketLayout.initial(1)
    before, parent = layout.route(hashes), 0
    for depth in range(4):  # the same lineage splits again and again, its sibling never
        layout, (child, other) = layout.split(parent, 10 * depth)
        after = layout.route(hashes)
        mine = before == parent
        assert set(after[mine].tolist()) == {child, other}
        assert 0.49 < np.mean(after[mine] == child) < 0.51
        np.testing.assert_array_equal(after[~mine], before[~mine])
        before, parent = after, child
    assert layout.active == (2, 4, 6, 7, 8)  # ids need not be contiguous


def test_merge_is_the_inverse_of_split():  # K1
    hashes = _hashes(np.random.default_rng(11), 50_000)
    layout = BucketLayout.initial(5)
    split, (c1, c2) = layout.split(3, 120)
    assert (c1, c2) == (5, 6)
    assert split.residue_class(c1) == (3, 10) and split.residue_class(c2) == (8, 10)
    merged, c = split.merge(c2, c1, 40, 30)
    assert c == 7 and merged.residue_class(c) == merged.residue_class(3) == (3, 5)
    expected = layout.route(hashes)
    expected[expected == 3] = c
    np.testing.assert_array_equal(merged.route(hashes), expected)
    lineage = {lin.table_bucket.bucket: lin for lin in merged.lineage("t")}
    assert lineage[3] == BucketLineage(TableBucket("t", 3), SEALED, (), (5, 6), 120)
    assert lineage[5] == BucketLineage(TableBucket("t", 5), SEALED, (3,), (7,), 30)
    assert lineage[6] == BucketLineage(TableBucket("t", 6), SEALED, (3,), (7,), 40)
    assert lineage[7] == BucketLineage(TableBucket("t", 7), ACTIVE, (5, 6), (), None)
    assert layout.active == (0, 1, 2, 3, 4)  # a value: split and merge leave it as it was


def test_only_the_buckets_of_one_split_merge():  # K8: "two siblings of one split"
    with pytest.raises(InvalidArgumentError, match="not siblings"):
        BucketLayout.initial(4).merge(1, 3, 5, 6)  # halves of (1, 2), but no split made them
    layout, (c1, c2) = BucketLayout.initial(2).split(1, 3)  # 2 (1 mod 4) and 3 (3 mod 4)
    layout, (g1, g2) = layout.split(c1, 4)  # 4 (1 mod 8) and 5 (5 mod 8)
    layout, back = layout.merge(g2, g1, 5, 6)
    assert layout.residue_class(back) == (1, 4)
    with pytest.raises(InvalidArgumentError, match="not siblings"):
        layout.merge(back, c2, 0, 0)  # halves of (1, 2), but of different splits


def test_refusals_are_typed():  # K8
    layout, _ = BucketLayout.initial(4).split(1, 10)  # buckets 4 (1 mod 8) and 5 (5 mod 8)
    with pytest.raises(IllegalStateError, match="sealed"):
        layout.split(1, 11)
    with pytest.raises(IllegalStateError, match="sealed"):
        layout.merge(1, 3, 0, 0)
    for unknown in (-1, 6, 10**9):
        with pytest.raises(BucketNotFoundError):
            layout.split(unknown, 0)
        with pytest.raises(BucketNotFoundError):
            layout.merge(4, unknown, 0, 0)
    for a, b in [(0, 3), (4, 0), (4, 3), (2, 3)]:  # not two halves of one class
        with pytest.raises(InvalidArgumentError, match="not siblings"):
            layout.merge(a, b, 0, 0)
    with pytest.raises(InvalidArgumentError, match="itself"):
        layout.merge(4, 4, 0, 0)
    with pytest.raises(InvalidArgumentError):
        layout.split(0, -1)
    with pytest.raises(InvalidArgumentError):
        layout.merge(4, 5, 0, 2**63)
    with pytest.raises(InvalidTypeError):
        layout.split("0", 0)
    with pytest.raises(InvalidTypeError):
        layout.split(0, 1.5)
    for n in (0, -3, 1_000_001):
        with pytest.raises(InvalidArgumentError):
            BucketLayout.initial(n)
    with pytest.raises(InvalidTypeError):
        layout.route(np.zeros(3, np.int64))
    with pytest.raises(InvalidArgumentError):
        layout.spark_column([])
    with pytest.raises(InvalidTypeError):
        layout.spark_column("k")


def test_a_bucket_splits_until_its_modulus_would_reach_2_31():  # K8
    layout, bucket = BucketLayout.initial(1), 0
    for _ in range(30):
        layout, (bucket, _) = layout.split(bucket, 0)
    assert layout.residue_class(bucket) == (0, 2**30)
    with pytest.raises(IllegalStateError, match="2\\*\\*31"):
        layout.split(bucket, 0)
    _assert_partition(layout, _hashes(np.random.default_rng(3), 10_000))


def test_spark_column_routes_like_python(spark):  # W4, K2: the same bucket in Spark writes
    from pyspark.sql import functions as F

    keys = _keys(np.random.default_rng(5), 4000)
    deep = BucketLayout.initial(6)
    for bucket, at in [(1, 3), (6, 4), (8, 5), (10, 6)]:  # a lineage split 4 times: sparse moduli
        deep, _ = deep.split(bucket, at)
    deep, (s1, s2) = deep.split(0, 6)
    deep, _ = deep.merge(s2, s1, 7, 8)  # a split merged back: an id unequal to its residue
    deep, _ = deep.merge(12, 13, 9, 10)  # the deepest halves merge back
    layouts = [BucketLayout.initial(6), deep, _random_layout(4, 3, 60), _random_layout(5, 8, 200)]
    df = spark.createDataFrame(keys.append_column("_rid", pa.array(np.arange(4000))))
    key_sets = [["i"], ["s"], ["i32", "s"]]
    cols = [
        layout.spark_column(ks).alias(f"b{i}_{j}")
        for i, layout in enumerate(layouts)
        for j, ks in enumerate(key_sets)
    ]
    out = df.select("_rid", *cols).orderBy(F.col("_rid")).toArrow()
    for i, layout in enumerate(layouts):
        for j, ks in enumerate(key_sets):
            expected = layout.route(murmur3_hash(keys, ks))
            np.testing.assert_array_equal(out[f"b{i}_{j}"].to_numpy(), expected)


def test_spark_column_at_100000_buckets(spark):  # W4, K2: compact for many buckets
    from pyspark.sql import functions as F

    layout = BucketLayout.initial(100_000)
    for bucket in range(0, 100_000, 100):
        layout, (low, _) = layout.split(bucket, 1)
        if bucket % 1000 == 0:
            layout, _ = layout.split(low, 2)
    layout, (m1, m2) = layout.split(1, 3)
    layout, _ = layout.merge(m1, m2, 3, 4)
    keys = pa.table({"k": np.arange(400_000, dtype=np.int64)})
    routed = layout.route(murmur3_hash(keys, ["k"]))
    moved = np.flatnonzero(routed >= 100_000)  # every key of a new bucket, and 5,000 others
    rows = keys.take(np.union1d(moved, np.arange(5000)))
    assert len(set(routed[moved].tolist())) > 1500
    df = spark.createDataFrame(rows).select("k", layout.spark_column(["k"]).alias("b"))
    out = df.orderBy(F.col("k")).toArrow()
    np.testing.assert_array_equal(out["b"].to_numpy(), layout.route(murmur3_hash(rows, ["k"])))


@pytest.mark.parametrize("seed,initial,steps", [(1, 1, 0), (2, 6, 300), (3, 1000, 200)])
def test_encoding_round_trips(seed, initial, steps):  # docs/architecture.md: versioned msgpack
    layout = _random_layout(seed, initial, steps)
    again = BucketLayout.decode(layout.encode(), PATH)
    assert again == layout and hash(again) == hash(layout)
    assert again.active == layout.active and again.lineage("t") == layout.lineage("t")
    hashes = _hashes(np.random.default_rng(seed), 10_000)
    np.testing.assert_array_equal(again.route(hashes), layout.route(hashes))


# docs/architecture.md: far below ZooKeeper's 1 MB
def test_encoding_stays_small_at_100000_buckets():
    layout = BucketLayout.initial(100_000)
    for bucket in range(0, 100_000, 100):
        layout, _ = layout.split(bucket, 2**40 + bucket)
    data = layout.encode()
    assert len(data) < 32 * 1024
    again = BucketLayout.decode(data, PATH)
    assert len(again.active) == 101_000 and again == layout


def _packed(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


HOSTILE = {
    "garbage": b"\xc1\x00\xff",
    "truncated": BucketLayout.initial(8).split(3, 100)[0].encode()[:-2],
    "empty": b"",
    "not a map": _packed([1, 8, []]),
    "no version": _packed({"n": 8, "o": []}),
    "wrong version": _packed({"v": 2, "n": 8, "o": []}),
    "no operations": _packed({"v": 1, "n": 8}),
    "operations not a list": _packed({"v": 1, "n": 8, "o": {"0": [0, 8, 1]}}),
    "zero buckets": _packed({"v": 1, "n": 0, "o": []}),
    "too many buckets": _packed({"v": 1, "n": 2**31 - 1, "o": []}),
    "2**64 - 1 buckets": _packed({"v": 1, "n": 2**64 - 1, "o": []}),
    "string count": _packed({"v": 1, "n": "8", "o": []}),
    "bool in an operation": _packed({"v": 1, "n": 8, "o": [[True, 8, 1]]}),
    "negative residue": _packed({"v": 1, "n": 8, "o": [[-1, 8, 1]]}),
    "residue = modulus": _packed({"v": 1, "n": 8, "o": [[8, 8, 1]]}),
    "residue > modulus": _packed({"v": 1, "n": 8, "o": [[2**64 - 1, 8, 1]]}),
    "modulus 2**64 - 1": _packed({"v": 1, "n": 8, "o": [[3, 2**64 - 1, 1]]}),
    "offset 2**64 - 1": _packed({"v": 1, "n": 8, "o": [[3, 8, 2**64 - 1]]}),
    "negative offset": _packed({"v": 1, "n": 8, "o": [[3, 4, 0, -5]]}),
    "short operation": _packed({"v": 1, "n": 8, "o": [[3, 8]]}),
    "long operation": _packed({"v": 1, "n": 8, "o": [[3, 8, 1, 2, 3]]}),
    "float offset": _packed({"v": 1, "n": 8, "o": [[3, 8, 1.0]]}),
    "no bucket owns the class": _packed({"v": 1, "n": 8, "o": [[3, 16, 1]]}),
    # splitting a sealed class again would make the bucket its own descendant
    "cycle: sealed bucket split again": _packed({"v": 1, "n": 8, "o": [[3, 8, 1], [3, 8, 2]]}),
    "split of a class merged away": _packed(
        {"v": 1, "n": 8, "o": [[3, 8, 1], [3, 8, 1, 2], [3, 16, 4]]}
    ),
    "merge of halves not both active": _packed({"v": 1, "n": 8, "o": [[3, 8, 1], [3, 4, 1, 2]]}),
    "merge of halves no split made": _packed({"v": 1, "n": 8, "o": [[3, 4, 1, 2]]}),
    "split past modulus 2**31": _packed({"v": 1, "n": 1, "o": [[0, 2**k, 1] for k in range(31)]}),
    "merge past modulus 2**31": _packed({"v": 1, "n": 8, "o": [[0, 2**30 + 1, 1, 2]]}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_encodings_raise_corrupt_metadata(name):  # CorruptMetadataError naming the path
    with pytest.raises(CorruptMetadataError) as caught:
        BucketLayout.decode(HOSTILE[name], PATH)
    assert caught.value.path == PATH and PATH in str(caught.value)
