"""Writes of ``format("leasekit")``: the stream sink (D4) and batch appends. Executors match input
columns to the table's (``_op`` honoured), route rows by the layout taken on the driver and write
segment files under a held write marker per task; the driver commits a batch's files at once (a
stream's with its batch marker), checking the markers in every transaction, and deletes them
after its commit or abort (R4, W2: orphan cleanup never races a commit)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from ..connection import context_of
from ..errors import IllegalStateError, InvalidArgumentError, TableNotFoundError
from ..log.append import SegmentFile, commit_segments
from ..log.batch_marks import BatchMark, mark_ops, read_mark
from ..log.markers import hold, in_flight, release
from ..log.segments import OP_COLUMN, ROW_GROUP_RECORDS, log_schema
from ..tables import schema as schemas
from ..tables.bucketing import murmur3_hash
from ..warehouse import Warehouse
from .connect import check_namespace, connection, table_of
from .report import reported

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from ..structs import OffsetRange, TableBucket
    from ..tables.info import TableInfo
    from ..tables.layout import BucketLayout
    from .options import SourceOptions

__all__ = ["SinkFiles", "batch_writer", "stream_writer", "write_files", "commit_batch"]

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The task property naming the streaming query (its id, kept across restarts)."""
IGNORED_COLUMNS = ("_bucket", "_offset", "_timestamp")
"""Columns of a leasekit stream that a sink drops: the target assigns its own."""
OPS = ("upsert", "delete")


@dataclass
class SinkFiles(WriterCommitMessage):
    """What one task wrote: its segment files, and the streaming query it wrote for."""

    files: tuple[SegmentFile, ...]
    """Complete segment files, not yet committed."""
    query_id: str | None
    """The streaming query's id (None in a batch write)."""


class SinkPlan(NamedTuple):
    """What executors need to write a table's segment files, without ZooKeeper (pickled)."""

    opts: SourceOptions
    """The data source's options (the commit opens its connection from them)."""
    table: str
    """The table's name."""
    table_id: str
    """The table's id when the write was planned: a table dropped and created again since is
    another table."""
    data_dir: str
    """Warehouse-relative directory of the table's files."""
    warehouse: str
    """The warehouse location, with its file-system options."""
    schema: pa.Schema
    """Segment-file schema: the table's columns (non-key ones nullable) and ``_op``."""
    primary_key: tuple[str, ...]
    """The table's key columns."""
    required: tuple[str, ...]
    """Non-key NOT NULL columns: null only in delete records."""
    layout: BucketLayout
    """The bucket layout read on the driver (a rescale since is handled at commit, K1)."""
    max_rows: int
    """``log.segment.max-rows``: rows per segment file at most."""
    columns: tuple[tuple[str, str], ...]
    """(input column, table column) pairs."""
    op_column: str | None
    """The input's ``_op`` column, if it has one."""


def plan_of(table: TableInfo, schema: StructType, opts: SourceOptions) -> SinkPlan:
    """The plan of writing Spark rows of ``schema`` into ``table``.

    Raises:
        InvalidArgumentError: a column the table does not have, two matching one column, or a
            missing key column.
    """
    by_lower = {f.name.lower(): f.name for f in table.schema}
    pairs: dict[str, str] = {}
    op_column = None
    extra = []
    for name in schema.fieldNames():
        lower = name.lower()
        if lower in IGNORED_COLUMNS:
            continue
        if lower == OP_COLUMN:
            op_column = name
        elif lower not in by_lower:
            extra.append(name)
        elif by_lower[lower] in pairs:
            raise InvalidArgumentError(
                f"columns {pairs[by_lower[lower]]!r} and {name!r} both match {by_lower[lower]!r}"
            )
        else:
            pairs[by_lower[lower]] = name
    if extra:
        raise InvalidArgumentError(
            f"columns not in table {table.name!r}: {', '.join(extra)} (its columns: "
            f"{', '.join(table.schema.names)}; {', '.join(IGNORED_COLUMNS)} and _op are taken too)"
        )
    missing = [k for k in table.primary_key if k not in pairs]
    if missing:
        raise InvalidArgumentError(
            f"missing primary-key columns of table {table.name!r}: {', '.join(missing)}"
        )
    wh = table.context.warehouse
    keys = table.primary_key
    return SinkPlan(
        opts,
        table.name,
        table.table_id,
        table.data_dir,
        f"{wh.location}?{wh.options}" if wh.options else wh.location,
        log_schema(table),
        keys,
        tuple(f.name for f in table.schema if not f.nullable and f.name not in keys),
        table.layout,
        int(table.properties["log.segment.max-rows"]),
        tuple((given, column) for column, given in pairs.items()),
        op_column,
    )


def _ops(plan: SinkPlan, data: pa.Table) -> pa.Array:
    """The ``_op`` of each row: the input's, checked, or ``upsert``."""
    if plan.op_column is None:
        return pa.array(np.full(data.num_rows, "upsert", dtype=object), pa.string())
    ops = data.column(plan.op_column).combine_chunks()
    if not pa.types.is_string(ops.type) and not pa.types.is_large_string(ops.type):
        raise InvalidArgumentError(f"column {plan.op_column!r} must be a string, not {ops.type}")
    ops = ops.cast(pa.string())
    bad = pc.invert(pc.fill_null(pc.is_in(ops, pa.array(OPS)), False))
    if pc.any(bad).as_py():
        shown = sorted({repr(v) for v in pc.filter(ops, bad).to_pylist()})[:5]
        raise InvalidArgumentError(
            f"column {plan.op_column!r} must hold 'upsert' or 'delete', not {', '.join(shown)}"
        )
    return ops


