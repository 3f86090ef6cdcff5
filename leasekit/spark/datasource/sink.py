"""Writes of ``format("leasekit")``: the stream sink (D4) and batch appends. Executors write
segment files, each task under a held write marker; the driver commits each batch's files at
once, a stream's with its batch marker, checking the tasks' markers in every transaction, and
deletes the markers after its commit or abort (R4, W2: orphan cleanup never races a commit).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ...connection import context_of
from ...errors import IllegalStateError, InvalidArgumentError, TableNotFoundError
from ...log.append import SegmentFile, commit_segments
from ...log.batch_marks import BatchMark, mark_ops, read_mark
from ...log.markers import in_flight, release
from ...warehouse import Warehouse
from .connect import connection
from .sink_rows import SinkPlan, plan_of, tokens_of, write_files

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from ...structs import OffsetRange, TableBucket
    from ...tables.info import TableInfo
    from .options import SourceOptions

__all__ = ["SinkFiles", "batch_writer", "stream_writer", "commit_batch", "QUERY_ID_PROPERTY"]

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The task property naming the streaming query (its id, kept across restarts)."""


@dataclass
class SinkFiles(WriterCommitMessage):
    """What one task wrote: its segment files, and the streaming query it wrote for."""

    files: tuple[SegmentFile, ...]
    """Complete segment files, not yet committed."""
    query_id: str | None
    """The streaming query's id (None in a batch write)."""


def stream_writer(opts: SourceOptions, schema: StructType, overwrite: bool) -> LeasekitSink:
    """The sink of ``writeStream.format("leasekit").start(table)``.

    Raises:
        InvalidArgumentError: ``overwrite`` (complete output mode), or columns that do not fit.
        TableNotFoundError: no such table.
    """
    return LeasekitSink(_plan(opts, schema, overwrite))


def batch_writer(opts: SourceOptions, schema: StructType, overwrite: bool) -> LeasekitWriter:
    """The writer of ``df.write.format("leasekit").mode("append").save(table)``.

    Raises:
        InvalidArgumentError: ``overwrite`` (mode "overwrite"), or columns that do not fit.
        TableNotFoundError: no such table.
    """
    return LeasekitWriter(_plan(opts, schema, overwrite))


def _plan(opts: SourceOptions, schema: StructType, overwrite: bool) -> SinkPlan:
    if overwrite:
        raise InvalidArgumentError(
            f"format('leasekit') cannot overwrite table {opts.table!r}: a log is append-only; "
            "write with mode('append') (outputMode('append') or 'update' for a stream)"
        )
    with connection(opts) as conn:
        return plan_of(conn.table(opts.table), schema, opts)


def _task_query_id() -> str | None:
    from pyspark import TaskContext

    task = TaskContext.get()
    return None if task is None else task.getLocalProperty(QUERY_ID_PROPERTY)


def _files(messages: Sequence[WriterCommitMessage | None]) -> list[SegmentFile]:
    return [f for m in messages if isinstance(m, SinkFiles) for f in m.files]


def _delete(plan: SinkPlan, files: Sequence[SegmentFile]) -> None:
    """Delete the files of an aborted write, then their tasks' markers."""
    if files:
        warehouse = Warehouse(plan.warehouse)
        warehouse.open()
        warehouse.delete_files(f.rel for f in files)
        with connection(plan.opts) as conn:
            release(context_of(conn), tokens_of(files))


def _commit(
    plan: SinkPlan, files: list[SegmentFile], query_id: str | None, batch_id: int | None
) -> dict[TableBucket, OffsetRange]:
    """Commit ``files`` to the table (with the batch marker of a stream's batch), then delete
    their tasks' markers, whatever the outcome (files not committed are orphans now)."""
    with connection(plan.opts) as conn:
        table = conn.table(plan.table)
        try:
            if table.table_id != plan.table_id:
                table.context.warehouse.delete_files(f.rel for f in files)
                raise TableNotFoundError(
                    f"table {plan.table!r} was dropped and created again while it was written "
                    "to; nothing of this batch was committed"
                )
            if query_id is None or batch_id is None:
                with in_flight(table.context) as token:
                    _check_present(table, files)
                    return commit_segments(table, files, token, held=tokens_of(files))
            return commit_batch(table, files, query_id, batch_id)
        finally:
            release(context_of(conn), tokens_of(files))


