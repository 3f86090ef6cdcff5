"""Batch reads of ``format("leasekit")`` (D1): the union read at the end offsets now, a lease's
pinned snapshots, or chosen snapshots, planned on the driver into one task per file.

Planning (``partitions``) asks ZooKeeper for the read sources (``snapshots.sources``) and makes a
task of every snapshot file and of every bucket's log tail; tasks read with pyarrow (``files``)
and need no ZooKeeper. Why the union of the tasks' rows is the KV state: per key, the records
that count are those of the sources whose key classes hold it, ordered by (lineage depth,
offset), a snapshot row first, and the last one wins unless it is a delete. These sources form
one chain (the buckets that owned the key, deepest first, down to one with a snapshot), so only
the shallowest of them has a snapshot. A snapshot file's task therefore drops the keys that its
own bucket's tail or a deeper overlapping source's tail holds; a tail's task emits the last
record of each key unless it is a delete or a deeper overlapping tail holds the key. Exactly one
task emits the key's last record, and none emits a deleted key.

Spark's Python Data Source API has no column pruning: every task returns all the table's
columns. Equality (``=``, ``IN``) on the whole primary key prunes buckets (the literal keys are
routed as appends route them); comparisons on columns of simple types are applied by pyarrow.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

from ..errors import IllegalStateError, InvalidArgumentError
from ..leases.reading import lease_sources
from ..log.segments import OP_COLUMN, list_segments
from ..log.state import read_states
from ..snapshots.catalog import snapshot_map
from ..snapshots.cover import latest_cover, snapshot_sources
from ..snapshots.sources import Source, narrower, plan_read
from .connect import check_namespace, connection, table_of
from .files import FileSlice, conform, open_warehouse, read_slice
from .options import BATCH_ONLY, CONNECTION, NAMING, STREAM_ONLY
from .pushdown import key_hashes, row_filter, supported
from .report import reported

if TYPE_CHECKING:
    from pyspark.sql.datasource import Filter
    from pyspark.sql.types import StructType

    from ..connection import Connection
    from ..tables.info import TableInfo
    from ..tables.layout import ResidueClass
    from .options import SourceOptions

__all__ = ["BatchRequest", "FilePart", "check_batch", "batch_schema", "plan_parts", "batch_reader"]


class BatchRequest(NamedTuple):
    """What a batch read reads, from its options."""

    lease: str | None
    """The ``lease`` option: read what this lease pins."""
    snapshots: str | None
    """The ``snapshots`` option: ``latest`` or a JSON object of snapshot id by bucket."""
    allow_partial: bool
    """The ``allowPartial`` option of a lease read."""


class FilePart(NamedTuple):
    """One task of a batch read: rows of some files, less the keys later records rewrote."""

    warehouse: str
    """The warehouse location (with its file-system options) the paths are relative to."""
    key: tuple[str, ...]
    """The table's primary-key columns."""
    rows: tuple[FileSlice, ...]
    """One snapshot file, or a bucket's log tail (its segments in offset order)."""
    log: bool
    """Whether ``rows`` are log records: the last one of each key counts, a delete drops it."""
    drop: tuple[FileSlice, ...]
    """Log records whose keys this task must not emit: later writes of them win elsewhere."""


def check_batch(opts: SourceOptions) -> BatchRequest:
    """The batch read ``opts`` ask for.

    Raises:
        InvalidArgumentError: a streaming option, an unknown option, both ``lease`` and
            ``snapshots``, ``allowPartial`` without ``lease`` or not true/false, or an empty
            ``lease``/``snapshots``.
    """
    for key in opts.options:
        if key in STREAM_ONLY:
            raise InvalidArgumentError(
                f"option {key!r} is for streaming reads (spark.readStream), not spark.read"
            )
        if key not in (*NAMING, *CONNECTION, *BATCH_ONLY):
            known = ", ".join(("table", *CONNECTION, "lease", "snapshots", "allowPartial"))
            raise InvalidArgumentError(
                f"format('leasekit') has no option {key!r} for batch reads (options: {known})"
            )
    lease, snapshots = opts.get("lease"), opts.get("snapshots")
    if lease is not None and snapshots is not None:
        raise InvalidArgumentError(
            "options 'lease' and 'snapshots' name two reads: give one of them"
        )
    for name, value in (("lease", lease), ("snapshots", snapshots)):
        if value is not None and not value.strip():
            raise InvalidArgumentError(f"option {name!r} is empty")
    partial = (opts.get("allowPartial") or "false").strip().lower()
    if partial not in ("true", "false"):
        raise InvalidArgumentError(f"option 'allowPartial' must be true or false, not {partial!r}")
    if partial == "true" and lease is None:
        raise InvalidArgumentError("option 'allowPartial' applies to lease reads only")
    return BatchRequest(lease, snapshots, partial == "true")


