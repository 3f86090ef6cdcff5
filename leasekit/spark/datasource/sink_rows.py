"""The sink's rows on executors: input columns matched to the table's, ``_op`` honoured, rows
routed by the table's layout (captured on the driver) and written as segment files per bucket."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...connection import context_of
from ...errors import InvalidArgumentError
from ...log.append import SegmentFile
from ...log.markers import hold
from ...log.segments import OP_COLUMN, ROW_GROUP_RECORDS, log_schema
from ...tables import schema as schemas
from ...tables.bucketing import murmur3_hash
from ...warehouse import Warehouse
from .connect import connection

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from ...tables.info import TableInfo
    from ...tables.layout import BucketLayout
    from .options import SourceOptions

__all__ = ["SinkPlan", "plan_of", "write_files", "tokens_of", "IGNORED_COLUMNS"]

IGNORED_COLUMNS = ("_bucket", "_offset", "_timestamp")
"""Columns of a leasekit stream that a sink drops: the target assigns its own."""
OPS = ("upsert", "delete")


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
