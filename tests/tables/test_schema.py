"""Schemas: validation and normalization, primary keys, stored form, conform."""

from __future__ import annotations

import datetime as dt
import decimal

import pandas as pd
import pyarrow as pa
import pytest

import leasekit.tables.ddl
from leasekit.errors import (
    CorruptMetadataError,
    InvalidArgumentError,
    InvalidTypeError,
    LeasekitError,
)
from leasekit.tables.schema import (
    check_primary_key,
    conform,
    deserialize_schema,
    parse_schema,
    serialize_schema,
    to_ddl,
    with_primary_key,
)

UTC_US = pa.timestamp("us", tz="UTC")
EXAMPLE = (
    "id BIGINT NOT NULL, name STRING, price DECIMAL(10,2), tags ARRAY<STRING>, "
    "attrs MAP<STRING, INT>, addr STRUCT<city: STRING, zip INT>, ts TIMESTAMP, d DATE, "
    "`weird col` INT COMMENT 'x'"
)


# --- parse_schema: names and input -------------------------------------------------------


@pytest.mark.parametrize("name", ["_offset", "_timestamp", "_op", "_bucket", "_OP", "_Offset"])
def test_reserved_names_are_rejected(name):
    with pytest.raises(InvalidArgumentError, match="reserved"):
        parse_schema(f"id INT, `{name}` STRING")
    with pytest.raises(InvalidArgumentError, match="reserved"):
        parse_schema(pa.schema([("id", pa.int32()), (name, pa.string())]))


def test_reserved_names_are_fine_inside_structs_and_as_prefixes():
    schema = parse_schema("s STRUCT<_op: STRING>, _ops INT, op INT")
    assert schema.names == ["s", "_ops", "op"]


@pytest.mark.parametrize(
    "ddl", ["a INT, A STRING", "Name INT, x INT, nAME INT", "s STRUCT<a: INT, A: INT>", "``INT"]
)
def test_duplicate_or_empty_names_are_rejected(ddl):
    with pytest.raises(InvalidArgumentError, match="duplicate|empty"):
        parse_schema(ddl)


def test_duplicate_names_in_arrow_schema_are_rejected():
    with pytest.raises(InvalidArgumentError, match="duplicate column name 'ID'"):
        parse_schema(pa.schema([("id", pa.int64()), ("ID", pa.int64())]))


@pytest.mark.parametrize("value", [None, 1, b"id INT", ["id INT"], {"id": "INT"}])
def test_parse_schema_wrong_python_type(value):
    with pytest.raises(InvalidTypeError):
        parse_schema(value)


def test_schema_text_with_lone_surrogate_is_rejected():
    with pytest.raises(InvalidArgumentError, match="Unicode"):
        parse_schema("`a\ud800` INT")


def test_to_ddl_is_reexported_from_ddl():
    assert to_ddl is leasekit.tables.ddl.to_ddl


# --- parse_schema from arrow ---------------------------------------------------------------


def test_arrow_schema_is_normalized():
    source = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False, metadata={"comment": "key", "other": "x"}),
            ("s", pa.large_string()),
            ("b", pa.large_binary()),
            ("ts_s", pa.timestamp("s")),
            ("ts_ns_utc", pa.timestamp("ns", tz="UTC")),
            ("ts_ms_berlin", pa.timestamp("ms", tz="Europe/Berlin")),
            ("d64", pa.date64()),
            ("dec", pa.decimal256(20, 4)),
            ("ll", pa.large_list(pa.field("element", pa.large_string()))),
            ("m", pa.map_(pa.large_string(), pa.timestamp("ns"))),
            ("st", pa.struct([("inner", pa.timestamp("ms", tz="+02:00"))])),
        ],
        metadata={"pandas": "{}"},
    )
    schema = parse_schema(source)
    assert schema.metadata is None
    assert schema.field("id").metadata == {b"comment": b"key"}
    assert not schema.field("id").nullable
    assert [f.type for f in schema] == [
        pa.int64(),
        pa.string(),
        pa.binary(),
        pa.timestamp("us"),
        UTC_US,
        UTC_US,
        pa.date32(),
        pa.decimal128(20, 4),
        pa.list_(pa.string()),
        pa.map_(pa.string(), pa.timestamp("us")),
        pa.struct([("inner", UTC_US)]),
    ]
    assert parse_schema(schema).equals(schema, check_metadata=True)


