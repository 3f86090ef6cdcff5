"""``connect()`` and the ``Connection``: one ZooKeeper session, one warehouse, one namespace.

With no ZooKeeper address the embedded server of the (local) warehouse is started or reused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .consumers import group_admin
from .consumers.consumer import Consumer
from .context import Context
from .durations import parse_duration
from .errors import IllegalStateError, InvalidArgumentError, InvalidDurationError, InvalidTypeError
from .leases import acquire as lease_acquire
from .leases import upkeep as lease_upkeep
from .properties import NAMESPACE_SETTINGS, effective, parse_properties
from .structs import (
    AcquireResult,
    GroupStatus,
    LeaseInfo,
    MemberInfo,
    RetentionPlan,
    RetentionReport,
    TableBucket,
)
from .tables import catalog as _tables
from .validate import check_id, check_namespace
from .warehouse import Warehouse
from .zk import ConflictReason, TxnConflict, ZkStore, to_datetime
from .zk.formats import SettingsRecord

if TYPE_CHECKING:
    from .leases.lease import KvSnapshotLease

__all__ = ["connect", "Connection", "DEFAULT_WAREHOUSE"]

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
            created without ``auth`` is closed to writers without these credentials (§6.1).
            Without ``auth`` a connection to a protected namespace reads but cannot write.
        timeout: how long to wait for ZooKeeper (a duration).
        clock: maps the ZooKeeper clock (epoch milliseconds) to the time this connection uses
            for expiry and age decisions; ``None`` uses the ZooKeeper clock as it is. Tests
            pass one to move time (``leasekit.testing.ShiftedClock``), as kazoo's lease recipe
            takes ``utcnow``.

    Returns:
        The open ``Connection``; its warehouse namespace directory records this namespace as
        its owner (DESIGN §9 "Ownership").

    Raises:
        InvalidArgumentError: a bad argument.
        ZooKeeperUnavailableError: no ZooKeeper answered within ``timeout``.
        PermissionDeniedError: the credentials were rejected, or with ``auth`` the namespace is
            open and cannot be closed.
        WarehouseOwnedError: the warehouse namespace directory belongs to another metadata
            store (another ZooKeeper, or a namespace dropped and created again).
    """
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
    if clock is not None and not callable(clock):
        store.close()
        raise InvalidTypeError("clock must be a callable from epoch ms to epoch ms")
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


