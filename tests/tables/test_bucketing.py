"""Bucketing: the Python and Spark write paths put every key in the same bucket.

Ground truth is real Spark: ``hash()`` and ``pmod`` on a local SparkSession.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasekit.errors import InvalidArgumentError, InvalidTypeError
from leasekit.tables.bucketing import SEED, bucket_ids, murmur3_hash, spark_bucket_column

RID = "_rid"
BUCKET_COUNTS = (1, 2, 7, 16, 1000)
N_RANDOM = 3000
UTC = dt.timezone.utc

# Spark's DateType / TimestampType range: 0001-01-01 .. 9999-12-31.
MIN_DAY, MAX_DAY = -719_162, 2_932_896
MIN_MICROS, MAX_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999

EDGE_STRINGS = [
    "", "a", "ab", "abc", "abcd", "abcde", "abcdefg", "abcdefgh", "abcdefghi",
    "é", "日本", "😀", "é日本😀", "aé", "abcé", "ß\u00ff", "\x00", "a\x00b", " ", "Zürich 東京 🎉",
    None,
]  # fmt: skip
EDGE_BINARY = [
    b"", b"\x80", b"\xff", b"\xff\xfe", b"\x80\x81\x82", b"\x00\x01\x02\x03",
    b"\x00\x01\x02\x03\x84", b"\xfe\xff\xfe\xff\xfe\xff\xfe", b"\x90" * 8, b"\x7f\x80" * 9, None,
]  # fmt: skip


def _int_edges(typ: pa.DataType, bits: int) -> pa.Array:
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return pa.array([0, 1, -1, 2, -2, lo, hi, lo + 1, hi - 1, 42, None], typ)


EDGE_ARRAYS = {
    "int8": _int_edges(pa.int8(), 8),
    "int16": _int_edges(pa.int16(), 16),
    "int32": _int_edges(pa.int32(), 32),
    "int64": _int_edges(pa.int64(), 64),
    "bool": pa.array([True, False, None]),
    "date32": pa.array(
        [0, -1, 1, -25_000, 19_000, MIN_DAY, MAX_DAY, -141_428, None], pa.date32()
    ),  # -141_428 is 1582-10-15, the Gregorian cutover
    "timestamp_us_utc": pa.array(
        [0, -1, 1, -86_400_000_001, 10**15, MIN_MICROS, MAX_MICROS, None],
        pa.timestamp("us", tz="UTC"),
    ),
    "timestamp_ms": pa.array([0, -1, 1, -1_234_567_890_123, None], pa.timestamp("ms", tz="UTC")),
    "timestamp_s": pa.array([0, -1, 1, -2_000_000_000, None], pa.timestamp("s", tz="UTC")),
    "timestamp_ns": pa.array(
        [0, -1, 1, -999, -1_000, -1_001, 1_999, -(10**18), None], pa.timestamp("ns", tz="UTC")
    ),
    "string": pa.array(EDGE_STRINGS, pa.string()),
    "large_string": pa.array(EDGE_STRINGS, pa.large_string()),
    "binary": pa.array(EDGE_BINARY, pa.binary()),
    "large_binary": pa.array(EDGE_BINARY, pa.large_binary()),
}


def _quoted(name: str):
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _spark_results(spark, table: pa.Table, keys: list[str], counts=BUCKET_COUNTS):
    """Spark's raw hash and bucket per count, in the table's row order."""
    from pyspark.sql import functions as F

    rid = pa.array(np.arange(table.num_rows, dtype=np.int64))
    df = spark.createDataFrame(table.append_column(RID, rid))
    cols = [F.hash(*[_quoted(k) for k in keys]).alias("h")]
    cols += [spark_bucket_column(keys, n).alias(f"b{n}") for n in counts]
    out = df.select(RID, *cols).toArrow().sort_by(RID)
    assert out[RID].to_pylist() == list(range(table.num_rows))
    return out["h"].to_numpy(), {n: out[f"b{n}"].to_numpy() for n in counts}


def _assert_matches_spark(spark, table: pa.Table, keys: list[str]) -> None:
    spark_hash, spark_buckets = _spark_results(spark, table, keys)
    ours = murmur3_hash(table, keys)
    assert ours.dtype == np.int32
    np.testing.assert_array_equal(ours, spark_hash)
    for n, expected in spark_buckets.items():
        got = bucket_ids(table, keys, n)
        assert got.dtype == np.int32
        assert got.min() >= 0 and got.max() < n
        np.testing.assert_array_equal(got, expected)


def _with_nulls(rng: np.random.Generator, values: list, rate: float = 0.1) -> list:
    return [None if rng.random() < rate else v for v in values]


def _random_arrays(rng: np.random.Generator, n: int) -> dict[str, pa.Array]:
    pool = list("abcxyzABC019 _-é日本語😀🎉ßü\x00") + ["\u00ff", "\u07ff", "\uffff", "\U0010ffff"]
    lengths = rng.integers(0, 25, n)
    strings = ["".join(rng.choice(pool, size=k)) for k in lengths]
    blobs = [rng.integers(0, 256, k, dtype=np.uint8).tobytes() for k in rng.integers(0, 40, n)]

    def ints(bits: int, typ: pa.DataType) -> pa.Array:
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        values = rng.integers(lo, hi, n, dtype=np.int64, endpoint=True).tolist()
        return pa.array(_with_nulls(rng, values), typ)

    return {
        "int8": ints(8, pa.int8()),
        "int16": ints(16, pa.int16()),
        "int32": ints(32, pa.int32()),
        "int64": ints(64, pa.int64()),
        "small_int64": pa.array(rng.integers(-1000, 1000, n), pa.int64()),
        "bool": pa.array(_with_nulls(rng, rng.integers(0, 2, n).astype(bool).tolist())),
        "date32": pa.array(
            _with_nulls(rng, rng.integers(MIN_DAY, MAX_DAY, n, endpoint=True).tolist()),
            pa.date32(),
        ),
        "timestamp": pa.array(
            _with_nulls(rng, rng.integers(MIN_MICROS, MAX_MICROS, n, endpoint=True).tolist()),
            pa.timestamp("us", tz="UTC"),
        ),
        "string": pa.array(_with_nulls(rng, strings), pa.string()),
        "binary": pa.array(_with_nulls(rng, blobs), pa.binary()),
    }


@pytest.fixture(scope="module")
def random_table() -> pa.Table:
    return pa.table(_random_arrays(np.random.default_rng(20240917), N_RANDOM))


@pytest.mark.parametrize("name", sorted(EDGE_ARRAYS))
def test_edge_values_match_spark(spark, name):  # W4
    table = pa.table({"k": EDGE_ARRAYS[name]})
    _assert_matches_spark(spark, table, ["k"])


@pytest.mark.parametrize(
    "name",
    ["int8", "int16", "int32", "int64", "small_int64", "bool", "date32", "timestamp", "string",
     "binary"],
)  # fmt: skip
def test_random_values_match_spark(spark, random_table, name):  # W4
    _assert_matches_spark(spark, random_table.select([name]), [name])


@pytest.mark.parametrize(
    "keys",
    [
        ["string", "int64"],
        ["int32", "date32", "bool"],
        ["binary", "timestamp", "int8", "int16"],
        ["int64", "string", "bool", "binary"],
    ],
)
def test_multi_column_keys_match_spark(spark, random_table, keys):  # W4
    _assert_matches_spark(spark, random_table, keys)


def test_all_null_key_hashes_to_seed(spark):  # W4
    table = pa.table(
        {
            "s": pa.array([None, None, "x"], pa.string()),
            "i": pa.array([None, 5, None], pa.int32()),
        }
    )
    _assert_matches_spark(spark, table, ["s", "i"])
    assert murmur3_hash(table, ["s", "i"])[0] == SEED
    assert bucket_ids(table, ["s", "i"], 16)[0] == SEED % 16


def test_sql_literals_match(spark):  # W4
    cases = [
        ("cast(-1 as int)", pa.array([-1], pa.int32())),
        ("cast(-128 as tinyint)", pa.array([-128], pa.int8())),
        ("cast(-32768 as smallint)", pa.array([-32768], pa.int16())),
        ("cast(-9223372036854775808 as bigint)", pa.array([-(2**63)], pa.int64())),
        ("true", pa.array([True])),
        ("'é日本😀'", pa.array(["é日本😀"])),
        ("''", pa.array([""])),
        ("X'80FF7F'", pa.array([b"\x80\xff\x7f"])),
        ("date'1969-12-31'", pa.array([dt.date(1969, 12, 31)])),
        (
            "timestamp'1969-12-31 23:59:59.999999'",
            pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)]),
        ),
        (
            "timestamp_ntz'1969-12-31 23:59:59.999999'",
            pa.array([dt.datetime(1969, 12, 31, 23, 59, 59, 999999)], pa.timestamp("us")),
        ),
    ]
    exprs = ", ".join(
        f"hash({sql}) AS c{i}, pmod(hash({sql}), 7) AS b{i}" for i, (sql, _) in enumerate(cases)
    )
    row = spark.sql(f"SELECT {exprs}").collect()[0]
    for i, (sql, arr) in enumerate(cases):
        table = pa.table({"k": arr})
        assert murmur3_hash(table, ["k"])[0] == row[f"c{i}"], sql
        assert bucket_ids(table, ["k"], 7)[0] == row[f"b{i}"], sql


def test_rows_with_explicit_schema_match(spark):  # W4
    """Spark rows built from Python objects (no Arrow), including TimestampNTZ."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    rows = [
        (0, "", -1, -(2**63), True, dt.date(1900, 3, 1),
         dt.datetime(1969, 7, 20, 20, 17, tzinfo=UTC), dt.datetime(1950, 1, 1, 0, 0, 0, 1),
         b"\x80"),
        (1, "日本", 2**31 - 1, 2**63 - 1, False, dt.date(2038, 1, 19),
         dt.datetime(2000, 1, 1, tzinfo=UTC), dt.datetime(1970, 1, 1), b""),
        (2, None, None, None, None, None, None, None, None),
        (3, "😀x", -(2**31), 0, True, dt.date(1, 1, 1), dt.datetime(1, 1, 1, tzinfo=UTC),
         dt.datetime(9999, 12, 31, 23, 59, 59, 999999), b"\xfe\xff\x00\x01\x02"),
    ]  # fmt: skip
    schema = T.StructType(
        [
            T.StructField(RID, T.LongType()),
            T.StructField("s", T.StringType()),
            T.StructField("i", T.IntegerType()),
            T.StructField("l", T.LongType()),
            T.StructField("b", T.BooleanType()),
            T.StructField("d", T.DateType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("bin", T.BinaryType()),
        ]
    )
    table = pa.table(
        {
            "s": pa.array([r[1] for r in rows], pa.string()),
            "i": pa.array([r[2] for r in rows], pa.int32()),
            "l": pa.array([r[3] for r in rows], pa.int64()),
            "b": pa.array([r[4] for r in rows], pa.bool_()),
            "d": pa.array([r[5] for r in rows], pa.date32()),
            "ts": pa.array([r[6] for r in rows], pa.timestamp("us", tz="UTC")),
            "ntz": pa.array([r[7] for r in rows], pa.timestamp("us")),
            "bin": pa.array([r[8] for r in rows], pa.binary()),
        }
    )
    keys = table.column_names
    df = spark.createDataFrame(rows, schema)
    selected = [F.hash(F.col(k)).alias(f"h_{k}") for k in keys]
    selected += [F.hash(*keys).alias("h_all"), spark_bucket_column(keys, 1000).alias("b")]
    out = df.select(RID, *selected).orderBy(RID).collect()
    for k in keys:
        assert murmur3_hash(table, [k]).tolist() == [r[f"h_{k}"] for r in out], k
    assert murmur3_hash(table, keys).tolist() == [r["h_all"] for r in out]
    assert bucket_ids(table, keys, 1000).tolist() == [r["b"] for r in out]


def test_timestamp_units_agree():  # W4
    micros = np.array([0, -1, -1_500_000, 86_400_000_000, -(10**15)], dtype=np.int64)
    expected = murmur3_hash(pa.table({"k": pa.array(micros, pa.timestamp("us"))}), ["k"])
    for unit, factor in (("ns", 1000), ("us", 1)):
        arr = pa.array(micros * factor, pa.timestamp(unit, tz="Europe/Berlin"))
        np.testing.assert_array_equal(murmur3_hash(pa.table({"k": arr}), ["k"]), expected)
    whole = micros[micros % 1000 == 0] // 1000
    arr = pa.array(whole, pa.timestamp("ms"))
    expected_ms = murmur3_hash(pa.table({"k": pa.array(whole * 1000, pa.timestamp("us"))}), ["k"])
    np.testing.assert_array_equal(murmur3_hash(pa.table({"k": arr}), ["k"]), expected_ms)


def test_chunked_and_sliced_columns(random_table):  # W4
    keys = ["string", "int64", "binary", "date32", "bool", "timestamp"]
    expected = bucket_ids(random_table, keys, 1000)
    pieces = [random_table.slice(0, 1), random_table.slice(1, 999), random_table.slice(1000)]
    chunked = pa.concat_tables(pieces)
    assert chunked.column("string").num_chunks == 3
    np.testing.assert_array_equal(bucket_ids(chunked, keys, 1000), expected)
    np.testing.assert_array_equal(
        bucket_ids(random_table.slice(123, 456), keys, 1000), expected[123:579]
    )
    large = random_table.cast(
        random_table.schema.set(
            random_table.schema.get_field_index("string"), pa.field("string", pa.large_string())
        )
    )
    np.testing.assert_array_equal(bucket_ids(large, keys, 1000), expected)


def test_null_slot_with_nonzero_length_keeps_seed():  # W4
    offsets = np.array([0, 3, 7], dtype=np.int32)
    validity = pa.array([True, False]).buffers()[1]
    arr = pa.Array.from_buffers(
        pa.string(), 2, [validity, pa.py_buffer(offsets), pa.py_buffer(b"abcdefg")]
    )
    hashes = murmur3_hash(pa.table({"k": arr}), ["k"])
    assert hashes[1] == SEED
    assert hashes[0] == murmur3_hash(pa.table({"k": ["abc"]}), ["k"])[0]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=30) | st.none(), min_size=1, max_size=40))