@pytest.mark.parametrize(
    "data_type",
    [
        pa.null(),
        pa.dictionary(pa.int32(), pa.string()),
        pa.dense_union([pa.field("a", pa.int32())]),
        pa.time32("s"),
        pa.time64("us"),
        pa.duration("s"),
        pa.month_day_nano_interval(),
        pa.binary(4),
        pa.uint32(),
        pa.float16(),
        pa.decimal256(50, 2),
        pa.struct([]),
        pa.list_(pa.uint8()),
        pa.struct([("deep", pa.duration("ms"))]),
    ],
)
def test_unsupported_arrow_types_are_rejected_naming_the_column(data_type):
    with pytest.raises(InvalidArgumentError, match="'bad"):
        parse_schema(pa.schema([("ok", pa.int32()), ("bad", data_type)]))


def test_empty_arrow_schema_is_rejected():
    with pytest.raises(InvalidArgumentError, match="at least one column"):
        parse_schema(pa.schema([]))


# --- primary keys --------------------------------------------------------------------------


@pytest.fixture
def example() -> pa.Schema:
    return parse_schema(
        EXAMPLE + ", region STRING, flag BOOLEAN, bin BINARY, small TINYINT, ntz TIMESTAMP_NTZ, "
        "score DOUBLE"
    )


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("id", ("id",)),
        ("ID", ("id",)),
        ("region,id", ("region", "id")),
        (" region , id ", ("region", "id")),
        (["id", "name"], ("id", "name")),
        (("Weird Col",), ("weird col",)),
        (["flag", "bin", "small", "ts", "ntz", "d"], ("flag", "bin", "small", "ts", "ntz", "d")),
    ],
)
def test_check_primary_key_accepts(example, key, expected):
    assert check_primary_key(example, key) == expected


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("", "at least one column"),
        ([], "at least one column"),
        ("id,", "empty column name"),
        ("missing", "'missing' is not in the schema"),
        ("id,ID", "appears twice"),
        (["id", "id"], "appears twice"),
        ("score", "has type double"),
        ("price", "has type decimal"),
        ("tags", "has type list"),
        ("attrs", "has type map"),
        ("addr", "has type struct"),
    ],
)
def test_check_primary_key_rejects(example, key, fragment):
    with pytest.raises(InvalidArgumentError, match=fragment):
        check_primary_key(example, key)


@pytest.mark.parametrize("key", [None, 1, b"id", ["id", 1], {"id"}])
def test_check_primary_key_wrong_python_type(example, key):
    with pytest.raises(InvalidTypeError):
        check_primary_key(example, key)
    with pytest.raises(InvalidTypeError):
        check_primary_key("id INT", "id")


def test_with_primary_key_makes_key_columns_not_null(example):
    keyed = with_primary_key(example, ("region", "name"))
    assert not keyed.field("region").nullable and not keyed.field("name").nullable
    assert keyed.field("price").nullable
    assert keyed.field("weird col").metadata == {b"comment": b"x"}
    assert keyed.names == example.names
    with pytest.raises(InvalidArgumentError):
        with_primary_key(example, ("nope",))


# --- stored form ---------------------------------------------------------------------------


def test_serialize_round_trip_keeps_comments(example):
    data = serialize_schema(example)
    assert isinstance(data, bytes)
    assert deserialize_schema(data).equals(example, check_metadata=True)


@pytest.mark.parametrize(
    "data", [b"", b"not arrow", b"\xff" * 64, serialize_schema(pa.schema([("a", pa.int8())]))[:-9]]
)
def test_deserialize_garbage_is_corrupt_metadata(data):
    with pytest.raises(CorruptMetadataError):
        deserialize_schema(data)


def test_stored_form_wrong_python_types():
    with pytest.raises(InvalidTypeError):
        serialize_schema("id INT")
    with pytest.raises(InvalidTypeError):
        deserialize_schema("bytes please")


