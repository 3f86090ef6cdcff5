"""Bucket assignment: a row's bucket is Spark's ``pmod(hash(key...), num_buckets)``.

Owns the vectorized numpy Murmur3 (bit-identical to Spark) and the Spark column form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from leasekit.errors import InvalidArgumentError, InvalidTypeError
from leasekit.validate import check_int

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["SEED", "bucket_ids", "murmur3_hash", "spark_bucket_column"]

SEED = 42
"""Seed of Spark's ``hash()`` (``Murmur3Hash``)."""

_MAX_BUCKETS = 2**31 - 1
_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_M5 = np.uint32(5)
_N1 = np.uint32(0xE6546B64)
_F1 = np.uint32(0x85EBCA6B)
_F2 = np.uint32(0xC2B2AE35)
_TO_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}


# Murmur3_x86_32 steps on uint32 arrays. Each takes ownership of its first
# argument (it may be modified in place) and returns the result.


def _mix_k1(k: np.ndarray) -> np.ndarray:
    k *= _C1
    k = (k << 15) | (k >> 17)
    k *= _C2
    return k


def _mix_h1(h: np.ndarray, k: np.ndarray) -> np.ndarray:
    h ^= k
    h = (h << 13) | (h >> 19)
    h *= _M5
    h += _N1
    return h