def test_arbitrary_text_matches_spark(spark, values):  # W4
    _assert_matches_spark(spark, pa.table({"k": pa.array(values, pa.string())}), ["k"])


def test_empty_table():  # W4
    table = pa.table({"s": pa.array([], pa.string()), "i": pa.array([], pa.int64())})
    result = bucket_ids(table, ["s", "i"], 16)
    assert result.dtype == np.int32 and result.shape == (0,)
    assert murmur3_hash(table, ["s"]).shape == (0,)


@pytest.mark.parametrize(
    "typ",
    [pa.float64(), pa.uint32(), pa.decimal128(10, 2), pa.list_(pa.int32()), pa.date64(),
     pa.dictionary(pa.int32(), pa.string())],
)  # fmt: skip
def test_unsupported_key_types_rejected(typ):  # W4
    table = pa.table({"k": pa.array([], typ)})
    with pytest.raises(InvalidArgumentError, match="unsupported type"):
        bucket_ids(table, ["k"], 4)


def test_bad_arguments_rejected():  # W4
    table = pa.table({"k": pa.array([1, 2], pa.int64())})
    with pytest.raises(InvalidArgumentError):
        bucket_ids(table, ["missing"], 4)
    with pytest.raises(InvalidArgumentError):
        bucket_ids(table, [], 4)
    with pytest.raises(InvalidTypeError):
        bucket_ids(table, "k", 4)
    for bad in (0, -3, 2**31):
        with pytest.raises(InvalidArgumentError):
            bucket_ids(table, ["k"], bad)
    for bad in (True, 4.0, "4"):
        with pytest.raises(InvalidTypeError):
            bucket_ids(table, ["k"], bad)
    with pytest.raises(InvalidArgumentError):
        spark_bucket_column([], 4)
    with pytest.raises(InvalidArgumentError):
        spark_bucket_column(["k"], 0)


def test_spark_column_quotes_odd_names(spark):  # W4
    table = pa.table({"a.b": pa.array(["x", "yy", None]), "c`d": pa.array([1, 2, 3], pa.int16())})
    _assert_matches_spark(spark, table, ["a.b", "c`d"])


def test_module_does_not_import_pyspark():  # W4
    code = "import sys, leasekit.tables.bucketing; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
