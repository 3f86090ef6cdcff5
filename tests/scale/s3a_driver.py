"""A Spark driver in a process of its own, whose session ``lk.spark_session`` starts with Spark's
``s3a`` file system: its jars must be on the classpath when the JVM starts, which the tests'
shared session (started without them) cannot give.

``Driver`` keeps one spawned Python process with one SparkSession for as many calls as a test
module makes; ``driver.call(fn, *args)`` runs ``fn`` (a function of ``s3a_calls``) there and
returns its result, or raises ``DriverError`` with the driver's traceback.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import s3a_calls

START_TIMEOUT = 300.0
"""A JVM start on a loaded 2-core machine, the jars loaded with it."""


class DriverError(AssertionError):
    """A call failed in the driver (its traceback is the message) or did not return in time."""


def _invoke(fn: Callable[..., Any], args: tuple) -> Any:
    """Run ``fn(*args)`` in the driver; an error comes back as text (Py4J's do not pickle)."""
    try:
        return fn(*args)
    except BaseException:  # noqa: BLE001 - every failure goes back to the test as text
        raise DriverError(traceback.format_exc()) from None


class Driver:
    """One spawned process holding a SparkSession made by ``s3a_calls.start``."""

    def __init__(self, env: dict[str, str], warehouse: str) -> None:
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            self.facts = self.call(s3a_calls.start, env, warehouse, timeout=START_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def call(self, fn: Callable[..., Any], *args: Any, timeout: float = 600.0) -> Any:
        future = self._pool.submit(_invoke, fn, args)
        try:
            return future.result(timeout)
        except FutureTimeout:
            raise DriverError(f"{fn.__name__} did not return within {timeout:.0f} s") from None

    def close(self) -> None:
        """Stop the session, then the process (killed if it does not end)."""
        processes = list(getattr(self._pool, "_processes", {}).values())
        with contextlib.suppress(Exception):
            self._pool.submit(s3a_calls.stop).result(60)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.join(30)
            if process.is_alive() and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
                process.join(10)
