"""leasekit benchmarks (docs/benchmarks.md): run with ``python -m bench.run ID``.

``REGISTRY`` maps a benchmark id to the module defining its ``BENCHMARK``; a new
benchmark is one module plus one line here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .common import Benchmark

__all__ = ["REGISTRY", "load"]

REGISTRY: dict[str, str] = {
    "B1": "bench.b1",
    "B2": "bench.b2",
    "B3": "bench.b3",
    "B4": "bench.b4",
    "B5": "bench.b5",
    "B6": "bench.b6",
    "B7": "bench.b7",
    "B8": "bench.b8",
    "B9": "bench.b9",
    "B10": "bench.b10",
    "B11": "bench.b11",
    "B12": "bench.b12",
    "B13": "bench.b13",
    "B13-SCRAPE": "bench.b13_scrape",
    "B19": "bench.b19",
    "B20": "bench.b20",
    # Against the real peer: a Kafka broker on loopback (peers.kafka_broker), same records.
    "B14": "bench.b14",
    "B15": "bench.b15",
    "B16": "bench.b16",
    "B17": "bench.b17",
    "B18": "bench.b18",
    "B12-peer": "bench.b12_peer",
    # B1 on an S3 warehouse (SeaweedFS on loopback) through Spark's s3a reader.
    "B1-S3": "bench.b1_s3",
    "B7-S3": "bench.b7_s3",
}


def load(bench_id: str) -> Benchmark:
    """The registered benchmark ``bench_id`` (``KeyError`` if there is none)."""
    return importlib.import_module(REGISTRY[bench_id]).BENCHMARK
