"""The ZooKeeper clock without a write per reading: an estimate from the ``mtime`` of the last
write seen (a write to the clock znode, or any commit) plus the local monotonic time since,
refreshed by a write at most every ``max_age`` seconds and whenever a decision needs it fresh.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["ServerClock"]


class ServerClock:
    """Estimates of ZooKeeper's clock (epoch ms).

    ``read()`` is a write to the clock znode returning its mtime (one round trip);
    ``monotonic`` is injectable so tests drive local time.
    """

    def __init__(
        self,
        read: Callable[[], int],
        *,
        max_age: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._monotonic = monotonic
        self.max_age = max_age
        self._lock = threading.Lock()
        self._seen: tuple[int, float] | None = None  # (server ms, local monotonic s)

    def observe(self, server_ms: int, *, sent_at: float | None = None) -> None:
        """Take in a ZooKeeper time just learnt (the mtime of a write); with ``sent_at`` (the
        monotonic time the write was sent), the midpoint of the round trip stands for it."""
        now = self._monotonic()
        at = now if sent_at is None else (sent_at + now) / 2
        with self._lock:
            if self._seen is None or at >= self._seen[1]:
                self._seen = (server_ms, at)

    def fresh_ms(self) -> int:
        """ZooKeeper's time now, read with a write (for decisions that depend on it)."""
        sent_at = self._monotonic()
        server_ms = self._read()
        self.observe(server_ms, sent_at=sent_at)
        return server_ms

    def now_ms(self) -> int:
        """ZooKeeper's time now: the estimate, refreshed by a write when older than max_age."""
        with self._lock:
            seen = self._seen
        now = self._monotonic()
        if seen is None or now - seen[1] > self.max_age:
            return self.fresh_ms()
        return seen[0] + round((now - seen[1]) * 1000)

    def estimate_ms(self) -> int | None:
        """The estimate without any I/O; None before the first observation."""
        with self._lock:
            seen = self._seen
        if seen is None:
            return None
        return seen[0] + round((self._monotonic() - seen[1]) * 1000)
