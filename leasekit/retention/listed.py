"""A table's buckets as retention reads them: log starts, snapshots, segments and the files
merges replaced, in pipelined batches; a bucket directory whose stat proves its children
unchanged is not read again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple
from weakref import WeakKeyDictionary

from ..errors import CorruptMetadataError
from ..log.segments import decode_segment
from ..snapshots.catalog import decode_snapshot
from ..zk import GetChildren, GetData
from ..zk.formats import BucketState
from .meta import RetiredMeta, SegmentMeta, SnapshotMeta
from .retired import read_retired, with_retired

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from ..zk import ZkStore
    from ..zk.ops import Node

__all__ = ["Buckets", "read_buckets"]


class Buckets(NamedTuple):
    """What retention reads of a table's buckets."""

    begin: dict[int, int]
    """Log start of each written bucket."""
    snapshots: dict[int, list[SnapshotMeta]]
    segments: dict[int, list[SegmentMeta]]
    retired: dict[int, list[RetiredMeta]] = {}
    """Per bucket, the records of the files its merges replaced (R8)."""


_Proof = tuple[int, int]
"""(czxid, cversion) of a bucket's snapshot or log directory. While both are unchanged its
children are the very znodes read before: creating or deleting a child bumps cversion, and a
directory created anew has another czxid. Snapshot and segment records never change once
written, so what was decoded of them then is what they hold now."""


class _Znode(NamedTuple):
    """Where an item was read: while a znode's czxid and version are unchanged, so is its data."""

    path: str
    czxid: int
    version: int


class _Known(NamedTuple):
    """A directory's children as read after its stat showed ``proof``."""

    proof: _Proof
    items: tuple[Any, ...]
    """Its snapshots (newest first) or segments, as read then."""
    znodes: tuple[_Znode, ...]
    """The znode of each item."""


_known: WeakKeyDictionary[ZkStore, dict[str, dict[str, _Known]]] = WeakKeyDictionary()
"""Per session's store and table directory, each bucket directory read without an error."""

_DECODED_MAX = 250_000
"""Decoded snapshot and segment records (and bucket states) kept between plans: a record never
changes once written; a decode is a function of the table's directory, the path and the bytes
alone."""
_decoded: dict[tuple[str, str, str, bytes], Any] = {}
_begins: dict[bytes, int] = {}
"""The log start each stored bucket state decodes to (a function of its bytes alone)."""


def _decode(kind: str, table: TableInfo, data: bytes, path: str) -> Any:
    """``decode_snapshot`` or ``decode_segment`` of ``data``, from the cache when the same bytes
    at the same path of the same table directory were decoded before; errors are not kept."""
    key = (kind, table.data_dir, path, data)
    found = _decoded.get(key)
    if found is None:
        found = (decode_snapshot if kind == "s" else decode_segment)(table, data, path)
        if len(_decoded) >= _DECODED_MAX:
            _decoded.clear()  # bounded: the next plans decode again what they still need
        _decoded[key] = found
    return found


def _values(ctx: Context, reads: list[Any]) -> list[Any]:
    """The values of ``reads`` in one pipelined batch (None: no such znode)."""
    results = ctx.store.read_many(reads)
    for result in results:
        if result.error is not None:
            raise result.error
    return [r.value for r in results]


class _Dir(NamedTuple):
    """A bucket directory to read in full: its children were not proven unchanged."""

    bucket: int
    path: str
    proof: _Proof


