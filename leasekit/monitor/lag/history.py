"""The lag history (M1): samples of every consumer group's buckets, appended to the internal
table ``__lag_history`` of the namespace, one append per sample, and read back by time with
pyarrow from only the log segments whose commit times can hold the samples asked for.

Several samplers may run (the janitor's leader, ``leasekit exporter``s): each claims a sample
with a compare-and-set of the last sample time on one znode, so a namespace gets at most one
sample per ``monitor.interval``.
"""

from __future__ import annotations

import bisect
import logging
import threading
import uuid
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from ...durations import to_ms
from ...errors import TableExistsError, TableNotFoundError
from ...log.append import SegmentFile, commit_segments
from ...log.markers import in_flight
from ...log.segments import OP_COLUMN, decode_segment, log_schema
from ...structs import LogSegment, TableBucket
from ...tables.catalog import create_table, load_table
from ...validate import LAG_HISTORY_TABLE
from ...zk import ConflictReason, Create, GetChildren, GetData, Node, SetData, TxnConflict
from ...zk.formats import BucketState
from ...zk.monitor_formats import SamplerRecord
from .history_files import read_files
from .readings import GroupReading, read_all_groups

if TYPE_CHECKING:
    from ...context import Context
    from ...tables.info import TableInfo

__all__ = [
    "HISTORY_TABLE",
    "HISTORY_SCHEMA",
    "HistoryRow",
    "sample",
    "rows_of",
    "append_rows",
    "read_rows",
    "sampler_path",
    "history_table",
]

log = logging.getLogger(__name__)

HISTORY_TABLE = LAG_HISTORY_TABLE
"""The namespace's internal table of lag samples (hidden from table listings)."""

