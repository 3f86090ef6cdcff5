"""Retention metadata of chosen buckets only, for the lease inventory (M4): a survey of the
snapshots leases pin (size, rank in their bucket, pin znodes), and the planner's metadata of
the buckets where dropping a lease may change what retention deletes.

Both are read in one pipelined batch each, in the layout retention's gathering reads, so a
lease over 10,000 buckets costs reads of its buckets, not a plan of the whole table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from ...errors import CorruptMetadataError
from ...retention.listed import read_buckets
from ...retention.meta import TableMeta
from ...snapshots.catalog import decode_snapshot
from ...zk import GetChildren, GetData
from ...zk.formats import BucketState

if TYPE_CHECKING:
    from ...context import Context
    from ...tables.info import TableInfo

__all__ = ["PinnedSnapshot", "survey_pins", "gather_buckets"]

Pin = tuple[str, int, int]
"""(table id, bucket, snapshot id)."""


class PinnedSnapshot(NamedTuple):
    """A pinned snapshot as retention would see it."""

    size_bytes: int
    """Its size."""
    newer: int
    """How many snapshots of its bucket have a higher id (listed: 0 is the newest)."""
    pins: int
    """Pin znodes under it (every lease's, and any of no known lease)."""


def survey_pins(
    ctx: Context, tables: dict[str, TableInfo], pins: Iterable[Pin], skipped: list[str]
) -> dict[Pin, PinnedSnapshot]:
    """Each pinned snapshot of ``tables`` (by table id) that retention would plan: stored,
    readable, in a written bucket. The bucket states, snapshot listings and pinned snapshots
    are read in one pipelined batch; what cannot be read is said in ``skipped``."""
    paths = ctx.paths
    wanted = sorted({pin for pin in pins if pin[0] in tables})
    buckets = sorted({pin[:2] for pin in wanted})
    results = ctx.store.read_many(
        [
            *(GetData(paths.bucket(t, b)) for t, b in buckets),
            *(GetChildren(paths.snapshots(t, b)) for t, b in buckets),
            *(GetData(paths.snapshot(*pin)) for pin in wanted),
        ]
    )
    for result in results:
        if result.error is not None:
            raise result.error
    n = len(buckets)
    ids: dict[tuple[str, int], list[int]] = {}
    for key, state, listed in zip(buckets, results[:n], results[n : 2 * n]):
        if state.value is not None and _written(paths.bucket(*key), state.value, skipped):
            ids[key] = [int(name) for name in listed.value or () if name.isdigit()]  # type: ignore[union-attr]
    out: dict[Pin, PinnedSnapshot] = {}
    for pin, result in zip(wanted, results[2 * n :]):
        node, listed_ids = result.value, ids.get(pin[:2])
        if node is None or listed_ids is None or pin[2] not in listed_ids:
            continue
        path = paths.snapshot(*pin)
        try:
            record = decode_snapshot(tables[pin[0]], node.data, path)  # type: ignore[union-attr]
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
            continue
        newer = sum(1 for i in listed_ids if i > pin[2])
        out[pin] = PinnedSnapshot(record.size, newer, node.stat.num_children)  # type: ignore[union-attr]
    return out


def _written(path: str, node: Any, skipped: list[str]) -> bool:
    """Whether a bucket's state is readable (retention plans written buckets only)."""
    try:
        BucketState.decode(node, path)
    except CorruptMetadataError as exc:
        skipped.append(str(exc))
        return False
    return True


def gather_buckets(
    ctx: Context, table: TableInfo, buckets: Iterable[int], skipped: list[str]
) -> TableMeta:
    """What retention's planner needs of ``buckets`` of ``table`` (log start, snapshots and
    segments), read as retention reads a whole table (``retention.listed``). Without consumer
    offsets: for a table with ``log.retention.respect-consumers`` use ``gather_table``."""
    read = read_buckets(ctx, table, skipped, buckets)
    return TableMeta(table, read.begin, read.snapshots, read.segments, {})
