"""The KV snapshot lease part of the ``Connection`` facade: lease handles and the same
operations in the shape of Fluss's Admin API (docs/concepts.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..leases import acquire as lease_acquire
from ..leases import upkeep as lease_upkeep
from ..memory import collector_paused
from ..structs import AcquireResult, LeaseInfo, TableBucket
from ..validate import check_id
from ..zk import to_datetime

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context
    from ..leases.lease import KvSnapshotLease

__all__ = ["LeaseMethods"]


class LeaseMethods:
    """Lease methods of ``Connection``; they act on its context."""

    _context: Context

    def lease(
        self,
        lease_id: str | None = None,
        duration: Any = "1h",
        *,
        keepalive: bool = False,
        drop_on_exit: bool = True,
    ) -> KvSnapshotLease:
        """A lease handle; its id and duration are checked now, no I/O until the first call.

        Arguments:
            lease_id: the lease's id; ``None`` makes a new unique one.
            duration: how long each acquire or renewal holds the lease (a duration).
            keepalive: renew the lease in the background while it is open.
            drop_on_exit: drop the lease when its ``with`` block ends.

        Returns:
            The ``KvSnapshotLease``.

        Raises:
            InvalidLeaseIdError: a bad ``lease_id``.
            InvalidDurationError: a bad ``duration``, or one over ``lease.max-duration``.
            InvalidTypeError: ``keepalive`` or ``drop_on_exit`` is not a bool.
        """
        from ..leases.lease import KvSnapshotLease

        return KvSnapshotLease(
            self._context, lease_id, duration, keepalive=keepalive, drop_on_exit=drop_on_exit
        )

    def acquire_kv_snapshot_lease(
        self, lease_id: str, snapshot_ids: Mapping[TableBucket, int], lease_duration: Any
    ) -> AcquireResult:
        """Pin snapshots for the lease, creating it on first use (Fluss Admin API shape).

        Arguments:
            lease_id: the lease's id.
            snapshot_ids: the snapshot id to pin for each ``TableBucket``.
            lease_duration: the lease's new validity from now (a duration).

        Returns:
            The ``AcquireResult``: the buckets pinned and those whose snapshot is gone.

        Raises:
            InvalidLeaseIdError: a bad ``lease_id``.
            InvalidDurationError: a bad duration, or one over ``lease.max-duration``.
            InvalidArgumentError, InvalidTypeError: bad ``snapshot_ids``.
            TableNotFoundError: a table does not exist (or was dropped meanwhile).
            BucketNotFoundError: a bucket is not one of its table's.
            LeaseExpiredError: the lease expired or is being dropped.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        return lease_acquire.acquire(self._context, lease_id, snapshot_ids, lease_duration)

    def renew_kv_snapshot_lease(self, lease_id: str, lease_duration: Any) -> datetime:
        """Extend the lease to at least now + ``lease_duration``.

        Arguments:
            lease_id: the lease's id.
            lease_duration: the validity from now (a duration).

        Returns:
            The new expiry, a UTC datetime.

        Raises:
            InvalidLeaseIdError: a bad ``lease_id``.
            InvalidDurationError: a bad duration, or one over ``lease.max-duration``.
            LeaseNotFoundError: no such lease.
            LeaseExpiredError: the lease expired before the renewal.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        return to_datetime(lease_acquire.renew(self._context, lease_id, lease_duration))

    def release_kv_snapshot_lease(self, lease_id: str, buckets: Iterable[TableBucket]) -> None:
        """Unpin these buckets from the lease (idempotent).

        Arguments:
            lease_id: the lease's id.
            buckets: the ``TableBucket`` values to unpin.

        Returns:
            None.

        Raises:
            InvalidLeaseIdError: a bad ``lease_id``.
            InvalidTypeError: ``buckets`` is not an iterable of ``TableBucket``.
            TableNotFoundError: a table does not exist.
            LeaseNotFoundError: no such lease.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        from ..leases.lease import group_buckets

        check_id(lease_id)
        lease_upkeep.release(self._context, lease_id, group_buckets(self._context, buckets))

    def drop_kv_snapshot_lease(self, lease_id: str) -> bool:
        """Remove the lease and all its pins.

        Arguments:
            lease_id: the lease's id.

        Returns:
            True if it was dropped, False if it does not exist.

        Raises:
            InvalidLeaseIdError: a bad ``lease_id``.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        return lease_upkeep.drop(self._context, lease_id)

    @collector_paused()
    def leases(self) -> list[LeaseInfo]:
        """Every lease of the namespace (expired ones too, until reclaimed).

        Returns:
            One ``LeaseInfo`` per lease, by id.

        Raises:
            CorruptMetadataError: a lease's stored record cannot be read.
        """
        return lease_upkeep.list_leases(self._context)

    def expire_leases(self) -> list[str]:
        """Reclaim the leases past ``expires_at`` + ``lease.expiry-grace`` now.

        Returns:
            The ids of the leases reclaimed.

        Raises:
            CorruptMetadataError: the namespace settings cannot be read.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        return lease_upkeep.expire(self._context)

    @collector_paused()
    def lease_inventory(self) -> pd.DataFrame:
        """Every lease with its owner, state and the bytes it holds (M4).

        A lease is ``expired`` past its expiry (until retention reclaims it), ``orphaned`` when
        the keepalive that last acquired or renewed it is gone (its process died, or its block
        ended without dropping it) and nobody renewed it for a third of its duration,
        ``expiring`` with less than a tenth of its duration left, else ``active``.

        Returns:
            One row per lease, by id, with columns lease_id, owner, host, state,
            pinned_buckets, tables (the names it pins), pinned_bytes (the snapshots it pins),
            exclusive_bytes (what dropping it would free: files no other lease or retention
            rule keeps), created_at, renewed_at, expires_at. ``attrs["measured_at"]`` is the
            ZooKeeper time the states were decided at.

        Raises:
            ZooKeeperUnavailableError: ZooKeeper did not answer.
            CorruptMetadataError: a table's metadata or the namespace settings are unreadable
                (an unreadable lease is left out).
        """
        from ..monitor.leases.inventory import lease_inventory

        return lease_inventory(self._context)
