"""A group's leader following rescales (K5): the bucket ids it assigns per table (active buckets
and sealed ones not drained, new ones once their parents are drained) and the watches that tell
it to assign again, on a rescale of a subscribed table or a commit that may drain a parent."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..structs import TableBucket
from . import lineage
from . import offsets as stored

if TYPE_CHECKING:
    from ..context import Context
    from ..tables.info import TableInfo
    from ..zk import Watch, ZkStore

__all__ = ["group_buckets", "RescaleWatch"]

DEBOUNCE = 0.1
"""Seconds a rescale or a commit waits for more before the leader assigns again."""


def group_buckets(
    ctx: Context, group_id: str, tables: Mapping[str, TableInfo], *, parent_first: bool
) -> tuple[dict[str, tuple[int, ...]], bool]:
    """The bucket ids the group assigns of each of ``tables`` now (``lineage.to_read`` of the
    group's committed offsets of their sealed buckets, read in one pipelined round trip), and
    whether some sealed bucket is not drained yet (its commits may change them)."""
    sealed = [TableBucket(name, b) for name, t in tables.items() for b in lineage.sealed(t.layout)]
    committed = stored.fetch(ctx, group_id, tables, sealed) if sealed else {}
    offsets: dict[str, dict[int, int | None]] = {name: {} for name in tables}
    for tb, record in committed.items():
        offsets[tb.table][tb.bucket] = record.offset
    ids, awaiting = {}, False
    for name, table in tables.items():
        ids[name] = lineage.to_read(table.layout, offsets[name], parent_first=parent_first)
        awaiting = awaiting or bool(lineage.undrained(table.layout, offsets[name]))
    return ids, awaiting


class RescaleWatch:
    """As a group's leader: watches the record of every subscribed table (a rescale changes its
    version) and, while a sealed bucket is not drained, the group's change marker (every commit
    touches it); calls ``changed`` on the watch thread after either."""

    def __init__(self, store: ZkStore, ctx: Context, group_id: str, changed: Callable[[], None]):
        self._store, self._ctx, self._group, self._changed = store, ctx, group_id, changed
        self._lock = threading.Lock()
        self._versions: dict[str, int] = {}
        """Table name -> the version of its record the last assignment was computed from."""
        self._tables: dict[str, Watch] = {}
        self._commits: Watch | None = None

    def follow(self, tables: Mapping[str, TableInfo], awaiting: bool) -> None:
        """After an assignment computed from ``tables`` (as read), with a sealed bucket not
        drained (``awaiting``) or not."""
        with self._lock:
            self._versions = {name: t.record[1] for name, t in tables.items()}
            gone = [self._tables.pop(n) for n in list(self._tables) if n not in tables]
            new = [n for n in tables if n not in self._tables]
            drop = None if awaiting else self._commits
            start = awaiting and self._commits is None
            if not awaiting:
                self._commits = None
        for watch in [*gone, *([drop] if drop else [])]:
            watch.remove()
        for name in new:
            watch = self._store.watch(
                self._ctx.paths.table(name), self._on_table(name), debounce=DEBOUNCE
            )
            with self._lock:
                self._tables[name] = watch
        if start:
            marker = self._ctx.paths.group_changes(self._group)
            watch = self._store.watch(marker, self._on_commit, debounce=DEBOUNCE)
            with self._lock:
                self._commits = watch

    def _on_table(self, name: str) -> Callable[[bytes | None, Any], None]:
        def rescaled(data: bytes | None, stat: Any) -> None:
            if stat is not None and stat.version != self._versions.get(name):
                self._changed()  # (a dropped table: the leader's watch of the tables)

        return rescaled

    def _on_commit(self, data: bytes | None, stat: Any) -> None:
        if stat is not None:
            self._changed()

    def close(self) -> None:
        with self._lock:
            watches = [*self._tables.values(), *([self._commits] if self._commits else [])]
            self._tables, self._commits, self._versions = {}, None, {}
        for watch in watches:
            watch.remove()