# --- conform -------------------------------------------------------------------------------


@pytest.fixture
def schema() -> pa.Schema:
    return with_primary_key(parse_schema(EXAMPLE), ("id",))


KEY = ("id",)
ROW = {
    "id": 1,
    "name": "a",
    "price": decimal.Decimal("1.50"),
    "tags": ["x", "y"],
    "attrs": {"k": 1},
    "addr": {"city": "c", "zip": 12345},
    "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
    "d": dt.date(2024, 1, 2),
    "weird col": 7,
}
UTC = dt.timezone.utc


def test_conform_list_of_dicts(schema):
    table = conform([ROW, {"id": 2}], schema, key_columns=KEY)
    assert table.schema.equals(schema, check_metadata=True)
    first, second = table.to_pylist()
    assert first["price"] == decimal.Decimal("1.50")
    assert first["attrs"] == [("k", 1)]
    assert first["ts"] == dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    assert second == {**dict.fromkeys(schema.names), "id": 2}


def test_conform_empty_list_gives_empty_table(schema):
    table = conform([], schema, key_columns=KEY)
    assert table.num_rows == 0 and table.schema.equals(schema, check_metadata=True)
    keys = conform([], schema, key_columns=KEY, keys_only=True)
    assert keys.schema.names == ["id"]


def test_conform_dataframe_ignores_the_index(schema):
    df = pd.DataFrame(
        {
            "weird col": [1, 2],  # order differs from the schema
            "id": [10, 20],
            "name": ["a", None],
            "price": [1.5, 2.25],
            "tags": [["a"], []],
            "attrs": [{"k": 1}, None],
            "addr": [{"city": "x", "zip": 1}, None],
            "ts": pd.to_datetime(["2024-01-01 10:00", "2024-01-02 00:00"]),
            "d": [dt.date(2024, 1, 1), None],
        },
        index=pd.Index([5, 6], name="ignored"),
    )
    table = conform(df, schema, key_columns=KEY)
    assert table.schema.equals(schema, check_metadata=True)
    rows = table.to_pylist()
    assert rows[0]["id"] == 10 and rows[1]["name"] is None
    assert rows[0]["price"] == decimal.Decimal("1.50")
    assert rows[0]["ts"] == dt.datetime(2024, 1, 1, 10, tzinfo=UTC)  # naive counts as UTC
    assert rows[0]["attrs"] == [("k", 1)]
    assert "ignored" not in table.column_names


def test_conform_rounded_floats_fit_decimals_and_empty_frames_work(schema):
    prices = [round(i * 0.01, 2) for i in range(20_000)]
    df = pd.DataFrame({"id": range(20_000), "price": prices})
    target = parse_schema("id BIGINT NOT NULL, price DECIMAL(10,2)")
    table = conform(df, target, key_columns=KEY)
    assert table.column("price").to_pylist()[:3] == [
        decimal.Decimal(v) for v in ("0.00", "0.01", "0.02")
    ]
    assert table.column("price")[12345].as_py() == decimal.Decimal("123.45")
    empty = conform(pd.DataFrame(columns=schema.names), schema, key_columns=KEY)
    assert empty.num_rows == 0 and empty.schema.equals(schema, check_metadata=True)


def test_conform_zoned_pandas_timestamps_become_utc():
    target = parse_schema("id INT, ts TIMESTAMP")
    ts = pd.Series(pd.to_datetime(["2024-01-01 12:00"])).dt.tz_localize("Europe/Berlin")
    table = conform(pd.DataFrame({"id": [1], "ts": ts}), target, key_columns=("id",))
    assert table.column("ts")[0].as_py() == dt.datetime(2024, 1, 1, 11, tzinfo=UTC)


def test_conform_arrow_table_and_record_batch(schema):
    source = conform([ROW], schema, key_columns=KEY)
    loose = pa.table({"id": pa.array([1], pa.int32()), "name": pa.array(["a"], pa.large_string())})
    small = parse_schema("id BIGINT NOT NULL, name STRING")
    assert conform(source, schema, key_columns=KEY).equals(source)
    assert conform(source.to_batches()[0], schema, key_columns=KEY).equals(source)
    table = conform(loose, small, key_columns=("id",))
    assert table.schema == small and table.to_pylist() == [{"id": 1, "name": "a"}]


