"""The stored format of a stream sink's batch marker: per table and Spark query, the last
micro-batch whose rows are committed, and the buckets of a batch committed only in part."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import codec
from .fields import ints, load

__all__ = ["SinkMarkRecord"]


def _batch_id(value: Any) -> int:
    """A stored batch id (or bucket id): an int in [-1, 2**63), nothing else. A marker naming a
    batch beyond any real one would make every later batch look like a replay and be dropped."""
    if isinstance(value, bool) or not isinstance(value, int) or not -1 <= value < 2**63:
        raise ValueError(f"not a batch id: {value!r:.40}")
    return value


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
            buckets = v.get("k", [])
            if not isinstance(buckets, list) or not all(_batch_id(b) >= 0 for b in buckets):
                raise ValueError(f"buckets must be a list of bucket ids, not {buckets!r:.80}")
            return cls(_batch_id(v["b"]), _batch_id(v.get("p", -1)), tuple(ints(buckets)))

        return load(data, path, cls.VERSION, "stream sink marker", build)
