"""The fetcher of a consumer: positions of the assigned buckets and the reset policy (C5),
seeks (C6), offsets looked up without moving (C7), and the records read but not handed out yet;
it hands out records from the positions and moves them past what it hands out only (C1)."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import (
    DataFileMissingError,
    InvalidTypeError,
    NoOffsetForBucketError,
    OffsetOutOfRangeError,
    TableNotFoundError,
)
from ..structs import Record, TableBucket
from . import offsets as stored
from .buffer import Buffered
from .log_view import Bounds, LogView, SegmentGone

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator
    from .no_group import NoGroupCoordinator
    from .options import ConsumerOptions
    from .subscription import BucketState, SubscriptionState

__all__ = ["Fetcher"]


class Fetcher:
    """Reads the assigned, unpaused buckets of ``subscription`` from their positions through
    ``log``; a bucket without a position starts from the offset ``coordinator`` has committed
    for it, else by the reset policy of ``options``."""

    def __init__(
        self,
        subscription: SubscriptionState,
        log: LogView,
        coordinator: GroupCoordinator | NoGroupCoordinator,
        options: ConsumerOptions,
    ) -> None:
        self._sub, self._log, self._coordinator = subscription, log, coordinator
        self.reset = options.reset
        """The reset policy (C5): "earliest", "latest" or "none"."""
        self.max_poll_records = options.max_poll_records
        self._buffers: dict[TableBucket, Buffered] = {}
        self._last: TableBucket | None = None
        """The bucket take_one handed a record of last: the next comes from its buffer first."""
        self._turn = itertools.count()
        self._seen_assignment = subscription.assignments
        self._reset_at: dict[TableBucket, int] = {}
        """Buckets the reset policy positioned, not sealed then: where (``_reached_seals``)."""
        self._reset_seen = -1
        """The log view's version when they were last looked at."""

    def wait(self, timeout: float, ready: Callable[[], bool]) -> bool:
        """Wait up to ``timeout`` seconds until ``ready()`` holds (re-checked when a watched
        bucket's log changes, or on ``wake``); whether it holds."""
        return self._log.wait(timeout, ready)

    def wake(self) -> None:
        """Wake ``wait`` (a change it does not watch: a pause, a seek, a close)."""
        self._log.wake()

    def sync_assignment(self) -> None:
        """After the assignment changed: buckets that left it are not watched any more and
        their buffered records go (a revoked bucket's are never handed out, C1)."""
        if self._seen_assignment == self._sub.assignments:
            return
        self._seen_assignment = self._sub.assignments
        assigned = set(self._sub.assignment())
        stale = [tb for tb in {*self._log.watched(), *self._buffers} if tb not in assigned]
        for tb in stale:
            self._buffers.pop(tb, None)
        self._log.unwatch(stale)
        self._log.wake()

    def has_records_ahead(self) -> bool:
        """Whether a fetchable bucket's log end is past its position (or it has none yet)."""
        for tb in self._sub.fetchable():
            bounds = self._log.bounds(tb)
            position = self._sub.state(tb).position
            if bounds is not None and (position is None or position != bounds.end):
                return True
        return False

    # -- handing out records (C1) -------------------------------------------------------------

    def take_one(self) -> Record | None:
        """The next record of the bucket ``take_one`` served last, while it has buffered ones;
        else of the next bucket with records."""
        tb = self._last
        if (
            tb is not None
            and self._sub.is_assigned(tb)
            and not self._sub.state(tb).paused
            and not self._sub.is_gone(tb)
        ):  # (in O(1): no list of all)
            state = self._sub.state(tb)
            buffer = None if state.position is None else self._buffered(tb, state.position)
            if buffer is not None:
                record = buffer.record(tb)
                state.position = record.offset + 1  # C1
                return record
        return self.fetch_one()

    def fetch_one(self) -> Record | None:
        """The next record of the next bucket with records (round robin), or None."""
        order = self._round_robin()
        now = int(time.time() * 1000)
        for tb, state in order:
            buffer = self._next_batch(tb, state, self.max_poll_records, now)
            if buffer is not None:
                self._last = tb
                record = buffer.record(tb)
                state.position = record.offset + 1  # C1
                return record
        return None

    def fetch(self, limit: int) -> dict[TableBucket, pa.Table]:
        """Up to ``limit`` records, buffered ones first, reading buckets whose buffer is empty
        (round robin); positions move past what is handed out only (C1). A bucket whose file is
        lost raises ``DataFileMissingError`` when nothing was read before it."""
        out: dict[TableBucket, pa.Table] = {}
        order = self._round_robin()
        now = int(time.time() * 1000)
        for tb, state in order:
            if limit <= 0:
                break
            try:
                buffer = self._next_batch(tb, state, limit, now)
            except DataFileMissingError:
                if out:  # what is read is handed out; the bucket raises again at the next poll
                    return out
                raise
            if buffer is not None:
                out[tb] = data = buffer.table(limit)
                state.position += data.num_rows  # C1
                limit -= data.num_rows
        return out

    def _round_robin(self) -> list[tuple[TableBucket, BucketState]]:
        """The fetchable buckets, watched, with positions and their segments indexed, starting
        one further at each call."""
        buckets = self._sub.fetchable()
        if not buckets:
            return []
        self._log.watch(buckets)
        self.ensure_positions(buckets)
        self._reached_seals()
        states = {tb: self._sub.state(tb) for tb in buckets}
        readable = {}
        for tb, state in states.items():
            bounds = self._log.bounds(tb)
            if bounds is not None and bounds.begin <= state.position < bounds.end:
                readable[tb] = state.position
        self._log.prepare(readable)
        start = next(self._turn) % len(buckets)
        return [(tb, states[tb]) for tb in buckets[start:] + buckets[:start]]

    def _next_batch(
        self, tb: TableBucket, state: BucketState, limit: int, now: int
    ) -> Buffered | None:
        """The bucket's buffered records, else up to ``limit`` read now; None when none."""
        buffer = self._buffered(tb, state.position)
        if buffer is None:
            data = self._read(tb, state, limit, now)
            if data is None:
                return None
            buffer = self._buffers[tb] = Buffered(data, state.position)
        state.last_poll = now
        return buffer

    def _read(self, tb: TableBucket, state: BucketState, limit: int, now: int) -> pa.Table | None:
        """Records of ``tb`` from ``state.position`` (reset first when it is outside the log)."""
        bounds = self._log.bounds(tb) or self._log.refresh_bounds([tb])[tb]
        state.highwater, state.last_poll = bounds.end, now
        position = state.position
        if not bounds.begin <= position <= bounds.end:
            bounds = self._log.refresh_bounds([tb])[tb]
            if bounds.end == 0 and self._sub.dropped(tb.table):  # no reset: its buckets leave
                self._sub.mark_gone(tb)  # the subscription at a coming poll (C17)
                return None
            if not bounds.begin <= position <= bounds.end:
                position = self._reset_position(tb, state, bounds)
        if position >= bounds.end:
            return None
        try:
            data = self._log.read(tb, position, limit)
        except SegmentGone:
            data = None
        if data is None:  # retention deleted the segment under us (C5)
            fresh = self._log.refresh_bounds([tb])[tb]
            if position < fresh.begin:
                self._reset_position(tb, state, fresh)
            return None
        return data  # from ``state.position`` (reset above when it was out of range)

    def _buffered(self, tb: TableBucket, position: int) -> Buffered | None:
        """The bucket's buffered records if some are left and the first is at ``position``
        (a seek or a reset elsewhere makes them stale: they are dropped)."""
        buffer = self._buffers.get(tb)
        if buffer is not None and (buffer.left <= 0 or buffer.next_offset != position):
            del self._buffers[tb]
            return None
        return buffer

    # -- positions, and the reset policy (C5) -------------------------------------------------

    def ensure_positions(self, buckets: list[TableBucket]) -> None:
        """Give each of ``buckets`` without a position its committed offset, else its beginning
        (a bucket made by a rescale, when a parent was consumed, K6), else one by the reset
        policy (C5; a reset to a sealed bucket's seal is told to the coordinator, K5);
        ``NoOffsetForBucketError`` with "none"."""
        missing = self._sub.without_position(buckets)
        if not missing:
            return
        committed = self._coordinator.starting_offsets(missing)
        new = [tb for tb in missing if tb not in committed and self._sub.made_by_rescale(tb)]
        fresh = self._coordinator.from_beginning(new) if new else set()
        known = {tb: self._log.bounds(tb) for tb in missing}  # watched: current already
        bounds = {tb: b for tb, b in known.items() if b is not None}
        bounds.update(self._log.refresh_bounds([tb for tb in missing if tb not in bounds]))
        for tb in missing:
            state, record = self._sub.state(tb), committed.get(tb)
            if record is not None:
                state.position = record.offset
            elif tb in fresh:  # K6: read after parents it consumed, all of it is new
                state.position = bounds[tb].begin
            elif self.reset == "none":
                made = " (nor a consumed parent: it was made by a rescale)" if tb in new else ""
                raise NoOffsetForBucketError(
                    f"{tb} has no committed offset{made} and auto_offset_reset is 'none'"
                )
            else:
                state.position = bounds[tb].begin if self.reset == "earliest" else bounds[tb].end
                if not self._at_seal(tb, state.position, consumed=False):
                    self._reset_at[tb] = state.position

    def _reached_seals(self) -> None:
        """K5: a bucket the reset policy positioned before a rescale sealed it, with nothing
        handed out since, sits at its seal: the coordinator drains it for the group as after a
        reset to the seal (nothing handed out is committed), its children read from 0 (it was
        inside it, K6). Looked at only when watched bounds changed."""
        if not self._reset_at or self._log.version == self._reset_seen:
            return
        self._reset_seen = self._log.version
        for tb, at in list(self._reset_at.items()):
            bounds = self._log.bounds(tb)
            if not self._sub.is_assigned(tb) or self._sub.state(tb).position != at:
                del self._reset_at[tb]  # handed out records, or moved: the caller's commits count
            elif bounds is not None and bounds.sealed:
                del self._reset_at[tb]
                if bounds.end == at:
                    with contextlib.suppress(TableNotFoundError):  # dropped: it leaves anyway
                        self._sub.table_of(tb).refresh()  # its layout with the seal
                        self._at_seal(tb, at, consumed=True)

    def _at_seal(self, tb: TableBucket, position: int, *, consumed: bool) -> bool:
        """After a reset to ``position``: when that is the seal of the sealed ``tb`` (not sealed
        empty), the coordinator drains it for the group (K5); ``consumed``: the consumer was
        inside it before (its children are then read from 0, K6). Whether it was sealed."""
        sealed = self._sub.table_of(tb).layout.sealed_at(tb.bucket)
        if sealed is not None and position > 0 and sealed == position:
            self._coordinator.reset_to_seal(tb, position, consumed=consumed)
        return sealed is not None

    def _reset_position(self, tb: TableBucket, state: BucketState, bounds: Bounds) -> int:
        """Move ``state``, whose position ``bounds`` do not hold, by the reset policy; the new
        position. ``OffsetOutOfRangeError`` with "none"."""
        if self.reset == "none":
            raise OffsetOutOfRangeError(
                f"position {state.position} of {tb} is outside its log "
                f"[{bounds.begin}, {bounds.end}]"
            )
        state.position = bounds.begin if self.reset == "earliest" else bounds.end
        self._at_seal(tb, state.position, consumed=True)
        return state.position

    def position(self, tb: TableBucket) -> int:
        """The offset of the next record to hand out of the assigned bucket ``tb`` (C1)."""
        state = self._sub.state(tb)
        self.ensure_positions([tb])
        return state.position

    def seek(self, tb: TableBucket, offset: int) -> None:
        """Make ``offset`` (checked) the next to hand out of the assigned bucket ``tb`` (C6)."""
        self._sub.state(tb)
        self._move(tb, stored.check_offset(offset, "offset"))

    def seek_to_beginning(self, tbs: tuple[TableBucket, ...]) -> None:
        for tb, bounds in self._log.refresh_bounds(self._targets(tbs)).items():
            self._move(tb, bounds.begin)

    def seek_to_end(self, tbs: tuple[TableBucket, ...]) -> None:
        for tb, bounds in self._log.refresh_bounds(self._targets(tbs)).items():
            self._move(tb, bounds.end)

    def seek_to_committed(self, tbs: tuple[TableBucket, ...]) -> dict[TableBucket, int | None]:
        """Move to the committed offsets (a committed 0 included, C6); buckets without one get
        the reset policy. Returns the committed offsets."""
        targets = self._targets(tbs)
        committed = self._coordinator.fetch_committed(targets)
        for tb in targets:
            if tb in committed:
                self._move(tb, committed[tb].offset)
            else:
                self._sub.state(tb).position = None
                self.ensure_positions([tb])
        return {tb: committed[tb].offset if tb in committed else None for tb in targets}

    def _move(self, tb: TableBucket, offset: int) -> None:
        self._sub.state(tb).position = offset
        self._buffers.pop(tb, None)  # its buffered records are not the next any more
        self._log.wake()

    def _targets(self, tbs: tuple[TableBucket, ...]) -> list[TableBucket]:
        """``tbs`` (each assigned), or the whole assignment when none is given."""
        for tb in tbs:
            self._sub.state(tb)
        return list(tbs) if tbs else self._sub.assignment()

    def highwater(self, tb: TableBucket) -> int | None:
        """The log end of the assigned ``tb`` as of the last fetch that looked at it."""
        return self._sub.state(tb).highwater

    def last_poll_timestamp(self, tb: TableBucket) -> int | None:
        """Epoch ms of the last fetch that looked at the assigned ``tb``."""
        return self._sub.state(tb).last_poll

    # -- offsets without moving (C7) ------------------------------------------------------

    def bounds_now(self, tbs: Iterable[TableBucket]) -> dict[TableBucket, Bounds]:
        """The log bounds of ``tbs`` (any buckets of existing tables), read now."""
        if isinstance(tbs, TableBucket) or not isinstance(tbs, Iterable):
            raise InvalidTypeError("give a collection of TableBucket")
        wanted = list(tbs)
        for tb in wanted:
            self._sub.table_of(tb)
        return self._log.refresh_bounds(wanted)

    def offsets_for_times(
        self, timestamps: Mapping[TableBucket, int]
    ) -> dict[TableBucket, int | None]:
        """Per bucket, the earliest offset whose timestamp is >= the given epoch ms; None if
        none."""
        if not isinstance(timestamps, Mapping):
            raise InvalidTypeError("timestamps must be a mapping of TableBucket to epoch ms")
        for tb, ts in timestamps.items():
            self._sub.table_of(tb)
            stored.check_offset(ts, f"timestamp of {tb} (epoch ms)")
        bounds = self.bounds_now(timestamps)
        return {
            tb: self._log.offset_for_time(tb, ts, bounds[tb].begin) for tb, ts in timestamps.items()
        }

    def close(self) -> None:
        self._buffers.clear()
        self._log.wake()
        self._log.close()
