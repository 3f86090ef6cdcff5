"""``leasekit janitor``: run the leader-elected janitor until Ctrl-C or SIGTERM.

Logs go to stderr with timestamps: one INFO line per pass, a WARNING per skipped item.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from .common import add_command, connect, duration_arg

__all__ = ["register"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _JanitorLogs(logging.Filter):
    """The janitor's own INFO lines; warnings and errors from the rest of leasekit."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name == "leasekit.janitor"


@contextlib.contextmanager
def _stderr_logs() -> Iterator[None]:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.addFilter(_JanitorLogs())
    lib, own = logging.getLogger("leasekit"), logging.getLogger("leasekit.janitor")
    level = own.level
    lib.addHandler(handler)
    own.setLevel(logging.INFO)
    try:
        yield
    finally:
        own.setLevel(level)
        lib.removeHandler(handler)


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and the first Ctrl-C set ``stop``; a second Ctrl-C interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum: int, frame: Any) -> None:
        stop.set()

    def on_int(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
                signal.SIGINT: signal.signal(signal.SIGINT, on_int)}  # fmt: skip
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _janitor(args: argparse.Namespace) -> int:
    from .. import janitor

    interval = janitor.check_interval(duration_arg(args.interval))
    stop = threading.Event()
    with _stderr_logs(), _stop_on_signals(stop), connect(args) as conn:
        janitor.run(conn, interval, stop)
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``janitor`` to the top-level subcommands."""
    cmd = add_command(
        commands,
        "janitor",
        "expire leases and run retention every interval (one leader at a time); "
        "runs until Ctrl-C or SIGTERM",
        common,
        _janitor,
    )
    cmd.add_argument(
        "--interval",
        default="30s",
        metavar="D",
        help="time between passes, like 10s, 5m or seconds (default: 30s)",
    )
