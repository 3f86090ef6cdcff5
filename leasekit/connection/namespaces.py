"""``namespaces()``: the namespaces of a ZooKeeper ensemble whose data a warehouse holds, what
``leasekit exporter --all-namespaces`` serves; it opens no namespace and writes nothing."""

from __future__ import annotations

import logging
import os
from typing import Any

from .. import ownership
from ..errors import CorruptMetadataError, WarehouseOwnedError
from ..validate import is_namespace
from ..warehouse import Warehouse
from ..zk import ZkStore
from ..zk.formats import IdentityRecord
from ..zk.paths import Paths
from .open import DEFAULT_WAREHOUSE, _check_arguments, _zookeeper_address

__all__ = ["namespaces"]

log = logging.getLogger("leasekit.connection")


def namespaces(
    zookeeper: str | None = None,
    warehouse: str | os.PathLike[str] | None = None,
    *,
    timeout: Any = "10s",
) -> list[str]:
    """The namespaces of the ensemble that keep their data in ``warehouse``: those whose
    directory there has an owner marker naming the namespace's identity (docs/security.md,
    "Ownership"; every connection claims its directory). A namespace of the ensemble whose data
    lives in another warehouse, or whose identity cannot be read, is left out (logged).

    Arguments:
        zookeeper: a ZooKeeper connect string; None: ``LEASEKIT_ZOOKEEPER`` or the warehouse's
            embedded server (started if it is stopped, as ``connect`` does).
        warehouse: a local path or pyarrow file-system URI (``LEASEKIT_WAREHOUSE``, else
            ``./leasekit-warehouse``).
        timeout: how long to wait for ZooKeeper (a duration).

    Returns:
        The namespace names, sorted.

    Raises:
        InvalidArgumentError: a bad argument.
        ZooKeeperUnavailableError: no ZooKeeper answered within ``timeout``.
        PermissionDeniedError: ZooKeeper refused to list its root to these credentials.
    """
    seconds = _check_arguments(zookeeper, "leasekit", None, timeout, None)
    wh = Warehouse(warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE)
    wh.open()
    store = ZkStore(_zookeeper_address(zookeeper, wh), timeout=seconds)
    store.open()
    try:
        names = [name for name in store.children("/") or [] if is_namespace(name)]
        nodes = store.get_many([Paths(name).identity for name in names])
    finally:
        store.close()
    found = []
    for name, node in zip(names, nodes):
        if node is None:
            continue  # not a leasekit namespace (ZooKeeper's own /zookeeper, say)
        try:
            identity = IdentityRecord.decode(node.data, Paths(name).identity).identity
            owner = ownership.owner_identity(wh, name)
        except (CorruptMetadataError, WarehouseOwnedError) as exc:
            log.warning("namespace %r left out: %s", name, exc)
            continue
        if owner == identity:
            found.append(name)
        elif owner is not None:
            log.warning("namespace %r left out: its directory in %s belongs to another "
                        "metadata store", name, wh.location)  # fmt: skip
    return found