def batch_schema(opts: SourceOptions) -> str:
    """The Spark DDL of a batch read's rows, after the checks that need no planning: the
    options, the namespace, the table and, for a lease read, the lease (D1: as ``lease.read``
    checks it; ``partitions`` checks it again when the query runs).

    Raises:
        InvalidArgumentError: bad options (``check_batch``).
        TableNotFoundError: no such namespace or table.
        LeaseNotFoundError, LeaseExpiredError, NotPinnedError: as ``lease.read``.
    """
    from ..sparkio.frames import table_ddl

    request = check_batch(opts)
    check_namespace(opts)
    with connection(opts) as conn:
        table = table_of(conn, opts)
        if request.lease is not None:
            lease_sources(table.context, request.lease, table, allow_partial=request.allow_partial)
        return table_ddl(table)


def _snapshot_ids(table: TableInfo, given: str) -> dict[int, int]:
    """The snapshot id per bucket that the ``snapshots`` option names."""
    if given.strip().lower() == "latest":
        return latest_cover(table)
    try:
        parsed = json.loads(given)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        parsed = None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(
            f"option 'snapshots' must be 'latest' or a JSON object of snapshot id by bucket, "
            f'e.g. {{"0": 3, "1": 5}}, not {given!r}'
        )
    numbered: dict[int, object] = {}
    for bucket, sid in parsed.items():
        try:
            numbered[int(bucket)] = sid
        except ValueError:
            raise InvalidArgumentError(f"option 'snapshots': {bucket!r} is no bucket") from None
    return snapshot_map(table, numbered)


def _sources(table: TableInfo, request: BatchRequest, hashes: np.ndarray | None) -> list[Source]:
    """The read sources of ``request``; with ``hashes``, the union read plans only the active
    buckets owning them."""
    if request.lease is not None:
        return lease_sources(
            table.context, request.lease, table, allow_partial=request.allow_partial
        )
    if request.snapshots is not None:
        return snapshot_sources(table, _snapshot_ids(table, request.snapshots))
    active = list(table.active)
    if hashes is not None:
        owning = set(table.layout.route(hashes.astype(np.int32)).tolist())
        active = [b for b in active if b in owning]
    ends = {b: (s.end if s else 0) for b, s in zip(active, read_states(table, active))}
    return plan_read(table, ends)


def _classes(table: TableInfo, source: Source) -> tuple[ResidueClass, ...]:
    return source.within or (table.layout.residue_class(source.bucket),)


def _holds(classes: Sequence[ResidueClass], hashes: np.ndarray | None) -> bool:
    return hashes is None or any(bool(np.any(hashes % c.modulus == c.residue)) for c in classes)


def _overlap(a: Sequence[ResidueClass], b: Sequence[ResidueClass]) -> bool:
    return any(narrower(x, y) is not None for x in a for y in b)


def _tails(table: TableInfo, sources: Sequence[Source]) -> dict[int, tuple[FileSlice, ...]]:
    """Each source's log tail ``[start, end)`` as row ranges of its bucket's segments."""
    ranged = {s.bucket: s for s in sources if s.end > s.start}
    warehouse = table.context.warehouse
    out: dict[int, tuple[FileSlice, ...]] = {}
    for bucket, segments in list_segments(table, ranged).items():
        s = ranged[bucket]
        used = [g for g in segments if g.base_offset < s.end and g.end_offset > s.start]
        covered = sum(min(g.end_offset, s.end) - max(g.base_offset, s.start) for g in used)
        if covered != s.end - s.start:
            raise IllegalStateError(
                f"bucket {bucket} of {table.name!r}: log records [{s.start}, {s.end}) are not "
                "all stored (retention deleted some meanwhile); read again"
            )
        out[bucket] = tuple(
            FileSlice(
                warehouse.relative(g.file),
                max(s.start - g.base_offset, 0),
                min(s.end, g.end_offset) - g.base_offset,
                s.within,
            )
            for g in used
        )
    return out


