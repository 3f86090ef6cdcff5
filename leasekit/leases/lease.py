"""``KvSnapshotLease``: the handle an analyst holds, with keepalive and Spark reads.

No I/O until the first call; the context manager renews in the background every
duration/3 and drops the lease on exit. A running keepalive holds an ephemeral holder znode
(``holder``), so the lease inventory tells a lease whose holder died (M4).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import (
    InvalidTypeError,
    LeaseExpiredError,
    LeasekitError,
    LeaseNotFoundError,
    ZooKeeperUnavailableError,
)
from ..structs import AcquireResult, LeaseInfo, TableBucket
from ..tables.catalog import load_table
from ..tables.info import TableInfo
from ..validate import check_bool, check_id, check_int
from ..zk import to_datetime
from . import acquire, holder, upkeep
from .reading import lease_sources

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["KvSnapshotLease", "group_buckets"]

log = logging.getLogger(__name__)


def group_buckets(ctx: Context, buckets: Iterable[TableBucket]) -> dict[TableInfo, list[int]]:
    """Validate TableBuckets and group their bucket numbers by table, for release: numbers the
    table does not have are left out, as a lease cannot pin them (L9)."""
    if isinstance(buckets, (str, bytes, TableBucket)) or not isinstance(buckets, Iterable):
        raise InvalidTypeError("buckets must be an iterable of TableBucket")
    by_name: dict[str, list[int]] = {}
    for tb in buckets:
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"buckets must be TableBucket values, not {type(tb).__name__}")
        check_int(tb.bucket, f"bucket of {tb}")
        by_name.setdefault(tb.table, []).append(tb.bucket)
    out: dict[TableInfo, list[int]] = {}
    for name, numbers in by_name.items():
        table = load_table(ctx, name)
        out[table] = [b for b in numbers if 0 <= b < table.layout.count]
    return out


def _ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


class KvSnapshotLease:
    """A lease that pins KV snapshots so retention cannot delete them while they are read.

    Made by ``Connection.lease``; no I/O until the first call. Used as a context manager it
    renews itself every duration/3 inside the block (with ``keepalive``) and drops the lease
    on exit (with ``drop_on_exit``).

    Arguments:
        ctx: the connection's context.
        lease_id: the lease's id; None makes a new unique one.
        duration: how long each acquire or renew keeps the lease ("1h", a timedelta, seconds).
        keepalive: renew in the background inside a ``with`` block.
        drop_on_exit: drop the lease when the ``with`` block ends.

    Raises:
        InvalidLeaseIdError: ``lease_id`` does not follow the id rule (L1).
        InvalidDurationError: ``duration`` is not > 0 and <= ``lease.max-duration`` (L2).
        InvalidTypeError: ``keepalive`` or ``drop_on_exit`` is not a bool.
    """

    def __init__(
        self,
        ctx: Context,
        lease_id: str | None = None,
        duration: Any = "1h",
        *,
        keepalive: bool = False,
        drop_on_exit: bool = True,
    ) -> None:
        self._ctx = ctx
        self.lease_id: str = (
            check_id(lease_id) if lease_id is not None else f"lease-{uuid.uuid4().hex[:16]}"
        )
        self._duration_ms = acquire.lease_duration_ms(ctx, duration)
        self.keepalive = check_bool(keepalive, "keepalive")
        self.drop_on_exit = check_bool(drop_on_exit, "drop_on_exit")
        self._expires_ms: int | None = None
        self._seen: tuple[int, float] | None = None  # (server ms, monotonic s) at the last call
        self._failure: LeasekitError | None = None
        self._dropped = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._holder = ""  # token of the running keepalive's holder znode; "" when none runs

    # -- state ----------------------------------------------------------------------------

    def _note(self, expires_ms: int, committed_ms: int) -> int:
        """Remember the expiry and the ZooKeeper time of the commit that set it (for ``alive``)."""
        self._expires_ms = expires_ms
        self._dropped = False
        self._seen = (self._ctx.clock(committed_ms), time.monotonic())
        return expires_ms

    def _check(self) -> None:
        if self._failure is not None:
            raise LeaseExpiredError(
                f"lease {self.lease_id!r} is no longer alive: {self._failure}"
            ) from self._failure

    @property
    def expires_at(self) -> datetime | None:
        """Expiry as of the last acquire or renew through this handle.

        Returns:
            A UTC datetime; None before the first acquire or renew.

        Raises nothing.
        """
        return None if self._expires_ms is None else to_datetime(self._expires_ms)

    @property
    def alive(self) -> bool:
        """Whether the lease still holds, as this handle knows it (no I/O).

        Returns:
            False once expired, dropped or after a failed keepalive renew; else True.

        Raises nothing.
        """
        if self._failure is not None or self._dropped:
            return False
        if self._expires_ms is None or self._seen is None:
            return True
        server_ms, seen_at = self._seen
        return server_ms + (time.monotonic() - seen_at) * 1000 <= self._expires_ms

    # -- operations -----------------------------------------------------------------------

    def acquire(self, snapshot_ids: Mapping[TableBucket, int]) -> AcquireResult:
        """Pin these snapshots, moving earlier pins of the same buckets; the first call creates
        the lease, each call extends it to at least now + its duration.

        Arguments:
            snapshot_ids: the snapshot id to pin for each bucket.

        Returns:
            What was pinned, the snapshots that do not exist (``unavailable``) and the expiry.

        Raises:
            InvalidTypeError, InvalidArgumentError: ``snapshot_ids`` is not a mapping of
                ``TableBucket`` to snapshot ids >= 1.
            TableNotFoundError: a table does not exist or was dropped while pinning.
            BucketNotFoundError: a bucket number the table does not have.
            LeaseExpiredError: the lease expired, was dropped, or its keepalive failed.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check()
        result, committed_ms = acquire.acquire_with_time(
            self._ctx, self.lease_id, snapshot_ids, self._duration_ms, holder=self._holder
        )
        self._note(_ms(result.expires_at), committed_ms)
        return result

    def acquire_latest(self, tables: str | Iterable[str]) -> AcquireResult:
        """Pin the newest snapshot of every active bucket of ``tables``, like ``acquire``; a
        bucket whose newest snapshot is deleted meanwhile gets the one after it. A bucket a
        rescale made that has no snapshot yet gets what its state is built from: the newest
        snapshots of its parents (of theirs, where they have none), so ``read`` returns the
        whole table (K4).

        Arguments:
            tables: a table name or an iterable of table names.

        Returns:
            What was pinned (``acquired`` then also holds sealed buckets: those parents);
            active buckets with no snapshot, neither their own nor their ancestors', are
            ``unavailable`` with id -1.

        Raises:
            InvalidTypeError: ``tables`` is not a name or an iterable of names.
            InvalidArgumentError: a name is not a valid table name.
            TableNotFoundError: a table does not exist or was dropped while pinning.
            LeaseExpiredError: the lease expired, was dropped, or its keepalive failed.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check()
        result, committed_ms = acquire.acquire_latest(
            self._ctx, self.lease_id, tables, self._duration_ms, holder=self._holder
        )
        self._note(_ms(result.expires_at), committed_ms)
        return result

    def renew(self, duration: Any = None) -> datetime:
        """Extend the lease to at least now + ``duration``; never shortens it (L7).

        Arguments:
            duration: a duration ("1h", a timedelta, seconds); None keeps the lease's
                duration. A new one becomes the lease's duration for later renewals.

        Returns:
            The new expiry.

        Raises:
            InvalidDurationError: ``duration`` is not > 0 and <= ``lease.max-duration``.
            LeaseNotFoundError: the lease was never acquired.
            LeaseExpiredError: the lease expired, was dropped, or its keepalive failed.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check()
        duration_ms = None if duration is None else acquire.lease_duration_ms(self._ctx, duration)
        if duration_ms is not None:
            self._duration_ms = duration_ms
        renewed = acquire.renew_with_time(
            self._ctx, self.lease_id, duration_ms, holder=self._holder
        )
        return to_datetime(self._note(*renewed))

    def release(self, buckets: Iterable[TableBucket]) -> None:
        """Unpin these buckets; buckets the lease does not pin are ignored (idempotent, L9).

        Arguments:
            buckets: the buckets to unpin.

        Raises:
            InvalidTypeError: ``buckets`` is not an iterable of ``TableBucket``.
            InvalidArgumentError: a bucket's table name is not valid.
            TableNotFoundError: a table does not exist.
            LeaseNotFoundError: the lease does not exist.
            LeaseExpiredError: the handle's keepalive failed.
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check()
        upkeep.release(self._ctx, self.lease_id, group_buckets(self._ctx, buckets))

    def drop(self) -> bool:
        """Stop the keepalive and remove the lease with all its pins (L10).

        Returns:
            True if the lease was removed; False if it did not exist.

        Raises:
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._stop_keepalive()
        dropped = upkeep.drop(self._ctx, self.lease_id)
        self._dropped = True
        return dropped

    def info(self) -> LeaseInfo:
        """The lease as stored in ZooKeeper.

        Returns:
            Its pins, duration, creation, renewal and expiry times, and owner.

        Raises:
            LeaseNotFoundError: the lease does not exist (never acquired, dropped, reclaimed).
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        return upkeep.info(self._ctx, self.lease_id)

    def read(self, spark: Any, table: str | TableInfo, *, allow_partial: bool = False) -> Any:
        """A Spark DataFrame of exactly the pinned snapshots' rows of ``table`` (L12): each
        active bucket's pinned snapshot, or, for one not pinned itself, its pinned ancestors'
        snapshots restricted to its keys (K4: what ``acquire_latest`` pins for a bucket a
        rescale made before its first snapshot). No key is read twice.

        Arguments:
            spark: the SparkSession to read with; None uses the active one, or starts one for
                the connection's warehouse (with Spark's ``s3a`` for an S3 one).
            table: a table name (or Table).
            allow_partial: read only what the pins cover when some active buckets are covered
                neither by a pin of their own nor by their ancestors'.

        Returns:
            A DataFrame of the table's columns.

        Raises:
            InvalidTypeError: ``spark`` is not a SparkSession, or ``table`` not a name.
            InvalidArgumentError: ``table`` is not a valid table name.
            JavaNotFoundError: ``spark`` is None and no Java was found to start Spark with.
            TableNotFoundError: the table does not exist.
            NotPinnedError: some active buckets are not covered and ``allow_partial`` is False.
            LeaseNotFoundError: no such lease, and this handle never acquired or renewed it.
            LeaseExpiredError: the lease expired, was dropped, or its keepalive failed.
            SnapshotNotFoundError: a pinned snapshot is gone.
            IllegalStateError: Spark failed to read the files.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        from ..sparkio.session import session, spark_errors
        from ..sparkio.snapshot_frames import snapshot_rows

        self._check()
        spark = session(spark, self._ctx.warehouse)
        table = load_table(self._ctx, table)
        try:
            sources = lease_sources(self._ctx, self.lease_id, table, allow_partial=allow_partial)
        except LeaseNotFoundError as exc:
            if self._expires_ms is None:
                raise  # this handle never acquired it: it does not exist (L8)
            raise LeaseExpiredError(
                f"lease {self.lease_id!r} is gone: it expired and was reclaimed, or was dropped"
            ) from exc
        with spark_errors(f"read {table.name} through lease {self.lease_id}"):
            return snapshot_rows(spark, table, sources, depth=False)

    # -- keepalive ------------------------------------------------------------------------

    def __enter__(self) -> KvSnapshotLease:
        """Start the keepalive (with ``keepalive``) and its holder znode; the lease itself."""
        if self.keepalive:
            self._holder = holder.new_token()
            self._ensure_holder()
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._keepalive, name=f"lease-{self.lease_id}", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Stop the keepalive and, with ``drop_on_exit``, drop the lease; a failed drop is
        raised unless the block is ending with an error of its own (then it is logged)."""
        self._stop_keepalive()
        if self.drop_on_exit:
            try:
                self.drop()
            except LeasekitError:
                if exc_type is None:
                    raise
                log.warning("could not drop lease %s while handling an error", self.lease_id)

    def _stop_keepalive(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        token, self._holder = self._holder, ""
        if token:
            holder.remove(self._ctx, token)

    def _ensure_holder(self) -> None:
        """Put the holder znode in place (again, after a new session lost it); a failure is
        logged and tried again after the next renewal."""
        try:
            holder.ensure(self._ctx, self.lease_id, self._holder)
        except LeasekitError as exc:
            log.warning("keepalive holder of lease %s not recorded: %s", self.lease_id, exc)

    def _keepalive(self) -> None:
        """Renew every duration/3 (L13); transient ZooKeeper trouble is retried until expiry."""
        interval = self._duration_ms / 3000
        while not self._stop.wait(interval):
            if self._expires_ms is None:
                continue  # nothing acquired yet: no lease to renew
            while True:
                try:
                    self._note(
                        *acquire.renew_with_time(
                            self._ctx, self.lease_id, self._duration_ms, holder=self._holder
                        )
                    )
                    self._ensure_holder()
                    break
                except ZooKeeperUnavailableError as exc:
                    if not self.alive:
                        self._failure = exc
                        return
                    if self._stop.wait(min(1.0, interval)):
                        return
                except LeasekitError as exc:
                    self._failure = exc
                    log.warning("keepalive of lease %s failed: %s", self.lease_id, exc)
                    return

    def __repr__(self) -> str:
        return (
            f"KvSnapshotLease({self.lease_id!r}, alive={self.alive}, expires_at={self.expires_at})"
        )
