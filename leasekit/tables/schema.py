"""Table schemas: validation and normalization (from Spark DDL or arrow), primary keys,
the stored (Arrow IPC) form, and conforming user rows to a schema.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import partial
from typing import Any

import pyarrow as pa

from ..errors import CorruptMetadataError, InvalidArgumentError, InvalidTypeError
from .ddl import parse_ddl, to_ddl
from .types import check_names, normalize_field

__all__ = [
    "RESERVED_COLUMNS",
    "parse_schema",
    "to_ddl",
    "check_primary_key",
    "with_primary_key",
    "serialize_schema",
    "deserialize_schema",
    "conform",
]

RESERVED_COLUMNS = ("_offset", "_timestamp", "_op", "_bucket")
"""Column names the change log adds; user schemas may not use them (in any case)."""

_KEY_TYPES = "TINYINT, SMALLINT, INT, BIGINT, STRING, BINARY, BOOLEAN, DATE or TIMESTAMP"
# What pyarrow, or a Python value it converts, raises for bad data.
_DATA_ERRORS = (pa.ArrowException, ValueError, TypeError, ArithmeticError)


def _type_error(what: str, expected: str, value: object) -> InvalidTypeError:
    return InvalidTypeError(f"{what} must be {expected}, not {type(value).__name__}")


# --- validation and normalization ---------------------------------------------------------


def parse_schema(schema: str | pa.Schema) -> pa.Schema:
    """A validated, normalized arrow schema from Spark DDL text or an arrow schema.

    Normalized: timestamps in microseconds (zoned ones in UTC), plain string and binary,
    decimal128, date32; no schema metadata and only the ``comment`` field metadata.
    """
    if isinstance(schema, str):
        fields = list(parse_ddl(schema))
    elif isinstance(schema, pa.Schema):
        fields = list(schema)
    else:
        raise _type_error("schema", "a DDL str or a pyarrow.Schema", schema)
    if not fields:
        raise InvalidArgumentError("a schema needs at least one column")
    check_names([f.name for f in fields], "schema")
    for field in fields:
        if field.name.lower() in RESERVED_COLUMNS:
            raise InvalidArgumentError(
                f"column name {field.name!r} is reserved ({', '.join(RESERVED_COLUMNS)} are "
                "added by the change log); rename the column"
            )
    return pa.schema([normalize_field(f, f.name) for f in fields])


# --- primary keys ------------------------------------------------------------------------


def _is_key_type(data_type: pa.DataType) -> bool:
    t = pa.types
    checks = (t.is_signed_integer, t.is_string, t.is_large_string, t.is_binary,
              t.is_large_binary, t.is_boolean, t.is_date32, t.is_timestamp)  # fmt: skip
    return any(check(data_type) for check in checks)


def check_primary_key(schema: pa.Schema, primary_key: str | Sequence[str]) -> tuple[str, ...]:
    """The key's column names as spelled in ``schema``; the str ``"a,b"`` names two columns."""
    if not isinstance(schema, pa.Schema):
        raise _type_error("schema", "a pyarrow.Schema", schema)
    if isinstance(primary_key, str):
        names = [part.strip() for part in primary_key.split(",")] if primary_key.strip() else []
    elif isinstance(primary_key, Sequence) and not isinstance(primary_key, (bytes, bytearray)):
        names = list(primary_key)
        for name in names:
            if not isinstance(name, str):
                raise _type_error("a primary key column name", "a str", name)
    else:
        raise _type_error("primary key", "a str or a sequence of str", primary_key)
    if not names:
        raise InvalidArgumentError("primary key must name at least one column")
    resolved: list[str] = []
    for name in names:
        if not name:
            raise InvalidArgumentError(f"primary key {primary_key!r} has an empty column name")
        matches = [c for c in schema.names if c.lower() == name.lower()]
        column = name if name in schema.names else matches[0] if len(matches) == 1 else None
        if column is None:
            columns = ", ".join(schema.names)
            raise InvalidArgumentError(
                f"primary key column {name!r} is not in the schema (columns: {columns})"
            )
        if column in resolved:
            raise InvalidArgumentError(f"column {column!r} appears twice in the primary key")
        data_type = schema.field(column).type
        if not _is_key_type(data_type):
            raise InvalidArgumentError(
                f"primary key column {column!r} has type {data_type}; "
                f"key columns must be {_KEY_TYPES}"
            )
        resolved.append(column)
    return tuple(resolved)