def commit_batch(
    table: TableInfo, files: list[SegmentFile], query_id: str, batch_id: int
) -> dict[TableBucket, OffsetRange]:
    """Commit the files of micro-batch ``batch_id`` of query ``query_id`` once (D4).

    A batch the query's marker says is committed has its (replayed) files deleted and commits
    nothing; one committed in part commits only the buckets it misses.

    Returns:
        The offsets assigned, per bucket (empty for a replay of a committed batch).

    Raises:
        PartialAppendError: only some buckets committed; the marker records which, so Spark's
            replay of the batch commits the rest.
    """
    ctx = table.context
    mark = BatchMark(ctx.paths.sink(table.table_id, _check_query_id(query_id)), batch_id)
    old = read_mark(ctx, mark.path)
    if old is not None and old.batch >= batch_id:
        ctx.warehouse.delete_files(f.rel for f in files)
        return {}
    if old is not None and old.pending == batch_id:
        done = set(old.buckets)
        ctx.warehouse.delete_files(f.rel for f in files if f.bucket in done)
        files = [f for f in files if f.bucket not in done]
        if not files:
            ctx.store.commit_retrying(
                lambda: mark_ops(ctx, mark, [], True), what=f"mark batch {batch_id} committed"
            )
            return {}
    if not files:
        return {}  # an empty batch: nothing to commit, and its replay appends nothing either
    with in_flight(ctx) as token:
        _check_present(table, files)
        return commit_segments(table, files, token, mark=mark, held=tokens_of(files))


def _check_query_id(query_id: str) -> str:
    if not query_id or not all(c.isalnum() or c == "-" for c in query_id):
        raise InvalidArgumentError(f"not a streaming query id: {query_id!r}")
    return query_id


def _check_present(table: TableInfo, files: Sequence[SegmentFile]) -> None:
    """Refuse to commit files that are gone (taken for orphans since they were written)."""
    gone = [f.rel for f in files if not table.context.warehouse.exists(f.rel)]
    if gone:
        raise IllegalStateError(
            f"{len(gone)} file(s) written for {table.name!r} are gone before their commit "
            f"(e.g. {gone[0]}): was orphan cleanup run with a tiny orphan.min-age? "
            "Nothing was committed; the batch fails"
        )


class LeasekitSink(DataSourceStreamArrowWriter):
    """Writes each micro-batch's rows as segment files in executor tasks; the driver commits a
    batch's files in one ZooKeeper transaction with the query's batch marker (D4)."""

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkFiles:
        return SinkFiles(tuple(write_files(self.plan, iterator)), _task_query_id())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        files = _files(messages)
        ids = {m.query_id for m in messages if isinstance(m, SinkFiles) and m.files}
        if len(ids) > 1 or None in ids:
            _delete(self.plan, files)
            raise IllegalStateError(
                f"the tasks of batch {batchId} name no single streaming query: "
                f"{sorted(map(str, ids))}"
            )
        if files:
            _commit(self.plan, files, ids.pop(), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _delete(self.plan, _files(messages))


class LeasekitWriter(DataSourceArrowWriter):
    """Writes a DataFrame's rows as segment files in executor tasks; the driver commits them all
    at once (one transaction unless the bucket count needs more)."""

    def __init__(self, plan: SinkPlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkFiles:
        return SinkFiles(tuple(write_files(self.plan, iterator)), None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = _files(messages)
        if files:
            _commit(self.plan, files, None, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _delete(self.plan, _files(messages))
