"""The stored formats of monitoring: the lag-history sampler's record of its last sample, which
samplers update by compare-and-set so that a namespace gets one sample per interval."""

from __future__ import annotations

from typing import Any, NamedTuple

from . import codec
from .fields import load

__all__ = ["SamplerRecord"]


class SamplerRecord(NamedTuple):
    """``<ns>/monitor/sampler``: when the lag history was last sampled, and by whom."""

    last_ms: int
    """ZooKeeper time (epoch ms) of the last sample claimed."""
    owner: str = ""
    """host:pid of the sampler that claimed it."""

    VERSION = 1

    def encode(self) -> bytes:
        return codec.encode({"last": self.last_ms, "owner": self.owner}, self.VERSION)

    @classmethod
    def decode(cls, data: bytes, path: str) -> SamplerRecord:
        def build(v: dict[str, Any]) -> SamplerRecord:
            last = v["last"]
            if isinstance(last, bool) or not isinstance(last, int):
                raise TypeError(f"last is not an int: {last!r:.40}")
            return cls(last, str(v.get("owner", "")))

        return load(data, path, cls.VERSION, "lag-history sampler record", build)
