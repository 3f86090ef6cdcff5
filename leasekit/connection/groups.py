"""The consumer part of the ``Connection`` facade: consumers and the administration of their
groups (docs/consumers.md)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..consumers.admin import group_admin
from ..consumers.consumer import Consumer
from ..consumers.options import DEFAULT_SETTINGS as _DEFAULT
from ..memory import collector_paused
from ..structs import GroupBoard, GroupStatus, MemberInfo, TableBucket
from ..tables import catalog as _tables

if TYPE_CHECKING:
    import pandas as pd

    from ..context import Context
    from ..table import Table

__all__ = ["GroupMethods"]


class GroupMethods:
    """Consumer and group methods of ``Connection``; they act on its context."""

    _context: Context

    def consumer(
        self,
        *tables: str | Table,
        group_id: str | None = _DEFAULT.group_id,
        auto_offset_reset: str = _DEFAULT.auto_offset_reset,
        enable_auto_commit: bool = _DEFAULT.enable_auto_commit,
        auto_commit_interval: Any = _DEFAULT.auto_commit_interval,
        session_timeout: Any = _DEFAULT.session_timeout,
        assignor: str = _DEFAULT.assignor,
        listener: Any = _DEFAULT.listener,
        max_poll_records: int = _DEFAULT.max_poll_records,
        max_poll_interval: Any = _DEFAULT.max_poll_interval,
        parent_first: bool = _DEFAULT.parent_first,
    ) -> Consumer:
        """A consumer of ``tables`` (every bucket); with ``group_id`` it commits for that group.

        Arguments:
            tables: the tables to read (names or ``Table``); none to ``subscribe`` later.
            group_id: the consumer group; ``None`` for a consumer without a group.
            auto_offset_reset: "earliest", "latest" or "none": where to start without a
                committed offset.
            enable_auto_commit: commit the positions every ``auto_commit_interval``.
            auto_commit_interval: how often to commit (a duration).
            session_timeout: how long a silent member stays in the group (a duration).
            assignor: how buckets are spread over members: "sticky", "range" or "roundrobin".
            listener: a ``BucketRebalanceListener`` told of revoked and assigned buckets.
            max_poll_records: the most records one ``poll`` returns.
            max_poll_interval: the longest time between polls before the member leaves.
            parent_first: read a bucket made by a split or merge only once its parents are
                read to their seals (a group: committed); False reads it at once (K5). A new
                bucket without a committed offset starts at its beginning, whatever
                ``auto_offset_reset`` says (K6).

        Returns:
            The ``Consumer`` (it joins its group on the first poll).

        Raises:
            InvalidArgumentError, InvalidTypeError: a bad option.
            TableNotFoundError: a table does not exist.
        """
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
            parent_first=parent_first,
        )

    def consumer_groups(self) -> list[str]:
        """The consumer groups of the namespace.

        Returns:
            The ids of groups with stored offsets or live members, sorted.
        """
        return group_admin.consumer_groups(self._context)

    @collector_paused()
    def describe_group(self, group_id: str) -> pd.DataFrame:
        """The group's position in every bucket it reads, measured now (docs/consumers.md).

        Arguments:
            group_id: the group.

        Returns:
            A DataFrame with one row per bucket: committed offset, log end, lag and time lag,
            the owning member, last commit and status.

        Raises:
            InvalidArgumentError: a bad ``group_id``.
            CorruptMetadataError: the group's stored records cannot be read.
        """
        return group_admin.describe_group(self._context, group_id)

    def group_board(
        self,
        group_id: str,
        *,
        stop_after: timedelta = timedelta(seconds=60),
        stall_after: timedelta = timedelta(seconds=60),
    ) -> GroupBoard:
        """Read a consumer group once, as a dashboard shows it (the round trips of
        ``describe_group``): each bucket's row with its commit metadata, and the live members.
        Its lag over time is ``lag_history``.

        Arguments:
            group_id: the group.
            stop_after: Burrow's STOP threshold (rule 3 of the health rules).
            stall_after: Burrow's STALL threshold (rule 5).

        Returns:
            The group's ``GroupBoard``.

        Raises:
            InvalidArgumentError: ``group_id`` is not a valid id.
            ZooKeeperUnavailableError: ZooKeeper did not answer.
            IllegalStateError: the connection is closed.
        """
        return group_admin.group_board(
            self._context, group_id, stop_after=stop_after, stall_after=stall_after
        )

    def group_members(self, group_id: str) -> list[MemberInfo]:
        """The group's live members.

        Arguments:
            group_id: the group.

        Returns:
            One ``MemberInfo`` per live member, with the buckets it owns.

        Raises:
            InvalidArgumentError: a bad ``group_id``.
        """
        return group_admin.group_members(self._context, group_id)

    @collector_paused()
    def group_status(
        self, group_id: str, *, stop_after: Any = "60s", stall_after: Any = "60s"
    ) -> GroupStatus:
        """Lag health of the group and of each committed bucket (docs/consumers.md).

        Arguments:
            group_id: the group.
            stop_after: a bucket no live member owns, with lag and no commit for this long,
                is "STOP" (a duration).
            stall_after: an owned bucket with lag and no commit for this long is "STALL".

        Returns:
            The ``GroupStatus``: the worst status, each bucket's, the generation and the
            buckets no live member owns.

        Raises:
            InvalidArgumentError: a bad ``group_id``.
            InvalidDurationError: a bad ``stop_after`` or ``stall_after``.
        """
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
        plan: pd.DataFrame | None = None,
    ) -> pd.DataFrame:
        """Move the group's committed offsets; only a plan unless ``dry_run=False`` (C13).

        Arguments:
            group_id: the group, which must have no live members.
            to: "earliest", "latest", "current", an offset, a datetime or a timedelta (that
                long ago); exactly one of ``to`` and ``shift_by``.
            shift_by: move every offset by this many records.
            tables: only these tables (default: every table the group committed).
            buckets: only these ``TableBucket`` values; without ``tables``, their tables,
                whether the group committed to them or not.
            dry_run: compute the plan and write nothing.
            plan: a dry run's result to carry out exactly: each of its buckets gets its
                ``new_offset`` provided its committed offset is still the plan's
                ``current_offset`` (checked in the commit's transaction); not with ``to``,
                ``shift_by``, ``tables`` or ``buckets``. With ``dry_run`` it is only checked.

        Returns:
            The plan as a DataFrame, one row per bucket, new offsets clamped to the bucket's
            range (``clamped`` says where).

        Raises:
            GroupNotEmptyError: the group has live members.
            CommitFailedError: with ``plan``: an offset changed since the plan was made, or a
                planned offset left its bucket's log (the message names the buckets); nothing
                was written.
            InvalidArgumentError, InvalidTypeError: bad arguments, before anything is written.
            TableNotFoundError: a table does not exist.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        return group_admin.reset_offsets(
            self._context,
            group_id,
            to=to,
            shift_by=shift_by,
            tables=tables,
            buckets=buckets,
            dry_run=dry_run,
            plan=plan,
        )

    def delete_group(self, group_id: str) -> bool:
        """Delete a group and its offsets.

        Arguments:
            group_id: the group.

        Returns:
            True if it was deleted, False if it did not exist.

        Raises:
            GroupNotEmptyError: the group has live members.
            InvalidArgumentError: a bad ``group_id``.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        return group_admin.delete_group(self._context, group_id)

    def delete_offsets(self, group_id: str, buckets: Iterable[TableBucket]) -> int:
        """Delete the group's committed offsets of ``buckets``.

        Arguments:
            group_id: the group.
            buckets: the ``TableBucket`` values whose offsets go.

        Returns:
            How many committed offsets there were.

        Raises:
            InvalidArgumentError: a bad ``group_id``.
            InvalidTypeError: ``buckets`` is not a collection of ``TableBucket``.
            TableNotFoundError: a table does not exist.
            PermissionDeniedError: this connection's credentials may not write the namespace.
        """
        return group_admin.delete_offsets(self._context, group_id, buckets)
