"""Spark DDL: parsing column lists into arrow schemas and printing them back."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasekit.errors import InvalidArgumentError, InvalidTypeError
from leasekit.tables.ddl import parse_ddl, to_ddl
from leasekit.tables.schema import parse_schema

UTC_US = pa.timestamp("us", tz="UTC")
EXAMPLE = (
    "id BIGINT NOT NULL, name STRING, price DECIMAL(10,2), tags ARRAY<STRING>, "
    "attrs MAP<STRING, INT>, addr STRUCT<city: STRING, zip INT>, ts TIMESTAMP, d DATE, "
    "`weird col` INT COMMENT 'x'"
)


def one_type(ddl_type: str) -> pa.DataType:
    return parse_ddl(f"c {ddl_type}").field("c").type


# --- parse_ddl -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ddl_type", "expected"),
    [
        ("BOOLEAN", pa.bool_()),
        ("TINYINT", pa.int8()),
        ("BYTE", pa.int8()),
        ("SMALLINT", pa.int16()),
        ("SHORT", pa.int16()),
        ("INT", pa.int32()),
        ("INTEGER", pa.int32()),
        ("BIGINT", pa.int64()),
        ("LONG", pa.int64()),
        ("FLOAT", pa.float32()),
        ("REAL", pa.float32()),
        ("DOUBLE", pa.float64()),
        ("DECIMAL", pa.decimal128(10, 0)),
        ("DECIMAL(5)", pa.decimal128(5, 0)),
        ("DECIMAL(10,2)", pa.decimal128(10, 2)),
        ("DEC(38, 38)", pa.decimal128(38, 38)),
        ("NUMERIC(1)", pa.decimal128(1, 0)),
        ("STRING", pa.string()),
        ("VARCHAR(20)", pa.string()),
        ("CHAR(3)", pa.string()),
        ("BINARY", pa.binary()),
        ("DATE", pa.date32()),
        ("TIMESTAMP", UTC_US),
        ("TIMESTAMP_LTZ", UTC_US),
        ("TIMESTAMP_NTZ", pa.timestamp("us")),
        ("bigint", pa.int64()),
        ("Timestamp_Ntz", pa.timestamp("us")),
        ("array<int>", pa.list_(pa.int32())),
        ("MAP<STRING, DOUBLE>", pa.map_(pa.string(), pa.float64())),
        ("STRUCT<a: INT, b STRING>", pa.struct([("a", pa.int32()), ("b", pa.string())])),
    ],
)
def test_parse_every_type(ddl_type, expected):
    assert one_type(ddl_type) == expected


def test_parse_example_schema():
    schema = parse_ddl(EXAMPLE)
    assert schema.names == ["id", "name", "price", "tags", "attrs", "addr", "ts", "d", "weird col"]
    assert not schema.field("id").nullable
    assert all(schema.field(n).nullable for n in schema.names[1:])
    assert schema.field("weird col").metadata == {b"comment": b"x"}
    assert schema.field("addr").type == pa.struct([("city", pa.string()), ("zip", pa.int32())])
    assert schema.metadata is None


def test_modifiers_in_any_order_and_comment_escapes():
    schema = parse_ddl(
        "a INT COMMENT 'first' NOT NULL, b STRING NOT NULL COMMENT 'it''s', "
        "c INT COMMENT 'tab\\there \\'q\\' \\\\ \\u00e9', d INT COMMENT \"dq \"\"x\"\"\", e INT "
        "COMMENT ''"
    )
    assert [f.nullable for f in schema] == [False, False, True, True, True]
    assert schema.field("a").metadata == {b"comment": b"first"}
    assert schema.field("b").metadata == {b"comment": b"it's"}
    assert schema.field("c").metadata[b"comment"].decode() == "tab\there 'q' \\ é"
    assert schema.field("d").metadata == {b"comment": b'dq "x"'}
    assert schema.field("e").metadata == {b"comment": b""}


def test_nested_types():
    data_type = one_type(
        "MAP<STRING, ARRAY<STRUCT<a: INT NOT NULL COMMENT 'c', `b b`: ARRAY<ARRAY<DATE>>>>>"
    )
    inner = pa.struct(
        [
            pa.field("a", pa.int32(), nullable=False, metadata={b"comment": b"c"}),
            pa.field("b b", pa.list_(pa.list_(pa.date32()))),
        ]
    )
    assert data_type == pa.map_(pa.string(), pa.list_(inner))
    assert data_type.item_type.value_type.field("a").metadata == {b"comment": b"c"}
    assert not data_type.item_type.value_type.field("a").nullable


def test_backtick_names_and_keyword_names():
    schema = parse_ddl("`weird col` INT, `a``b` STRING, ` ``x`` ` INT, not INT, comment STRING")
    assert schema.names == ["weird col", "a`b", " `x` ", "not", "comment"]


def test_top_level_colon_is_accepted():
    assert parse_ddl("a: INT, b: STRING").names == ["a", "b"]


def test_whitespace_and_newlines():
    schema = parse_ddl("\n  id\tBIGINT\r\n  NOT   NULL ,\n name STRING\n")
    assert schema.names == ["id", "name"]


@pytest.mark.parametrize(
    ("ddl", "fragment", "character"),
    [
        ("", "at least one column", 1),
        ("   ", "at least one column", 4),
        ("id", "expected a data type, found the end of the schema", 3),
        ("id INT,", "expected a column name", 8),
        ("id INT name STRING", "expected ',' or the end of the schema, found 'name'", 8),
        ("id ARRAY<INT", "expected '>' to close ARRAY<", 13),
        ("id ARRAY INT", "expected '<' after ARRAY", 10),
        ("id MAP<STRING>", "expected ',' between the MAP key and value types", 14),
        ("id STRUCT<>", "STRUCT needs at least one field", 11),
        ("id STRUCT<a INT", "expected ',' or '>' to close STRUCT<", 16),
        ("id DECIMAL(40)", "precision <= 38", 4),
        ("id DECIMAL(0)", "precision <= 38", 4),
        ("id DECIMAL(5,6)", "scale <= precision", 4),
        ("id DECIMAL(5,", "expected the DECIMAL scale", 14),
        ("id DECIMAL(x)", "expected the DECIMAL precision, found 'x'", 12),
        ("id VARCHAR", "expected '(' and a length after VARCHAR", 11),
        ("id CHAR(0)", "CHAR length must be at least 1", 4),
        ("id FOO", "unsupported data type 'FOO'", 4),
        ("id INTERVAL", "unsupported data type 'INTERVAL'", 4),
        ("id INT(11)", "INT takes no parameters", 7),
        ("id INT NOT", "expected NULL after NOT", 11),
        ("id INT NOT NULL NOT NULL", "NOT NULL is given twice", 17),
        ("id INT COMMENT", "expected a quoted string after COMMENT", 15),
        ("id INT COMMENT 'a' COMMENT 'b'", "COMMENT is given twice", 20),
        ("id INT COMMENT 'open", "unterminated string", 16),
        ("`id INT", "unterminated `name`", 1),
        ("id INT; DROP", "unexpected ';'", 7),
        ("123 INT", "expected a column name, found '123'", 1),
        ("id INT, , b INT", "expected a column name, found ','", 9),
        ("a INT COMMENT '\\ud800'", "is not a character", 15),
        ("a " + "ARRAY<" * 40 + "INT" + ">" * 40, "nest at most", 195),
    ],
)
def test_syntax_errors_point_at_the_problem(ddl, fragment, character):
    with pytest.raises(InvalidArgumentError) as info:
        parse_ddl(ddl)
    message = str(info.value)
    assert fragment in message
    assert f"at character {character}:" in message
    assert message.rstrip().endswith("^")


def test_syntax_error_shows_the_line_with_a_caret():
    with pytest.raises(InvalidArgumentError) as info:
        parse_ddl("id BIGINT,\nname STRNG")
    first, line, caret = str(info.value).splitlines()
    assert "character 17" in first and "'STRNG'" in first
    assert line == "  name STRNG"
    assert caret == "       ^"


def test_parse_ddl_leaves_names_to_parse_schema():
    assert parse_ddl("a INT, A STRING, `_op` STRING").names == ["a", "A", "_op"]
    with pytest.raises(InvalidArgumentError, match="Unicode"):
        parse_ddl("`a\ud800` INT")


@pytest.mark.parametrize("value", [None, 1, b"id INT", ["id INT"], pa.schema([("a", pa.int8())])])
def test_parse_ddl_wrong_python_type(value):
    with pytest.raises(InvalidTypeError):
        parse_ddl(value)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=80),
        st.lists(
            st.sampled_from(
                [
                    "id",
                    "`x`",
                    "INT",
                    "ARRAY",
                    "MAP",
                    "STRUCT",
                    "DECIMAL",
                    "VARCHAR",
                    "<",
                    ">",
                    "(",
                    ")",
                    ",",
                    ":",
                    "NOT",
                    "NULL",
                    "COMMENT",
                    "'c'",
                    "10",
                    "2",
                    "`",
                    "'",
                    "\\",
                ]
            ),  # fmt: skip
            max_size=25,
        ).map(" ".join),
    )
)
def test_parse_schema_fuzz_raises_only_argument_errors(text):
    try:
        schema = parse_schema(text)
    except (InvalidArgumentError, InvalidTypeError):
        return
    assert parse_schema(to_ddl(schema)).equals(schema, check_metadata=True)


# --- to_ddl --------------------------------------------------------------------------------


def test_to_ddl_of_the_example():
    assert to_ddl(parse_ddl(EXAMPLE)) == (
        "id BIGINT NOT NULL, name STRING, price DECIMAL(10,2), tags ARRAY<STRING>, "
        "attrs MAP<STRING, INT>, addr STRUCT<city: STRING, zip: INT>, ts TIMESTAMP_LTZ, "
        "d DATE, `weird col` INT COMMENT 'x'"
    )


@pytest.mark.parametrize(
    "ddl",
    [
        EXAMPLE,
        "a BOOLEAN, b TINYINT, c SMALLINT, d INT, e BIGINT, f FLOAT, g DOUBLE, h DECIMAL(38,9), "
        "i STRING, j BINARY, k DATE, l TIMESTAMP, m TIMESTAMP_NTZ",
        "`a``b` INT NOT NULL COMMENT 'it''s \\\\ \\n new\\tline', `1st` STRING, `with space` DATE",
        "s STRUCT<`x y`: ARRAY<MAP<STRING, STRUCT<z: INT NOT NULL COMMENT 'deep'>>>> NOT NULL",
        "m MAP<BIGINT, ARRAY<DECIMAL(5,1)>> COMMENT 'é ✓'",
    ],
)
def test_to_ddl_round_trips(ddl):
    schema = parse_ddl(ddl)
    assert parse_ddl(to_ddl(schema)).equals(schema, check_metadata=True)


def test_to_ddl_normalizes_and_allows_reserved_names():
    schema = pa.schema(
        [("_offset", pa.int64()), ("s", pa.large_string()), ("t", pa.timestamp("ns"))]
    )
    assert to_ddl(schema) == "_offset BIGINT, s STRING, t TIMESTAMP_NTZ"


def test_to_ddl_rejects_bad_input():
    with pytest.raises(InvalidTypeError):
        to_ddl("id INT")
    with pytest.raises(InvalidArgumentError):
        to_ddl(pa.schema([]))
    with pytest.raises(InvalidArgumentError, match="'t'"):
        to_ddl(pa.schema([("t", pa.time32("s"))]))


# --- against real Spark --------------------------------------------------------------------


def spark_to_arrow(spark_type):
    from pyspark.sql import types as T

    simple = {
        T.BooleanType: pa.bool_(), T.ByteType: pa.int8(), T.ShortType: pa.int16(),
        T.IntegerType: pa.int32(), T.LongType: pa.int64(), T.FloatType: pa.float32(),
        T.DoubleType: pa.float64(), T.StringType: pa.string(), T.CharType: pa.string(),
        T.VarcharType: pa.string(), T.BinaryType: pa.binary(), T.DateType: pa.date32(),
        T.TimestampType: UTC_US, T.TimestampNTZType: pa.timestamp("us"),
    }  # fmt: skip
    if type(spark_type) in simple:
        return simple[type(spark_type)]
    if isinstance(spark_type, T.DecimalType):
        return pa.decimal128(spark_type.precision, spark_type.scale)
    if isinstance(spark_type, T.ArrayType):
        item = spark_to_arrow(spark_type.elementType)
        return pa.list_(pa.field("item", item, spark_type.containsNull))
    if isinstance(spark_type, T.MapType):
        key, value = spark_to_arrow(spark_type.keyType), spark_to_arrow(spark_type.valueType)
        return pa.map_(
            pa.field("key", key, False), pa.field("value", value, spark_type.valueContainsNull)
        )
    assert isinstance(spark_type, T.StructType), spark_type
    return pa.struct([spark_field_to_arrow(f) for f in spark_type.fields])


def spark_field_to_arrow(field):
    comment = field.metadata.get("comment")
    metadata = None if comment is None else {b"comment": comment.encode()}
    return pa.field(field.name, spark_to_arrow(field.dataType), field.nullable, metadata)


def test_ddl_agrees_with_spark(spark):
    from pyspark.sql.types import StructType

    ddls = [
        EXAMPLE,
        "a boolean, b tinyint, c byte, d smallint, e short, f int, g integer, h bigint, i long, "
        "j float, k real, l double, m decimal, n dec(5), o numeric(38,10), p string, "
        "q varchar(3), r char(2), s binary, t date, u timestamp, v timestamp_ltz, w timestamp_ntz",
        "`a``b` INT NOT NULL COMMENT 'it''s', `x y` ARRAY<MAP<STRING, ARRAY<STRUCT<z INT>>>>",
        "s STRUCT<a: INT NOT NULL COMMENT 'c', b STRUCT<c: DATE>> NOT NULL COMMENT 'tab\\there'",
    ]
    for ddl in ddls:
        ours = parse_ddl(ddl)
        theirs = pa.schema([spark_field_to_arrow(f) for f in StructType.fromDDL(ddl).fields])
        assert ours.equals(theirs, check_metadata=True), ddl
        # Spark reads our printed DDL back to the same schema.
        printed = spark.createDataFrame([], to_ddl(ours)).schema
        again = pa.schema([spark_field_to_arrow(f) for f in printed.fields])
        assert again.equals(ours, check_metadata=True), ddl
