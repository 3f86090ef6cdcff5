"""The consumer (docs/consumers.md): a facade that wires its parts as aiokafka does. One
subscription state (what is subscribed, per-bucket positions) is handed to the fetcher
(positions, the reset policy and records, C1 C5–C7) and to the coordinator (a group's
membership and offsets, C2–C17)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from ..errors import IllegalStateError
from ..structs import OffsetAndMetadata, Record, TableBucket
from ..validate import check_positive_int
from .assignors import get_assignor
from .coordinators import coordinator_for
from .fetcher import Fetcher
from .log_view import LogView
from .options import RESET_POLICIES, ConsumerSettings, consumer_options
from .options import timeout as timeout_seconds
from .subscription import SubscriptionState

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from .listener import BucketRebalanceListener

__all__ = ["Consumer", "RESET_POLICIES"]

T = TypeVar("T")


class Consumer:
    """Reads buckets of tables by offset; built by ``Connection.consumer`` (see its arguments:
    ``settings`` are those keywords, ``ConsumerSettings``)."""

    def __init__(
        self,
        ctx: Context,
        tables: Iterable[TableInfo],
        *,
        exclusive_prefix: str | None = None,
        **settings: Any,
    ) -> None:
        asked = ConsumerSettings(**settings)
        options = consumer_options(asked, exclusive_prefix)  # (exclusive: the data source, D3)
        chosen = get_assignor(asked.assignor)
        self._sub = SubscriptionState(ctx, asked.listener)
        log = LogView(self._sub)
        self._coordinator = coordinator_for(
            ctx, asked.group_id, self._sub, options, chosen, log.wake
        )
        self._fetcher = Fetcher(self._sub, log, self._coordinator, options)
        self._closed = False
        if tables := list(tables):
            self._subscribe(tables)

    def subscribe(
        self,
        tables: Iterable[Any] = (),
        *,
        pattern: Any = None,
        listener: BucketRebalanceListener | None = None,
    ) -> None:
        """Consume every bucket of ``tables``, or of every table whose name ``pattern`` fully
        matches, now or later (C17); with a group, ``poll`` assigns the buckets. A new
        subscription replaces the last one. After a rescale, sealed buckets are read to their
        seals and new ones after their parents (with ``parent_first``, K5).

        Arguments:
            tables: table names or Table objects (not with ``pattern``).
            pattern: a regular expression (str or compiled) matched with ``re.fullmatch``.
            listener: a ``BucketRebalanceListener`` told of the buckets revoked and assigned.

        Raises:
            IllegalStateError: closed, or it has a manual assignment.
            InvalidArgumentError: neither or both of ``tables`` and ``pattern``, a bad pattern or
                table name.
            InvalidTypeError: ``tables`` is not a collection; a bad pattern or listener.
            TableNotFoundError: a table does not exist.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        self._subscribe(self._sub.resolve(tables, pattern, listener, self._fetcher.wake), listener)

    def _subscribe(self, tables: list[TableInfo], listener: Any = None, poll: bool = False) -> None:
        self._sub.subscribe(tables, listener)
        self._coordinator.subscription_changed(in_poll=poll)
        self._fetcher.sync_assignment()

    def assign(self, buckets: Iterable[TableBucket]) -> None:
        """Consume exactly ``buckets``, without group membership (with a ``group_id``, commits
        still go to the group, while it has no live members).

        Arguments:
            buckets: a collection of TableBucket (empty: consume nothing).

        Raises:
            IllegalStateError: closed, or it subscribes.
            InvalidTypeError: not a collection of TableBucket.
            InvalidArgumentError: a bucket's table name is not valid.
            TableNotFoundError, BucketNotFoundError: a bucket that does not exist.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        self._sub.assign(self._sub.buckets(buckets))
        self._fetcher.sync_assignment()

    def unsubscribe(self) -> None:
        """Stop consuming and leave the group (revoked buckets' positions auto-committed).

        Raises:
            IllegalStateError: closed.
            ZooKeeperUnavailableError, PermissionDeniedError: the auto-commit of the revoked
                buckets failed; the consumer left the group all the same.
        """
        self._check_open()
        self._sub.stop_pattern()
        self._coordinator.unsubscribe()
        self._sub.unsubscribe()
        self._fetcher.sync_assignment()

    def assignment(self) -> set[TableBucket]:
        """The buckets this consumer reads now (a group's assignment changes inside ``poll``).

        Returns:
            A new set of TableBucket.

        Raises nothing.
        """
        return set(self._sub.assignment())

    def poll(
        self, timeout: Any = "0s", max_records: int | None = None
    ) -> dict[TableBucket, pa.Table]:
        """Records from the positions of the assigned, unpaused buckets; records fetched and not
        yet handed out (by ``getone``) come first. Positions move past what is returned (C1).
        With a group, it also runs membership, rebalances and auto-commit.

        Arguments:
            timeout: how long to wait when no records are there (a huge duration: until some).
            max_records: at most this many records (default ``max_poll_records``).

        Returns:
            The records of each bucket that has some (``{}`` when none), with the columns
            ``_offset``, ``_timestamp``, ``_op`` and the table's.

        Raises:
            IllegalStateError: closed.
            InvalidDurationError, InvalidArgumentError, InvalidTypeError: bad arguments.
            NoOffsetForBucketError, OffsetOutOfRangeError: with ``auto_offset_reset="none"`` (C5).
            DataFileMissingError: a log file the metadata lists is missing (records read from
                other buckets before it are returned first).
            GroupNotEmptyError: a Spark stream reads the group alone; joining it is refused.
            PermissionDeniedError: joining the group needs the namespace's credentials.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        wait, limit = timeout_seconds(timeout), self._fetcher.max_poll_records
        if max_records is not None:
            limit = check_positive_int(max_records, "max_records")
        return self._poll(wait, lambda: self._fetch(limit), {})

    def getone(self, timeout: Any = None) -> Record | None:
        """The next record of any assigned, unpaused bucket; its position moves past it only.

        Arguments:
            timeout: how long to wait for a record (None, or a huge duration: until one comes).

        Returns:
            The record, or None when none came within ``timeout`` or the consumer was closed.

        Raises:
            As ``poll``.
        """
        self._check_open()
        wait = math.inf if timeout is None else timeout_seconds(timeout)  # None: until one
        return self._poll(wait, self._fetcher.take_one, None)

    def __iter__(self) -> Iterator[Record]:
        """Records one by one, waiting for new ones, until the consumer is closed."""
        while not self._closed:
            record = self.getone()
            if record is not None:
                yield record

    def _fetch(self, limit: int) -> dict[TableBucket, pa.Table]:  # a seam the benchmarks time
        return self._fetcher.fetch(limit)

    def _poll(self, wait: float, take: Callable[[], T], empty: T) -> T:
        """Drive the group and take records until some come or ``wait`` seconds passed."""
        deadline = time.monotonic() + wait
        with self._coordinator.polling():  # max_poll_interval counts the time between polls
            while True:
                followed = self._sub.follow_pattern()
                if followed is not None:
                    self._subscribe(followed, poll=True)
                self._coordinator.poll()
                self._fetcher.sync_assignment()
                out = take() if not self._coordinator.suspended else empty
                left = deadline - time.monotonic()
                if out or left <= 0 or self._closed:
                    return out
                self._fetcher.wait(left, self._has_news)

    def _has_news(self) -> bool:
        if self._closed or self._coordinator.has_work or self._sub.pattern_changed:
            return True
        return self._fetcher.has_records_ahead()

    def position(self, tb: TableBucket) -> int:
        """The offset of the next record of the assigned ``tb`` (C1), set first if it had none.

        Arguments:
            tb: an assigned TableBucket.

        Returns:
            The offset.

        Raises:
            IllegalStateError: closed, or ``tb`` not assigned.
            InvalidTypeError: ``tb`` is not a TableBucket.
            NoOffsetForBucketError: no committed offset and ``auto_offset_reset="none"``.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        return self._fetcher.position(tb)

    def seek(self, tb: TableBucket, offset: int) -> None:
        """Make ``offset`` the next record of the assigned ``tb`` (C6).

        Arguments:
            tb: an assigned TableBucket.
            offset: an int in [0, 2**63).

        Raises:
            IllegalStateError: closed, or ``tb`` not assigned.
            InvalidTypeError: ``tb`` is not a TableBucket, or ``offset`` not an int.
            InvalidArgumentError: ``offset`` is negative, or 2**63 or more.
        """
        self._check_open()
        self._fetcher.seek(tb, offset)

    def seek_to_beginning(self, *tbs: TableBucket) -> None:
        """Move assigned buckets to their first stored offset.

        Arguments:
            tbs: assigned TableBuckets; none: the whole assignment.

        Raises:
            IllegalStateError: closed, or a bucket not assigned.
            InvalidTypeError: not a TableBucket.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        self._fetcher.seek_to_beginning(tbs)

    def seek_to_end(self, *tbs: TableBucket) -> None:
        """Move assigned buckets to their log end.

        Arguments:
            tbs: assigned TableBuckets; none: the whole assignment.

        Raises:
            As ``seek_to_beginning``.
        """
        self._check_open()
        self._fetcher.seek_to_end(tbs)

    def seek_to_committed(self, *tbs: TableBucket) -> dict[TableBucket, int | None]:
        """Move assigned buckets to the group's committed offsets (a committed 0 included, C6);
        a bucket without one gets the reset policy.

        Arguments:
            tbs: assigned TableBuckets; none: the whole assignment.

        Returns:
            The committed offset of each bucket, None where there is none.

        Raises:
            IllegalOperationError: no ``group_id``.
            IllegalStateError: closed, or a bucket not assigned.
            InvalidTypeError: not a TableBucket.
            NoOffsetForBucketError: as ``position``.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        return self._fetcher.seek_to_committed(tbs)

    def beginning_offsets(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, int]:
        """The first stored offset of buckets, read now; no position moves.

        Arguments:
            tbs: a collection of TableBucket, assigned or not.

        Returns:
            The offset of each bucket.

        Raises:
            IllegalStateError: closed.
            InvalidTypeError: not a collection of TableBucket.
            InvalidArgumentError: a bucket's table name is not valid.
            TableNotFoundError, BucketNotFoundError: a bucket that does not exist.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        return {tb: b.begin for tb, b in self._fetcher.bounds_now(tbs).items()}

    def end_offsets(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, int]:
        """The log end offset of buckets, read now; no position moves.

        Arguments:
            tbs: a collection of TableBucket, assigned or not.

        Returns:
            The offset of each bucket.

        Raises:
            As ``beginning_offsets``.
        """
        self._check_open()
        return {tb: b.end for tb, b in self._fetcher.bounds_now(tbs).items()}

    def offsets_for_times(
        self, timestamps: Mapping[TableBucket, int]
    ) -> dict[TableBucket, int | None]:
        """Per bucket, the earliest offset whose timestamp is >= the given time, read now (C7).

        Arguments:
            timestamps: TableBucket (assigned or not) -> epoch milliseconds.

        Returns:
            The offset of each bucket, None where no record is that recent.

        Raises:
            As ``beginning_offsets``; InvalidArgumentError, InvalidTypeError: a bad timestamp.
        """
        self._check_open()
        return self._fetcher.offsets_for_times(timestamps)

    def highwater(self, tb: TableBucket) -> int | None:
        """The log end of the assigned ``tb`` as the last poll that read it saw it.

        Arguments:
            tb: an assigned TableBucket.

        Returns:
            The offset; None before such a poll.

        Raises:
            IllegalStateError: closed, or ``tb`` not assigned.
            InvalidTypeError: ``tb`` is not a TableBucket.
        """
        self._check_open()
        return self._fetcher.highwater(tb)

    def last_poll_timestamp(self, tb: TableBucket) -> int | None:
        """When the last poll looked at the assigned ``tb``.

        Arguments:
            tb: an assigned TableBucket.

        Returns:
            Epoch milliseconds; None before such a poll.

        Raises:
            As ``highwater``.
        """
        self._check_open()
        return self._fetcher.last_poll_timestamp(tb)

    def pause(self, *tbs: TableBucket) -> None:
        """Hand out no records of assigned buckets until they are resumed.

        Arguments:
            tbs: assigned TableBuckets.

        Raises:
            IllegalStateError: closed, or a bucket not assigned.
            InvalidTypeError: not a TableBucket.
        """
        self._check_open()
        self._sub.pause(tbs, True)

    def resume(self, *tbs: TableBucket) -> None:
        """Hand out records of paused buckets again.

        Arguments:
            tbs: assigned TableBuckets.

        Raises:
            As ``pause``.
        """
        self._check_open()
        self._sub.pause(tbs, False)
        self._fetcher.wake()

    def paused(self) -> set[TableBucket]:
        """The assigned buckets paused now.

        Returns:
            A new set of TableBucket.

        Raises nothing.
        """
        return self._sub.paused()

    @property
    def group_id(self) -> str | None:
        """The consumer's group.

        Returns:
            The group id; None without a group.

        Raises nothing.
        """
        return self._coordinator.group_id

    @property
    def member_id(self) -> str | None:
        """Its id in the group, once it polled as a subscribed group member.

        Returns:
            The member id; None before, after leaving, and without a group.

        Raises nothing.
        """
        return self._coordinator.member_id

    @property
    def generation(self) -> int | None:
        """The group generation of its assignment as a member.

        Returns:
            The generation; None when it is not a member.

        Raises nothing.
        """
        return self._coordinator.generation

    def commit(self, offsets: Mapping[TableBucket, int | OffsetAndMetadata] | None = None) -> None:
        """Commit the positions of the assignment (records handed out only; a dropped table's are
        left out, C17), or exactly ``offsets`` (C3); offsets that did not change are not written.

        Arguments:
            offsets: None, or TableBucket -> offset (an int in [0, 2**63)) or OffsetAndMetadata
                (metadata: at most 4096 UTF-8 bytes).

        Raises:
            IllegalOperationError: no ``group_id``.
            IllegalStateError: closed, or a bucket not assigned.
            InvalidArgumentError, InvalidTypeError: bad offsets, before anything is written.
            CommitFailedError: a member that no longer owns a bucket or left the group (C11).
            GroupNotEmptyError: a manual assignment commits into a group with live members
                (docs/consumers.md).
            TableNotFoundError: a bucket of a dropped table (C17).
            PermissionDeniedError: this connection's credentials may not write the namespace.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        self._coordinator.require_group()
        wanted = self._sub.to_commit(offsets, self.group_id)
        self._coordinator.commit(wanted, skip_dropped=offsets is None)

    def committed(self, tb: TableBucket) -> int | None:
        """The group's committed offset of ``tb``, read now (C2).

        Arguments:
            tb: a TableBucket, assigned or not.

        Returns:
            The offset; None before a commit.

        Raises:
            IllegalOperationError: no ``group_id``.
            IllegalStateError: closed.
            InvalidTypeError: ``tb`` is not a TableBucket.
            InvalidArgumentError: its table name is not valid.
            TableNotFoundError, BucketNotFoundError: a bucket that does not exist.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
        """
        self._check_open()
        self._coordinator.require_group()
        self._sub.table_of(tb)
        record = self._coordinator.fetch_committed([tb]).get(tb)
        return None if record is None else record.offset

    def close(self) -> None:
        """Commit the positions (with auto-commit, C8), leave the group, stop; twice: no-op.

        Raises:
            ZooKeeperUnavailableError, PermissionDeniedError: the final auto-commit failed; the
                consumer is closed all the same.
        """
        if self._closed:
            return
        try:
            self._sub.stop_pattern()
            self._coordinator.close()
        finally:
            self._closed = True
            self._fetcher.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")