def with_primary_key(schema: pa.Schema, primary_key: str | Sequence[str]) -> pa.Schema:
    """``schema`` with the (checked) primary key columns made NOT NULL."""
    key = set(check_primary_key(schema, primary_key))
    fields = [f.with_nullable(False) if f.name in key else f for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


# --- stored form -------------------------------------------------------------------------


def serialize_schema(schema: pa.Schema) -> bytes:
    """``schema`` as Arrow IPC bytes, field metadata included."""
    if not isinstance(schema, pa.Schema):
        raise _type_error("schema", "a pyarrow.Schema", schema)
    return schema.serialize().to_pybytes()


def deserialize_schema(data: bytes) -> pa.Schema:
    """The schema stored by ``serialize_schema``; ``CorruptMetadataError`` if unreadable."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise _type_error("schema data", "bytes", data)
    try:
        return pa.ipc.read_schema(pa.py_buffer(bytes(data)))
    except (pa.ArrowException, ValueError, TypeError, OSError, EOFError) as exc:
        raise CorruptMetadataError(f"stored schema cannot be decoded: {exc}") from None


# --- conforming rows ---------------------------------------------------------------------

_KIND_CHANGES = {
    ("integer", "floating"), ("integer", "decimal"), ("floating", "integer"),
    ("floating", "decimal"), ("decimal", "integer"), ("decimal", "floating"),
    ("binary", "string"), ("string", "binary"), ("date", "timestamp"),
}  # fmt: skip


def _kind(data_type: pa.DataType) -> str:
    t = pa.types
    kinds = (("null", t.is_null), ("boolean", t.is_boolean), ("integer", t.is_integer),
             ("floating", t.is_floating), ("decimal", t.is_decimal), ("date", t.is_date),
             ("timestamp", t.is_timestamp), ("map", t.is_map), ("struct", t.is_struct),
             ("string", t.is_string), ("string", t.is_large_string), ("binary", t.is_binary),
             ("binary", t.is_large_binary), ("list", t.is_list),
             ("list", t.is_large_list))  # fmt: skip
    return next((kind for kind, check in kinds if check(data_type)), str(data_type))


def _cast_problem(source: pa.DataType, target: pa.DataType) -> str | None:
    """Why ``source`` values may not become ``target`` ones (None: a safe cast decides)."""
    if pa.types.is_dictionary(source):
        source = source.value_type
    have, want = _kind(source), _kind(target)
    if have == "null" or source == target:
        return None
    if have != want and (have, want) not in _KIND_CHANGES:
        return f"{have} values cannot be stored as {want}"
    if have == "timestamp" and source.tz and not target.tz:
        return "zoned timestamps cannot go into a TIMESTAMP_NTZ column; drop the zone first"
    if have == "list":
        return _cast_problem(source.value_type, target.value_type)
    if have == "map":
        keys = _cast_problem(source.key_type, target.key_type)
        return keys or _cast_problem(source.item_type, target.item_type)
    if have == "struct":
        wanted = {field.name: field.type for field in target}
        for field in source:
            if field.name not in wanted:
                return f"struct field {field.name!r} is not in the column's type"
            problem = _cast_problem(field.type, wanted[field.name])
            if problem:
                return problem
    return None


def _has_map(data_type: pa.DataType) -> bool:
    return pa.types.is_map(data_type) or any(
        _has_map(data_type.field(i).type) for i in range(data_type.num_fields)
    )


def _conversion_error(
    name: str, source: object, target: object, detail: object
) -> InvalidArgumentError:
    origin = "" if source is None else f" from {source}"
    message = f"column {name!r} cannot be converted{origin} to {target}"
    return InvalidArgumentError(f"{message}: {detail}")


def _convert(name: str, target: pa.DataType, data: Any) -> Any:
    """Column ``name`` as ``target``. ``data`` is an arrow column, or a ``pa.array`` partial over
    Python/pandas values: called bare to infer a type that is then cast safely, or with the
    target type for what inference cannot type (mixed values, dicts meant as maps)."""
    import pyarrow.compute as pc

    typed = None if isinstance(data, pa.ChunkedArray) else data
    try:
        source = data if typed is None else typed()
    except _DATA_ERRORS:
        source = None
    problem = None if source is None else _cast_problem(source.type, target)
    if typed is not None and (source is None or (problem and _has_map(target))):
        try:
            return typed(type=target)
        except _DATA_ERRORS as exc:
            raise _conversion_error(name, None, target, exc) from None
    if problem:
        raise _conversion_error(name, source.type, target, problem)
    try:
        result = source.cast(target, safe=True)
    except _DATA_ERRORS as exc:
        raise _conversion_error(name, source.type, target, exc) from None
    # Safe casts still round floats into decimals and overflow doubles into FLOAT.
    if pa.types.is_floating(source.type) and pa.types.is_decimal(target):
        scale = 10.0**target.scale  # x has at most `scale` places iff round(x * 10^s) / 10^s == x
        x = source.cast(pa.float64())
        exact = pc.all(pc.equal(pc.divide(pc.round(pc.multiply(x, scale)), scale), x))
        if exact.as_py() is False:
            detail = f"values have more than {target.scale} decimal places"
            raise _conversion_error(name, source.type, target, detail)
    if pa.types.is_floating(source.type) and pa.types.is_float32(target):
        if pc.any(pc.and_(pc.is_finite(source), pc.is_inf(result))).as_py():
            raise _conversion_error(name, source.type, target, "values are outside the FLOAT range")
    return result


def _match_columns(names: Sequence[Any], target: pa.Schema, keys_only: bool) -> dict[str, Any]:
    """The input column that gives each target column (names match case-insensitively)."""
    lower = {field.name.lower(): field.name for field in target}
    matched: dict[str, Any] = {}
    extra = []
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"column names must be str, got {name!r}")
        column = name if name in target.names else lower.get(name.lower())
        if column is None:
            extra.append(repr(name))
        elif column in matched:
            other = matched[column]
            raise InvalidArgumentError(f"columns {other!r} and {name!r} both match {column!r}")
        else:
            matched[column] = name
    if extra:
        allowed = "the key columns" if keys_only else "the schema's columns"
        raise InvalidArgumentError(
            f"columns not in the schema: {', '.join(extra)}; rows may hold only {allowed} "
            f"({', '.join(target.names)})"
        )
    return matched


def conform(
    rows: Any, schema: pa.Schema, *, key_columns: Sequence[str], keys_only: bool = False
) -> pa.Table:
    """``rows`` (pandas DataFrame, arrow Table/RecordBatch or list of dicts) as ``schema``.

    With ``keys_only`` the table holds only the key columns. Values are cast safely by Arrow
    rules plus type checks (no str to number, no bool to int); naive datetimes into a zoned
    column count as UTC. Only a list of dicts may leave out a non-key column (all null).
    """
    if not isinstance(schema, pa.Schema):
        raise _type_error("schema", "a pyarrow.Schema", schema)
    if isinstance(key_columns, str) or not all(isinstance(k, str) for k in key_columns):
        raise InvalidTypeError("key_columns must be a sequence of column names")
    keys = tuple(key_columns)
    for key in keys:
        if key not in schema.names:
            raise InvalidArgumentError(f"key column {key!r} is not in the schema")
    if keys_only and not keys:
        raise InvalidArgumentError("keys_only needs at least one key column")
    target = pa.schema([f for f in schema if f.name in keys]) if keys_only else schema

    pandas = sys.modules.get("pandas")  # a DataFrame implies pandas is imported already
    if pandas is not None and isinstance(rows, pandas.DataFrame):
        names, length = list(rows.columns), len(rows)
        data = {name: partial(pa.array, s, from_pandas=True) for name, s in rows.items()}
    elif isinstance(rows, (pa.Table, pa.RecordBatch)):
        names, length = rows.column_names, rows.num_rows
        table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
        data = {name: table.column(i) for i, name in enumerate(names)}
    elif isinstance(rows, list):
        if not rows:
            return target.empty_table()
        seen: dict[Any, None] = {}  # every key of every row, in first-seen order
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise InvalidTypeError(f"rows[{i}] is a {type(row).__name__}, not a dict")
            seen.update(dict.fromkeys(row))
        names, length = list(seen), len(rows)
        data = {name: partial(pa.array, [row.get(name) for row in rows]) for name in names}
    else:
        raise _type_error("rows", "a pandas DataFrame, a pyarrow Table or a list of dicts", rows)

    matched = _match_columns(names, target, keys_only)
    columns = []
    for field in target:
        is_key = field.name in keys
        if field.name in matched:
            column = _convert(field.name, field.type, data[matched[field.name]])
        elif is_key or not isinstance(rows, list):
            raise InvalidArgumentError(f"missing {'key ' if is_key else ''}column {field.name!r}")
        else:
            column = pa.nulls(length, field.type)
        if column.null_count and (is_key or not field.nullable):
            kind = "key column" if is_key else "NOT NULL column"
            count = column.null_count
            raise InvalidArgumentError(f"{kind} {field.name!r} has {count} null value(s)")
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)
