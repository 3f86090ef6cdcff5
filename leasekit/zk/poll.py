"""kazoo's threading handler, waiting on its sockets with one ``poll`` call.

kazoo's connection thread waits for its socket before every read, write and response
(``handler.select``). The stock handler builds an epoll selector for each wait: five system
calls (create, two registers, wait, close) and a few Python objects, where ``poll`` needs one
call, so every request costs the client's connection thread less CPU, and holds the GIL
for less of it, than with the stock handler. Where ``select.poll`` does not exist (Windows),
kazoo's own handler is used.
"""

from __future__ import annotations

import select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

__all__ = ["make_handler", "PollingHandler"]

_POLL = hasattr(select, "poll")
_READABLE = (select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR) if _POLL else 0
_WRITABLE = (select.POLLOUT | select.POLLHUP | select.POLLERR) if _POLL else 0
_MAX_MS = 2**31 - 1
"""The longest wait ``poll`` takes, in milliseconds (about 24.8 days)."""


class PollingHandler(SequentialThreadingHandler):
    """kazoo's ``SequentialThreadingHandler`` whose ``select`` is one ``poll`` call, with
    kazoo's ``selector_select`` contract: the objects of ``rlist`` and ``wlist`` that are
    ready within ``timeout`` seconds (None: no limit), and an empty third list. A hung-up or
    failed socket counts as ready, so the caller's read or write meets the error; an object
    that is not open is a ValueError, as in kazoo."""

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        if timeout is not None:
            if not isinstance(timeout, (int, float)):
                raise TypeError("timeout must be a number")
            if timeout < 0:
                raise ValueError("timeout must be non-negative")
        read_fds = [fileobj_to_fd(obj) for obj in rlist]
        write_fds = [fileobj_to_fd(obj) for obj in wlist]
        wanted: dict[int, int] = {}
        for fds, mask in ((read_fds, select.POLLIN | select.POLLPRI), (write_fds, select.POLLOUT)):
            for fd in fds:
                wanted[fd] = wanted.get(fd, 0) | mask
        poller = select.poll()
        for fd, mask in wanted.items():
            poller.register(fd, mask)
        ready = dict(poller.poll(None if timeout is None else min(timeout * 1000, _MAX_MS)))
        if any(events & select.POLLNVAL for events in ready.values()):
            raise ValueError("Invalid event mask or fd")
        readable = [o for o, fd in zip(rlist, read_fds) if ready.get(fd, 0) & _READABLE]
        writable = [o for o, fd in zip(wlist, write_fds) if ready.get(fd, 0) & _WRITABLE]
        return readable, writable, []


def make_handler() -> SequentialThreadingHandler:
    """A new handler for one kazoo client: polling where the platform has ``poll``."""
    return PollingHandler() if _POLL else SequentialThreadingHandler()