HISTORY_SCHEMA = pa.schema(
    [
        pa.field("time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("table", pa.string(), nullable=False),
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("committed", pa.int64()),
        pa.field("end", pa.int64()),
        pa.field("lag", pa.int64()),
        pa.field("time_lag_ms", pa.int64()),
    ]
)
"""A sample row: one bucket of one group at one time; each key is written once."""
HISTORY_KEY = ("group", "table", "bucket", "time")

ROWS_PER_GROUP = 1024
"""Rows per Parquet row group of a sample file: rows are sorted by group, so a read of one
group skips the row groups of the others by their statistics."""

COMMIT_SLACK_MS = 60_000
"""A sample is committed within this long after its reading: a segment committed later than
``until`` + this holds no sample taken before ``until``."""

CLAIM_TOLERANCE = 0.05
"""A sample is due once 95% of ``monitor.interval`` has passed since the last one, so that a
sampler woken every interval never skips one for a few milliseconds of jitter."""


class HistoryRow(NamedTuple):
    """One sampled bucket of one group."""

    time_ms: int
    """ZooKeeper time of the sample (epoch ms)."""
    group: str
    table: str
    bucket: int
    committed: int | None
    """The committed offset; None when never committed."""
    end: int
    """The log end offset."""
    lag: int | None
    """end - committed (at least 0); None when never committed."""
    time_lag_ms: int | None
    """How old the first record not consumed was; 0 with no lag; None when never committed."""


def sampler_path(ctx: Context) -> str:
    """The znode that holds the time of the namespace's last sample."""
    return f"{ctx.paths.root}/monitor/sampler"


def sample(ctx: Context, *, force: bool = False) -> int:
    """Sample every consumer group of the namespace, live or stopped, into the lag history,
    unless another sampler did less than ``monitor.interval`` ago (M1), or ``force``.

    The last sample's time is claimed with a compare-and-set on one znode before the append,
    so of several samplers (the janitor's leader, ``leasekit exporter``s) one writes per
    interval; a namespace without groups writes nothing.

    Arguments:
        ctx: the connection's context.
        force: sample now however recent the last sample is (the demo samples after each of
            its batches); the compare-and-set still lets one of racing samplers write.

    Returns:
        The rows written: one per bucket of every group; 0 when no sample was due, another
        sampler took it, or there is no group.

    Raises:
        CorruptMetadataError: the namespace settings, the sampler's znode or a bucket's
            metadata cannot be read (groups whose znodes hold garbage are left out, logged).
        PermissionDeniedError: this connection's credentials may not write the namespace.
        ZooKeeperUnavailableError: ZooKeeper did not answer.
    """
    interval_ms = to_ms(ctx.settings()["monitor.interval"])
    path = sampler_path(ctx)
    node = ctx.store.get(path)
    if node is not None:
        last = SamplerRecord.decode(node.data, path).last_ms
        if not force and ctx.server_time_ms() - last < interval_ms * (1 - CLAIM_TOLERANCE):
            return 0
    ctx.ensure_writable("sample the lag history")  # before reading anything for nothing
    skipped: list[str] = []
    readings = read_all_groups(ctx, skipped=skipped)
    for reason in skipped:
        log.warning("lag history sample skipped %s", reason)
    rows = rows_of(readings)
    if not rows or not _claim(ctx, node, rows[0].time_ms):
        return 0
    return append_rows(ctx, rows)


def _claim(ctx: Context, node: Node | None, time_ms: int) -> bool:
    """Whether this sampler takes the sample of ``time_ms``: a compare-and-set of the sampler
    znode at the version it was read (``node``; None: create it), so that of samplers racing
    for one interval exactly one wins."""
    path = sampler_path(ctx)
    record = SamplerRecord(time_ms, ctx.owner).encode()
    try:
        if node is None:
            ctx.store.ensure_path(path.rsplit("/", 1)[0])
            ctx.store.commit([Create(path, record)])
        else:
            ctx.store.commit([SetData(path, record, node.stat.version)])
    except TxnConflict as exc:
        if exc.reason in (ConflictReason.EXISTS, ConflictReason.VERSION, ConflictReason.NONODE):
            return False  # another sampler claimed it first
        raise
    return True


def rows_of(readings: Iterable[GroupReading]) -> list[HistoryRow]:
    """The history rows of group readings: every bucket of every group."""
    return [
        HistoryRow(
            r.time_ms,
            r.group,
            b.table_bucket.table,
            b.table_bucket.bucket,
            b.current_offset,
            b.log_end_offset,
            b.lag,
            b.time_lag_ms,
        )
        for r in readings
        for b in r.buckets
    ]


def history_table(ctx: Context) -> TableInfo | None:
    """The namespace's lag-history table; None before its first sample."""
    try:
        return load_table(ctx, HISTORY_TABLE, internal=True)
    except TableNotFoundError:
        return None


def _created_table(ctx: Context) -> TableInfo:
    """The namespace's lag-history table, created when missing."""
    table = history_table(ctx)
    if table is not None:
        return table
    try:
        return create_table(ctx, HISTORY_TABLE, HISTORY_SCHEMA, HISTORY_KEY, 1, internal=True)
    except TableExistsError:  # another sampler created it meanwhile
        return load_table(ctx, HISTORY_TABLE, internal=True)


def append_rows(ctx: Context, rows: Sequence[HistoryRow]) -> int:
    """Append ``rows`` to the lag history as one segment (one atomic append).

    Returns:
        How many rows were appended.
    """
    if not rows:
        return 0
    table = _created_table(ctx)
    data = _arrow(table, sorted(rows, key=lambda r: (r.group, r.table, r.bucket, r.time_ms)))
    with in_flight(ctx) as token:
        rel = f"{table.data_dir}/log/0/{token}-{uuid.uuid4().hex[:8]}.parquet"
        size = ctx.warehouse.write_parquet(rel, data, ROWS_PER_GROUP)
        commit_segments(table, [SegmentFile(0, rel, data.num_rows, size)], token)
    return data.num_rows


def _arrow(table: TableInfo, rows: list[HistoryRow]) -> pa.Table:
    """``rows`` in the layout of the history table's segment files."""
    columns = list(zip(*rows))
    values = {
        "time": pa.array([t * 1000 for t in columns[0]], pa.int64()).cast(HISTORY_SCHEMA[0].type),
        **{f.name: pa.array(columns[i], f.type) for i, f in enumerate(HISTORY_SCHEMA) if i},
    }
    schema = log_schema(table)
    arrays = [
        pa.array(["upsert"] * len(rows), pa.string())
        if f.name == OP_COLUMN
        else values[f.name].cast(f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_rows(
    ctx: Context,
    since_ms: int,
    until_ms: int,
    groups: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The history rows sampled in [since_ms, until_ms] (of ``groups`` only, when given),
    read with pyarrow from only the segments committed from ``since_ms`` to ``until_ms`` +
    ``COMMIT_SLACK_MS`` (a sample is committed after it is taken, and soon after).

    Returns:
        A pyarrow table of ``HISTORY_SCHEMA``'s columns (or ``columns``), in no set order.
    """
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    wanted = list(columns or HISTORY_SCHEMA.names)
    table = history_table(ctx)
    files = [] if table is None else _files(table, since_ms, until_ms)
    if not files:
        return HISTORY_SCHEMA.empty_table().select(wanted)
    read = list(dict.fromkeys(["time", *wanted]))
    if groups is not None:
        data = read_files(table, files, groups, read)
    else:
        warehouse = ctx.warehouse
        dataset = ds.dataset(
            [warehouse.fs_path(warehouse.relative(f)) for f in files],
            schema=log_schema(table),
            format="parquet",
            filesystem=warehouse.fs,
        )
        data = dataset.to_table(columns=read)
    since = pa.scalar(since_ms * 1000, pa.int64()).cast(HISTORY_SCHEMA[0].type)
    until = pa.scalar(until_ms * 1000, pa.int64()).cast(HISTORY_SCHEMA[0].type)
    times = data.column("time")
    data = data.filter(pc.and_(pc.greater_equal(times, since), pc.less_equal(times, until)))
    return data.select(wanted).cast(pa.schema([HISTORY_SCHEMA.field(n) for n in wanted]))


def _files(table: TableInfo, since_ms: int, until_ms: int) -> list[str]:
    """The segment files of the history committed in [since_ms, until_ms + slack]: a merged
    segment (R8) holds appends committed from its first record's timestamp to its last's."""
    segments = _index(table)
    lasts = [s.timestamp_ms for s in segments]  # non-decreasing (W3), and so are the firsts
    firsts = [
        s.timestamp_ms if s.first_timestamp_ms is None else s.first_timestamp_ms for s in segments
    ]
    first = bisect.bisect_left(lasts, since_ms)
    last = bisect.bisect_right(firsts, until_ms + COMMIT_SLACK_MS)
    return [s.file for s in segments[first:last]]


_INDEX: weakref.WeakKeyDictionary[Context, dict[str, dict[int, LogSegment]]] = (
    weakref.WeakKeyDictionary()
)
"""Per context, per history table id: its segments read so far by base offset. A segment
changes only when a merge (R8) replaces it and the segments after it by one at its base offset,
so a read lists the log and the bucket's state (one round trip) and reads only the segments
not seen, or no longer ending where the next one listed begins (or, the last, at the log end)."""
_INDEX_LOCK = threading.Lock()


def _index(table: TableInfo) -> list[LogSegment]:
    """The history table's stored segments, oldest first."""
    ctx = table.context
    with _INDEX_LOCK:
        known = dict(_INDEX.setdefault(ctx, {}).get(table.table_id, {}))
    log_path, state_path = ctx.paths.log(table.table_id, 0), ctx.paths.bucket(table.table_id, 0)
    listed, state = ctx.store.read_many([GetChildren(log_path), GetData(state_path)])
    for result in (listed, state):
        if result.error is not None:
            raise result.error
    names = listed.value if isinstance(listed.value, list) else []
    bases = sorted(int(n) for n in names if n.isdigit())
    end = BucketState.decode(state.value, state_path).end if isinstance(state.value, Node) else 0
    ends = dict(zip(bases, [*bases[1:], end]))
    new = [b for b in bases if b not in known or known[b].end_offset != ends[b]]
    paths = [ctx.paths.segment(table.table_id, 0, b) for b in new]
    for base, path, node in zip(new, paths, ctx.store.get_many(paths)):
        if node is None:  # deleted by retention since the listing
            known.pop(base, None)
            continue
        rec = decode_segment(table, node.data, path)
        known[base] = LogSegment(
            TableBucket(table.name, 0),
            base,
            base + rec.rows,
            rec.last_stamp(node.stat.ctime_ms),
            rec.size,
            ctx.warehouse.uri(rec.file),
            None if rec.stamps is None else rec.stamps[0],
        )
    current = {b: known[b] for b in bases if b in known}
    with _INDEX_LOCK:
        _INDEX.setdefault(ctx, {})[table.table_id] = current
    return [current[b] for b in sorted(current)]
