"""``connect()`` and the ``Connection``: one ZooKeeper session, one warehouse, one namespace.

With no ZooKeeper address the embedded server of the (local) warehouse is started or reused.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from . import tables as _tables
from .durations import check_namespace, parse_duration
from .errors import InvalidArgumentError, InvalidDurationError, InvalidTypeError
from .properties import NAMESPACE_SETTINGS, effective, parse_properties
from .warehouse import Warehouse
from .zk import TxnConflict, ZkStore, decode, encode, to_datetime
from .zkpaths import Paths

__all__ = ["connect", "Connection", "DEFAULT_WAREHOUSE"]

DEFAULT_WAREHOUSE = "./leasekit-warehouse"


def connect(
    zookeeper: str | None = None,
    warehouse: str | os.PathLike[str] | None = None,
    *,
    namespace: str = "leasekit",
    auth: tuple[str, str] | None = None,
    timeout: Any = "10s",
) -> Connection:
    """Open a connection; ``zookeeper=None`` uses ``LEASEKIT_ZOOKEEPER`` or the embedded server."""
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
    if zookeeper is not None and (not isinstance(zookeeper, str) or not zookeeper.strip()):
        raise InvalidArgumentError("zookeeper must be a connect string like 'zk1:2181,zk2:2181'")
    zookeeper = zookeeper or os.environ.get("LEASEKIT_ZOOKEEPER") or None
    wh = Warehouse(warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE)
    wh.open()
    if zookeeper is None:
        if not wh.is_local:
            raise InvalidArgumentError(
                "the embedded ZooKeeper needs a local warehouse; pass zookeeper='host:2181' for "
                f"the warehouse {wh.location}"
            )
        from . import embedded

        zookeeper = embedded.ensure_running(os.path.join(wh.location, "_zookeeper"))
    store = ZkStore(zookeeper, timeout=seconds, auth=auth)
    store.open()
    conn = Connection(store, wh, namespace)
    try:
        conn._ensure_namespace()
    except BaseException:
        conn.close()
        raise
    return conn


class Connection:
    """A session on one namespace of a ZooKeeper ensemble plus a warehouse of data files."""

    def __init__(self, store: ZkStore, warehouse: Warehouse, namespace: str) -> None:
        self.store = store
        self.warehouse = warehouse
        self.namespace = namespace
        self.paths = Paths(namespace)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"

    def _ensure_namespace(self) -> None:
        for path in self.paths.skeleton():
            if self.store.exists(path) is None:
                self.store.ensure_path(path)

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def zookeeper(self) -> str:
        """The ZooKeeper connect string in use."""
        return self.store.hosts

    def close(self) -> None:
        """End the ZooKeeper session."""
        self.store.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Connection(zookeeper={self.zookeeper!r}, warehouse={self.warehouse.location!r}, namespace={self.namespace!r})"

    # -- clock and settings ---------------------------------------------------------------

    def server_time_ms(self) -> int:
        """The ZooKeeper clock, epoch milliseconds."""
        return self.store.server_time_ms(self.paths.clock)

    def server_time(self) -> datetime:
        """The ZooKeeper clock as a UTC datetime."""
        return to_datetime(self.server_time_ms())

    def _stored_settings(self) -> tuple[dict[str, Any], int]:
        node = self.store.get(self.paths.settings)
        if node is None:
            self._ensure_namespace()
            return {}, 0
        return _decode_settings(node.data, self.paths.settings), node.stat.version

    def settings(self) -> dict[str, Any]:
        """Namespace-wide settings (defaults filled in; durations as ``timedelta``)."""
        return effective(self._stored_settings()[0], NAMESPACE_SETTINGS)

    def update_settings(self, mapping: Mapping[str, Any]) -> dict[str, Any]:
        """Change namespace-wide settings for every client; returns the new settings."""
        changes = parse_properties(mapping, NAMESPACE_SETTINGS, what="settings")
        while True:
            stored, version = self._stored_settings()
            merged = {**stored, **changes}
            if merged == stored:
                return effective(stored, NAMESPACE_SETTINGS)
            try:
                self.store.set(self.paths.settings, encode({"values": merged}), version)
                return effective(merged, NAMESPACE_SETTINGS)
            except TxnConflict as exc:
                if exc.reason != "version":
                    raise

    # -- tables ---------------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: str | pa.Schema,
        primary_key: str | Sequence[str],
        buckets: int = 4,
        properties: Mapping[str, Any] | None = None,
    ) -> _tables.Table:
        """Create a primary-key table; ``TableExistsError`` if the name is taken."""
        return _tables.create_table(self, name, schema, primary_key, buckets, properties)

    def table(self, name: str | _tables.Table) -> _tables.Table:
        """The named table; ``TableNotFoundError`` if it does not exist."""
        return _tables.load_table(self, name)

    def tables(self) -> list[str]:
        """Names of every table, sorted."""
        return _tables.list_tables(self)

    def drop_table(self, name: str | _tables.Table, *, force: bool = False) -> None:
        """Drop a table, its metadata first and its files after."""
        if not isinstance(force, bool):
            raise InvalidTypeError("force must be a bool")
        _tables.drop_table(self, name, force=force)


def _decode_settings(data: bytes, path: str) -> dict[str, Any]:
    return decode(data, path).get("values", {}) if data else {}