def log_rows(plan: SinkPlan, data: pa.Table) -> pa.Table:
    """Input rows as log records (the segment-file schema): a delete keeps only its key.

    Raises:
        InvalidArgumentError: a null key, a null in a NOT NULL column of an upsert, a bad
            ``_op`` or a value that does not convert.
    """
    ops = _ops(plan, data)
    fields = [f for f in plan.schema if f.name != OP_COLUMN]
    names = {column: given for given, column in plan.columns}
    arrays = [
        data.column(names[f.name]) if f.name in names else pa.nulls(data.num_rows, f.type)
        for f in fields
    ]
    rows = schemas.conform(
        pa.Table.from_arrays(arrays, [f.name for f in fields]),
        pa.schema(fields),
        key_columns=plan.primary_key,
    )
    deletes = pc.equal(ops, "delete")
    columns = []
    for f in fields:
        column = rows.column(f.name)
        if f.name not in plan.primary_key:
            if f.name in plan.required:
                nulls = pc.sum(pc.and_(pc.is_null(column), pc.invert(deletes))).as_py() or 0
                if nulls:
                    raise InvalidArgumentError(
                        f"NOT NULL column {f.name!r} has {nulls} null value(s) in upserts"
                    )
            column = pc.if_else(deletes, pa.scalar(None, f.type), column)
        columns.append(column)
    return pa.Table.from_arrays([*columns, ops], schema=plan.schema)


def write_files(plan: SinkPlan, batches: Iterable[pa.RecordBatch]) -> list[SegmentFile]:
    """Write the rows of ``batches`` as segment files, one or more per bucket, in row order
    within each bucket, under a held write marker made first (``log.markers.hold``): the
    driver's commit checks it and its commit or abort deletes it (R4, W2)."""
    collected = list(batches)
    if not collected or not any(b.num_rows for b in collected):
        return []
    data = log_rows(plan, pa.Table.from_batches(collected))
    with connection(plan.opts) as conn:
        token = hold(context_of(conn))
    ids = plan.layout.route(murmur3_hash(data, plan.primary_key))
    order = np.argsort(ids, kind="stable")
    ids, data = ids[order], data.take(pa.array(order))
    warehouse = Warehouse(plan.warehouse)
    warehouse.open()
    bounds = np.flatnonzero(np.diff(ids)) + 1
    starts, ends = np.concatenate(([0], bounds)), np.concatenate((bounds, [len(ids)]))
    files = []
    for start, end in zip(starts.tolist(), ends.tolist()):
        bucket = int(ids[start])
        for chunk in range(start, end, plan.max_rows):
            rows = data.slice(chunk, min(plan.max_rows, end - chunk))
            rel = f"{plan.data_dir}/log/{bucket}/{token}-{uuid.uuid4().hex[:8]}.parquet"
            size = warehouse.write_parquet(rel, rows, ROW_GROUP_RECORDS)
            files.append(SegmentFile(bucket, rel, rows.num_rows, size))
    return files


def tokens_of(files: Sequence[SegmentFile]) -> list[str]:
    """The held write markers of the tasks that wrote ``files`` (their names' first part)."""
    return sorted({PurePosixPath(f.rel).name.split("-", 1)[0] for f in files})


def stream_writer(opts: SourceOptions, schema: StructType, overwrite: bool) -> LeasekitSink:
    """The sink of ``writeStream.format("leasekit").start(table)``.

    Raises:
        InvalidArgumentError: ``overwrite`` (complete output mode), or columns that do not fit.
        TableNotFoundError: no such namespace or table.
    """
    return LeasekitSink(_plan(opts, schema, overwrite))


def batch_writer(opts: SourceOptions, schema: StructType, overwrite: bool) -> LeasekitWriter:
    """The writer of ``df.write.format("leasekit").mode("append").save(table)``.

    Raises:
        InvalidArgumentError: ``overwrite`` (mode "overwrite"), or columns that do not fit.
        TableNotFoundError: no such namespace or table.
    """
    return LeasekitWriter(_plan(opts, schema, overwrite))


def _plan(opts: SourceOptions, schema: StructType, overwrite: bool) -> SinkPlan:
    if overwrite:
        raise InvalidArgumentError(
            f"format('leasekit') cannot overwrite table {opts.table!r}: a log is append-only; "
            "write with mode('append') (outputMode('append') or 'update' for a stream)"
        )
    check_namespace(opts)  # before the connection, which would make it
    with connection(opts) as conn:
        return plan_of(table_of(conn, opts), schema, opts)


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

    @reported
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkFiles:
        return SinkFiles(tuple(write_files(self.plan, iterator)), _task_query_id())

    @reported
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

    @reported
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkFiles:
        return SinkFiles(tuple(write_files(self.plan, iterator)), None)

    @reported
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = _files(messages)
        if files:
            _commit(self.plan, files, None, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _delete(self.plan, _files(messages))