def read_buckets(
    ctx: Context, table: TableInfo, skipped: list[str], buckets: Iterable[int] | None = None
) -> Buckets:
    """The log start, snapshots and segments of every written bucket of ``table`` (or of
    ``buckets`` only); what cannot be read is left out and said in ``skipped``.

    First the bucket states and the stats of both directories of every bucket (the stat before
    anything listed under it: a session's reads are answered in order, so an unchanged stat
    later proves the listing taken after it current). A directory proven unchanged since the
    last read gives its children as read then, except the snapshots beyond an active bucket's
    newest ``kv.snapshot.num-retained`` and every snapshot of a sealed bucket: their pin counts
    decide whether retention may delete them, so they are read again. Every other directory
    is listed and its children read. Last, the records of files merges replaced, of the
    buckets whose state shows a ``retired`` directory (``retention.retired``)."""
    paths, tid = ctx.paths, table.table_id
    begin, dir_nodes, states = _states_and_stats(ctx, table, buckets, skipped)
    known = _known.get(ctx.store, {}).get(table.data_dir, {})
    now: dict[str, _Known] = {}
    snapshots: dict[int, list[SnapshotMeta]] = {b: [] for b in sorted(begin)}
    segments: dict[int, list[SegmentMeta]] = {b: [] for b in begin}
    stale: list[_Dir] = []
    recheck: list[tuple[int, SnapshotMeta, _Znode]] = []  # snapshots whose pins are read again
    retained = table.properties["kv.snapshot.num-retained"]
    for b in snapshots:
        snap_dir, log_dir = dir_nodes[b]
        dirs = ((paths.snapshots(tid, b), snap_dir, True), (paths.log(tid, b), log_dir, False))
        for d, node, of_snapshots in dirs:
            if node is None:
                continue  # no directory: no children
            proof = (node.stat.czxid, node.stat.cversion)
            was = known.get(d)
            if was is None or was.proof != proof:
                stale.append(_Dir(b, d, proof))
                continue
            now[d] = was
            if of_snapshots:  # K7: a sealed bucket's newest snapshots go too, unless pinned
                kept = retained if table.layout.is_active(b) else 0
                snapshots[b].extend(was.items[:kept])
                recheck += [(b, *old) for old in zip(was.items[kept:], was.znodes[kept:])]
            else:
                segments[b].extend(was.items)
    listings = _values(
        ctx, [*(GetChildren(s.path) for s in stale), *(GetData(z.path) for _, _, z in recheck)]
    )
    for (b, old, znode), node in zip(recheck, listings[len(stale) :]):
        snap = _again(table, old, znode, node, skipped)
        if snap is not None:
            snapshots[b].append(snap)
    _read_stale(ctx, table, stale, listings[: len(stale)], (snapshots, segments), now, skipped)
    if buckets is None:
        _known.setdefault(ctx.store, {})[table.data_dir] = now
    else:  # the other buckets' directories stay as last read
        _known.setdefault(ctx.store, {}).setdefault(table.data_dir, {}).update(now)
    merged = with_retired(states, dir_nodes)
    retired = read_retired(ctx, table, merged, skipped, whole=buckets is None) if merged else {}
    return Buckets(begin, snapshots, segments, retired)


def _states_and_stats(
    ctx: Context, table: TableInfo, buckets: Iterable[int] | None, skipped: list[str]
) -> tuple[dict[int, int], dict[int, tuple[Node | None, Node | None]], dict[int, Node]]:
    """One pipelined batch: the log start of each written bucket of ``buckets`` (None: all),
    the stats of its snapshot and log directories (None: no such directory), and its state's
    znode."""
    paths, tid = ctx.paths, table.table_id
    chosen = list(range(table.layout.count)) if buckets is None else sorted(set(buckets))
    n = len(chosen)
    first = _values(
        ctx,
        [
            *(GetData(paths.bucket(tid, b)) for b in chosen),
            *(GetData(paths.snapshots(tid, b)) for b in chosen),
            *(GetData(paths.log(tid, b)) for b in chosen),
        ],
    )
    begin = _begin(ctx, table, chosen, first[:n], skipped)
    dirs = {b: (first[n + i], first[2 * n + i]) for i, b in enumerate(chosen) if b in begin}
    return begin, dirs, {b: first[i] for i, b in enumerate(chosen) if b in begin}


def _again(
    table: TableInfo, old: SnapshotMeta, znode: _Znode, node: Node | None, skipped: list[str]
) -> SnapshotMeta | None:
    """A snapshot read again for its pins: as read before while its znode is the same znode
    with the same data (czxid and version), else decoded anew (None: gone or unreadable)."""
    if node is not None and (node.stat.czxid, node.stat.version) == (znode.czxid, znode.version):
        pins = node.stat.num_children
        return old if old.pins == pins else old._replace(pins=pins)
    return _snapshot(table, znode.path, node, skipped)


