"""The stress run's parameters and its records of what the library acknowledged: shared by
its workload (stress_workload) and its checks (stress_checks)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import leasekit as lk

TB = lk.TableBucket

TABLES = ("orders", "events")
BUCKETS = 4
WORKERS = 8
SHARED_LEASES = ("shared-0", "shared-1", "shared-2")
GRACE = "1s"
GRACE_MS = 1000
# Not 0s, nor 5s: unreferenced files younger than this may be appends or snapshots in flight,
# and a commit delayed by the outage can come several seconds after its file write (the
# writer does not check the age itself: see test_writer_kill's stalled-writer test)
ORPHAN_MIN_AGE = "15s"
# log.segment.min-merge 2: buckets split off lately get few segments, and merge them too
TABLE_PROPERTIES = {
    "kv.snapshot.num-retained": 1,
    "log.retention": "2s",
    "log.segment.min-merge": 2,
}
SNAPSHOT_EVERY = 3.0  # seconds between Spark snapshots of one table (2 cores: keep it moderate)
RETENTION_EVERY = 1.0
EXPIRE_EVERY = 0.5
RESCALE_EVERY = 2.0
COMPACT_EVERY = 0.5  # seconds between merges of small log segments (R8) of a random bucket
RESCALED = "orders"  # the table whose buckets split and merge
MAX_ACTIVE = 10
LATEST_CHECK_EVERY = 10.0  # seconds between reads of the latest snapshots (Spark: 2 cores)


def epoch_ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


class Counts:
    """Thread-safe counters for the summary line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def __getitem__(self, key: str) -> int:
        with self._lock:
            return self._counts[key]


@dataclass
class OwnLease:
    """A lease only one worker touches, so the worker knows what ZooKeeper must hold for it."""

    worker: int
    slot: int
    generation: int = 0
    exists: bool = False
    pins: dict[TB, int] = field(default_factory=dict)
    expires_ms: int = 0
    duration: float = 5.0
    created_at: datetime | None = None
    history: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.history.append(f"{time.monotonic():.3f} {self.lease_id} {text}")

    @property
    def lease_id(self) -> str:
        return f"w{self.worker}-s{self.slot}-g{self.generation}"

    def next_generation(self, rng: random.Random) -> None:
        """Move on to a fresh id (the old lease, if any, is left to expiry)."""
        self.generation += 1
        self.exists, self.pins, self.expires_ms, self.created_at = False, {}, 0, None
        self.duration = rng.uniform(3.0, 10.0)


@dataclass
class Acked:
    """Everything a successful call acknowledged."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    appends: list[tuple[TB, lk.OffsetRange]] = field(default_factory=list)
    snapshots: dict[tuple[TB, int], lk.Snapshot] = field(default_factory=dict)
    deleted_snapshots: set[tuple[str, int, int]] = field(default_factory=set)
    retention_interrupted: int = 0