class Connection:
    """A session on one namespace of a ZooKeeper ensemble plus a warehouse of data files: the
    facade users hold. It has a ``Context`` (store, paths, warehouse, clock, settings) that the
    services below it take; ``leasekit.testing.context(conn)`` gives it to tests."""

    def __init__(self, context: Context) -> None:
        self._context = context

    def __getattr__(self, name: str) -> Any:
        # Transitional: internals reached through the connection still resolve on its context
        # while callers move to leasekit.testing.context(conn).
        if name.startswith("__") or name == "_context":
            raise AttributeError(name)
        return getattr(self._context, name)

    @property
    def clock(self) -> Callable[[int], int]:
        return self._context.clock

    @clock.setter
    def clock(self, value: Callable[[int], int]) -> None:
        self._context.clock = value

    @property
    def namespace(self) -> str:
        """The namespace: its root znode and its directory in the warehouse."""
        return self._context.namespace

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def zookeeper(self) -> str:
        """The ZooKeeper connect string in use."""
        return self._context.store.hosts

    def close(self) -> None:
        """End the ZooKeeper session."""
        self._context.store.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Connection(zookeeper={self.zookeeper!r}, warehouse={self._context.warehouse.location!r}, namespace={self.namespace!r})"

    # -- clock and settings ---------------------------------------------------------------

    def server_time(self) -> datetime:
        """The ZooKeeper clock as a UTC datetime."""
        return to_datetime(self._context.server_time_ms())

    def update_settings(
        self, mapping: Mapping[str, Any], *, replace: bool = False
    ) -> dict[str, Any]:
        """Change namespace-wide settings for every client (a compare-and-set on the znode).

        Arguments:
            mapping: setting keys to values (durations as in ``parse_duration``).
            replace: store exactly ``mapping``: every key it leaves out returns to its default.
                The old value is not read, so this repairs corrupt stored settings
                (``update_settings({}, replace=True)`` removes every stored setting).

        Returns:
            The new settings, defaults filled in.

        Raises:
            InvalidArgumentError: an unknown key or a bad value; nothing is written.
            InvalidTypeError: ``replace`` is not a bool.
            CorruptMetadataError: the stored settings cannot be read (without ``replace``).
        """
        if not isinstance(replace, bool):
            raise InvalidTypeError("replace must be a bool")
        changes = parse_properties(mapping, NAMESPACE_SETTINGS, what="setting")
        path = self._context.paths.settings
        while True:
            if replace:
                node = self._context.store.get(path)
                if node is None:
                    self._context.ensure_namespace()
                    continue
                version, merged = node.stat.version, changes
            else:
                stored, version = self._context.stored_settings()
                merged = {**stored, **changes}
                if merged == stored:
                    return effective(stored, NAMESPACE_SETTINGS)
            try:
                stat = self._context.store.set(path, SettingsRecord(merged).encode(), version)
            except TxnConflict as exc:
                if exc.reason not in (
                    ConflictReason.VERSION,
                    ConflictReason.NONODE,
                ):  # nonode: deleted meanwhile, recreated on re-read
                    raise IllegalStateError(f"cannot update settings at {path}: {exc}") from None
                continue
            self._context._remember_settings(merged, stat.version)
            return effective(merged, NAMESPACE_SETTINGS)

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
        return _tables.create_table(self._context, name, schema, primary_key, buckets, properties)

    def table(self, name: str | _tables.Table) -> _tables.Table:
        """The named table; ``TableNotFoundError`` if it does not exist."""
        return _tables.load_table(self._context, name)

    def tables(self) -> list[str]:
        """Names of every table, sorted."""
        return _tables.list_tables(self._context)

    def drop_table(self, name: str | _tables.Table, *, force: bool = False) -> None:
        """Drop a table, its metadata first and its files after."""
        if not isinstance(force, bool):
            raise InvalidTypeError("force must be a bool")
        _tables.drop_table(self._context, name, force=force)

    # -- KV snapshot leases ------------------------------------------------------------------

    def lease(
        self,
        lease_id: str | None = None,
        duration: Any = "1h",
        *,
        keepalive: bool = False,
        drop_on_exit: bool = True,
    ) -> KvSnapshotLease:
        """A lease handle; validates its id and duration now, does no I/O until the first call."""
        from .leases.lease import KvSnapshotLease

        return KvSnapshotLease(
            self._context, lease_id, duration, keepalive=keepalive, drop_on_exit=drop_on_exit
        )

    def acquire_kv_snapshot_lease(
        self, lease_id: str, snapshot_ids: Mapping[TableBucket, int], lease_duration: Any
    ) -> AcquireResult:
        """Pin snapshots for the lease, creating it on first use (Fluss Admin API shape)."""
        check_id(lease_id)
        duration_ms = lease_acquire.lease_duration_ms(self._context, lease_duration)
        return lease_acquire.acquire(
            self._context,
            lease_id,
            lease_acquire.check_snapshot_ids(self._context, snapshot_ids),
            duration_ms,
        )

    def renew_kv_snapshot_lease(self, lease_id: str, lease_duration: Any) -> datetime:
        """Extend the lease to at least now + lease_duration; returns the new expiry."""
        check_id(lease_id)
        return to_datetime(
            lease_acquire.renew(
                self._context,
                lease_id,
                lease_acquire.lease_duration_ms(self._context, lease_duration),
            )
        )

    def release_kv_snapshot_lease(self, lease_id: str, buckets: Iterable[TableBucket]) -> None:
        """Unpin these buckets from the lease (idempotent)."""
        from .leases.lease import group_buckets

        check_id(lease_id)
        lease_upkeep.release(self._context, lease_id, group_buckets(self._context, buckets))

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        """Remove the lease and all its pins; False if it does not exist."""
        check_id(lease_id)
        return lease_upkeep.drop(self._context, lease_id)

    def leases(self) -> list[LeaseInfo]:
        """Every lease of the namespace, by id (expired ones too, until reclaimed)."""
        return lease_upkeep.list_leases(self._context)

    def expire_leases(self) -> list[str]:
        """Reclaim leases past expires_at + lease.expiry-grace now; returns their ids."""
        return lease_upkeep.expire(self._context)

    # -- retention ------------------------------------------------------------------------

    def consumer(
        self,
        *tables: str | _tables.Table,
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval: Any = "5s",
        session_timeout: Any = "10s",
        assignor: str = "sticky",
        listener: Any = None,
        max_poll_records: int = 10_000,
        max_poll_interval: Any = "5m",
    ) -> Consumer:
        """A consumer of ``tables`` (every bucket); with ``group_id`` it commits for that group."""
        return Consumer(
            self._context,
            [_tables.load_table(self._context, t) for t in tables],
            group_id=group_id,
            auto_offset_reset=auto_offset_reset,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval=auto_commit_interval,
            session_timeout=session_timeout,
            assignor=assignor,
            listener=listener,
            max_poll_records=max_poll_records,
            max_poll_interval=max_poll_interval,
        )

    def consumer_groups(self) -> list[str]:
        """Groups with stored offsets or live members, sorted."""
        return group_admin.consumer_groups(self._context)

    def describe_group(self, group_id: str) -> Any:
        """One row per bucket: committed offset, log end, lag and time lag now, status (DESIGN §6.6)."""
        return group_admin.describe_group(self._context, group_id)

    def group_members(self, group_id: str) -> list[MemberInfo]:
        """The group's live members and the buckets each owns."""
        return group_admin.group_members(self._context, group_id)

    def group_status(
        self, group_id: str, *, stop_after: Any = "60s", stall_after: Any = "60s"
    ) -> GroupStatus:
        """Lag health of the group and of each committed bucket (DESIGN §6.6)."""
        return group_admin.group_status(
            self._context, group_id, stop_after=stop_after, stall_after=stall_after
        )

    def reset_offsets(
        self,
        group_id: str,
        *,
        to: Any = None,
        shift_by: int | None = None,
        tables: Iterable[Any] | None = None,
        buckets: Iterable[TableBucket] | None = None,
        dry_run: bool = True,
    ) -> Any:
        """The reset plan as a DataFrame; carried out only with ``dry_run=False`` (C13)."""
        return group_admin.reset_offsets(
            self._context,
            group_id,
            to=to,
            shift_by=shift_by,
            tables=tables,
            buckets=buckets,
            dry_run=dry_run,
        )

    def delete_group(self, group_id: str) -> bool:
        """Delete a group and its offsets (refused while it has live members)."""
        return group_admin.delete_group(self._context, group_id)

    def delete_offsets(self, group_id: str, buckets: Iterable[TableBucket]) -> int:
        """Delete the group's committed offsets of ``buckets``."""
        return group_admin.delete_offsets(self._context, group_id, buckets)

    def retention_plan(self, table: str | _tables.Table | None = None) -> RetentionPlan:
        """What retention would keep and delete, with reasons (one table or all); changes nothing."""
        from .retention.apply import retention_plan

        return retention_plan(self._context, table)

    def run_retention(
        self, table: str | _tables.Table | None = None, *, dry_run: bool = False
    ) -> RetentionReport:
        """Expire leases, then delete unpinned old snapshots, old log segments and orphan files."""
        from .retention.apply import run_retention

        if not isinstance(dry_run, bool):
            raise InvalidTypeError("dry_run must be a bool")
        return run_retention(self._context, table, dry_run=dry_run)
