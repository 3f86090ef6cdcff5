"""``leasekit janitor``: run the leader-elected janitor until Ctrl-C or SIGTERM (``--once``: one
pass as leader, then exit); with ``--metrics-port`` the process also serves the namespace's
Prometheus metrics.

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
from typing import TYPE_CHECKING, Any

from .common import add_command, connect, duration_arg
from .output import note

if TYPE_CHECKING:
    from ..connection import Connection

__all__ = [
    "register",
    "stop_on_signals",
    "stderr_logs",
    "serving_metrics",
    "add_metrics_options",
    "port_arg",
    "address_arg",
]

DEFAULT_PORT = 9308
"""The exporter's port (``leasekit.monitor.exporter.serve.DEFAULT_PORT``, not imported: the CLI
loads the library only when a command runs)."""


def port_arg(text: str) -> int:
    """A TCP port, 0..65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 0..65535, got {port}")
    return port


def address_arg(text: str) -> str:
    """A host name or IP address a socket can listen on (``validate.check_host``)."""
    from ..errors import LeasekitError
    from ..validate import check_host

    try:
        return check_host(text)
    except LeasekitError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _JanitorLogs(logging.Filter):
    """The janitor's own INFO lines; warnings and errors from the rest of leasekit."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name in _INFO_LOGGERS


_INFO_LOGGERS = ("leasekit.janitor", "leasekit.monitor")


@contextlib.contextmanager
def stderr_logs() -> Iterator[None]:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.addFilter(_JanitorLogs())
    lib = logging.getLogger("leasekit")
    own = [logging.getLogger(name) for name in _INFO_LOGGERS]
    levels = [logger.level for logger in own]
    lib.addHandler(handler)
    for logger in own:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        for logger, level in zip(own, levels):
            logger.setLevel(level)
        lib.removeHandler(handler)


@contextlib.contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
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


@contextlib.contextmanager
def serving_metrics(
    conn: Connection, port: int | None, address: str, interval: Any, *, sample_history: bool
) -> Iterator[None]:
    """Serve the namespace's metrics on ``port`` inside the block (nothing when None);
    ``interval`` None: the namespace's ``monitor.interval``."""
    if port is None:
        yield
        return
    from ..connection import context_of
    from ..monitor.exporter.serve import MetricsServer

    server = MetricsServer(
        context_of(conn),
        port=port,
        address=address,
        interval=interval,
        sample_history=sample_history,
    )
    with server as srv:
        note(f"serving Prometheus metrics of namespace {conn.namespace!r} on {srv.url}")
        yield


def _janitor(args: argparse.Namespace) -> int:
    from .. import janitor
    from ..connection import context_of

    interval = janitor.check_interval(duration_arg(args.interval))
    stop = threading.Event()
    with stderr_logs(), stop_on_signals(stop), connect(args) as conn:
        # the janitor samples the lag history itself
        port, address = args.metrics_port, args.metrics_address
        with serving_metrics(conn, port, address, interval, sample_history=False):
            worker = janitor.Janitor(context_of(conn), interval.total_seconds(), stop,
                                     once=args.once)  # fmt: skip
            worker.run()
    if args.once:
        return _once_summary(args, worker.report)
    return 0


def _once_summary(args: argparse.Namespace, report: Any) -> int:
    """What ``--once``'s pass did, on stdout; exit 1 when no pass completed."""
    from ..sizes import human_bytes
    from .output import emit

    if report is None:
        note("no janitor pass completed (interrupted, or the pass failed: see the log above)")
        return 1
    merged = sum(c.merged for c in report.compacted)
    written = sum(c.written for c in report.compacted)
    info = {
        "segments_merged": merged,
        "merged_segments_written": written,
        "deleted": len(report.deleted),
        "freed_bytes": report.freed_bytes,
        "errors": list(report.errors),
    }

    def render(i: dict[str, Any]) -> str:
        lines = [
            f"one janitor pass: merged {merged:,} log segments into {written:,}; retention "
            f"deleted {i['deleted']:,} items and freed {human_bytes(i['freed_bytes'])}",
            *(f"error: {e}" for e in i["errors"]),
        ]
        return "\n".join(lines)

    emit(args, info, render)
    return 0


def add_metrics_options(
    cmd: argparse.ArgumentParser, port: str, address: str, *, default_port: int | None
) -> None:
    """The options naming the port (``default_port`` None: no metrics unless given) and the
    address metrics are served on."""
    shown = "none" if default_port is None else default_port
    cmd.add_argument(
        port,
        type=port_arg,
        default=default_port,
        metavar="PORT",
        help=f"serve Prometheus metrics on this port (0: any free one; default: {shown})",
    )
    cmd.add_argument(
        address,
        type=address_arg,
        default="0.0.0.0",
        metavar="ADDRESS",
        help="address to serve metrics on (default: 0.0.0.0, every interface)",
    )


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
    cmd.add_argument(
        "--once",
        action="store_true",
        help="do one pass as the elected janitor, print what it did, and exit",
    )
    add_metrics_options(cmd, "--metrics-port", "--metrics-address", default_port=None)
