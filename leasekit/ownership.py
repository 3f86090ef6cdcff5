"""Ownership of a warehouse namespace directory (docs/security.md, "Ownership"): a marker file in
``<warehouse>/<namespace>/`` names the identity of the namespace (in ZooKeeper) that owns it."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from .errors import IllegalStateError, WarehouseOwnedError
from .warehouse import Warehouse

__all__ = ["MARKER", "claim", "check", "owner_identity"]

MARKER = "_leasekit_owner.json"
"""The owner marker's name in the namespace directory, beside ``tables/`` (which retention
lists for orphans), never inside it."""

log = logging.getLogger("leasekit.connection")


def marker_path(namespace: str) -> str:
    """Warehouse-relative path of the owner marker of ``namespace``'s directory."""
    return f"{namespace}/{MARKER}"


def _owner(warehouse: Warehouse, namespace: str) -> dict[str, str] | None:
    """The marker's content, None if there is none; a marker that cannot be read as one
    refuses like another owner's."""
    rel = marker_path(namespace)
    data = warehouse.read_small(rel)
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
        if not isinstance(value, dict) or not isinstance(value.get("identity"), str):
            raise ValueError("no identity")
        return {str(k): str(v) for k, v in value.items()}
    except (ValueError, UnicodeDecodeError):
        raise WarehouseOwnedError(
            f"the owner marker {warehouse.uri(rel)} is unreadable, so the owner of "
            f"{warehouse.uri(namespace)} is unknown; nothing is written or deleted there. If "
            "no other leasekit metadata store uses that directory, remove the marker file"
        ) from None


def owner_identity(warehouse: Warehouse, namespace: str) -> str | None:
    """The identity the owner marker of ``namespace``'s directory names; None without one.

    Raises:
        WarehouseOwnedError: the marker cannot be read.
    """
    owner = _owner(warehouse, namespace)
    return None if owner is None else owner["identity"]


def _refuse(warehouse: Warehouse, namespace: str, owner: dict[str, str]) -> WarehouseOwnedError:
    rel = marker_path(namespace)
    return WarehouseOwnedError(
        f"the warehouse directory {warehouse.uri(namespace)} belongs to another metadata store: "
        f"namespace {owner.get('namespace', '?')!r} on ZooKeeper {owner.get('zookeeper', '?')} "
        f"(identity {owner['identity']}, since {owner.get('claimed_at', '?')}). Connect to that "
        "ZooKeeper (LEASEKIT_ZOOKEEPER or zookeeper=...), or use another warehouse or namespace. "
        "Its files are left alone: if that store is truly gone (its namespace dropped or its "
        f"ZooKeeper wiped), remove {warehouse.uri(rel)} to let this one adopt them"
    )


def check(warehouse: Warehouse, namespace: str, identity: str | None) -> None:
    """Raise ``WarehouseOwnedError`` if the marker names another identity than ``identity``."""
    if identity is None:
        return
    owner = _owner(warehouse, namespace)
    if owner is not None and owner["identity"] != identity:
        raise _refuse(warehouse, namespace, owner)


def claim(
    warehouse: Warehouse, namespace: str, identity: str | None, zookeeper: str, *, writer: bool
) -> None:
    """Write the marker naming ``identity`` where there is none (adopting a directory made
    before markers), then check it names ``identity``.

    A reader (``writer`` False) that cannot write the marker goes on without one.

    Raises:
        WarehouseOwnedError: the marker names another identity, or cannot be read.
        IllegalStateError: a writer cannot write the marker.
    """
    if identity is None:
        return
    if _owner(warehouse, namespace) is None:
        marker = {
            "identity": identity,
            "zookeeper": zookeeper,
            "namespace": namespace,
            "claimed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        data = (json.dumps(marker, indent=1) + "\n").encode()
        try:
            warehouse.create_exclusive(marker_path(namespace), data)
        except IllegalStateError:
            if writer:
                raise
            log.info("cannot write the owner marker of %s; reading only", warehouse.uri(namespace))
            return
    check(warehouse, namespace, identity)