def plan_parts(
    conn: Connection, opts: SourceOptions, filters: Sequence[Filter] = ()
) -> list[FilePart]:
    """The tasks of a batch read: one per snapshot file and one per bucket's log tail, only of
    the sources that can hold the keys ``filters`` name.

    Raises:
        InvalidArgumentError: bad options (``check_batch``) or a bad ``snapshots`` value.
        TableNotFoundError: no such table.
        BucketNotFoundError: ``snapshots`` names a bucket the table never had.
        SnapshotNotFoundError: a named or pinned snapshot is gone.
        LeaseNotFoundError, LeaseExpiredError, NotPinnedError: as ``lease.read``.
        OffsetOutOfRangeError: a bucket's log below its end is deleted and no snapshot covers it.
    """
    request = check_batch(opts)
    table = table_of(conn, opts)
    hashes = key_hashes(table, filters)
    sources = _sources(table, request, hashes)
    sources = [s for s in sources if _holds(_classes(table, s), hashes)]
    tails = _tails(table, sources)
    warehouse = table.context.warehouse
    location = (
        f"{warehouse.location}?{warehouse.options}" if warehouse.options else warehouse.location
    )
    key = tuple(table.primary_key)
    parts: list[FilePart] = []
    for s in sources:
        mine = _classes(table, s)
        later = [t for t in sources if t.depth > s.depth and _overlap(mine, _classes(table, t))]
        if any(t.snapshot is not None and t.snapshot.files for t in later):
            raise IllegalStateError(  # plan_read reads no ancestor of a bucket with a snapshot
                f"read of {table.name!r}: bucket {s.bucket} is read below a snapshot of a "
                "descendant"
            )
        rewritten = tuple(f for t in later for f in tails.get(t.bucket, ()))
        own_tail = tails.get(s.bucket, ())
        for file in s.snapshot.files if s.snapshot is not None else ():
            whole = FileSlice(warehouse.relative(file), 0, None, s.within)
            parts.append(FilePart(location, key, (whole,), False, own_tail + rewritten))
        if own_tail:
            parts.append(FilePart(location, key, own_tail, True, rewritten))
    return parts


class BatchReader(DataSourceReader):
    """A batch read of a leasekit table: planned on the driver, read by pyarrow in the tasks."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        self._opts = opts
        self._schema = schema
        self._pushed: list[Filter] = []
        check_batch(opts)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802 (Spark's name)
        """Keep the filters pyarrow applies exactly; give back the others for Spark."""
        unsupported = []
        for f in filters:
            if supported(f, self._schema):
                self._pushed.append(f)
            else:
                unsupported.append(f)
        return iter(unsupported)

    @reported
    def partitions(self) -> list[InputPartition]:
        with connection(self._opts) as conn:
            return [InputPartition(p) for p in plan_parts(conn, self._opts, self._pushed)]

    @reported
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = partition.value
        if not isinstance(part, FilePart):
            return iter(())  # Spark's stand-in partition of a read with no files
        return iter(read_part(part, self._schema, self._pushed).to_batches())


def read_part(part: FilePart, schema: StructType, filters: Sequence[Filter] = ()) -> pa.Table:
    """The rows task ``part`` emits, with exactly the columns of ``schema``, matching ``filters``.

    Raises:
        IllegalStateError: a file is gone or does not hold the table's columns.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(schema, timezone="UTC")
    warehouse = open_warehouse(part.warehouse)
    where = row_filter(filters, schema)
    key = list(part.key)
    if part.log:
        records = [read_slice(warehouse, f, [*target.names, OP_COLUMN], key) for f in part.rows]
        data = _last_per_key(pa.concat_tables(records, promote_options="permissive"), key)
    else:
        data = read_slice(warehouse, part.rows[0], target.names, key, where)
    data = conform(data, target)
    if part.drop:
        keys = [read_slice(warehouse, f, key, key) for f in part.drop]
        gone = pa.concat_tables(keys, promote_options="permissive")
        gone = conform(gone, pa.schema([target.field(k) for k in key]))
        data = data.join(gone, keys=key, join_type="left anti")
    if where is not None and part.log:
        data = data.filter(where)
    return conform(data, target)


def _last_per_key(records: pa.Table, key: list[str]) -> pa.Table:
    """The last record of each key (records in offset order), less the deleted keys."""
    if records.num_rows == 0:
        return records
    numbered = records.append_column("_row", pa.array(np.arange(records.num_rows)))
    last = numbered.group_by(key, use_threads=False).aggregate([("_row", "max")])
    kept = records.take(last.column("_row_max"))
    return kept.filter(pc.field(OP_COLUMN) != "delete")


def batch_reader(opts: SourceOptions, schema: StructType, *_: Any) -> BatchReader:
    """The reader of ``spark.read.format("leasekit")`` with these options.

    Raises:
        InvalidArgumentError: bad options (``check_batch``).
    """
    return BatchReader(opts, schema)
