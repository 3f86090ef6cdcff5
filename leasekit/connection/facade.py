"""The ``Connection`` users hold: its lifecycle, namespace settings and tables here, its leases,
consumer groups and retention in the sibling modules it combines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import pyarrow as pa

from ..context import Context
from ..memory import collector_paused
from ..properties import NAMESPACE_SETTINGS, parse_properties
from ..structs import RetentionPlan, RetentionReport
from ..table import Table, drop_table
from ..tables import catalog as _tables
from ..validate import check_bool
from ..zk import to_datetime
from .groups import GroupMethods
from .leases import LeaseMethods
from .monitoring import MonitorMethods
from .watching import ChangeWatcher

__all__ = ["Connection", "context_of"]


def context_of(conn: Connection) -> Context:
    """The ``Context`` behind ``conn``, for the library's own entry points (CLI, janitor) and
    ``leasekit.testing``; users call the connection's methods instead."""
    return conn._context


class Connection(LeaseMethods, GroupMethods, MonitorMethods):
    """A session on one namespace of a ZooKeeper ensemble plus a warehouse of data files: the
    facade users hold. It has a ``Context`` (store, paths, warehouse, clock, settings) that the
    services below it take; ``leasekit.testing.context(conn)`` gives it to tests. Open one with
    ``leasekit.connect()``."""

    def __init__(self, context: Context) -> None:
        """Wrap an open ``context`` (internal: users call ``leasekit.connect()``)."""
        self._context = context

    @property
    def namespace(self) -> str:
        """The namespace: its root znode and its directory in the warehouse."""
        return self._context.namespace

    @property
    def zookeeper(self) -> str:
        """The ZooKeeper connect string in use."""
        return self._context.store.hosts

    @property
    def warehouse(self) -> str:
        """The warehouse location: a local path or a pyarrow file-system URI."""
        return self._context.warehouse.location

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """End the ZooKeeper session; the connection cannot be used afterwards.

        Returns:
            None.
        """
        self._context.store.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Connection(zookeeper={self.zookeeper!r}, warehouse={self.warehouse!r}, "
            f"namespace={self.namespace!r})"
        )

    # -- clock and settings ---------------------------------------------------------------

    def server_time(self) -> datetime:
        """The ZooKeeper clock.

        Returns:
            A timezone-aware UTC datetime, estimated from a reading at most a few seconds old.

        Raises:
            ZooKeeperUnavailableError: ZooKeeper cannot be reached.
        """
        return to_datetime(self._context.server_time_ms())

    def server_time_estimate(self) -> int | None:
        """The ZooKeeper clock estimated from the last reading, without I/O: the base of a
        view's countdowns between refreshes.

        Returns:
            Epoch milliseconds, or None before the connection first read the clock.
        """
        return self._context.server_clock.estimate_ms()

    def change_watcher(
        self,
        *,
        follow: Literal["all", "positions", "retention"] = "all",
        name: str = "leasekit-live",
    ) -> ChangeWatcher:
        """What a live view needs to follow changes of what it read (``leasekit.live.LiveView``
        is built on it): reads that note the znodes they touch, watches on those znodes' change
        markers, the session's state, and a thread of its own for the view's calls. No I/O.

        Arguments:
            follow: which changes of what was read matter: ``"all"``; ``"positions"``, all but
                the log's segment records; ``"retention"``, the children of every znode listed
                and the data of tables and leases.
            name: the name of its thread.

        Returns:
            The ``ChangeWatcher``; ``close()`` ends its thread.

        Raises:
            InvalidArgumentError: ``follow`` is not one of those values.
        """
        return ChangeWatcher(self._context, follow=follow, name=name)

    def settings(self) -> dict[str, Any]:
        """The namespace-wide settings every client of the namespace applies.

        Returns:
            Every setting key with its value, defaults filled in (durations as ``timedelta``).

        Raises:
            CorruptMetadataError: the stored settings cannot be read; the message names the
                znode and how to repair it (``update_settings(mapping, replace=True)``).
        """
        return self._context.settings()

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
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        check_bool(replace, "replace")
        changes = parse_properties(mapping, NAMESPACE_SETTINGS, what="setting")
        return self._context.update_settings(changes, replace=replace)

    # -- tables ---------------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: str | pa.Schema,
        primary_key: str | Sequence[str],
        buckets: int = 4,
        properties: Mapping[str, Any] | None = None,
    ) -> Table:
        """Create a primary-key table.

        Arguments:
            name: the table's name, unique in the namespace.
            schema: a DDL string ("id BIGINT, amount DOUBLE") or a ``pyarrow.Schema``.
            primary_key: the key column, or several.
            buckets: how many buckets the key hashes into.
            properties: table properties (docs/configuration.md); the rest keep their defaults.

        Returns:
            The new ``Table``.

        Raises:
            TableExistsError: the name is taken.
            InvalidArgumentError: a bad name, schema, key, bucket count or property.
            InvalidTypeError: an argument of the wrong type.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        info = _tables.create_table(self._context, name, schema, primary_key, buckets, properties)
        return Table(self, info)

    def table(self, name: str | Table) -> Table:
        """The named table.

        Arguments:
            name: a table name, or a ``Table`` (looked up again by its name).

        Returns:
            The ``Table`` handle.

        Raises:
            TableNotFoundError: no such table.
            CorruptMetadataError: its stored metadata cannot be read.
        """
        return Table(self, _tables.load_table(self._context, name))

    def tables(self) -> list[str]:
        """The tables of the namespace.

        Returns:
            Every table's name, sorted.
        """
        return _tables.list_tables(self._context)  # leasekit's internal tables left out

    def drop_table(self, name: str | Table, *, force: bool = False) -> None:
        """Drop a table, its metadata first and its files after.

        Arguments:
            name: the table's name or ``Table``.
            force: drop it even while live leases pin it (their pins of it go too).

        Returns:
            None.

        Raises:
            TableNotFoundError: no such table.
            IllegalStateError: live leases pin it and ``force`` is False (the message names
                them).
            InvalidTypeError: ``force`` is not a bool.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        check_bool(force, "force")
        drop_table(self._context, name, force=force)

    # -- retention ------------------------------------------------------------------------

    @collector_paused()
    def retention_plan(self, table: str | Table | None = None) -> RetentionPlan:
        """What retention would keep and delete now, with reasons; changes nothing.

        Arguments:
            table: one table (name or ``Table``); ``None`` for every table. Expired leases are
                namespace-wide and always covered.

        Returns:
            The ``RetentionPlan``: one item per snapshot, segment, orphan file and lease, with
            its action and reason, and the bytes the deletions would free.

        Raises:
            TableNotFoundError: ``table`` does not exist.
            CorruptMetadataError: the namespace settings or a table's metadata cannot be read.
        """
        from ..retention.apply import retention_plan

        return retention_plan(self._context, table)

    def run_retention(
        self, table: str | Table | None = None, *, dry_run: bool = False
    ) -> RetentionReport:
        """Expire leases, then delete unpinned old snapshots, old log segments and orphan files.

        Arguments:
            table: one table (name or ``Table``); ``None`` for every table.
            dry_run: report what would be deleted and delete nothing.

        Returns:
            The ``RetentionReport``: what was deleted and freed, and an error for each item
            kept against the plan.

        Raises:
            TableNotFoundError: ``table`` does not exist.
            InvalidTypeError: ``dry_run`` is not a bool.
            CorruptMetadataError: the namespace settings or a table's metadata cannot be read.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            WarehouseOwnedError: another metadata store owns the warehouse directory.
        """
        from ..retention.apply import run_retention

        check_bool(dry_run, "dry_run")
        return run_retention(self._context, table, dry_run=dry_run)
