"""The stored format of a stream sink's batch marker: per table and Spark query, the last
micro-batch whose rows are committed, and the buckets of a batch committed only in part."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import codec
from .fields import ints, load

__all__ = ["SinkMarkRecord"]


class SinkMarkRecord(NamedTuple):
    """``<ns>/data/<table_id>/sinks/<query id>``: what one streaming query has committed to a
    table, so a micro-batch Spark replays is not appended twice (D4)."""

    batch: int
    """The last micro-batch committed whole (-1: none yet)."""
    pending: int = -1
    """A micro-batch committed only in part (its append took several transactions), or -1."""
    buckets: tuple[int, ...] = ()
    """The buckets of ``pending`` already committed: a replay commits only the others."""

    VERSION = 1

    def encode(self) -> bytes:
        value: dict[str, Any] = {"b": self.batch}
        if self.pending >= 0:
            value["p"] = self.pending
            value["k"] = list(self.buckets)
        return codec.encode(value, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> SinkMarkRecord:
        def build(v: dict[str, Any]) -> SinkMarkRecord:
            pending = int(v.get("p", -1))
            return cls(int(v["b"]), pending, tuple(ints(v.get("k", []))))

        return load(data, path, cls.VERSION, "stream sink marker", build)
