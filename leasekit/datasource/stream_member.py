"""The stream's membership of its group (D3, D5): in the stream reader's long-lived process, the
query is the group's only live member, owning every bucket, and commits each completed batch."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
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
            if self._assigned or time.monotonic() > deadline or Termination.requested:
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


def leave_on_sigterm(stop: Callable[[], None]) -> None:
    """Spark ends the reader's process with SIGTERM when the query stops (and closes its socket
    right after, or not at all when the whole session stops), without calling ``stop``: make the
    signal run ``stop`` (the reader's newest), so the member leaves the group at once instead
    of at its session's end (D3). A process whose parent (Spark's JVM) is gone gets no signal
    and no reader: it stops as on SIGTERM. Called in the main thread before the reader joins."""
    if threading.current_thread() is not threading.main_thread():
        return
    Termination.stop = stop
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        parent = os.getppid()
        wake, Termination.wake = os.pipe()
        os.set_blocking(Termination.wake, False)
        threading.Thread(
            target=Termination.watch, args=(parent, wake), name="leasekit-sigterm", daemon=True
        ).start()
        signal.signal(signal.SIGTERM, Termination.on_signal)


class Termination:
    """The end of the reader's process: SIGTERM, or its parent gone. The handler raises nothing:
    an exception thrown into the main thread at an arbitrary point can land between the runner's
    read of its closed socket and its call of ``stop`` (or inside ``stop``), skip the leave, and
    keep the member in its group until its session expires. So the handler only records the
    signal, and takes no lock: a signal can land while the handler of the one before runs
    (Spark, the kernel's process group and the JVM's exit each send one), or inside any lock's
    holder, and a handler waiting for a lock its own thread holds never returns. The main
    thread, which sees its socket close, stops and exits by itself; a watchdog thread gives it
    ``WAIT`` seconds, then (the main thread busy in a long call, or no socket closed) calls
    ``stop`` itself, after any stop under way, and ends the process. The process ends at the
    latest ``WAIT + GRACE`` seconds after the signal, after its parent is gone, or after a
    ``stop`` began (the runner exits once its reader stopped), however long the stops take: a
    ZooKeeper that went away leaves ZooKeeper calls waiting for it without end."""

    WAIT = 1.0
    """Seconds the main thread gets to stop and exit after SIGTERM before the watchdog acts."""
    GRACE = 10.0
    """Seconds the stops may take after ``WAIT`` before the process ends regardless."""
    PARENT_CHECK = 0.5
    """Seconds between the watchdog's looks at the process's parent."""
    requested = False
    """Set by SIGTERM, or once the parent is gone; a wait in the reader (the first assignment)
    gives up on it."""
    wake = -1
    """The write end of the pipe that wakes the watchdog."""
    stop: Callable[[], None] | None = None
    """The newest reader's ``stop``; set only in a reader's own process."""
    _lock = threading.RLock()
    _deadline: threading.Timer | None = None
    _deadline_lock = threading.Lock()

    @classmethod
    @contextlib.contextmanager
    def stopping(cls) -> Iterator[None]:
        """Around ``stop``: one at a time, whether the main thread's or the watchdog's; in a
        reader's own process, the process ends at the latest ``WAIT + GRACE`` from here on."""
        if cls.stop is not None:
            cls.arm()
        with cls._lock:
            yield

    @classmethod
    def arm(cls) -> None:
        """Start the hard deadline (once): the process ends ``WAIT + GRACE`` seconds from now."""
        with cls._deadline_lock:
            if cls._deadline is None:
                deadline = threading.Timer(cls.WAIT + cls.GRACE, os._exit, (128 + signal.SIGTERM,))
                deadline.daemon = True
                deadline.start()
                cls._deadline = deadline

    @classmethod
    def on_signal(cls, signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: the watchdog ends it
        cls.requested = True
        with contextlib.suppress(OSError):  # a full pipe: the watchdog is awake already
            os.write(cls.wake, b"\0")

    @classmethod
    def watch(cls, parent: int, wake: int) -> None:
        while not cls.requested:
            select.select([wake], [], [], cls.PARENT_CHECK)
            if os.getppid() != parent:  # Spark's JVM is gone: no signal or reader will come
                cls.requested = True
        cls.arm()  # a stop that hangs (ZooKeeper gone, say) does not keep the process
        time.sleep(cls.WAIT)
        with cls._lock, contextlib.suppress(Exception):  # after a stop under way
            if cls.stop is not None:
                cls.stop()
        os._exit(128 + signal.SIGTERM)