def test_conform_keys_only(schema):
    table = conform([{"id": 1}, {"id": 2}], schema, key_columns=KEY, keys_only=True)
    assert table.schema.names == ["id"] and table.column("id").to_pylist() == [1, 2]
    with pytest.raises(InvalidArgumentError, match="'name'.*only the key columns"):
        conform([{"id": 1, "name": "a"}], schema, key_columns=KEY, keys_only=True)
    with pytest.raises(InvalidArgumentError, match="needs at least one key column"):
        conform([{"id": 1}], schema, key_columns=(), keys_only=True)


def test_conform_matches_column_names_case_insensitively(schema):
    table = conform([{"ID": 1, "Name": "x"}], schema, key_columns=KEY)
    assert table.column_names == schema.names and table.to_pylist()[0]["name"] == "x"
    with pytest.raises(InvalidArgumentError, match="both match 'id'"):
        conform(pd.DataFrame({"id": [1], "ID": [2]}), schema, key_columns=KEY)


def test_conform_without_key_columns_allows_nulls_everywhere_nullable():
    target = parse_schema("a INT, b STRING")
    table = conform([{"a": None}], target, key_columns=())
    assert table.to_pylist() == [{"a": None, "b": None}]


def test_extra_columns_are_never_dropped(schema):
    with pytest.raises(InvalidArgumentError, match="'extra', 'more'"):
        conform([{**ROW, "extra": 1, "more": 2}], schema, key_columns=KEY)
    with pytest.raises(InvalidArgumentError, match="'extra'"):
        conform(pd.DataFrame({"id": [1], "extra": [1]}), parse_schema("id INT"), key_columns=KEY)
    with pytest.raises(InvalidArgumentError, match="'extra'"):
        conform(pa.table({"id": [1], "extra": [1]}), parse_schema("id INT"), key_columns=KEY)


def test_missing_columns(schema):
    with pytest.raises(InvalidArgumentError, match="missing key column 'id'"):
        conform([{"name": "x"}], schema, key_columns=KEY)
    with pytest.raises(InvalidArgumentError, match="missing key column 'id'"):
        conform(pd.DataFrame({"name": ["x"]}), parse_schema("id INT, name STRING"), key_columns=KEY)
    with pytest.raises(InvalidArgumentError, match="missing column 'name'"):
        conform(pd.DataFrame({"id": [1]}), parse_schema("id INT, name STRING"), key_columns=KEY)
    with pytest.raises(InvalidArgumentError, match="missing column 'name'"):
        conform(pa.table({"id": [1]}), parse_schema("id INT, name STRING"), key_columns=KEY)


def test_null_keys_and_not_null_columns(schema):
    with pytest.raises(InvalidArgumentError, match="key column 'id' has 1 null"):
        conform([{"id": 1}, {"id": None}], schema, key_columns=KEY)
    with pytest.raises(InvalidArgumentError, match="key column 'id' has 1 null"):
        conform(pd.DataFrame({"id": [1.0, float("nan")]}), schema, key_columns=KEY, keys_only=True)
    strict = parse_schema("id INT, v STRING NOT NULL")
    with pytest.raises(InvalidArgumentError, match="NOT NULL column 'v' has 2 null"):
        conform([{"id": 1}, {"id": 2}], strict, key_columns=("id",))
    with pytest.raises(InvalidArgumentError, match="key column 'id' has 1 null"):
        conform([{"id": None, "v": "x"}], strict, key_columns=("id",))


