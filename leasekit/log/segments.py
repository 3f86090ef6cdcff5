"""Log segments: the Parquet schema of segment files, listing a bucket's segments, and deleting
a prefix of them (znodes and the new beginning offset first, files after)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from ..structs import LogSegment, TableBucket
from ..warehouse import contained
from ..zk import Delete, Op, SetData, touch
from ..zk.formats import BucketState, SegmentRecord
from ..zk.paths import SEGMENT_DIGITS

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = [
    "segments_at",
    "OP_COLUMN",
    "ROW_GROUP_RECORDS",
    "log_schema",
    "decode_segment",
    "list_segments",
    "delete_segments",
]

OP_COLUMN = "_op"
ROW_GROUP_RECORDS = 65_536
"""Records per row group of segment files: a consumer's read decodes only the groups it needs."""


def log_schema(table: TableInfo) -> pa.Schema:
    """Schema of segment files: the table's columns (non-key ones nullable, for deletes) and
    ``_op``."""
    fields = [f if f.name in table.primary_key else f.with_nullable(True) for f in table.schema]
    return pa.schema([*fields, pa.field(OP_COLUMN, pa.string(), nullable=False)])


def decode_segment(table: TableInfo, data: bytes, path: str) -> SegmentRecord:
    """The segment record stored at ``path``, its file resolved inside the table's directory.

    Raises:
        CorruptMetadataError: naming ``path``, when the value cannot be decoded or names a
            file outside the table's directory (DESIGN §9 Containment).
    """
    rec = SegmentRecord.decode(data, path)
    return rec._replace(file=contained(rec.file, table.data_dir, path))


def list_segments(table: TableInfo, buckets: Iterable[int]) -> dict[int, list[LogSegment]]:
    """Every stored segment of each bucket, by base offset (children listed and read pipelined)."""
    store, paths, tid = table.context.store, table.context.paths, table.table_id
    buckets = list(buckets)
    names = store.children_many([paths.log(tid, b) for b in buckets])
    wanted = [(b, int(n)) for b, kids in zip(buckets, names) for n in (kids or [])]
    out: dict[int, list[LogSegment]] = {b: [] for b in buckets}
    for bucket, segment in _read_segments(table, wanted):
        out[bucket].append(segment)
    for segs in out.values():
        segs.sort(key=lambda s: s.base_offset)
    return out


_FOUND: dict[tuple[str, str], dict[int, LogSegment]] = {}
"""Per (warehouse, table id), the last segment ``segments_at`` found of each bucket: segment
records never change once written, and one holding an offset at or above the bucket's beginning
is not deleted (retention deletes only segments wholly below it), so it is found again without
a read."""
_FOUND_TABLES = 64


def segments_at(table: TableInfo, offsets: Mapping[int, int]) -> dict[int, LogSegment]:
    """The stored segment holding each bucket's offset (``{bucket: offset}``, each at or above
    its bucket's beginning); a bucket whose offset no segment holds is left out. The segment
    found last for a bucket serves while it holds the offset; for the others, children are
    listed and only those segments read (one per bucket, not the whole log), pipelined."""
    key = (table.context.warehouse.location, table.table_id)
    known = _FOUND.setdefault(key, {})
    out: dict[int, LogSegment] = {}
    missing: list[int] = []
    for bucket, offset in offsets.items():
        seg = known.get(bucket)
        if seg is not None and seg.base_offset <= offset < seg.end_offset:
            out[bucket] = seg
        else:
            missing.append(bucket)
    if missing:
        found = _look_up(table, {b: offsets[b] for b in missing})
        known.update(found)
        out.update(found)
    while len(_FOUND) > _FOUND_TABLES:
        _FOUND.pop(next(iter(_FOUND)), None)
    return out


def _look_up(table: TableInfo, offsets: Mapping[int, int]) -> dict[int, LogSegment]:
    store, paths, tid = table.context.store, table.context.paths, table.table_id
    buckets = list(offsets)
    names = store.children_many([paths.log(tid, b) for b in buckets])
    wanted: list[tuple[int, int]] = []
    for bucket, kids in zip(buckets, names):  # names sorted, of fixed width: as the numbers
        i = bisect.bisect_right(kids or [], f"{offsets[bucket]:0{SEGMENT_DIGITS}d}") - 1
        if i >= 0:
            wanted.append((bucket, int(kids[i])))  # type: ignore[index]
    return {
        bucket: seg
        for bucket, seg in _read_segments(table, wanted)
        if seg.base_offset <= offsets[bucket] < seg.end_offset
    }


def _read_segments(
    table: TableInfo, wanted: list[tuple[int, int]]
) -> Iterator[tuple[int, LogSegment]]:
    """The segments of ``wanted`` ((bucket, base offset) pairs) read pipelined, as (bucket,
    segment); those deleted by retention since they were listed are left out."""
    paths, tid, warehouse = table.context.paths, table.table_id, table.context.warehouse
    seg_paths = [paths.segment(tid, b, base) for b, base in wanted]
    for (bucket, base), path, node in zip(
        wanted, seg_paths, table.context.store.get_many(seg_paths)
    ):
        if node is None:
            continue  # deleted by retention between listing and reading
        rec = decode_segment(table, node.data, path)
        yield (
            bucket,
            LogSegment(
                TableBucket(table.name, bucket),
                base,
                base + rec.rows,
                max(node.stat.ctime_ms, rec.ts_floor),
                rec.size,
                warehouse.uri(rec.file),
            ),
        )


def delete_segments(table: TableInfo, bucket: int, bases: Iterable[int]) -> tuple[list[str], int]:
    """Delete a prefix of a bucket's segments: znodes and the new beginning offset in one
    transaction, files after (R3). Returns the deleted files and their bytes.
    """
    ctx = table.context
    paths, tid = ctx.paths, table.table_id
    wanted = sorted(set(bases))
    deleted: list[tuple[str, int]] = []

    def build() -> list[Op]:
        deleted.clear()
        seg_paths = [paths.segment(tid, bucket, b) for b in wanted]
        nodes = ctx.store.get_many([paths.bucket(tid, bucket), *seg_paths])
        if nodes[0] is None:
            return []
        state = BucketState.decode(nodes[0], paths.bucket(tid, bucket))
        ops: list[Op] = []
        begin = state.begin
        for path, node in zip(seg_paths, nodes[1:]):
            if node is None:
                continue  # deleted by an earlier pass
            rec = decode_segment(table, node.data, path)  # before anything is deleted
            ops.append(Delete(path, node.stat.version))
            deleted.append((rec.file, rec.size))
            begin = max(begin, int(path.rsplit("/", 1)[1]) + rec.rows)
        if not ops:
            return []
        ops.append(
            SetData(paths.bucket(tid, bucket), state.encode(begin=begin), state.stat.version)
        )
        return [*ops, touch(paths.table_changes(tid))]

    ctx.store.commit_retrying(build, what=f"delete segments of {table.name} bucket {bucket}")
    ctx.warehouse.delete_files(f for f, _ in deleted)
    return [f for f, _ in deleted], sum(size for _, size in deleted)
