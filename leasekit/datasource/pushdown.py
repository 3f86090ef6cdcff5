"""Filters Spark pushes to a batch read: the comparisons pyarrow applies exactly (on columns of
integer, string, boolean and date types), and the literal keys that equality on the whole
primary key names, hashed as appends hash them so planning skips buckets that cannot hold them."""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DateType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
)

from ..tables.bucketing import murmur3_hash

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter
    from pyspark.sql.types import DataType, StructType

    from ..tables.info import TableInfo

__all__ = ["supported", "row_filter", "key_hashes", "MAX_KEYS"]

MAX_KEYS = 10_000
"""Most literal keys (combinations, for a composite key) routed to prune buckets."""

_COMPARE = {
    EqualTo: "__eq__",
    GreaterThan: "__gt__",
    GreaterThanOrEqual: "__ge__",
    LessThan: "__lt__",
    LessThanOrEqual: "__le__",
}


def _fits(kind: DataType, value: Any) -> bool:
    """Whether pyarrow compares ``value`` with a column of Spark type ``kind`` as Spark does."""
    if isinstance(kind, (ByteType, ShortType, IntegerType, LongType)):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(kind, StringType):
        return isinstance(value, str)
    if isinstance(kind, BooleanType):
        return isinstance(value, bool)
    if isinstance(kind, DateType):
        return isinstance(value, datetime.date) and not isinstance(value, datetime.datetime)
    return False


def _column(f: Filter, schema: StructType) -> str | None:
    """The top-level column ``f`` tests, if the schema has it."""
    path = getattr(f, "attribute", ())
    if len(path) != 1 or path[0] not in schema.fieldNames():
        return None
    return path[0]


def _expression(f: Filter, schema: StructType) -> pc.Expression | None:
    """``f`` as a pyarrow expression with Spark's result, or None if there is none."""
    name = _column(f, schema)
    if name is None:
        return None
    field = pc.field(name)
    if isinstance(f, IsNull):
        return field.is_null()
    if isinstance(f, IsNotNull):
        return field.is_valid()
    kind = schema[name].dataType
    if isinstance(f, In):
        values = list(f.value)
        return field.isin(values) if values and all(_fits(kind, v) for v in values) else None
    method = _COMPARE.get(type(f))
    if method is None or not _fits(kind, f.value):
        return None
    return getattr(field, method)(pc.scalar(f.value))


def supported(f: Filter, schema: StructType) -> bool:
    """Whether a read applies ``f`` exactly (Spark then does not apply it again)."""
    return _expression(f, schema) is not None


def row_filter(filters: Sequence[Filter], schema: StructType) -> pc.Expression | None:
    """The conjunction of the ``supported`` ones of ``filters`` as one pyarrow expression."""
    out: pc.Expression | None = None
    for f in filters:
        expr = _expression(f, schema)
        if expr is not None:
            out = expr if out is None else out & expr
    return out


def key_hashes(table: TableInfo, filters: Sequence[Filter]) -> np.ndarray | None:
    """The hashes (int64) of the keys equality filters on every primary-key column allow, or
    None when they do not pin the key down to at most ``MAX_KEYS`` keys (no pruning)."""
    allowed: dict[str, set[Any]] = {}
    for f in filters:
        path = getattr(f, "attribute", ())
        name = path[0] if len(path) == 1 else None
        if name not in table.primary_key:
            continue
        if isinstance(f, EqualTo):
            values = {f.value}
        elif isinstance(f, In):
            values = set(f.value)
        else:
            continue
        allowed[name] = allowed[name] & values if name in allowed else values
    if any(k not in allowed for k in table.primary_key):
        return None
    sizes = [len(allowed[k]) for k in table.primary_key]
    if int(np.prod(sizes, dtype=np.int64)) > MAX_KEYS:
        return None
    combos = list(itertools.product(*(sorted(allowed[k], key=repr) for k in table.primary_key)))
    if not combos:
        return np.zeros(0, np.int64)
    try:
        keys = pa.table(
            {
                k: pa.array([c[i] for c in combos], type=table.schema.field(k).type)
                for i, k in enumerate(table.primary_key)
            }
        )
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return None  # a literal the key's type cannot hold: no pruning, the row filter decides
    return murmur3_hash(keys, list(table.primary_key)).astype(np.int64)