def _begin(
    ctx: Context, table: TableInfo, buckets: list[int], nodes: list[Node | None], skipped: list[str]
) -> dict[int, int]:
    """The log start of each of ``buckets`` with a readable state (a written bucket)."""
    begin: dict[int, int] = {}
    for b, node in zip(buckets, nodes):
        if node is None:
            continue
        found = _begins.get(node.data)
        if found is None:
            try:
                found = BucketState.decode(node, ctx.paths.bucket(table.table_id, b)).begin
            except CorruptMetadataError as exc:
                skipped.append(str(exc))
                continue
            if len(_begins) >= _DECODED_MAX:
                _begins.clear()
            _begins[node.data] = found
        begin[b] = found
    return begin


def _read_stale(
    ctx: Context,
    table: TableInfo,
    stale: list[_Dir],
    listings: list[list[str] | None],
    found: tuple[dict[int, list[SnapshotMeta]], dict[int, list[SegmentMeta]]],
    now: dict[str, _Known],
    skipped: list[str],
) -> None:
    """Read every child of the ``stale`` directories (listed in ``listings``) into ``found``;
    each directory read without an error is kept in ``now``, proven by its stat."""
    snap_dirs = {ctx.paths.snapshots(table.table_id, d.bucket) for d in stale}
    children: list[tuple[_Dir, str]] = []
    clean: dict[str, bool] = {}
    for d, names in zip(stale, listings):
        clean[d.path] = True
        for name in names or ():
            if name.isdigit():  # a child's path is its parent's and its name, as listed
                children.append((d, name))
            else:
                clean[d.path] = False
                skipped.append(f"unexpected znode {d.path}/{name}: not a snapshot id or log offset")
    nodes = _values(ctx, [GetData(f"{d.path}/{name}") for d, name in children])
    items: dict[str, list[tuple[Any, _Znode]]] = {d.path: [] for d in stale}
    held: dict[int, int] = {}  # bucket -> base offset of its first unreadable segment
    for (d, name), node in zip(children, nodes):
        if node is None:
            continue
        path = f"{d.path}/{name}"
        before = len(skipped)
        if d.path in snap_dirs:
            item = _snapshot(table, path, node, skipped)
        else:
            item = _segment(table, int(name), path, node, skipped)
            if item is None:
                held[d.bucket] = min(held.get(d.bucket, int(name)), int(name))
        if len(skipped) > before:
            clean[d.path] = False
        if item is not None:
            items[d.path].append((item, _Znode(path, node.stat.czxid, node.stat.version)))
    snapshots, segments = found
    for d in stale:
        listed = items[d.path]
        if d.path in snap_dirs:
            listed.sort(key=lambda x: -x[0].snapshot_id)
            snapshots[d.bucket].extend(s for s, _ in listed)
        else:
            at = held.get(d.bucket)  # R3: the log stays contiguous; nothing from there on goes
            segments[d.bucket].extend(s for s, _ in listed if at is None or s.base_offset < at)
        if clean[d.path]:
            now[d.path] = _Known(d.proof, tuple(i for i, _ in listed), tuple(z for _, z in listed))


def _snapshot(
    table: TableInfo, path: str, node: Node | None, skipped: list[str]
) -> SnapshotMeta | None:
    """The snapshot at ``path`` as read (None: gone, or unreadable and said in ``skipped``)."""
    if node is None:
        return None
    try:
        snap = _decode("s", table, node.data, path)  # docs/security.md: files in the table's dir
    except CorruptMetadataError as exc:
        skipped.append(str(exc))
        return None
    sid = int(path.rsplit("/", 1)[1])
    return SnapshotMeta(sid, snap.log_offset, snap.size, snap.files, node.stat.num_children)


def _segment(
    table: TableInfo, base: int, path: str, node: Node, skipped: list[str]
) -> SegmentMeta | None:
    """The segment at ``path`` as read (None: unreadable, said in ``skipped``)."""
    try:
        rec = _decode("g", table, node.data, path)  # docs/security.md: file in the table's dir
    except CorruptMetadataError as exc:
        skipped.append(str(exc))
        return None
    time_ms = rec.last_stamp(node.stat.ctime_ms)
    return SegmentMeta(base, base + rec.rows, rec.size, time_ms, rec.file)
