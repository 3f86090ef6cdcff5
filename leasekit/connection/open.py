"""``connect()``: check the arguments, open the warehouse and the ZooKeeper session (the
embedded server when no address is given), then wrap the context in a ``Connection``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..context import Context
from ..durations import parse_duration
from ..errors import InvalidArgumentError, InvalidDurationError, InvalidTypeError
from ..validate import check_host, check_namespace
from ..warehouse import Warehouse
from ..zk import ZkStore
from .facade import Connection

__all__ = ["connect", "DEFAULT_WAREHOUSE"]

DEFAULT_WAREHOUSE = "./leasekit-warehouse"


def connect(
    zookeeper: str | None = None,
    warehouse: str | os.PathLike[str] | None = None,
    *,
    namespace: str = "leasekit",
    auth: tuple[str, str] | None = None,
    timeout: Any = "10s",
    clock: Callable[[int], int] | None = None,
) -> Connection:
    """Open a connection; ``zookeeper=None`` uses ``LEASEKIT_ZOOKEEPER`` or the embedded server.

    Arguments:
        zookeeper: a ZooKeeper connect string ("zk1:2181,zk2:2181").
        warehouse: a local path or pyarrow file-system URI (``LEASEKIT_WAREHOUSE``, else
            ``./leasekit-warehouse``).
        namespace: the namespace's root znode and its directory in the warehouse.
        auth: (user, password): digest ACLs for everything this connection creates; a namespace
            created without ``auth`` is closed to writers without these credentials
            (docs/security.md). Without ``auth`` a connection to a protected namespace reads but
            cannot write.
        timeout: how long to wait for ZooKeeper (a duration).
        clock: maps the ZooKeeper clock (epoch milliseconds) to the time this connection uses
            for expiry and age decisions; ``None`` uses the ZooKeeper clock as it is. Tests
            pass one to move time (``leasekit.testing.ShiftedClock``), as kazoo's lease recipe
            takes ``utcnow``.

    Returns:
        The open ``Connection``; its warehouse namespace directory records this namespace as
        its owner (docs/security.md, "Ownership").

    Raises:
        InvalidArgumentError: a bad argument.
        InvalidTypeError: ``clock`` is not callable.
        ZooKeeperUnavailableError: no ZooKeeper answered within ``timeout``.
        PermissionDeniedError: the credentials were rejected, or with ``auth`` the namespace is
            open and cannot be closed.
        WarehouseOwnedError: the warehouse namespace directory belongs to another metadata
            store (another ZooKeeper, or a namespace dropped and created again).
    """
    seconds = _check_arguments(zookeeper, namespace, auth, timeout, clock)
    wh = Warehouse(warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE)
    wh.open()
    store = ZkStore(_zookeeper_address(zookeeper, wh), timeout=seconds, auth=auth)
    store.open()
    ctx = Context(store, wh, namespace, clock=clock)
    conn = Connection(ctx)
    try:
        ctx.ensure_namespace()
        ctx.claim_warehouse()
        ctx.watch_settings()
    except BaseException:
        conn.close()
        raise
    return conn


def _check_arguments(
    zookeeper: object, namespace: object, auth: object, timeout: Any, clock: object
) -> float:
    """Refuse bad ``connect`` arguments before any I/O; returns the timeout in seconds."""
    check_namespace(namespace)
    if auth is not None and not (
        isinstance(auth, tuple) and len(auth) == 2 and all(isinstance(a, str) and a for a in auth)
    ):
        raise InvalidArgumentError("auth must be a (user, password) tuple of non-empty strings")
    try:
        seconds = parse_duration(timeout, what="timeout").total_seconds()
    except InvalidDurationError as exc:
        raise InvalidArgumentError(str(exc)) from None
    if seconds <= 0:
        raise InvalidArgumentError("timeout must be greater than 0")
    if zookeeper is not None:
        _check_connect_string(zookeeper)
    if clock is not None and not callable(clock):
        raise InvalidTypeError("clock must be a callable from epoch ms to epoch ms")
    return seconds


def _check_connect_string(zookeeper: object) -> None:
    """Refuse a connect string that is no str, is blank, or whose hosts no socket can use
    (control, direction or surrogate characters; kazoo would retry them until the timeout)."""
    if not isinstance(zookeeper, str) or not zookeeper.strip():
        raise InvalidArgumentError("zookeeper must be a connect string like 'zk1:2181,zk2:2181'")
    hosts = zookeeper.split("/", 1)[0]  # an optional chroot follows the hosts
    try:
        for entry in hosts.split(","):
            host = entry.strip()
            host = host.rsplit(":", 1)[0] if ":" in host else host  # the port goes
            check_host(host.strip("[]"))
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"invalid ZooKeeper connect string {zookeeper[:200]!r}: give host:port pairs like "
            "'zk1:2181,zk2:2181'"
        ) from None


def _zookeeper_address(zookeeper: str | None, wh: Warehouse) -> str:
    """The connect string to use: the one given, ``LEASEKIT_ZOOKEEPER``, or the embedded server
    of the (local) warehouse, started here if it is not running."""
    zookeeper = zookeeper or os.environ.get("LEASEKIT_ZOOKEEPER") or None
    if zookeeper is not None:
        _check_connect_string(zookeeper)
        return zookeeper
    if not wh.is_local:
        raise InvalidArgumentError(
            "the embedded ZooKeeper needs a local warehouse; pass zookeeper='host:2181' for "
            f"the warehouse {wh.location}"
        )
    from .. import embedded

    return embedded.ensure_running(os.path.join(wh.location, "_zookeeper"))
