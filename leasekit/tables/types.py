"""The column types leasekit supports: Spark's type names and the arrow types they map to, and
the normalization every schema goes through (one arrow type per Spark type, checked names)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from ..errors import InvalidArgumentError

__all__ = [
    "MAX_DEPTH",
    "COMMENT",
    "TYPE_BY_NAME",
    "NAME_BY_TYPE",
    "SUPPORTED",
    "check_names",
    "normalize_type",
    "normalize_field",
]

MAX_DEPTH = 32
COMMENT = b"comment"
_SIMPLE = (  # Spark names (the first is the one printed) and their arrow types
    ("BOOLEAN", pa.bool_()), ("TINYINT BYTE", pa.int8()), ("SMALLINT SHORT", pa.int16()),
    ("INT INTEGER", pa.int32()), ("BIGINT LONG", pa.int64()), ("FLOAT REAL", pa.float32()),
    ("DOUBLE", pa.float64()), ("STRING", pa.string()), ("BINARY", pa.binary()),
    ("DATE", pa.date32()), ("TIMESTAMP_LTZ TIMESTAMP", pa.timestamp("us", tz="UTC")),
    ("TIMESTAMP_NTZ", pa.timestamp("us")),
)  # fmt: skip
TYPE_BY_NAME = {name: arrow for names, arrow in _SIMPLE for name in names.split()}
NAME_BY_TYPE = {arrow: names.split()[0] for names, arrow in _SIMPLE}
SUPPORTED = (
    "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s), STRING, VARCHAR(n), "
    "CHAR(n), BINARY, DATE, TIMESTAMP, TIMESTAMP_LTZ, TIMESTAMP_NTZ, ARRAY, MAP, STRUCT"
)


def check_names(names: Sequence[str], where: str) -> None:
    seen: dict[str, str] = {}
    for name in names:
        if not name:
            raise InvalidArgumentError(f"{where}: column names must not be empty")
        other = seen.get(name.lower())
        seen.setdefault(name.lower(), name)
        if other is not None:
            raise InvalidArgumentError(
                f"{where}: duplicate column name {name!r} "
                f"(names are case-insensitive; {other!r} exists)"
            )


def normalize_type(data_type: pa.DataType, path: str, depth: int) -> pa.DataType:
    t = pa.types
    if depth >= MAX_DEPTH:
        raise InvalidArgumentError(f"column {path!r}: types may nest at most {MAX_DEPTH} levels")
    if data_type in NAME_BY_TYPE:
        return data_type
    if t.is_string(data_type) or t.is_large_string(data_type):
        return pa.string()
    if t.is_binary(data_type) or t.is_large_binary(data_type):
        return pa.binary()
    if t.is_date64(data_type):
        return pa.date32()
    if t.is_timestamp(data_type):  # a zoned timestamp is an instant, kept in UTC
        return pa.timestamp("us", tz="UTC" if data_type.tz else None)
    if t.is_decimal(data_type) and 1 <= data_type.precision <= 38 and data_type.scale >= 0:
        return pa.decimal128(data_type.precision, data_type.scale)
    if t.is_list(data_type) or t.is_large_list(data_type):
        item = data_type.value_field
        item_type = normalize_type(item.type, f"{path}.element", depth + 1)
        return pa.list_(pa.field("item", item_type, item.nullable))
    if t.is_map(data_type):
        key = normalize_type(data_type.key_type, f"{path}.key", depth + 1)
        item = data_type.item_field
        value = normalize_type(item.type, f"{path}.value", depth + 1)
        return pa.map_(pa.field("key", key, False), pa.field("value", value, item.nullable))
    if t.is_struct(data_type) and data_type.num_fields:
        fields = list(data_type)
        check_names([f.name for f in fields], f"struct column {path!r}")
        return pa.struct([normalize_field(f, f"{path}.{f.name}", depth + 1) for f in fields])
    hint = " (use a signed type)" if t.is_unsigned_integer(data_type) else ""
    raise InvalidArgumentError(
        f"column {path!r} has unsupported type {data_type}{hint}; supported: {SUPPORTED}"
    )


def normalize_field(field: pa.Field, path: str, depth: int = 0) -> pa.Field:
    comment = (field.metadata or {}).get(COMMENT)
    metadata = None if comment is None else {COMMENT: comment}
    return pa.field(field.name, normalize_type(field.type, path, depth), field.nullable, metadata)
