"""Rows of a group's buckets: each with its committed record and its log bounds, read in one
round trip with the ZooKeeper clock, and the time of the first record not yet consumed, read
for many buckets (of many groups) in two pipelined round trips."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

from ..log.segments import LogSegment, decode_segment, list_segments
from ..structs import TableBucket
from ..tables.info import TableInfo
from ..zk import Node
from ..zk.formats import BucketState, OffsetRecord
from .lineage import sealed, undrained

if TYPE_CHECKING:
    from ..context import Context

__all__ = [
    "Row",
    "bucket_rows",
    "bucket_rows_now",
    "rows_of_states",
    "every_bucket",
    "segments_of",
    "record_times",
    "record_segments",
    "missing_files",
    "Held",
]


class _Committed(Protocol):
    """What ``bucket_rows`` needs of a group: its committed offsets (a ``GroupView``)."""

    @property
    def offsets(self) -> Mapping[tuple[str, int], OffsetRecord]: ...


class Row(NamedTuple):
    """A bucket of a group's table: its committed record (None: never committed) and its log
    bounds [begin, end)."""

    tb: TableBucket
    table: TableInfo
    record: OffsetRecord | None
    begin: int
    end: int


def bucket_rows(
    ctx: Context, view: _Committed, keys: list[tuple[TableInfo, int]], nodes: list[Node | None]
) -> list[Row]:
    """Each (table, bucket) of ``keys`` with the group's committed record and its log bounds
    from its bucket znode in ``nodes``."""
    states = [
        None if node is None else BucketState.decode(node, ctx.paths.bucket(table.table_id, b))
        for (table, b), node in zip(keys, nodes)
    ]
    return rows_of_states(view, keys, states)


def rows_of_states(
    view: _Committed, keys: Iterable[tuple[TableInfo, int]], states: Iterable[BucketState | None]
) -> list[Row]:
    """Each (table, bucket) of ``keys`` with the group's committed record and its log bounds
    from its decoded bucket state (None: an empty log)."""
    return [
        Row(
            TableBucket(table.name, b),
            table,
            view.offsets.get((table.table_id, b)),
            state.begin if state else 0,
            state.end if state else 0,
        )
        for (table, b), state in zip(keys, states)
    ]


def bucket_rows_now(
    ctx: Context, view: _Committed, keys: list[tuple[TableInfo, int]]
) -> tuple[int, list[Row]]:
    """The rows of ``keys`` and the ZooKeeper time read just before them, in one round trip."""
    now, nodes = ctx.read_with_clock([ctx.paths.bucket(t.table_id, b) for t, b in keys])
    return ctx.clock(now), bucket_rows(ctx, view, keys, nodes)


def every_bucket(
    tables: Iterable[TableInfo], offsets: Mapping[tuple[str, int], OffsetRecord] | None = None
) -> list[tuple[TableInfo, int]]:
    """The active buckets of ``tables`` and, given a group's committed ``offsets`` (by
    (table id, bucket)), the sealed ones the group has not committed to their seals (K6: a
    rescale hides no lag), in bucket order."""
    out = []
    for t in tables:
        ids = t.active
        if offsets is not None and t.layout.rescaled:
            mine = {
                b: rec.offset
                for b in sealed(t.layout)
                if (rec := offsets.get((t.table_id, b))) is not None
            }
            ids = tuple(sorted([*ids, *undrained(t.layout, mine)]))
        out += [(t, b) for b in ids]
    return out


def segments_of(rows: list[Row]) -> dict[TableBucket, list[LogSegment]]:
    """The log segments of each row's bucket, listed per table in one pipelined read."""
    by_table: dict[str, list[Row]] = {}
    for r in rows:
        by_table.setdefault(r.tb.table, []).append(r)
    out: dict[TableBucket, list[LogSegment]] = {}
    for rs in by_table.values():
        listed = list_segments(rs[0].table, [r.tb.bucket for r in rs])
        out.update((r.tb, listed[r.tb.bucket]) for r in rs)
    return out


