"""Decoding helpers of the stored formats: a value's fields checked for their types, and a
bad value reported as ``CorruptMetadataError`` naming its znode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import CorruptMetadataError
from . import codec

__all__ = ["load", "ints", "strs", "string"]

R = TypeVar("R")


def load(
    data: bytes,
    path: str,
    version: int | tuple[int, ...],
    kind: str,
    build: Callable[[dict[str, Any]], R],
) -> R:
    """``build`` of the value at ``path`` (format ``version``); any error it raises on a
    missing or ill-typed field becomes ``CorruptMetadataError`` naming ``kind``."""
    value = codec.decode(data, path, version)
    try:
        return build(value)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise CorruptMetadataError(f"{kind} at {path} is invalid: {exc!r}", path) from None


def ints(values: Any) -> list[int]:
    if not isinstance(values, list):
        raise TypeError(f"expected a list of ints, got {type(values).__name__}")
    return [int(v) for v in values]


def strs(values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"expected a list of str, got {values!r:.80}")
    return tuple(values)


def string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, got {type(value).__name__}")
    return value
