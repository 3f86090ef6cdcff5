"""The coordinator of a consumer without a ``group_id``: every bucket of the tables it
subscribes to is its own at once (after a rescale: sealed buckets until it has read them to
their seals, new ones once their parents are, K5), and commits and committed offsets are
refused (C3)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import IllegalOperationError, TableNotFoundError
from ..structs import OffsetAndMetadata, TableBucket
from . import lineage
from .subscription import SUBSCRIBED, SubscriptionState

if TYPE_CHECKING:
    from ..context import Context
    from ..zk import Watch
    from .offsets import OffsetRecord

__all__ = ["NoGroupCoordinator"]


class NoGroupCoordinator:
    """A consumer without a group: it is assigned the buckets of the tables it subscribes to at
    once; it has no member id, no generation and no committed offsets. It follows rescales of
    those tables (a watch on each table's record) and drops a sealed bucket once its position
    reached the seal, adding the new buckets made from it (with ``parent_first``, only then)."""

    member_id: str | None = None
    generation: int | None = None
    group_id: str | None = None
    suspended = False

    def __init__(
        self,
        ctx: Context,
        subscription: SubscriptionState,
        wake: Callable[[], None],
        *,
        parent_first: bool = True,
    ) -> None:
        self._ctx, self._sub, self._wake = ctx, subscription, wake
        self._parent_first = parent_first
        self._drained: dict[str, set[int]] = {}
        """Table id -> the sealed buckets this consumer read to their seals."""
        self._skipped: dict[str, set[int]] = {}
        """Table id -> the sealed buckets the reset policy put at their seals, without this
        consumer having been inside them (their new buckets start by the policy too, K6)."""
        self._watches: dict[str, Watch] = {}
        self._rescaled: set[str] = set()
        """Names of subscribed tables whose record changed since it was read (a rescale)."""
        self._computed: dict[str, int] = {}
        """Table name -> the version of its record the assignment was computed from."""
        self._lock = threading.Lock()

    def subscription_changed(self, *, in_poll: bool = False) -> None:
        """Assign the buckets of the subscribed tables to read now. A change made inside
        ``poll`` (a pattern subscription following tables created or dropped, C17; a rescale or
        a drained parent, K5) is told to the listener: the buckets that left, then the ones
        that came."""
        if self._sub.mode != SUBSCRIBED:
            return
        self._follow_tables()
        before = set(self._sub.assignment())
        wanted = self._wanted()
        listener = self._sub.listener if in_poll else None
        revoked = before - set(wanted)
        if listener is not None and revoked:
            listener.on_buckets_revoked(revoked)
        self._sub.set_assignment(wanted)
        if listener is not None and set(wanted) - before:
            listener.on_buckets_assigned(set(wanted) - before)

    def _wanted(self) -> list[TableBucket]:
        """The buckets to read now: ``lineage.to_read`` of each subscribed table, with the
        positions reached in its sealed buckets."""
        positions = self._sub.positions()
        out = []
        self._computed = {name: t.record[1] for name, t in self._sub.tables.items()}
        for name, table in self._sub.tables.items():
            drained = self._drained.setdefault(table.table_id, set())
            offsets: dict[int, int | None] = {b: table.layout.sealed_at(b) for b in drained}
            for b in lineage.sealed(table.layout):
                reached = positions.get(TableBucket(name, b))
                if lineage.drained(table.layout, b, reached):
                    drained.add(b)
                    offsets[b] = reached
            ids = lineage.to_read(table.layout, offsets, parent_first=self._parent_first)
            out += [TableBucket(name, b) for b in ids]
        return out

    def _follow_tables(self) -> None:
        """Watch the record of every subscribed table (and no other)."""
        names = set(self._sub.tables)
        for name in [n for n in self._watches if n not in names]:
            self._watches.pop(name).remove()
        for name in names - set(self._watches):
            path = self._ctx.paths.table(name)
            self._watches[name] = self._ctx.store.watch(path, self._on_table(name))

    def _on_table(self, name: str) -> Callable[[bytes | None, Any], None]:
        def changed(data: bytes | None, stat: Any) -> None:
            if stat is not None and stat.version != self._computed.get(name):
                with self._lock:
                    self._rescaled.add(name)
                self._wake()

        return changed

    @property
    def has_work(self) -> bool:
        """A subscribed table was rescaled, or an assigned sealed bucket was read to its seal."""
        if self._rescaled or any(
            t.record[1] != self._computed.get(n) for n, t in self._sub.tables.items()
        ):  # (a table read again elsewhere: ``table_of`` reads a new bucket's table again)
            return True
        positions = self._sub.positions()
        for name, table in self._sub.tables.items():
            layout = table.layout
            for b in lineage.sealed(layout):
                tb = TableBucket(name, b)
                if tb in positions and lineage.drained(layout, b, positions[tb]):
                    return True
        return False

    def unsubscribe(self) -> None:
        self._unwatch()

    def poll(self) -> None:
        """Follow a rescale or a drained sealed bucket (K5)."""
        if self._sub.mode != SUBSCRIBED or not self.has_work:
            return
        with self._lock:
            rescaled, self._rescaled = self._rescaled, set()
        for name in rescaled:
            table = self._sub.tables.get(name)
            if table is not None:
                with contextlib.suppress(TableNotFoundError):  # dropped: C17 takes it out
                    table.refresh()
        self.subscription_changed(in_poll=True)

    def polling(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def require_group(self) -> str:
        raise _no_group()

    def starting_offsets(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        return {}

    def from_beginning(self, buckets: list[TableBucket]) -> set[TableBucket]:
        """Of ``buckets`` (made by rescales), those read from their beginning: this consumer
        consumed one of their parents (it held a position in it, not one the reset policy put
        at its seal, K6)."""
        positions = self._sub.positions()
        out = set()
        for tb in buckets:
            table = self._sub.table_of(tb)
            drained = self._drained.get(table.table_id, set())
            skipped = self._skipped.get(table.table_id, set())

            def consumed(
                b: int,
                name: str = tb.table,
                drained: set[int] = drained,
                skipped: set[int] = skipped,
            ) -> bool | None:
                if b in skipped:
                    return False
                return True if b in drained or TableBucket(name, b) in positions else None

            if lineage.from_beginning(table.layout, tb.bucket, consumed, default=False):
                out.add(tb)
        return out

    def reset_to_seal(self, tb: TableBucket, seal: int, *, consumed: bool) -> None:
        """The reset policy put ``tb`` at its seal ``seal``; unless this consumer was inside it
        (``consumed``), its new buckets start by the policy too (K6)."""
        if not consumed:
            self._skipped.setdefault(self._sub.table_of(tb).table_id, set()).add(tb.bucket)

    def fetch_committed(self, buckets: list[TableBucket]) -> dict[TableBucket, OffsetRecord]:
        raise _no_group()

    def commit(
        self, offsets: Mapping[TableBucket, OffsetAndMetadata], *, skip_dropped: bool = False
    ) -> None:
        raise _no_group()

    def _unwatch(self) -> None:
        watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            watch.remove()

    def close(self) -> None:
        self._unwatch()


def _no_group() -> IllegalOperationError:
    return IllegalOperationError(
        "this consumer has no group_id: offsets cannot be committed or read"
    )
