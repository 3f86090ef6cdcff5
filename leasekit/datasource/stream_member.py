"""The stream's membership of its group (D3, D5): in the stream reader's long-lived process, the
query is the group's only live member, owning every bucket, and commits each completed batch."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..connection import connect
from ..consumers.consumer import Consumer
from ..consumers.listener import BucketRebalanceListener
from ..errors import IllegalStateError, TableNotFoundError
from ..structs import OffsetAndMetadata, TableBucket
from ..tables.catalog import load_table

if TYPE_CHECKING:
    from ..connection import Connection
    from ..tables.info import TableInfo
    from .options import SourceOptions

__all__ = ["StreamMember", "open_connection", "leave_on_sigterm", "Termination", "MEMBER_PREFIX"]

MEMBER_PREFIX = "spark-"
"""Member ids of a stream are ``spark-<stream id>-<sequence>``."""
FIRST_ASSIGNMENT = 30.0
"""Seconds a joining stream waits for its first assignment (a lone member's comes at once)."""
MAX_POLL_INTERVAL = "7d"
"""A batch may run long: Spark asks for offsets (and so polls) only between batches."""


def open_connection(opts: SourceOptions) -> Connection:
    """A connection kept for the life of the reader's process."""
    return connect(opts.zookeeper, opts.warehouse, namespace=opts.namespace)


class _PauseAll(BucketRebalanceListener):
    """Pauses every bucket the member gets: the stream reads files itself, never through the
    consumer, which only drives membership and commits."""

    def __init__(self) -> None:
        self.consumer: Consumer | None = None

    def on_buckets_assigned(self, assigned: set[TableBucket]) -> None:
        if self.consumer is not None and assigned:
            self.consumer.pause(*assigned)


class StreamMember:
    """The group membership of stream ``stream_id``: a group consumer of the table with every
    bucket paused and no auto-commit, joined as the group's exclusive member (a joining consumer
    is refused with ``GroupNotEmptyError``, and so is this join while the group has members).
    The leader's assignment (this member's, all buckets) follows rescales (K5)."""

    def __init__(self, conn: Connection, opts: SourceOptions, stream_id: str) -> None:
        group = opts.get("group") or ""
        self.stream_id = stream_id
        self.table: TableInfo = conn.table(opts.table)
        pauser = _PauseAll()
        self._consumer = Consumer(
            self.table.context,
            [self.table],
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=1,
            max_poll_interval=MAX_POLL_INTERVAL,
            listener=pauser,
            exclusive_prefix=f"{MEMBER_PREFIX}{stream_id}-",
        )
        pauser.consumer = self._consumer
        self._assigned = False

    def poll(self) -> list[int]:
        """Drive membership (join, rebalances); the buckets of the table assigned now.

        Raises:
            GroupNotEmptyError: the group has other live members.
            TableNotFoundError: the table was dropped (D5).
        """
        self.check_table()
        deadline = time.monotonic() + FIRST_ASSIGNMENT
        while True:
            self._consumer.poll(0)
            if self._consumer.generation is not None:
                self._assigned = True
            if self._assigned or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if not self._assigned:
            raise IllegalStateError(
                f"group {self._consumer.group_id}: no assignment within {FIRST_ASSIGNMENT:g}s"
            )
        return sorted(tb.bucket for tb in self._consumer.assignment())

    def check_table(self) -> TableInfo:
        """The table read now.

        Raises:
            TableNotFoundError: it was dropped (or dropped and created again) (D5).
        """
        now = load_table(self.table.context, self.table.name)
        if now.table_id != self.table.table_id:
            raise TableNotFoundError(f"table {self.table.name} was dropped (and created again)")
        return now

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit the end of the last completed batch: ``offsets`` of the buckets assigned (those
        that did not change are not written, C3)."""
        owned = self._consumer.assignment()
        wanted = {
            tb: OffsetAndMetadata(o)
            for b, o in offsets.items()
            if (tb := TableBucket(self.table.name, b)) in owned
        }
        if wanted:
            self._consumer.commit(wanted)

    def committed(self, buckets: list[int]) -> dict[int, int | None]:
        """The group's committed offset of each bucket, read now."""
        return {b: self._consumer.committed(TableBucket(self.table.name, b)) for b in buckets}

    def bounds(self, buckets: list[int]) -> tuple[dict[int, int], dict[int, int]]:
        """The beginning and end offsets of ``buckets``, read now."""
        tbs = [TableBucket(self.table.name, b) for b in buckets]
        if not tbs:
            return {}, {}
        begin = self._consumer.beginning_offsets(tbs)
        end = self._consumer.end_offsets(tbs)
        return {tb.bucket: o for tb, o in begin.items()}, {tb.bucket: o for tb, o in end.items()}

    def close(self) -> None:
        """Leave the group (its member znode goes at once), committing nothing."""
        self._consumer.close()


def leave_on_sigterm() -> None:
    """Spark ends the reader's process with SIGTERM when the query stops, without calling
    ``stop``: turn it into ``SystemExit``, so the runner's own ``finally`` calls ``stop`` and the
    member leaves the group at once instead of at its session's end."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, Termination.on_signal)


class Termination:
    """SIGTERM in the reader's process. Spark may send it more than once, or while ``stop``
    already runs (the runner's socket closed first): one that lands inside ``stop`` must not
    cut the leave short, or the member stays in its group until its session expires. So inside
    ``stop`` (or after the first one, which is on its way there) it only sets a deadline
    (``GRACE``) after which the process ends regardless."""

    GRACE = 10.0
    """Seconds a deferred SIGTERM waits for ``stop`` before the process exits anyway."""
    stopping = 0
    signalled = False

    @classmethod
    @contextlib.contextmanager
    def deferred(cls) -> Iterator[None]:
        cls.stopping += 1
        try:
            yield
        finally:
            cls.stopping -= 1

    @classmethod
    def on_signal(cls, signum: int, frame: Any) -> None:
        if not cls.stopping and not cls.signalled:
            cls.signalled = True
            raise SystemExit(128 + signum)
        timer = threading.Timer(cls.GRACE, os._exit, (128 + signum,))
        timer.daemon = True
        timer.start()
