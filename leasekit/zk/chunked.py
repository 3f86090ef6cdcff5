"""Per-bucket arrays stored as fixed-size chunk znodes (a table's latest snapshots, a lease's
pins): which chunk holds a bucket, and one chunk's values addressed by bucket number."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

__all__ = ["CHUNK", "ChunkArray", "chunk_of", "chunks_for", "group_by_chunk"]

CHUNK = 1000
"""Buckets per chunk znode: chunk c holds buckets [c * CHUNK, (c + 1) * CHUNK)."""


def chunk_of(bucket: int) -> int:
    """The number of the chunk that holds ``bucket``."""
    return bucket // CHUNK


def chunks_for(num_buckets: int) -> range:
    """The chunk numbers of an array of ``num_buckets`` buckets."""
    return range((num_buckets + CHUNK - 1) // CHUNK)


def group_by_chunk(buckets: Iterable[int]) -> dict[int, list[int]]:
    """``buckets`` grouped by the chunk that holds them: chunks and buckets ascending."""
    ordered = sorted(set(buckets))
    out: dict[int, list[int]] = {}
    start = 0
    while start < len(ordered):
        chunk = ordered[start] // CHUNK
        end = bisect_left(ordered, (chunk + 1) * CHUNK, start)
        out[chunk] = ordered[start:end]
        start = end
    return out


class ChunkArray(NamedTuple):
    """The values of one chunk, addressed by bucket number; 0 means no value. The list may be
    shorter than CHUNK: missing trailing entries are 0."""

    chunk: int
    """The chunk's number."""
    ids: list[int]
    """Value per bucket of the chunk: index i is bucket chunk * CHUNK + i."""

    @classmethod
    def filled(cls, num_buckets: int, value: int) -> list[ChunkArray]:
        """The arrays of ``num_buckets`` buckets that all hold ``value``."""
        return [
            cls(c, [value] * min(CHUNK, num_buckets - c * CHUNK)) for c in chunks_for(num_buckets)
        ]

    @property
    def first(self) -> int:
        """The first bucket of the chunk."""
        return self.chunk * CHUNK

    def get(self, bucket: int) -> int:
        """The value of ``bucket`` (0 when it has none)."""
        i = bucket - self.chunk * CHUNK
        if not 0 <= i < CHUNK:
            raise ValueError(f"bucket {bucket} is not in chunk {self.chunk}")
        return self.ids[i] if i < len(self.ids) else 0

    def present(self, buckets: Iterable[int]) -> dict[int, int]:
        """The value of each of ``buckets`` (all of this chunk) that has one (not 0)."""
        first, ids = self.chunk * CHUNK, self.ids
        size = len(ids)
        out = {}
        for bucket in buckets:
            i = bucket - first
            if not 0 <= i < CHUNK:
                raise ValueError(f"bucket {bucket} is not in chunk {self.chunk}")
            if i < size and ids[i]:
                out[bucket] = ids[i]
        return out

    def updated(self, values: Mapping[int, int]) -> ChunkArray:
        """A copy with the values of these buckets (all of this chunk) replaced."""
        ids = list(self.ids)
        first = self.chunk * CHUNK
        for bucket, value in values.items():
            i = bucket - first
            if not 0 <= i < CHUNK:
                raise ValueError(f"bucket {bucket} is not in chunk {self.chunk}")
            if i >= len(ids):
                ids.extend([0] * (i + 1 - len(ids)))
            ids[i] = value
        return ChunkArray(self.chunk, ids)

    def items(self) -> Iterator[tuple[int, int]]:
        """(bucket, value) of every bucket of the chunk that has a value."""
        first = self.chunk * CHUNK
        return ((first + i, v) for i, v in enumerate(self.ids) if v)
