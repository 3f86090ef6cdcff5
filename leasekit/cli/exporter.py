"""``leasekit exporter``: serve the Prometheus metrics of one or more namespaces (``--namespace``
repeated, or ``--all-namespaces``) from one process until Ctrl-C or SIGTERM.

Lag, time lag and health of every group and each lease's state and expiry are read on each
scrape; every ``--interval`` (default: each namespace's ``monitor.interval``) a background pass
per namespace samples the lag history (M1) and computes the retention plan's reclaimable bytes
and each lease's bytes, served with their age. A namespace that cannot be opened is served as
``leasekit_up`` 0 and tried again every interval (30s by default), as ``--all-namespaces``
looks for namespaces created or dropped meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

from .common import add_command, connect, duration_arg, refuse_missing_warehouse
from .janitor import DEFAULT_PORT, add_metrics_options, stderr_logs, stop_on_signals
from .output import note

if TYPE_CHECKING:
    from datetime import timedelta

    from ..monitor.exporter.serve import MetricsServer

__all__ = ["register"]

log = logging.getLogger("leasekit.monitor")

RETRY_S = 30.0
"""Seconds between two looks for namespaces to open when no ``--interval`` is given."""


def _given(args: argparse.Namespace) -> list[str] | None:
    """The namespaces named by ``--namespace`` after the subcommand (None: none was)."""
    names = args.namespace if isinstance(args.namespace, list) else None
    if names and args.all_namespaces:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError("give --namespace or --all-namespaces, not both")
    return list(dict.fromkeys(names)) if names else None


class _Namespaces:
    """The connections of the namespaces served, opened (and closed) as the wanted set
    changes; a namespace that cannot be opened is served as unreachable until it can."""

    def __init__(self, args: argparse.Namespace, server: MetricsServer) -> None:
        self._args = args
        self._server = server
        self._open: dict[str, contextlib.ExitStack] = {}

    def wanted(self) -> list[str]:
        """The namespaces to serve now: those given, or every one of the warehouse's."""
        given = _given(self._args)
        if given is not None or not self._args.all_namespaces:
            return given or [self._args.namespace]
        from ..connection import namespaces

        refuse_missing_warehouse(self._args)
        return namespaces(self._args.zookeeper, self._args.warehouse)

    def refresh(self) -> list[str]:
        """Open what is wanted and not open (served as unreachable where that fails), close
        what is no longer wanted; the namespaces now served that were not before."""
        from ..connection import context_of
        from ..errors import InvalidArgumentError, LeasekitError

        try:
            wanted = self.wanted()
        except InvalidArgumentError:
            raise
        except LeasekitError as exc:  # ZooKeeper down: what is served stays, as leasekit_up says
            log.warning("cannot list the namespaces (tried again in an interval): %s", exc)
            return []
        for name in [n for n in self._server.namespaces if n not in wanted]:
            self._server.remove(name)
            if name in self._open:
                self._open.pop(name).close()
                note(f"namespace {name!r} is gone: no longer served")
        added = []
        for name in [n for n in wanted if n not in self._open]:
            # a service: it may start the embedded server (it also writes lag history samples)
            args = argparse.Namespace(**{**vars(self._args), "namespace": name})
            stack = contextlib.ExitStack()
            try:
                conn = stack.enter_context(connect(args, read_only=True, start_server=True))
            except LeasekitError as exc:
                stack.close()
                self._server.mark_unreachable(name, str(exc))
                log.warning("namespace %r cannot be opened (leasekit_up 0): %s", name, exc)
                continue
            self._open[name] = stack
            self._server.add(context_of(conn))
            added.append(name)
        return added

    def close(self) -> None:
        """Stop serving every namespace and close its connection."""
        for name in list(self._open):
            self._server.remove(name)
            self._open.pop(name).close()


def _serving(names: list[str], url: str) -> None:
    if names:
        shown = ", ".join(repr(n) for n in names)
        note(f"serving Prometheus metrics of namespace{'s' * (len(names) > 1)} {shown} on {url}")


def _exporter(args: argparse.Namespace) -> int:
    from ..durations import parse_duration
    from ..monitor.exporter.serve import MetricsServer

    _given(args)  # refuses --namespace with --all-namespaces before anything starts
    interval: timedelta | None = (
        None
        if args.interval is None
        else parse_duration(duration_arg(args.interval), what="interval")
    )
    retry_s = RETRY_S if interval is None else interval.total_seconds()
    stop = threading.Event()
    server = MetricsServer(port=args.port, address=args.address, interval=interval)
    with stderr_logs(), stop_on_signals(stop):
        served = _Namespaces(args, server)
        try:
            added = served.refresh()  # their background passes start; scrapes once listening
            server.start()
            _serving(added, server.url)
            if not added and args.all_namespaces:
                note(f"no namespace has its data in the warehouse yet; looking every {retry_s:g}s")
            while not stop.wait(retry_s):
                _serving(served.refresh(), server.url)
        finally:
            server.close()
            served.close()
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``exporter`` to the top-level subcommands (``common``: the global options, with
    ``--namespace`` repeatable)."""
    cmd = add_command(
        commands,
        "exporter",
        "serve Prometheus metrics of consumer lag, leases and retention at /metrics, for one "
        "namespace or many; runs until Ctrl-C or SIGTERM",
        common,
        _exporter,
    )
    add_metrics_options(cmd, "--port", "--address", default_port=DEFAULT_PORT)
    cmd.add_argument(
        "--interval",
        default=None,
        metavar="D",
        help="time between lag history samples and computations of the retention plan and "
        "lease bytes, like 30s or 5m (default: each namespace's monitor.interval, 30s); also "
        "how often namespaces that could not be opened are tried again (default: 30s)",
    )
    cmd.add_argument(
        "--all-namespaces",
        action="store_true",
        help="serve every namespace of the ZooKeeper ensemble whose data is in the warehouse "
        "(its directory there is the namespace's), and those created later",
    )
