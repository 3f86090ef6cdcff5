"""The files of log segments that merges replaced (R8), as retention reads them: the records
under each bucket's ``retired`` directory, read in pipelined batches, only for the buckets whose
state shows that directory (a stat read already), and not again while a directory's stat proves
its children unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple
from weakref import WeakKeyDictionary

from ..errors import CorruptMetadataError
from ..warehouse import contained
from ..zk.formats import RetiredRecord
from .meta import RetiredMeta

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from ..zk import ZkStore
    from ..zk.ops import Node

__all__ = ["with_retired", "read_retired", "decode_retired"]


class _Known(NamedTuple):
    """A ``retired`` directory's records as read after its stat showed ``proof``: (czxid,
    cversion). While both are unchanged its children are the very znodes read then (creating
    or deleting one bumps cversion; a directory made anew has another czxid), and a record is
    written once, so what was decoded of them is what they hold now."""

    proof: tuple[int, int]
    records: tuple[RetiredMeta, ...]


_known: WeakKeyDictionary[ZkStore, dict[str, dict[str, _Known]]] = WeakKeyDictionary()
"""Per session's store and table directory, each ``retired`` directory read without an error."""


def with_retired(
    states: Mapping[int, Node], dirs: Mapping[int, tuple[Node | None, Node | None]]
) -> list[int]:
    """Of the buckets with a state (``states``), those whose state znode has a child besides
    their snapshot and log directories (``dirs``): the ``retired`` directory a bucket's first
    merge makes. Stats already read: a table never compacted costs no read (and, at 100,000
    buckets, about 20 ms)."""
    out = []
    for b, node in states.items():
        n = node.stat.num_children  # 2 (log and snapshots) unless a merge made a third
        if n > 2 or (None in dirs[b] and n > 2 - dirs[b].count(None)):
            out.append(b)
    return out


def decode_retired(table: TableInfo, path: str, node: Node) -> RetiredMeta:
    """The record at ``path``, its files resolved inside the table's directory.

    Raises:
        CorruptMetadataError: naming ``path``, when the value cannot be decoded or names a file
            outside the table's directory (docs/security.md, "Containment").
    """
    rec = RetiredRecord.decode(node.data, path)
    files = tuple(contained(f, table.data_dir, path) for f in rec.files)
    return RetiredMeta(
        path, node.stat.version, node.stat.ctime_ms, files, rec.size, rec.base, rec.end
    )


def read_retired(
    ctx: Context, table: TableInfo, buckets: list[int], skipped: list[str], *, whole: bool
) -> dict[int, list[RetiredMeta]]:
    """The retired records of each of ``buckets`` (those ``with_retired`` names), by base
    offset; what cannot be read is left out and said in ``skipped``. ``whole``: ``buckets``
    are every such bucket of the table (the directories read before of others are forgotten).

    First the stats of the directories, then the listing of each not proven unchanged and not
    empty, then its records: at most three pipelined batches, none when ``buckets`` is empty.
    """
    paths, tid = ctx.paths, table.table_id
    known = _known.get(ctx.store, {}).get(table.data_dir, {})
    now: dict[str, _Known] = {}
    out: dict[int, list[RetiredMeta]] = {}
    dirs = {b: paths.retired(tid, b) for b in buckets}
    stale: list[tuple[int, str, tuple[int, int]]] = []
    for (b, d), node in zip(dirs.items(), ctx.store.get_many(list(dirs.values()))):
        if node is None:
            continue  # no directory: nothing retired
        proof = (node.stat.czxid, node.stat.cversion)
        was = known.get(d)
        if was is not None and was.proof == proof:
            now[d] = was
            if was.records:
                out[b] = list(was.records)
        elif node.stat.num_children == 0:
            now[d] = _Known(proof, ())
        else:
            stale.append((b, d, proof))
    listings = ctx.store.children_many([d for _, d, _ in stale])
    _read_stale(ctx, table, stale, listings, (out, now), skipped)
    if whole:
        _known.setdefault(ctx.store, {})[table.data_dir] = now
    else:
        _known.setdefault(ctx.store, {}).setdefault(table.data_dir, {}).update(now)
    return out


def _read_stale(
    ctx: Context,
    table: TableInfo,
    stale: list[tuple[int, str, tuple[int, int]]],
    listings: list[list[str] | None],
    found: tuple[dict[int, list[RetiredMeta]], dict[str, _Known]],
    skipped: list[str],
) -> None:
    """Read the records of the ``stale`` directories (listed in ``listings``) into ``found``:
    per bucket its records, and each directory read without an error, proven by its stat."""
    out, now = found
    children = [
        (b, d, f"{d}/{name}") for (b, d, _), names in zip(stale, listings) for name in names or ()
    ]
    nodes = ctx.store.get_many([p for _, _, p in children])
    read: dict[str, list[RetiredMeta]] = {d: [] for _, d, _ in stale}
    clean = dict.fromkeys(read, True)
    for (_, d, path), node in zip(children, nodes):
        if node is None:
            continue  # deleted by retention between listing and reading
        try:
            read[d].append(decode_retired(table, path, node))
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
            clean[d] = False
    for b, d, proof in stale:
        records = sorted(read[d], key=lambda r: (r.base_offset, r.path))
        if records:
            out[b] = records
        if clean[d]:
            now[d] = _Known(proof, tuple(records))
