"""``MetricsServer``: the Prometheus metrics of one or more namespaces over HTTP (``/metrics``),
each with the background pass that keeps its heavy figures fresh; what ``leasekit exporter``
and ``leasekit janitor --metrics-port`` run. Each namespace's collector is a prometheus_client
collector (it can be registered in any ``CollectorRegistry``); the server merges their families
and renders them with ``exposition`` (OpenMetrics when the scraper asks for it)."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from ...durations import parse_duration
from ...errors import IllegalStateError, LeasekitError
from ...properties import NAMESPACE_SETTINGS
from ...validate import check_bool, check_host, check_int
from .exposition import metrics_app, serve_http
from .metrics import LeasekitCollector, unreachable
from .sampler import Sampler

if TYPE_CHECKING:
    from ...context import Context

__all__ = ["MetricsServer", "DEFAULT_PORT", "merge_families"]

DEFAULT_PORT = 9308
"""The exporter's port (kafka-lag-exporter's neighbour in Prometheus's port list)."""

log = logging.getLogger("leasekit.monitor")


class _Served(NamedTuple):
    """One namespace being served."""

    ctx: Context
    """Its context (the caller keeps the connection open while it is served)."""
    sampler: Sampler
    """Its background pass."""
    collector: LeasekitCollector
    """Its metrics, read on each scrape."""


def merge_families(per_namespace: list[list[Any]]) -> list[Any]:
    """The metric families of several collectors as one list: samples of families of the same
    name join the first such family (a name is described once per scrape), in the order the
    names first appear. The families are changed in place (they are built afresh per scrape)."""
    if len(per_namespace) == 1:
        return per_namespace[0]
    merged: dict[str, Any] = {}
    for families in per_namespace:
        for family in families:
            first = merged.setdefault(family.name, family)
            if first is not family:
                first.samples.extend(family.samples)
    return list(merged.values())


class MetricsServer:
    """Serves the ``LeasekitCollector`` of each namespace added over HTTP and runs their
    ``Sampler``; no I/O until ``start``.

    Arguments:
        ctx: the context of the namespace to serve from ``start`` on (it must stay open while
            the server runs); None: only those given to ``add``.
        port: the TCP port; 0 picks a free one (``port`` tells which once started).
        address: the address to listen on ("0.0.0.0": every interface).
        interval: time between two background passes (a duration); None: each namespace's
            ``monitor.interval`` (read when it is added; 30s when its settings are unreadable).
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
        ctx: Context | None = None,
        *,
        port: int = DEFAULT_PORT,
        address: str = "0.0.0.0",
        interval: Any = None,
        sample_history: bool = True,
    ) -> None:
        self._first = ctx
        self._port = check_int(port, "port", minimum=0, maximum=65535)
        self.address = check_host(address)
        seconds = None if interval is None else parse_duration(interval, what="interval")
        self._interval_s = None if seconds is None else seconds.total_seconds()
        self._sample_history = check_bool(sample_history, "sample_history")
        self._served: dict[str, _Served] = {}
        self._down: dict[str, str] = {}
        self._lock = threading.Lock()
        self._httpd: Any = None
        self._pool: ThreadPoolExecutor | None = None

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

    @property
    def sampler(self) -> Sampler:
        """The background pass of the namespace given to the constructor.

        Raises:
            IllegalStateError: the server has not started, or was given no namespace.
        """
        served = None if self._first is None else self._served.get(self._first.namespace)
        if served is None:
            raise IllegalStateError("the metrics server serves no namespace of its own yet")
        return served.sampler

    @property
    def namespaces(self) -> list[str]:
        """The namespaces served: read on each scrape, or reported unreachable."""
        with self._lock:
            return sorted({*self._served, *self._down})

    def start(self) -> MetricsServer:
        """Listen, and serve the constructor's namespace (starting its background pass).

        Returns:
            This server.

        Raises:
            IllegalStateError: the port cannot be listened on (in use, not allowed).
        """
        try:
            self._httpd = serve_http(self.address, self._port, metrics_app(self.collect))
        except OSError as exc:
            raise IllegalStateError(
                f"cannot serve metrics on {self.address!r}, port {self._port}: "
                f"{exc.strerror or exc}"
            ) from None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="leasekit-namespaces")
        if self._first is not None:
            self.add(self._first)
        log.info("serving metrics on %s", self.url)
        return self

    def add(self, ctx: Context) -> None:
        """Serve ``ctx``'s namespace too, from the next scrape on, and start its background
        pass; it replaces a namespace of the same name (served or unreachable).

        Arguments:
            ctx: the namespace's context; it must stay open while it is served.
        """
        sampler = Sampler(ctx, self._interval_of(ctx), sample_history=self._sample_history)
        served = _Served(ctx, sampler, LeasekitCollector(ctx, sampler))
        with self._lock:
            old = self._served.pop(ctx.namespace, None)
            self._down.pop(ctx.namespace, None)
            self._served[ctx.namespace] = served
        if old is not None:
            _stop(old)
        sampler.start()

    def mark_unreachable(self, namespace: str, reason: str) -> None:
        """Serve ``namespace`` as ``leasekit_up`` 0 (it could not be opened: ``reason``),
        stopping what was served of it."""
        with self._lock:
            old = self._served.pop(namespace, None)
            self._down[namespace] = reason
        if old is not None:
            _stop(old)

    def remove(self, namespace: str) -> None:
        """Stop serving ``namespace`` (nothing if it is not served)."""
        with self._lock:
            old = self._served.pop(namespace, None)
            self._down.pop(namespace, None)
        if old is not None:
            _stop(old)

    def _interval_of(self, ctx: Context) -> float:
        """Seconds between two background passes of ``ctx``'s namespace."""
        if self._interval_s is not None:
            return self._interval_s
        try:
            return float(ctx.settings()["monitor.interval"].total_seconds())
        except LeasekitError as exc:
            default = NAMESPACE_SETTINGS["monitor.interval"].default
            log.warning(
                "namespace %s: monitor.interval unreadable (%s); sampling every %s",
                ctx.namespace, exc, default,
            )  # fmt: skip
            return float(default.total_seconds())

    def collect(self) -> list[Any]:
        """Every family of every namespace served, read now (the namespaces side by side),
        families of one name merged; an unreachable namespace has ``leasekit_up`` 0."""
        with self._lock:
            served = [self._served[name] for name in sorted(self._served)]
            down = sorted(self._down)
        if len(served) <= 1 or self._pool is None:
            per = [list(s.collector.collect()) for s in served]
        else:
            per = list(self._pool.map(lambda s: list(s.collector.collect()), served))
        return merge_families([*per, *(list(unreachable(name)) for name in down)])

    def close(self) -> None:
        """Stop serving and stop every background pass."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        with self._lock:
            served, self._served = list(self._served.values()), {}
            self._down = {}
        for each in served:
            _stop(each)
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop(served: _Served) -> None:
    served.collector.close()
    served.sampler.close()
