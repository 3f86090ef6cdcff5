"""Log segments: the Parquet schema of segment files, listing a bucket's segments, and deleting
a prefix of them (znodes and the new beginning offset first, files after)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from ..errors import DataFileMissingError, IllegalStateError
from ..structs import LogSegment, TableBucket
from ..warehouse import contained
from ..zk import ConflictReason, Delete, Op, SetData, TxnConflict, touch
from ..zk.formats import BucketState, SegmentRecord

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = [
    "OP_COLUMN",
    "STAMP_COLUMN",
    "merged_schema",
    "ROW_GROUP_RECORDS",
    "log_schema",
    "decode_segment",
    "list_segments",
    "delete_segments",
    "lost_file",
    "check_files",
]

OP_COLUMN = "_op"
STAMP_COLUMN = "_timestamp"
"""A merged segment file's column of record timestamps (int64, ms on the ZooKeeper clock): an
appended segment's records all carry its commit time and its file has no such column (R8)."""
ROW_GROUP_RECORDS = 65_536
"""Records per row group of segment files: a consumer's read decodes only the groups it needs."""
_ATTEMPTS = 100
"""Reads of the segments to delete again after a transaction found one of them gone."""


def log_schema(table: TableInfo) -> pa.Schema:
    """Schema of segment files: the table's columns (non-key ones nullable, for deletes) and
    ``_op``."""
    fields = [f if f.name in table.primary_key else f.with_nullable(True) for f in table.schema]
    return pa.schema([*fields, pa.field(OP_COLUMN, pa.string(), nullable=False)])


def merged_schema(table: TableInfo) -> pa.Schema:
    """Schema of merged segment files: the log's columns and the record timestamps."""
    return log_schema(table).append(pa.field(STAMP_COLUMN, pa.int64(), nullable=False))


def decode_segment(table: TableInfo, data: bytes, path: str) -> SegmentRecord:
    """The segment record stored at ``path``, its file resolved inside the table's directory.

    Raises:
        CorruptMetadataError: naming ``path``, when the value cannot be decoded or names a
            file outside the table's directory (docs/security.md, "Containment").
    """
    rec = SegmentRecord.decode(data, path)
    return rec._replace(file=contained(rec.file, table.data_dir, path))


def list_segments(table: TableInfo, buckets: Iterable[int]) -> dict[int, list[LogSegment]]:
    """Every stored segment of each bucket, by base offset (children listed and read pipelined)."""
    store, paths, tid = table.context.store, table.context.paths, table.table_id
    buckets = list(buckets)
    names = store.children_many([paths.log(tid, b) for b in buckets])
    wanted = [(b, int(n)) for b, kids in zip(buckets, names) for n in (kids or [])]
    seg_paths = [paths.segment(tid, b, base) for b, base in wanted]
    nodes = store.get_many(seg_paths)
    out: dict[int, list[LogSegment]] = {b: [] for b in buckets}
    warehouse = table.context.warehouse
    for (bucket, base), path, node in zip(wanted, seg_paths, nodes):
        if node is None:
            continue  # deleted by retention between listing and reading
        rec = decode_segment(table, node.data, path)
        out[bucket].append(
            LogSegment(
                TableBucket(table.name, bucket),
                base,
                base + rec.rows,
                rec.last_stamp(node.stat.ctime_ms),
                rec.size,
                warehouse.uri(rec.file),
                None if rec.stamps is None else rec.stamps[0],
            )
        )
    for segs in out.values():
        segs.sort(key=lambda s: s.base_offset)
    return out


def delete_segments(
    table: TableInfo, bucket: int, bases: Iterable[int] | Mapping[int, tuple[int, str]]
) -> tuple[list[str], int]:
    """Delete a prefix of a bucket's segments: znodes and the new beginning offset in one
    transaction, files after (R3). Returns the deleted files and their bytes.

    ``bases``: the segments' base offsets, or what the caller saw of each (base offset -> end
    offset and warehouse-relative file), as a retention plan did. Then a segment whose znode
    holds another extent or file now is not deleted, nor any after it (the log stays
    contiguous): a merge replaced it meanwhile (R8), and the merged segment may hold records
    the caller never decided on. Plain base offsets delete what their znodes hold now.
    """
    ctx = table.context
    paths, tid = ctx.paths, table.table_id
    seen = bases if isinstance(bases, Mapping) else None
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
        for base, path, node in zip(wanted, seg_paths, nodes[1:]):
            if node is None:
                continue  # deleted by an earlier pass
            rec = decode_segment(table, node.data, path)  # before anything is deleted
            if seen is not None and seen[base] != (base + rec.rows, rec.file):
                break  # replaced since the caller looked: it and what follows stay
            ops.append(Delete(path, node.stat.version))
            deleted.append((rec.file, rec.size))
            begin = max(begin, base + rec.rows)
        if not ops:
            return []
        ops.append(
            SetData(paths.bucket(tid, bucket), state.encode(begin=begin), state.stat.version)
        )
        return [*ops, touch(paths.table_changes(tid))]

    what = f"delete segments of {table.name} bucket {bucket}"
    for _ in range(_ATTEMPTS):
        try:
            ctx.store.commit_retrying(build, what=what)
            break
        except TxnConflict as exc:
            if exc.reason != ConflictReason.NONODE or not isinstance(exc.op, Delete):
                raise
            # a merge (R8) or another pass deleted a segment between the read and the commit:
            # read again (it is gone, or a merged segment the plan did not see is there)
    else:
        raise IllegalStateError(f"{what}: gave up after {_ATTEMPTS} segments deleted meanwhile")
    ctx.warehouse.delete_files(f for f, _ in deleted)
    return [f for f, _ in deleted], sum(size for _, size in deleted)


def lost_file(segment: LogSegment) -> DataFileMissingError:
    """The error of a segment whose file is missing while the metadata lists it."""
    tb = segment.table_bucket
    return DataFileMissingError(
        f"the file {segment.file} of {tb} (offsets {segment.base_offset} to "
        f"{segment.end_offset - 1}) is missing while the table's metadata lists it: its "
        f"records cannot be read; restore the file, or move past offset {segment.end_offset - 1}",
        segment.file,
        tb,
    )


def check_files(table: TableInfo, segments: Iterable[LogSegment]) -> None:
    """Check that the files of ``segments`` (of ``table``) exist, in one batched look-up.

    Raises:
        DataFileMissingError: a file is missing while the metadata still lists its segment.
        IllegalStateError: the warehouse could not be read.
    """
    warehouse = table.context.warehouse
    wanted = {warehouse.relative(s.file): s for s in segments}
    there = {entry.path for entry in warehouse.stat(sorted(wanted))}
    gone = [s for rel, s in wanted.items() if rel not in there]
    if not gone:
        return
    listed = list_segments(table, sorted({s.table_bucket.bucket for s in gone}))
    for segment in gone:  # listed still: lost (retention deletes the metadata first)
        if segment in listed[segment.table_bucket.bucket]:
            raise lost_file(segment)
