"""The stored format of a table's bucket layout: its initial bucket count and the ordered list
of its splits and merges, from which ``tables.layout`` rebuilds every bucket it ever had."""

from __future__ import annotations

from typing import Any, NamedTuple

from .codec import encode
from .fields import load

__all__ = ["LayoutRecord", "SplitOp", "MergeOp", "MAX_MODULUS", "MAX_OFFSET", "operation"]

MAX_MODULUS = 2**31 - 1
"""Largest modulus of a residue class: Spark's ``pmod`` takes an int."""
MAX_OFFSET = 2**63 - 1
"""Largest log offset (int64)."""


class SplitOp(NamedTuple):
    """The active bucket owning hashes ``residue`` mod ``modulus`` was split into the buckets
    owning ``residue`` and ``residue + modulus`` mod ``2 * modulus``."""

    residue: int
    """Residue of the split bucket, 0 <= residue < modulus."""
    modulus: int
    """Modulus of the split bucket."""
    sealed_at: int
    """The split bucket's end offset at its seal."""


class MergeOp(NamedTuple):
    """The active buckets owning ``residue`` and ``residue + modulus`` mod ``2 * modulus`` were
    merged into one bucket owning ``residue`` mod ``modulus``."""

    residue: int
    """Residue of the merged bucket, 0 <= residue < modulus."""
    modulus: int
    """Modulus of the merged bucket."""
    sealed_at_low: int
    """End offset at its seal of the half owning ``residue`` mod ``2 * modulus``."""
    sealed_at_high: int
    """End offset at its seal of the half owning ``residue + modulus`` mod ``2 * modulus``."""


class LayoutRecord(NamedTuple):
    """A table's bucket layout: ``num_buckets`` initial buckets, then ``operations`` in order.
    A split is stored as 3 ints, a merge as 4 (about 20 bytes each, whatever the bucket count)."""

    num_buckets: int
    """Buckets the table was created with (ids 0 .. num_buckets - 1)."""
    operations: tuple[SplitOp | MergeOp, ...]
    """Every split and merge, oldest first."""

    VERSION = 1

    def encode(self) -> bytes:
        ops = [list(op) for op in self.operations]
        return encode({"n": self.num_buckets, "o": ops}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> LayoutRecord:
        """The layout stored at ``path``: ``CorruptMetadataError`` for garbage, another version,
        or a field out of range (a bucket count or modulus outside [1, 2**31), a residue not
        below its modulus, an offset outside [0, 2**63))."""

        def build(v: dict[str, Any]) -> LayoutRecord:
            ops = v["o"]
            if not isinstance(ops, list):
                raise TypeError(f"operations are a {type(ops).__name__}, not a list")
            return cls(_bounded(v["n"], 1, MAX_MODULUS), tuple(operation(op) for op in ops))

        return load(data, path, cls.VERSION, "bucket layout", build)


def operation(value: Any) -> SplitOp | MergeOp:
    """A stored split ``[residue, modulus, sealed_at]`` or merge ``[residue, modulus, low,
    high]``, its fields checked."""
    if not isinstance(value, list) or len(value) not in (3, 4):
        raise ValueError(f"an operation is 3 or 4 ints, not {value!r:.80}")
    modulus = _bounded(value[1], 1, MAX_MODULUS)
    residue = _bounded(value[0], 0, modulus - 1)
    offsets = [_bounded(v, 0, MAX_OFFSET) for v in value[2:]]
    if len(offsets) == 1:
        return SplitOp(residue, modulus, offsets[0])
    return MergeOp(residue, modulus, offsets[0], offsets[1])


def _bounded(value: Any, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) in [low, high]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{value} is outside [{low}, {high}]")
    return value
