"""The context every service takes: the ZooKeeper store and paths of one namespace, the
warehouse, the clock that decides expiry, and the namespace settings. It imports no service."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

from . import ownership
from .errors import CorruptMetadataError, IllegalStateError, PermissionDeniedError
from .properties import NAMESPACE_SETTINGS, effective
from .warehouse import Warehouse
from .zk import ConflictReason, Create, Node, ServerClock, Stat, TxnConflict, ZkStore
from .zk.formats import AccessRecord, IdentityRecord, SettingsRecord
from .zk.paths import Paths

__all__ = ["Context"]

log = logging.getLogger("leasekit.connection")


def _identity(ms: int) -> int:
    return ms


class Context:
    """One namespace of a ZooKeeper ensemble plus a warehouse of data files."""

    def __init__(
        self,
        store: ZkStore,
        warehouse: Warehouse,
        namespace: str,
        *,
        clock: Callable[[int], int] | None = None,
    ) -> None:
        self.store = store
        self.warehouse = warehouse
        self.namespace = namespace
        self.paths = Paths(namespace)
        self.tables_dir = f"{namespace}/tables"
        """Warehouse-relative directory of this namespace's table files: namespaces sharing a
        warehouse keep apart, so one's retention never takes another's files for orphans."""
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        """host:pid, recorded on leases this client acquires or renews."""
        self.clock: Callable[[int], int] = clock or _identity
        """Maps ZooKeeper time (ms) to the time used for expiry decisions; tests inject a shift."""
        self._settings_cache: dict[str, Any] = {}
        self._settings_version = -1
        """The znode version of ``_settings_cache``: a late watch delivery never replaces a
        newer value."""
        self._settings_lock = threading.Lock()
        self._settings_warned: int | None = None
        self.server_clock = ServerClock(lambda: store.server_time_ms(self.paths.clock))
        """The ZooKeeper clock, estimated between writes that read it."""
        self.identity: str | None = None
        """The namespace's identity (``ensure_namespace`` reads it), which the owner marker of
        its warehouse directory names; None for a reader of a namespace that has none yet."""
        self.write_refused: str | None = None
        """Why this connection may not write the namespace (ZooKeeper's ACLs refuse its
        credentials), as ``ensure_namespace`` found; None if it may."""

    # -- clock ------------------------------------------------------------------------------

    def server_time_ms(self) -> int:
        """The ZooKeeper clock, epoch milliseconds: an estimate from a reading at most a few
        seconds old (no ZooKeeper write per call), for display."""
        return self.server_clock.now_ms()

    def now_ms(self) -> int:
        """The time used for expiry and age decisions: the ZooKeeper clock read now (one write),
        through ``self.clock``."""
        return self.clock(self.server_clock.fresh_ms())

    def read_with_clock(self, paths: list[str]) -> tuple[int, list[Node | None]]:
        """The ZooKeeper clock (epoch ms, read first) and the znodes at ``paths``, in one
        pipelined batch; the reading also refreshes ``server_clock``."""
        now, nodes = self.store.read_with_clock(self.paths.clock, paths)
        self.server_clock.observe(now)
        return now, nodes

    # -- namespace and settings -------------------------------------------------------------

    def ensure_namespace(self) -> None:
        """Create the namespace's fixed znodes where missing; with ``auth``, close a namespace
        created without it (docs/security.md); read (or create) the namespace's identity.

        Raises:
            PermissionDeniedError: the namespace is open and cannot be closed, or a fixed znode
                is missing and these credentials may not create it.
        """
        for path in self.paths.skeleton():
            if self.store.exists(path) is None:
                self.store.ensure_path(path)
        user = self.store.access.user or ""
        refused = self.store.protect(
            self.paths.root,
            seal=self.paths.access,
            seal_data=AccessRecord(user).encode(),
            clock=self.paths.clock,
        )
        self.write_refused = refused or self.store.write_refusal(self.paths.root)
        if self.write_refused:
            log.info("read-only connection: %s", self.write_refused)
        self.identity = self._identity()

    def _identity(self) -> str | None:
        """The namespace's identity, created once (atomically) by the first client that may."""
        path = self.paths.identity
        while True:
            node = self.store.get(path)
            if node is not None:
                return IdentityRecord.decode(node.data, path).identity
            try:
                self.store.commit([Create(path, IdentityRecord(uuid.uuid4().hex).encode())])
            except TxnConflict as exc:
                if exc.reason != ConflictReason.EXISTS:
                    raise
            except PermissionDeniedError:
                return None  # a reader of a namespace created before identities: nothing to own

    def claim_warehouse(self) -> None:
        """Record in the warehouse namespace directory that this namespace owns it, or check
        that it does (docs/security.md, "Ownership").

        Raises:
            WarehouseOwnedError: another metadata store (or namespace instance) owns it.
            IllegalStateError: the marker cannot be written (for a connection that may write).
        """
        ownership.claim(
            self.warehouse,
            self.namespace,
            self.identity,
            self.store.hosts,
            writer=self.write_refused is None,
        )

    def ensure_writable(self, what: str) -> None:
        """Refuse, before anything is changed, a write this connection may not make: ZooKeeper's
        ACLs refuse its credentials, or another store owns the warehouse directory.

        Raises:
            PermissionDeniedError: the namespace's ACL refuses this connection's writes.
            WarehouseOwnedError: another metadata store owns the warehouse directory.
        """
        refused = self.store.write_refusal(self.paths.root)
        if refused:
            raise PermissionDeniedError(f"{what}: {refused}")
        ownership.check(self.warehouse, self.namespace, self.identity)

    def _settings_corrupt(self, exc: CorruptMetadataError, version: int) -> CorruptMetadataError:
        """``exc`` restated with how to repair it; logged once per znode version."""
        path = self.paths.settings
        error = CorruptMetadataError(
            f"namespace settings at {path} are corrupt ({exc}); retention refuses to run until "
            "they are repaired with `leasekit settings reset` or "
            "conn.update_settings(mapping, replace=True)",
            path,
        )
        # the watch thread and a caller may both get here for one version: whoever finds it
        # marked as warned under the lock knows the warning is out
        with self._settings_lock:
            if self._settings_warned != version:
                log.warning("%s", error)
                self._settings_warned = version
        return error

    def _remember_settings(self, values: dict[str, Any], version: int) -> None:
        """Keep ``values`` as the cached settings unless a newer version was seen already."""
        with self._settings_lock:
            if version >= self._settings_version:
                self._settings_cache, self._settings_version = values, version

    def watch_settings(self) -> None:
        """Read the settings now and keep ``cached_settings`` current from a ZooKeeper watch
        on the settings znode (delivered on the store's watch thread).

        Corrupt stored settings do not stop the connection: they are logged as a warning
        naming the znode and the repair, and ``settings()`` and retention refuse until then.
        """

        def update(data: bytes | None, stat: Stat | None) -> None:
            if stat is None:  # deleted: nothing stored, so the defaults apply
                with self._settings_lock:
                    self._settings_cache, self._settings_version = {}, -1
                return
            try:
                self._remember_settings(self._decode_settings(data or b""), stat.version)
            except CorruptMetadataError as exc:
                self._settings_corrupt(exc, stat.version)

        self.store.watch(self.paths.settings, update)
        try:
            self.stored_settings()  # current now, before the watch's first delivery
        except CorruptMetadataError:
            pass  # logged by stored_settings

    def _decode_settings(self, data: bytes) -> dict[str, Any]:
        """The stored settings in ``data``; ``CorruptMetadataError`` for garbage or a value
        that is not a valid setting."""
        stored = SettingsRecord.decode(data, self.paths.settings).values
        effective(stored, NAMESPACE_SETTINGS, path=self.paths.settings)  # every value loads
        return stored

    def cached_settings(self) -> dict[str, Any]:
        """Namespace settings as last seen through the ZooKeeper watch (no I/O); while the
        stored value is corrupt, the last readable one (defaults if none)."""
        return effective(self._settings_cache, NAMESPACE_SETTINGS)

    def stored_settings(self) -> tuple[dict[str, Any], int]:
        """The settings stored now (set keys only) and the znode version, for compare-and-set.

        Raises:
            CorruptMetadataError: the stored value cannot be read (names the znode and the
                repair).
        """
        node = self.store.get(self.paths.settings)
        if node is None:
            self.ensure_namespace()
            return {}, 0
        try:
            stored = self._decode_settings(node.data)
        except CorruptMetadataError as exc:
            raise self._settings_corrupt(exc, node.stat.version) from None
        self._remember_settings(stored, node.stat.version)
        return stored, node.stat.version

    def update_settings(self, changes: dict[str, Any], *, replace: bool) -> dict[str, Any]:
        """Store ``changes`` over the stored settings (all of them with ``replace``) by
        compare-and-set, retried on a concurrent change; returns the new effective settings.

        Raises:
            CorruptMetadataError: the stored settings cannot be read (without ``replace``).
            IllegalStateError: the write failed for another reason than a concurrent change.
        """
        path = self.paths.settings
        while True:
            if replace:
                node = self.store.get(path)
                if node is None:
                    self.ensure_namespace()
                    continue
                version, merged = node.stat.version, changes
            else:
                stored, version = self.stored_settings()
                merged = {**stored, **changes}
                if merged == stored:
                    return effective(stored, NAMESPACE_SETTINGS)
            try:
                stat = self.store.set(path, SettingsRecord(merged).encode(), version)
            except TxnConflict as exc:
                if exc.reason not in (
                    ConflictReason.VERSION,
                    ConflictReason.NONODE,
                ):  # nonode: recreated on re-read
                    raise IllegalStateError(f"cannot update settings at {path}: {exc}") from None
                continue
            self._remember_settings(merged, stat.version)
            return effective(merged, NAMESPACE_SETTINGS)

    def settings(self) -> dict[str, Any]:
        """Namespace-wide settings (defaults filled in; durations as ``timedelta``).

        Raises:
            CorruptMetadataError: the stored settings cannot be read; the message names the
                znode and how to repair it.
        """
        return effective(self.stored_settings()[0], NAMESPACE_SETTINGS)