_Wanted = tuple[str, int, int]
"""(table id, bucket, offset): a record whose timestamp is wanted."""


def record_times(ctx: Context, rows: Iterable[Row]) -> dict[_Wanted, int]:
    """``_timestamp`` (ms) of the record at each committed offset below its log end (its
    segment's commit time), keyed (table id, bucket, offset); absent where no stored segment
    holds it. Two pipelined round trips for all rows: the log listings of their buckets, then
    only the segment znodes that hold the offsets (offsets below the log start count as the
    log start)."""
    return {key: held.stamp for key, held in record_segments(ctx, rows).items()}


class Held(NamedTuple):
    """The segment holding a record: the record's ``_timestamp`` (ms), the segment's file
    (warehouse-relative) and znode."""

    stamp: int
    file: str
    znode: str


def record_segments(ctx: Context, rows: Iterable[Row]) -> dict[_Wanted, Held]:
    """As ``record_times``, with the segment holding each record."""
    tables: dict[tuple[str, int], TableInfo] = {}
    targets: dict[_Wanted, int] = {}
    for r in rows:
        rec = r.record
        if rec is not None and rec.offset < r.end:
            tables[r.table.table_id, r.tb.bucket] = r.table
            targets[r.table.table_id, r.tb.bucket, rec.offset] = max(rec.offset, r.begin)
    buckets = list(tables)
    paths = ctx.paths
    listed = ctx.store.children_many([paths.log(t, b) for t, b in buckets])
    bases = {
        key: sorted(int(n) for n in names or () if n.isdigit())
        for key, names in zip(buckets, listed)
    }
    found: dict[_Wanted, int] = {}
    for (tid, b, offset), target in targets.items():
        base = _floor(bases[tid, b], target)
        if base is not None:
            found[tid, b, offset] = base
    wanted = sorted({(tid, b, base) for (tid, b, _), base in found.items()})
    seg_paths = [paths.segment(tid, b, base) for tid, b, base in wanted]
    segments: dict[tuple[str, int, int], tuple[int, Held]] = {}
    for (tid, b, base), path, node in zip(wanted, seg_paths, ctx.store.get_many(seg_paths)):
        if node is None:
            continue  # deleted by retention between listing and reading
        rec = decode_segment(tables[tid, b], node.data, path)
        stamp = max(node.stat.ctime_ms, rec.ts_floor)
        segments[tid, b, base] = base + rec.rows, Held(stamp, rec.file, path)
    out = {}
    for (tid, b, offset), base in found.items():
        end, held = segments.get((tid, b, base), (base, None))
        if held is not None and targets[tid, b, offset] < end:
            out[tid, b, offset] = held
    return out


def missing_files(ctx: Context, segments: Mapping[_Wanted, Held]) -> dict[_Wanted, str]:
    """The records of ``segments`` (``record_segments``) whose segment file is missing while
    the metadata still lists it (a disk fault, a file deleted by hand), with the file's
    location: one batched look-up of the files, then (only when one is missing) one read of
    those segments' znodes, so a segment retention deleted meanwhile (its znode first) is not
    taken for a lost file."""
    there = {e.path for e in ctx.warehouse.stat(sorted({h.file for h in segments.values()}))}
    gone = {key: held for key, held in segments.items() if held.file not in there}
    if not gone:
        return {}
    nodes = ctx.store.get_many([held.znode for held in gone.values()])
    return {
        key: ctx.warehouse.uri(held.file)
        for (key, held), node in zip(gone.items(), nodes)
        if node is not None
    }


def _floor(bases: list[int], offset: int) -> int | None:
    """The largest of ``bases`` (sorted) at or below ``offset``."""
    i = bisect.bisect_right(bases, offset) - 1
    return bases[i] if i >= 0 else None
