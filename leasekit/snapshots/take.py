"""Taking snapshots: compact each advanced bucket (previous snapshot + log tail) with Spark,
then register the complete files, a new id per bucket (S1, S2).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import IllegalStateError, TableNotFoundError
from ..log.markers import guard, in_flight, lost, lost_error
from ..log.segments import list_segments
from ..log.state import read_states
from ..spark.frames import bucket_of_path, files_frame, kv_state, log_frame
from ..spark.session import micros_timestamps, session, spark_errors
from ..structs import Snapshot, TableBucket
from ..zk import ConflictReason, Create, Op, SetData, Stat, TxnConflict, to_datetime
from ..zk.chunked import ChunkArray, group_by_chunk
from ..zk.formats import BucketState, LatestChunk, SnapshotRecord
from .catalog import get_snapshots

if TYPE_CHECKING:
    from ..tables.info import TableInfo

__all__ = ["take_snapshots", "register", "Written"]


class Written(NamedTuple):
    """Complete snapshot files of one bucket, waiting to be registered."""

    log_offset: int
    files: list[str]
    rows: int
    size: int


def take_snapshots(table: TableInfo, spark: Any = None) -> dict[TableBucket, Snapshot]:
    """Compact every advanced bucket (previous snapshot + log tail) and register the results."""
    from tqdm.auto import tqdm

    spark = session(spark)
    states = read_states(table, range(table.num_buckets))
    advanced = {
        b: s
        for b, s in enumerate(states)
        if s is not None and s.end > (s.latest_offset if s.latest_snapshot is not None else 0)
    }
    if not advanced:
        return {}
    bar = tqdm(total=3, desc=f"snapshot {table.name}", unit="step", disable=None, leave=False)
    try:
        bases = get_snapshots(
            table, {b: s.latest_snapshot for b, s in advanced.items() if s.latest_snapshot}
        )
        starts = {b: s.latest_offset if s.latest_snapshot else 0 for b, s in advanced.items()}
        ranges = {b: (starts[b], s.end) for b, s in advanced.items()}
        segments = list_segments(table, ranges)
        bar.update(1)
        warehouse = table.context.warehouse
        with in_flight(table.context) as token:
            rel = f"{table.data_dir}/snapshots/{token}"
            with spark_errors(f"snapshot {table.name}"), micros_timestamps(spark):
                state = kv_state(
                    table,
                    files_frame(spark, table, [f for s in bases for f in s.files]),
                    log_frame(spark, table, segments, ranges),
                    by_bucket=True,
                )
                state.write.partitionBy("_bucket").parquet(warehouse.to_spark(warehouse.uri(rel)))
            bar.update(1)
            written = {b: Written(s.end, [], 0, 0) for b, s in advanced.items()}
            for entry in warehouse.list(rel):
                bucket = bucket_of_path(entry.path)
                if bucket is None or bucket not in written:
                    continue
                w = written[bucket]
                rows = warehouse.parquet_metadata(entry.path).num_rows
                written[bucket] = w._replace(
                    files=[*w.files, entry.path], rows=w.rows + rows, size=w.size + entry.size
                )
            result = register(table, written, token)
        bar.update(1)
    finally:
        bar.close()
    return result


def register(
    table: TableInfo, written: Mapping[int, Written], token: str
) -> dict[TableBucket, Snapshot]:
    """Register complete snapshot files: a new id per bucket, committed with the bucket state
    and the table's latest-snapshot array in one transaction per chunk of buckets (S2).

    A bucket whose latest snapshot already reaches the same offset (a concurrent snapshot
    won) is skipped and its files are deleted.
    """
    ctx = table.context
    paths, tid = ctx.paths, table.table_id
    out: dict[TableBucket, Snapshot] = {}
    stale: list[str] = []
    for chunk, group in group_by_chunk(written).items():
        chosen: dict[int, int] = {}

        def build(
            chunk: int = chunk, group: list[int] = group, chosen: dict[int, int] = chosen
        ) -> list[Op]:
            chosen.clear()
            summary_path = paths.latest_chunk(tid, chunk)
            nodes = ctx.store.get_many([*(paths.bucket(tid, b) for b in group), summary_path])
            summary = nodes[-1]
            array = ChunkArray(
                chunk,
                LatestChunk.decode(summary.data, summary_path).ids if summary is not None else [],
            )
            ops: list[Op] = [guard(ctx, token)]
            for bucket, node in zip(group, nodes[:-1]):
                if node is None:
                    raise TableNotFoundError(f"table {table.name!r} was dropped")
                state = BucketState.decode(node, paths.bucket(tid, bucket))
                w = written[bucket]
                if state.latest_snapshot is not None and state.latest_offset >= w.log_offset:
                    continue
                sid = state.next_snapshot
                value = SnapshotRecord(w.log_offset, w.rows, w.size, tuple(w.files)).encode()
                ops.append(Create(paths.snapshot(tid, bucket, sid), value))
                ops.append(_advance(paths.bucket(tid, bucket), state, sid, w.log_offset))
                chosen[bucket] = sid
            if not chosen:
                return []
            if chosen:
                value = LatestChunk(array.updated(chosen).ids).encode()
                ops.append(
                    SetData(summary_path, value, summary.stat.version)
                    if summary is not None
                    else Create(summary_path, value)
                )
            return ops

        try:
            results = ctx.store.commit_retrying(build, what=f"register snapshots of {table.name}")
        except TxnConflict as exc:
            if lost(ctx, exc, token):
                raise lost_error(token) from None
            if exc.reason == ConflictReason.NONODE:
                raise TableNotFoundError(f"table {table.name!r} was dropped") from None
            raise IllegalStateError(f"cannot register snapshots of {table.name!r}: {exc}") from None
        stats = iter(r for r in results if isinstance(r, Stat))
        for bucket in group:
            if bucket in chosen:
                w = written[bucket]
                created = next(stats).mtime_ms
                tb = TableBucket(table.name, bucket)
                uri = ctx.warehouse.uri
                out[tb] = Snapshot(
                    tb,
                    chosen[bucket],
                    w.log_offset,
                    w.rows,
                    w.size,
                    to_datetime(created),
                    tuple(uri(f) for f in w.files),
                )
            else:
                stale.extend(written[bucket].files)
    ctx.warehouse.delete_files(stale)
    return out


def _advance(path: str, state: BucketState, sid: int, log_offset: int) -> SetData:
    return SetData(
        path,
        state.encode(next_snapshot=sid + 1, latest_snapshot=sid, latest_offset=log_offset),
        state.stat.version,
    )
