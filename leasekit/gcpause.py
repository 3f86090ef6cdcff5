"""The cyclic garbage collector paused while a bulk read builds its answer.

Reading a group or a retention plan over 10,000 buckets decodes tens of thousands of znodes
into hundreds of thousands of small containers (tuples, lists, dicts), none of them part of a
reference cycle. Each 700 allocations start a collection, and the ones that reach the oldest
generation traverse every object of the process: in a kernel holding half a million objects
they took about half of such a read's time. Reference counting still frees everything at once
while the collector is paused; cycles made meanwhile are collected after. The pause nests and
is shared by threads: the collector runs again when the last bulk read ends, and only if it
was running when the first one began.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

__all__ = ["paused_gc", "bulk_read"]

P = ParamSpec("P")
R = TypeVar("R")

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def paused_gc() -> Iterator[None]:
    """The collector paused for the block (see the module's note)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()


def bulk_read(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with the collector paused."""

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused_gc():
            return fn(*args, **kwargs)

    return run
