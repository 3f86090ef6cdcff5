"""``KvSnapshotLease``: the handle an analyst holds, with keepalive and Spark reads.

No I/O until the first call; the context manager renews in the background every
duration/3 and drops the lease on exit.
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
    NotPinnedError,
    ZooKeeperUnavailableError,
)
from ..snapshots.catalog import get_snapshots, read_latest
from ..structs import AcquireResult, LeaseInfo, TableBucket
from ..tables.catalog import load_table
from ..tables.info import TableInfo
from ..validate import check_id
from ..zk import to_datetime
from . import acquire, upkeep

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
        if isinstance(tb.bucket, bool) or not isinstance(tb.bucket, int):
            raise InvalidTypeError(f"bucket of {tb} must be an int, not {type(tb.bucket).__name__}")
        by_name.setdefault(tb.table, []).append(tb.bucket)
    out: dict[TableInfo, list[int]] = {}
    for name, numbers in by_name.items():
        table = load_table(ctx, name)
        out[table] = [b for b in numbers if 0 <= b < table.num_buckets]
    return out


def table_list(ctx: Context, tables: Any) -> list[TableInfo]:
    """Tables named by a name, a Table, or an iterable of those."""
    if isinstance(tables, (str, TableInfo)):
        tables = [tables]
    if not isinstance(tables, Iterable):
        raise InvalidTypeError("tables must be a table name or an iterable of table names")
    return [load_table(ctx, t) for t in tables]


def acquire_latest(
    ctx: Context, lease_id: str, tables: Any, duration_ms: int
) -> tuple[AcquireResult, int]:
    """Pin the newest snapshot of every bucket of ``tables`` (L6); also the commit time (ms)."""
    wanted: dict[TableInfo, dict[int, int]] = {}
    missing: dict[TableBucket, int] = {}
    for table in table_list(ctx, tables):
        latest = read_latest(table)
        wanted[table] = latest
        missing.update(
            {TableBucket(table.name, b): -1 for b in range(table.num_buckets) if b not in latest}
        )
    result, committed_ms = acquire.acquire_at(
        ctx,
        lease_id,
        wanted,
        duration_ms,
        refresh=lambda table, buckets: read_latest(table, buckets),
    )
    return result._replace(unavailable={**missing, **result.unavailable}), committed_ms


def _ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


class KvSnapshotLease:
    """A lease that pins KV snapshots so retention cannot delete them while they are read."""

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
        if not isinstance(keepalive, bool) or not isinstance(drop_on_exit, bool):
            raise InvalidTypeError("keepalive and drop_on_exit must be bools")
        self.keepalive = keepalive
        self.drop_on_exit = drop_on_exit
        self._expires_ms: int | None = None
        self._seen: tuple[int, float] | None = None  # (server ms, monotonic s) at the last call
        self._failure: LeasekitError | None = None
        self._dropped = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

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
        """Expiry as of the last acquire or renew through this handle."""
        return None if self._expires_ms is None else to_datetime(self._expires_ms)

    @property
    def alive(self) -> bool:
        """False once expired, dropped or after a failed keepalive renew."""
        if self._failure is not None or self._dropped:
            return False
        if self._expires_ms is None or self._seen is None:
            return True
        server_ms, seen_at = self._seen
        return server_ms + (time.monotonic() - seen_at) * 1000 <= self._expires_ms

    # -- operations -----------------------------------------------------------------------

    def acquire(self, snapshot_ids: Mapping[TableBucket, int]) -> AcquireResult:
        """Pin these snapshots (moving earlier pins of the same buckets); creates the lease."""
        self._check()
        wanted = acquire.check_snapshot_ids(self._ctx, snapshot_ids)
        result, committed_ms = acquire.acquire_at(
            self._ctx, self.lease_id, wanted, self._duration_ms
        )
        self._note(_ms(result.expires_at), committed_ms)
        return result

    def acquire_latest(self, tables: str | Iterable[str]) -> AcquireResult:
        """Pin the newest snapshot of every bucket of ``tables``."""
        self._check()
        result, committed_ms = acquire_latest(self._ctx, self.lease_id, tables, self._duration_ms)
        self._note(_ms(result.expires_at), committed_ms)
        return result

    def renew(self, duration: Any = None) -> datetime:
        """Extend the lease to at least now + duration (default: its duration); the new expiry."""
        self._check()
        duration_ms = None if duration is None else acquire.lease_duration_ms(self._ctx, duration)
        if duration_ms is not None:
            self._duration_ms = duration_ms
        return to_datetime(self._note(*acquire.renew_at(self._ctx, self.lease_id, duration_ms)))

    def release(self, buckets: Iterable[TableBucket]) -> None:
        """Unpin these buckets (idempotent)."""
        self._check()
        upkeep.release(self._ctx, self.lease_id, group_buckets(self._ctx, buckets))

    def drop(self) -> bool:
        """Remove the lease and its pins; False if it did not exist."""
        self._stop_keepalive()
        dropped = upkeep.drop(self._ctx, self.lease_id)
        self._dropped = True
        return dropped

    def info(self) -> LeaseInfo:
        """The lease as stored in ZooKeeper."""
        return upkeep.info(self._ctx, self.lease_id)

    def read(self, spark: Any, table: str | TableInfo, *, allow_partial: bool = False) -> Any:
        """A Spark DataFrame of exactly the pinned snapshots' rows of ``table`` (L12)."""
        from ..spark.frames import files_frame
        from ..spark.session import session, spark_errors

        self._check()
        spark = session(spark)
        table = load_table(self._ctx, table)
        acquire.validity(self._ctx, self.lease_id)
        pins = upkeep.pins_of(self._ctx, self.lease_id, table)
        unpinned = [b for b in range(table.num_buckets) if TableBucket(table.name, b) not in pins]
        if unpinned and not allow_partial:
            shown = ", ".join(map(str, unpinned[:10])) + (" ..." if len(unpinned) > 10 else "")
            raise NotPinnedError(
                f"lease {self.lease_id!r} does not pin {len(unpinned)} of {table.num_buckets} buckets of "
                f"{table.name!r} (buckets {shown}); acquire them or pass allow_partial=True"
            )
        snaps = get_snapshots(table, {tb.bucket: sid for tb, sid in pins.items()})
        with spark_errors(f"read {table.name} through lease {self.lease_id}"):
            return files_frame(spark, table, [f for s in snaps for f in s.files])

    # -- keepalive ------------------------------------------------------------------------

    def __enter__(self) -> KvSnapshotLease:
        if self.keepalive:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._keepalive, name=f"lease-{self.lease_id}", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
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

    def _keepalive(self) -> None:
        """Renew every duration/3 (L13); transient ZooKeeper trouble is retried until expiry."""
        interval = self._duration_ms / 3000
        while not self._stop.wait(interval):
            if self._expires_ms is None:
                continue  # nothing acquired yet: no lease to renew
            while True:
                try:
                    self._note(*acquire.renew_at(self._ctx, self.lease_id, self._duration_ms))
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
