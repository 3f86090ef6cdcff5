"""``spark.readStream.format("leasekit")``: a table's change log as micro-batches (D2, D3, D5):
offsets per bucket, one partition per segment file, and the group membership (``stream_member``).

An offset is ``{"stream": <id>, "buckets": {"<bucket>": <next offset>}}``. The stream id is a
uuid made at ``initialOffset`` and kept in every offset, so a query restarted from its
checkpoint keeps it: nothing tells the reader's process the Spark query id (only executor tasks
see it), so the group member is named ``spark-<stream id>-<sequence>``.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from ..consumers import offsets as stored
from ..consumers.rescales import group_buckets
from ..errors import InvalidArgumentError, LeasekitError, OffsetOutOfRangeError
from ..log.segments import OP_COLUMN, STAMP_COLUMN, list_segments
from ..log.state import read_states
from ..structs import TableBucket
from ..warehouse import io_errors
from .files import FileGone, FileSlice, open_warehouse
from .files import read_slice as read_rows
from .options import STARTS, check_stream
from .report import reported
from .stream_member import StreamMember, Termination, leave_on_sigterm, open_connection

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql.types import StructType

    from ..connection import Connection
    from ..tables.info import TableInfo
    from .options import SourceOptions

__all__ = [
    "stream_reader",
    "refused_reader",
    "LeasekitStreamReader",
    "SegmentSlice",
    "BucketRun",
    "runs_of",
    "share_limit",
    "STARTS",
]

STREAM_COLUMNS = 4
"""``_bucket``, ``_offset``, ``_timestamp``, ``_op`` come before the table's columns."""


class SegmentSlice(InputPartition):
    """Records ``[start, stop)`` of one segment file of a bucket: one Spark task."""

    def __init__(
        self,
        warehouse: str,
        file: str,
        bucket: int,
        base: int,
        start: int,
        stop: int,
        ts: int,
        merged: bool = False,
    ) -> None:
        super().__init__((bucket, start))
        self.warehouse = warehouse
        """The warehouse location (with its file-system options): executors open it alone."""
        self.file = file
        """The segment file, relative to the warehouse root."""
        self.bucket = bucket
        """The bucket the segment belongs to."""
        self.base = base
        """The segment's base offset (its first row's)."""
        self.start = start
        """First offset to read."""
        self.stop = stop
        """One past the last offset to read."""
        self.ts = ts
        """The segment's commit time (ZooKeeper clock, ms): every record's ``_timestamp`` when
        it is an appended segment."""
        self.merged = merged
        """A merged segment (R8): its file holds each record's own ``_timestamp``."""


class BucketRun(InputPartition):
    """Consecutive slices of one bucket's segment files, read in order by one Spark task."""

    def __init__(self, slices: tuple[SegmentSlice, ...]) -> None:
        super().__init__((slices[0].bucket, slices[0].start))
        self.slices = slices
        """The slices, in offset order."""


TASK_RECORDS = 250_000
"""Records one task reads at most, unless one segment slice holds more: a bucket's slices are
read by as few tasks as that allows (each Python task costs tens of milliseconds to start)."""


def runs_of(slices: list[SegmentSlice], size: int = TASK_RECORDS) -> list[BucketRun]:
    """``slices`` (in offset order per bucket) cut into runs of one bucket of at most ``size``
    records each (a larger slice makes a run alone)."""
    out: list[BucketRun] = []
    run: list[SegmentSlice] = []
    records = 0
    for part in slices:
        n = part.stop - part.start
        if run and (run[-1].bucket != part.bucket or records + n > size):
            out.append(BucketRun(tuple(run)))
            run, records = [], 0
        run.append(part)
        records += n
    if run:
        out.append(BucketRun(tuple(run)))
    return out


def stream_reader(opts: SourceOptions, schema: StructType) -> LeasekitStreamReader:
    """The stream reader of ``opts`` (checked here, on the driver).

    Raises:
        InvalidArgumentError: bad options (``check_stream``).
    """
    request = check_stream(opts)
    return LeasekitStreamReader(opts, schema, request.start, request.cap)


class RefusedStream(DataSourceStreamReader):
    """The reader of a stream whose options were refused: its first call raises the refusal,
    and it has nothing to stop."""

    def __init__(self, refusal: LeasekitError) -> None:
        self.refusal = refusal
        """The error the options were refused with."""

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    @reported
    def initialOffset(self) -> dict[str, Any]:
        raise self.refusal

    @reported
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.refusal

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return iter(())


def refused_reader(refusal: LeasekitError) -> RefusedStream:
    """A reader that raises ``refusal`` when the query starts (see ``RefusedStream``)."""
    return RefusedStream(refusal)


class LeasekitStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches of the change log. Spark pickles it to the processes that read, so
    the connection and the membership are made lazily, in the long-lived driver process that
    asks for offsets, and are never pickled."""

    def __init__(
        self, opts: SourceOptions, schema: StructType, start: str, cap: int | None
    ) -> None:
        self._opts, self._schema, self._start, self._cap = opts, schema, start, cap
        self._conn: Connection | None = None
        self._member: StreamMember | None = None
        self._until: dict[int, int] | None = None
        """With Trigger.AvailableNow, the log ends when the query started: read no further."""

    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "_conn": None, "_member": None, "_until": None}

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = open_connection(self._opts)
        return self._conn

    def _membership(self, stream_id: str) -> StreamMember:
        if self._member is not None and self._member.stream_id != stream_id:
            self._member.close()
            self._member = None
        if self._member is None:
            leave_on_sigterm(self.stop)  # before the join: a SIGTERM while joining still leaves
            self._member = StreamMember(self._connection(), self._opts, stream_id)
        return self._member

    # -- offsets ------------------------------------------------------------------------------

    @reported
    def initialOffset(self) -> dict[str, Any]:
        """A new stream id, and per bucket the group reads now where ``startingOffsets`` says."""
        conn, group = self._connection(), self._opts.get("group") or ""
        table = conn.table(self._opts.table)
        ids, _ = group_buckets(table.context, group, {table.name: table}, parent_first=True)
        buckets = list(ids.get(table.name, ()))
        states = read_states(table, buckets)
        begin = {b: (s.begin if s else 0) for b, s in zip(buckets, states)}
        end = {b: (s.end if s else 0) for b, s in zip(buckets, states)}
        if self._start == "earliest":
            chosen = begin
        elif self._start == "latest":
            chosen = end
        else:
            committed = _committed(table, group, buckets)
            chosen = {b: max(begin[b], committed.get(b, begin[b])) for b in buckets}
        return _offset(uuid.uuid4().hex, chosen)

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self._cap is None else ReadMaxRows(self._cap)

    def prepareForTriggerAvailableNow(self) -> None:
        self._until = {}  # filled at the first latestOffset, from the log ends then

    @reported
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Commit ``start`` (the end of the last completed batch) to the group, follow the
        assignment, and say how far the next batch reads (at most ``limit`` records).

        Raises:
            TableNotFoundError: the table was dropped (D5).
            GroupNotEmptyError: the group has other live members (D3).
        """
        stream_id, current = _parse(start)
        member = self._membership(stream_id)
        member.check_table()  # (D5) before the commit, which would name the table otherwise
        member.commit(current)
        assigned = member.poll()
        new = [b for b in assigned if b not in current]
        if new:  # a rescale's new buckets (K5): from their committed offset, else the beginning
            begin, _ = member.bounds(new)
            committed = member.committed(new)
            for b in new:
                current[b] = max(begin[b], committed.get(b) or 0)
        old = [b for b in assigned if b not in new]
        _, end = member.bounds(old)
        if self._until == {}:
            self._until = dict(end)
        if self._until is not None:
            end = {b: min(o, self._until.get(b, current[b])) for b, o in end.items()}
        backlog = {b: max(0, end[b] - current[b]) for b in old}
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        take = share_limit(backlog, cap)
        return _offset(stream_id, {b: current[b] + take.get(b, 0) for b in assigned})

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing: the group gets each batch's end at the next ``latestOffset``, which comes
        once the batch completed (Spark's commit trails by a batch)."""

    def stop(self) -> None:
        """Leave the group, committing nothing, and close the connection; a SIGTERM meanwhile
        waits until it is done (D3: the member leaves at once, not at its session's end)."""
        with Termination.stopping():
            member, self._member = self._member, None
            conn, self._conn = self._conn, None
            try:
                if member is not None:
                    member.close()
            finally:
                if conn is not None:
                    conn.close()

    # -- planning and reading -----------------------------------------------------------------

    @reported
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[BucketRun]:
        """The slices of the segment files overlapping each bucket's ``[start, end)``, in offset
        order, cut into runs of one bucket (``runs_of``): planned per file, never per record (a
        bucket only in ``end`` is new: read from the next batch on).

        Raises:
            OffsetOutOfRangeError: records of the range are gone (retention deleted them).
        """
        _, first = _parse(start)
        _, last = _parse(end)
        ranges = {b: (first[b], last[b]) for b in sorted(last) if b in first and last[b] > first[b]}
        if not ranges:
            return []
        conn = self._connection()
        table = conn.table(self._opts.table)
        warehouse = table.context.warehouse
        location = warehouse.location + (f"?{warehouse.options}" if warehouse.options else "")
        out: list[SegmentSlice] = []
        for bucket, segments in list_segments(table, ranges).items():
            lo, hi = ranges[bucket]
            covered = lo
            for seg in segments:
                if seg.end_offset <= covered or seg.base_offset >= hi:
                    continue
                if seg.base_offset > covered:
                    break
                stop = min(hi, seg.end_offset)
                rel = warehouse.relative(seg.file)
                merged = seg.first_timestamp_ms is not None
                part = (location, rel, bucket, seg.base_offset, covered, stop, seg.timestamp_ms)
                out.append(SegmentSlice(*part, merged))
                covered = stop
            if covered < hi:
                raise OffsetOutOfRangeError(
                    f"table {table.name} bucket {bucket}: records {covered}..{hi - 1} are gone "
                    "(retention deleted them before the stream read them)"
                )
        return runs_of(out)

    @reported
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of a ``BucketRun``, read from its files through the warehouse's file
        system (no ZooKeeper in executors), with exactly the schema's columns."""
        if not isinstance(partition, BucketRun):
            raise InvalidArgumentError(f"not a leasekit stream partition: {partition!r}")
        for part in partition.slices:
            yield from read_slice(part, self._schema)


def read_slice(part: SegmentSlice, schema: StructType) -> Iterator[pa.RecordBatch]:
    """Record batches of ``part`` in offset order, decoding only the row groups it spans."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    columns = [*schema.fieldNames()[STREAM_COLUMNS:], OP_COLUMN]
    if part.merged:
        columns.append(STAMP_COLUMN)
    rows = FileSlice(part.file, part.start - part.base, part.stop - part.base)
    try:
        data = read_rows(open_warehouse(part.warehouse), rows, columns, ())
    except FileGone:
        raise OffsetOutOfRangeError(
            f"segment file {part.file} of bucket {part.bucket} is gone (retention deleted it, or "
            "it was lost: the driver's next batch tells which)"
        ) from None
    yield from _batches(part, data, part.start, target)


def _batches(
    part: SegmentSlice, data: pa.Table, offset: int, target: pa.Schema
) -> list[pa.RecordBatch]:
    """``data`` (records from ``offset`` on) with the stream's columns, cast to ``target``."""
    n = data.num_rows
    if part.merged:  # each record's own (R8)
        stamps = data.column(STAMP_COLUMN).combine_chunks().cast(pa.int64())
    else:  # an appended segment's records all carry its commit time
        stamps = pa.array(np.full(n, part.ts, dtype=np.int64))
    arrays = [
        pa.array(np.full(n, part.bucket, dtype=np.int32)),
        pa.array(np.arange(offset, offset + n, dtype=np.int64)),
        stamps.view(pa.timestamp("ms", tz="UTC")),
        data.column(OP_COLUMN),
        *(data.column(name) for name in target.names[STREAM_COLUMNS:]),
    ]
    with io_errors(f"convert {part.file}"):
        table = pa.Table.from_arrays(arrays, names=target.names).cast(target)
        return table.combine_chunks().to_batches()


def share_limit(backlog: dict[int, int], cap: int | None) -> dict[int, int]:
    """How many records each bucket gives a batch of at most ``cap`` records (None: all): in
    proportion to its backlog, at least 1 per bucket with records (so a batch may exceed a cap
    smaller than the number of such buckets)."""
    total = sum(backlog.values())
    if cap is None or total <= cap:
        return dict(backlog)
    share = {b: min(n, max(1, cap * n // total)) if n else 0 for b, n in backlog.items()}
    left = cap - sum(share.values())
    order = sorted(backlog, key=lambda b: (backlog[b], b), reverse=True)
    for b in order:  # the rounding's remainder to the largest backlogs
        more = max(0, min(left, backlog[b] - share[b]))
        share[b] += more
        left -= more
    for b in order:  # the floors of 1 went over the cap: taken back from the largest shares
        less = max(0, min(-left, share[b] - 1))
        share[b] -= less
        left += less
    return share


def _offset(stream_id: str, buckets: dict[int, int]) -> dict[str, Any]:
    return {"stream": stream_id, "buckets": {str(b): int(o) for b, o in sorted(buckets.items())}}


def _parse(offset: dict[str, Any]) -> tuple[str, dict[int, int]]:
    """The stream id and the next offset of each bucket of an offset this reader made."""
    try:
        return str(offset["stream"]), {int(b): int(o) for b, o in offset["buckets"].items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InvalidArgumentError(
            f"not an offset of a leasekit stream (a checkpoint of another source?): {offset!r}"
        ) from None


def _committed(table: TableInfo, group: str, buckets: list[int]) -> dict[int, int]:
    """The group's committed offsets of ``buckets`` of ``table`` (those it has), read now."""
    found = stored.fetch(
        table.context, group, {table.name: table}, [TableBucket(table.name, b) for b in buckets]
    )
    return {tb.bucket: record.offset for tb, record in found.items()}