def _fmix(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h ^= np.asarray(length, dtype=np.uint32)
    h ^= h >> 16
    h *= _F1
    h ^= h >> 13
    h *= _F2
    h ^= h >> 16
    return h


def _hash_int(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark ``hashInt`` of int32-valued ``values``."""
    k = _mix_k1(values.astype(np.int32).view(np.uint32))
    return _fmix(_mix_h1(seed.copy(), k), 4)


def _hash_long(values: np.ndarray, seed: np.ndarray) -> np.ndarray:
    """Spark ``hashLong`` of int64 ``values``: low word, then high word."""
    words = np.ascontiguousarray(values, dtype="<i8").view("<u4").reshape(-1, 2)
    h = _mix_h1(seed.copy(), _mix_k1(words[:, 0].copy()))
    h = _mix_h1(h, _mix_k1(words[:, 1].copy()))
    return _fmix(h, 8)


def _hash_bytes(arr: pa.Array, seed: np.ndarray) -> np.ndarray:
    """Spark ``hashUnsafeBytes`` of each value of a (large) string/binary array.

    Loops over the 4-byte block index, not over rows; the set of rows still
    having blocks shrinks as the loop goes, so the cost is the total byte count
    plus a small per-iteration overhead times the longest value.
    """
    n = len(arr)
    if n == 0:
        return seed.copy()
    _, off_buf, data_buf = arr.buffers()[:3]
    off_type = (
        np.int64
        if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
        else np.int32
    )
    offsets = np.frombuffer(off_buf, dtype=off_type, count=arr.offset + n + 1)
    offsets = offsets[arr.offset :].astype(np.int64)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    # Unaligned little-endian uint32 view at every byte position.
    words = np.ndarray((max(data.size - 3, 0),), dtype="<u4", buffer=data, strides=(1,))

    h = seed.copy()
    nblocks = lengths >> 2
    active = np.flatnonzero(nblocks > 0)
    pos = starts[active]
    left = nblocks[active]
    ha = h[active]
    while active.size:
        ha = _mix_h1(ha, _mix_k1(words[pos]))
        pos += 4
        left -= 1
        done = left == 0
        if done.any():
            h[active[done]] = ha[done]
            keep = ~done
            active, pos, left, ha = active[keep], pos[keep], left[keep], ha[keep]

    tail = starts + (nblocks << 2)
    rem = lengths & 3
    for t in range(3):
        rows = np.flatnonzero(rem > t)
        if rows.size:
            # Tail bytes are mixed one at a time as sign-extended Java bytes.
            byte = data[tail[rows] + t].view(np.int8).astype(np.int32).view(np.uint32)
            h[rows] = _mix_h1(h[rows], _mix_k1(byte))
    return _fmix(h, lengths.astype(np.uint32))


def _kind(typ: pa.DataType, name: str) -> str:
    """How Spark hashes a key of Arrow type ``typ``; raises for unsupported types."""
    if pa.types.is_int8(typ) or pa.types.is_int16(typ) or pa.types.is_int32(typ):
        return "int"
    if pa.types.is_int64(typ):
        return "long"
    if pa.types.is_boolean(typ):
        return "bool"
    if pa.types.is_date32(typ):
        return "date"
    if pa.types.is_timestamp(typ):
        return "timestamp"
    if (
        pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
    ):
        return "bytes"
    raise InvalidArgumentError(f"key column {name!r} has unsupported type {typ}")


def _hash_array(arr: pa.Array, kind: str, seed: np.ndarray) -> np.ndarray:
    """Hash one column chunk into ``seed``; nulls keep their seed."""
    if kind == "int":
        h = _hash_int(pc.fill_null(arr, 0).to_numpy(), seed)
    elif kind == "long":
        h = _hash_long(pc.fill_null(arr, 0).to_numpy(), seed)
    elif kind == "bool":
        values = pc.fill_null(arr, False).to_numpy(zero_copy_only=False)
        h = _hash_int(values.astype(np.int32), seed)
    elif kind == "date":
        h = _hash_int(pc.fill_null(arr.cast(pa.int32()), 0).to_numpy(), seed)
    elif kind == "timestamp":
        raw = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy()
        unit = arr.type.unit
        # Spark hashes microseconds; ns are floored, as java.time.Instant -> micros.
        micros = np.floor_divide(raw, 1_000) if unit == "ns" else raw * _TO_MICROS[unit]
        h = _hash_long(micros, seed)
    else:
        h = _hash_bytes(arr, seed)
    if arr.null_count == 0:
        return h
    return np.where(arr.is_valid().to_numpy(zero_copy_only=False), h, seed)


def _check_key_list(key_columns: Sequence[str]) -> list[str]:
    if isinstance(key_columns, (str, bytes)) or not isinstance(key_columns, Sequence):
        raise InvalidTypeError("key_columns must be a sequence of column names")
    if not key_columns:
        raise InvalidArgumentError("key_columns must name at least one column")
    return list(key_columns)


def _check_keys(table: pa.Table, key_columns: Sequence[str]) -> list[str]:
    keys = _check_key_list(key_columns)
    missing = [k for k in keys if k not in table.column_names]
    if missing:
        raise InvalidArgumentError(f"key columns not in table: {missing}")
    return keys


def _check_num_buckets(num_buckets: int) -> None:
    check_int(num_buckets, "num_buckets", minimum=1, maximum=_MAX_BUCKETS)


def murmur3_hash(table: pa.Table, key_columns: Sequence[str]) -> np.ndarray:
    """Spark's ``hash(k1, k2, ...)`` of each row, as an int32 array.

    Keys: int8/16/32/64, bool, date32, timestamp (any unit, as microseconds),
    (large_)string, (large_)binary; others raise ``InvalidArgumentError``. A
    timestamp hashes its stored value, so a naive one matches Spark's
    TimestampNTZ (or TimestampType only under a UTC session time zone).
    """
    keys = _check_keys(table, key_columns)
    kinds = [_kind(table.schema.field(name).type, name) for name in keys]
    h = np.full(table.num_rows, SEED, dtype=np.uint32)
    for name, kind in zip(keys, kinds, strict=True):
        parts, start = [], 0
        for chunk in table.column(name).chunks:
            parts.append(_hash_array(chunk, kind, h[start : start + len(chunk)]))
            start += len(chunk)
        if parts:
            h = np.concatenate(parts)
    return h.view(np.int32)


def bucket_ids(table: pa.Table, key_columns: Sequence[str], num_buckets: int) -> np.ndarray:
    """Bucket of each row: ``pmod(hash(key...), num_buckets)`` as Spark computes it."""
    _check_num_buckets(num_buckets)
    h = murmur3_hash(table, key_columns).astype(np.int64)
    return np.mod(h, int(num_buckets)).astype(np.int32)


def spark_bucket_column(key_columns: Sequence[str], num_buckets: int) -> Column:
    """Spark column ``pmod(hash(key...), num_buckets)`` (int), the same bucket as ``bucket_ids``."""
    keys = _check_key_list(key_columns)
    _check_num_buckets(num_buckets)
    from pyspark.sql import functions as F

    cols = [F.col("`" + name.replace("`", "``") + "`") for name in keys]
    return F.pmod(F.hash(*cols), F.lit(int(num_buckets))).cast("int")
