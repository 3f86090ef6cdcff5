"""``MetricsServer``: the namespace's Prometheus metrics over HTTP (``/metrics``), with the
background pass that keeps the heavy figures fresh; what ``leasekit exporter`` and
``leasekit janitor --metrics-port`` run. The collector is a prometheus_client collector (it
can be registered in any ``CollectorRegistry``); the server renders it with ``exposition``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...durations import parse_duration
from ...errors import IllegalStateError
from ...validate import check_bool, check_host, check_int
from .exposition import metrics_app, serve_http
from .metrics import LeasekitCollector
from .sampler import Sampler

if TYPE_CHECKING:
    from ...context import Context

__all__ = ["MetricsServer", "DEFAULT_PORT"]

DEFAULT_PORT = 9308
"""The exporter's port (kafka-lag-exporter's neighbour in Prometheus's port list)."""

log = logging.getLogger("leasekit.monitor")


class MetricsServer:
    """Serves ``LeasekitCollector`` over HTTP and runs its ``Sampler``; no I/O until ``start``.

    Arguments:
        ctx: the connection's context (it must stay open while the server runs).
        port: the TCP port; 0 picks a free one (``port`` tells which once started).
        address: the address to listen on ("0.0.0.0": every interface).
        interval: time between two background passes (a duration); None: the namespace's
            ``monitor.interval`` (read on ``start``).
        sample_history: sample the lag history in each background pass (M1; the janitor
            samples on its own).

    Raises:
        InvalidTypeError: ``port`` is not an int, ``address`` not a str, or ``sample_history``
            not a bool.
        InvalidArgumentError: ``port`` is not in 0..65535, or ``address`` is no host name or
            IP address (``validate.check_host``).
        InvalidDurationError: a bad ``interval``.
    """

    def __init__(
        self,
        ctx: Context,
        *,
        port: int = DEFAULT_PORT,
        address: str = "0.0.0.0",
        interval: Any = None,
        sample_history: bool = True,
    ) -> None:
        self._ctx = ctx
        self._port = check_int(port, "port", minimum=0, maximum=65535)
        self.address = check_host(address)
        seconds = None if interval is None else parse_duration(interval, what="interval")
        self.sampler = Sampler(
            ctx,
            0.0 if seconds is None else seconds.total_seconds(),
            sample_history=check_bool(sample_history, "sample_history"),
        )
        self._interval_set = seconds is not None
        self._httpd: Any = None
        self._collector: LeasekitCollector | None = None

    @property
    def port(self) -> int:
        """The port listened on (the one picked, for port 0, once started)."""
        return self._httpd.server_port if self._httpd is not None else self._port

    @property
    def url(self) -> str:
        """The metrics URL (with 127.0.0.1 for an address of every interface)."""
        host = "127.0.0.1" if self.address in ("", "0.0.0.0", "::") else self.address
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> MetricsServer:
        """Listen and start the background pass; the server itself.

        Returns:
            This server.

        Raises:
            IllegalStateError: the port cannot be listened on (in use, not allowed).
            CorruptMetadataError: no ``interval`` was given and the settings are unreadable.
            ZooKeeperUnavailableError: no ``interval`` was given and ZooKeeper did not answer.
        """
        if not self._interval_set:
            interval = self._ctx.settings()["monitor.interval"]
            self.sampler.interval_s = interval.total_seconds()
        collector = LeasekitCollector(self._ctx, self.sampler)
        try:
            self._httpd = serve_http(self.address, self._port, metrics_app(collector.collect))
        except OSError as exc:
            collector.close()
            raise IllegalStateError(
                f"cannot serve metrics on {self.address!r}, port {self._port}: "
                f"{exc.strerror or exc}"
            ) from None
        self._collector = collector
        self.sampler.start()
        log.info("serving metrics on %s", self.url)
        return self

    def close(self) -> None:
        """Stop serving and stop the background pass."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        collector, self._collector = self._collector, None
        if collector is not None:
            collector.close()
        self.sampler.close()

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