BAD_VALUES = [
    ({"id": "abc"}, "'id'.*string.*int64"),
    ({"id": "12"}, "'id'.*string values cannot be stored as integer"),
    ({"id": 2**70}, "'id'.*int64"),
    ({"id": 1.5}, "'id'.*truncated"),
    ({"id": True}, "'id'.*boolean"),
    ({"id": 1, "name": 5}, "'name'"),
    ({"id": 1, "price": 1.234}, "'price'.*more than 2 decimal places"),
    ({"id": 1, "price": decimal.Decimal("1.234")}, "'price'"),
    ({"id": 1, "price": decimal.Decimal("123456789.5")}, "'price'"),
    ({"id": 1, "tags": "not a list"}, "'tags'"),
    ({"id": 1, "tags": [1, 2]}, "'tags'"),
    ({"id": 1, "attrs": {"k": "v"}}, "'attrs'"),
    ({"id": 1, "attrs": [1, 2]}, "'attrs'"),
    ({"id": 1, "addr": {"city": "c", "extra": 1}}, "'addr'.*'extra'"),
    ({"id": 1, "addr": "x"}, "'addr'"),
    ({"id": 1, "ts": "2024-01-01"}, "'ts'"),
    ({"id": 1, "d": dt.datetime(2024, 1, 1, 12)}, "'d'"),
    ({"id": 1, "d": 5}, "'d'"),
    ({"id": 1, "weird col": 2**40}, "'weird col'"),
    ({"id": 1, "weird col": object()}, "'weird col'"),
    ({"id": [1]}, "'id'"),
    ({"id": 1, "name": b"\xff"}, "'name'"),
]


@pytest.mark.parametrize(("row", "pattern"), BAD_VALUES)
def test_bad_values_name_the_column(schema, row, pattern):
    with pytest.raises(InvalidArgumentError, match=pattern):
        conform([row], schema, key_columns=KEY)


def test_bad_values_in_dataframes_and_tables():
    target = parse_schema("id BIGINT, f FLOAT, n TIMESTAMP_NTZ, t TINYINT")
    base = {"id": [1], "f": [1.0], "n": [dt.datetime(2024, 1, 1)], "t": [1]}
    cases = [
        ({"id": ["abc"]}, "'id'"),
        ({"id": [1.5]}, "'id'"),
        ({"id": [2**70]}, "'id'"),
        ({"f": [1e300]}, "'f'.*FLOAT range"),
        ({"t": [300]}, "'t'"),
        ({"n": pd.to_datetime(["2024-01-01"]).tz_localize("UTC")}, "'n'.*TIMESTAMP_NTZ"),
        ({"n": pd.to_datetime(["2024-01-01 00:00:00.000000001"]).astype("datetime64[ns]")}, "'n'"),
    ]
    for change, pattern in cases:
        df = pd.DataFrame({**base, **change})
        with pytest.raises(InvalidArgumentError, match=pattern):
            conform(df, target, key_columns=("id",))
        try:
            table = pa.Table.from_pandas(df, preserve_index=False)
        except (pa.ArrowException, OverflowError):
            continue
        with pytest.raises(InvalidArgumentError, match=pattern):
            conform(table, target, key_columns=("id",))


def test_conform_wrong_python_types(schema):
    for rows in [None, "rows", {"id": [1]}, (ROW,), pd.Series([1])]:
        with pytest.raises(InvalidTypeError):
            conform(rows, schema, key_columns=KEY)
    with pytest.raises(InvalidTypeError, match=r"rows\[1\]"):
        conform([ROW, ["not", "a", "dict"]], schema, key_columns=KEY)
    with pytest.raises(InvalidTypeError):
        conform([ROW], "id INT", key_columns=KEY)
    with pytest.raises(InvalidTypeError):
        conform([ROW], schema, key_columns="id")
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        conform([ROW], schema, key_columns=("nope",))
    with pytest.raises(InvalidArgumentError, match="must be str"):
        conform(pd.DataFrame({0: [1]}), schema, key_columns=KEY)
    with pytest.raises(InvalidArgumentError, match="must be str"):
        conform([{1: 1}], schema, key_columns=KEY)


@pytest.mark.parametrize(("row", "pattern"), BAD_VALUES)
def test_no_pyarrow_exception_escapes(schema, row, pattern):
    for rows in ([row], pd.DataFrame([row])):
        try:
            conform(rows, schema, key_columns=KEY)
        except Exception as exc:  # the point is which class comes out
            assert isinstance(exc, LeasekitError), repr(exc)
            assert not isinstance(exc, pa.ArrowException)
        else:
            pytest.fail(f"{row!r} was accepted")
