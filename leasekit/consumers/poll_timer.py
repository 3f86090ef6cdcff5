"""Kafka's ``max.poll.interval`` for a group member: a timer thread that fires when the
consumer has spent too long outside ``poll`` (docs/consumers.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .log_view import MAX_WAIT

__all__ = ["PollTimer"]


class PollTimer:
    """Kafka's ``max.poll.interval``: calls ``expired`` on a thread of its own when the consumer
    has spent ``interval`` seconds outside ``poll`` (the time inside a blocking poll does not
    count). Entering and leaving ``poll`` only take a lock and read the clock."""

    def __init__(self, interval: float, expired: Callable[[], None]) -> None:
        self.interval, self._expired = interval, expired
        self._lock = threading.Lock()
        self._inside = 0
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PollTimer:
        with self._lock:
            self._inside += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._inside -= 1
            self._last = time.monotonic()

    def start(self) -> None:
        with self._lock:
            self._last = time.monotonic()
            if self._thread is not None:
                return
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), daemon=True, name="leasekit-max-poll-interval"
            )
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self, stop: threading.Event) -> None:
        wait = min(self.interval, MAX_WAIT)  # (a huge interval waits in turns: it never fires)
        while not stop.wait(wait):
            with self._lock:  # a poll starting now waits until the member has left
                idle = 0.0 if self._inside else time.monotonic() - self._last
                if idle >= self.interval:
                    self._last = time.monotonic()  # once per idle spell
                    self._expired()
            wait = min(self.interval - idle if idle < self.interval else self.interval, MAX_WAIT)
