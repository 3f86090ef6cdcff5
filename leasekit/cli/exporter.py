"""``leasekit exporter``: serve the namespace's Prometheus metrics until Ctrl-C or SIGTERM.

Lag, time lag and health of every group and each lease's state and expiry are read on each
scrape; every ``--interval`` (default: the namespace's ``monitor.interval``) a background pass
samples the lag history (M1) and computes the retention plan's reclaimable bytes and each
lease's bytes, served with their age.
"""

from __future__ import annotations

import argparse
import threading
from typing import Any

from .common import add_command, connect, duration_arg
from .janitor import (
    DEFAULT_PORT,
    add_metrics_options,
    serving_metrics,
    stderr_logs,
    stop_on_signals,
)

__all__ = ["register"]


def _exporter(args: argparse.Namespace) -> int:
    from ..durations import parse_duration

    interval = (
        None
        if args.interval is None
        else parse_duration(duration_arg(args.interval), what="interval")
    )
    stop = threading.Event()
    # a service: it may start the embedded server (it also writes lag history samples)
    with (
        stderr_logs(),
        stop_on_signals(stop),
        connect(args, read_only=True, start_server=True) as conn,
    ):
        with serving_metrics(conn, args.port, args.address, interval, sample_history=True):
            stop.wait()
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``exporter`` to the top-level subcommands."""
    cmd = add_command(
        commands,
        "exporter",
        "serve Prometheus metrics of consumer lag, leases and retention at /metrics; runs "
        "until Ctrl-C or SIGTERM",
        common,
        _exporter,
    )
    add_metrics_options(cmd, "--port", "--address", default_port=DEFAULT_PORT)
    cmd.add_argument(
        "--interval",
        default=None,
        metavar="D",
        help="time between lag history samples and computations of the retention plan and "
        "lease bytes, like 30s or 5m (default: the namespace's monitor.interval, 30s)",
    )
