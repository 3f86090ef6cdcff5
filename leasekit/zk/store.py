"""The ZooKeeper session of the ZooKeeper layer: ``ZkStore`` connects, reads, commits
transactions and compare-and-set loops, and hands out watches and elections. Error
translation, pipelined reads, watches, the clock and elections live in their own modules."""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.security import OPEN_ACL_UNSAFE

from ..errors import IllegalStateError, MetadataTooLargeError
from .acl import Access, protect, write_refusal
from .changes import Touch
from .election import Election
from .errors import ConflictReason, translated
from .ops import (
    MAX_REQUEST_BYTES,
    Check,
    Delete,
    Node,
    Op,
    SetData,
    Stat,
    TxnConflict,
    chunk_ops,
    ops_size,
    stat_of,
)
from .reads import GetChildren, GetData, Read, Reader, ReadResult, value_of
from .session import MAX_SESSION_TIMEOUT, MAX_TIMEOUT, start_client
from .txn import Pending, acl_bytes, send
from .watches import Dispatcher, Watch, watch_children, watch_data
from .watchset import DataWatches, Recorder, Recording, WatchSet

__all__ = ["ZkStore", "MAX_SESSION_TIMEOUT"]

# "leasekit.zk": the layer logs (and passes to kazoo) one logger
log = logging.getLogger(__package__)

T = TypeVar("T")


class ZkStore:
    """A ZooKeeper session with leasekit's transactions, pipelined reads, watches and retries.

    ``hosts`` is a kazoo connect string; ``auth`` a (user, password) pair that
    turns on digest ACLs for everything this store creates.
    """

    def __init__(
        self,
        hosts: str,
        *,
        timeout: float = 10.0,
        auth: tuple[str, str] | None = None,
        session_timeout: float | None = None,
    ) -> None:
        self.hosts = hosts
        self.timeout = min(timeout, MAX_TIMEOUT)
        asked = max(timeout, 4.0) if session_timeout is None else session_timeout
        self.session_timeout = min(asked, MAX_SESSION_TIMEOUT)
        """The session timeout asked of ZooKeeper (it grants one within its bounds)."""
        self._auth = auth
        self.access = Access(auth)
        """The ACLs this store gives what it creates, and what its user may do."""
        self._acl = acl_bytes(self.access.acl or OPEN_ACL_UNSAFE)
        self.create_extra = 8 + len(self._acl)
        """Bytes of a create of this store besides its path and data (its ACL, flags)."""
        self._client: KazooClient | None = None
        self.round_trips = 0
        """Request batches sent and awaited (a pipelined batch counts once)."""
        self._reader = Reader(lambda: self.client, self.timeout)
        self._dispatcher = Dispatcher()
        self._recording = Recording()
        self._noted = self._recording.note
        self._fence = threading.local()

    # -- session --------------------------------------------------------------------------

    def open(self) -> None:
        """Connect; ``ZooKeeperUnavailableError`` if no server answers within the timeout, and
        ``PermissionDeniedError`` if it rejects the credentials."""
        self._client = start_client(
            self.hosts, self.session_timeout, self.timeout, self._auth, self.access.acl, log
        )

    def sibling(self, timeout: float) -> ZkStore:
        """A new, unopened store for a session of its own on the same ensemble with the same
        credentials, whose session timeout is ``timeout`` seconds (ZooKeeper bounds it to its
        min/max session timeout)."""
        return ZkStore(self.hosts, timeout=self.timeout, auth=self._auth, session_timeout=timeout)

    def close(self) -> None:
        """End the session (its ephemeral znodes go with it) and stop delivering watches."""
        self._dispatcher.close()
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.stop()
            with contextlib.suppress(Exception):
                client.close()

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            raise IllegalStateError("the connection is closed")
        return self._client

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected

    def add_state_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener`` with "CONNECTED", "SUSPENDED" or "LOST" on session changes;
        returns a function that removes it again."""
        client = self.client

        def forward(state: Any) -> None:
            listener(str(state))

        client.add_listener(forward)
        return lambda: client.remove_listener(forward)

    # -- reads ----------------------------------------------------------------------------

    def recording(self) -> contextlib.AbstractContextManager[Recorder]:
        """Note the znodes this thread reads through the store inside the block (for a view
        that watches what it showed, with ``watch_set``)."""
        return self._recording.scope()

    def get(self, path: str) -> Node | None:
        """The znode at ``path``, or None if it does not exist."""
        self._noted([path])
        self.round_trips += 1
        with translated(f"read {path}"):
            try:
                data, stat = self.client.retry(self.client.get, path)
            except kx.NoNodeError:
                return None
        return Node(data, stat_of(stat))

    def children(self, path: str) -> list[str] | None:
        """Sorted child names of ``path``, or None if it does not exist."""
        self._noted(children=[path])
        self.round_trips += 1
        with translated(f"list {path}"):
            try:
                return sorted(self.client.retry(self.client.get_children, path))
            except kx.NoNodeError:
                return None

    def read_many(self, reads: Sequence[Read]) -> list[ReadResult]:
        """Reads of mixed kinds in pipelined multiRead batches, each with its own result: a
        missing znode gives value None, a refused read its error, and the batch goes on."""
        if not reads:
            return []
        if self._recording.active:
            self._noted(
                [r.path for r in reads if isinstance(r, GetData)],
                [r.path for r in reads if isinstance(r, GetChildren)],
            )
        return self._pipelined(
            lambda: self._reader.collect(self._reader.send(reads)), f"{len(reads)} reads"
        )

    def get_many(self, paths: Sequence[str]) -> list[Node | None]:
        """Read many znodes in pipelined multiRead batches; None where a znode is missing."""
        return [value_of(r) for r in self.read_many([GetData(p) for p in paths])]

    def children_many(self, paths: Sequence[str]) -> list[list[str] | None]:
        """Sorted children of many znodes in pipelined multiRead batches; None where missing."""
        return [value_of(r) for r in self.read_many([GetChildren(p) for p in paths])]

    def read_with_clock(
        self, clock_path: str, paths: Sequence[str]
    ) -> tuple[int, list[Node | None]]:
        """The ZooKeeper clock (epoch ms) and the znodes at ``paths``, in one pipelined batch.

        The clock is read first, so every node read is at least as new as that time.
        """
        self._noted(paths)

        def attempt() -> tuple[int, list[Node | None]]:
            clock = self.client.set_async(clock_path, b"")
            pending = self._reader.send([GetData(p) for p in paths])
            now = clock.get(timeout=self.timeout).mtime
            return now, [value_of(r) for r in self._reader.collect(pending)]

        return self._pipelined(attempt, f"read the clock and {len(paths)} znodes")

    def exists(self, path: str) -> Stat | None:
        self._noted([path])
        self.round_trips += 1
        with translated(f"stat {path}"):
            stat = self.client.retry(self.client.exists, path)
        return None if stat is None else stat_of(stat)

    def _pipelined(self, attempt: Callable[[], T], what: str) -> T:
        self.round_trips += 1
        with translated(what):
            return self.client.retry(attempt)

    # -- watches and elections ------------------------------------------------------------

    def watch(
        self,
        path: str,
        callback: Callable[[bytes | None, Stat | None], None],
        *,
        debounce: float = 0.0,
    ) -> Watch:
        """Call ``callback(data, stat)`` now and after every change of ``path`` ((None, None)
        while it does not exist), on the store's watch thread; ``Watch.remove()`` stops it."""
        return watch_data(self.client, self._dispatcher, path, callback, debounce=debounce)

    def data_watches(self, callback: Callable[[str, Node | None], None]) -> DataWatches:
        """Many znodes' data kept current: ``callback(path, node)`` after each change."""
        return DataWatches(self.client, self._dispatcher.submit, self.get_many, callback)

    def watch_children(
        self, path: str, callback: Callable[[list[str] | None], None], *, debounce: float = 0.0
    ) -> Watch:
        """Call ``callback(children)`` now and after every change of ``path``'s children (None
        once when it is deleted, ending the watch), on the store's watch thread."""
        return watch_children(self.client, self._dispatcher, path, callback, debounce=debounce)

    def watch_set(self, on_change: Callable[[str | None], None]) -> WatchSet:
        """An empty set of watches on many znodes (see ``WatchSet``), filled with ``update``."""
        return WatchSet(self.client, on_change)

    def election(self, path: str, identifier: str) -> Election:
        """A leader election at ``path`` with kazoo's recipe, errors translated."""
        return Election(self.client.Election(path, identifier))

    # -- writes ---------------------------------------------------------------------------

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents (empty values) if missing."""
        with translated(f"create {path}"):
            self.client.retry(self.client.ensure_path, path)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        """Set data; raises ``TxnConflict`` on a version mismatch or missing znode."""
        return self.commit([SetData(path, data, version)])[0]

    def commit(self, ops: Sequence[Op]) -> list[Any]:
        """Run ``ops`` as one transaction; raises ``TxnConflict`` naming the op that failed.

        Results are a path per Create, a Stat per SetData and True per Delete/Check.
        A connection loss is not retried here: the caller knows whether the
        transaction is idempotent and how to check whether it committed. Inside ``fenced``
        the transaction also checks the fence first, else ``LeadershipLostError``. A change
        marker missing (``changes.Touch``, data older than markers) is created, and the
        transaction sent once more.
        """
        if not ops:
            return []
        try:
            return self.submit(ops).result()
        except TxnConflict as exc:
            if exc.reason != ConflictReason.NONODE or not isinstance(exc.op, Touch):
                raise
            self.ensure_path(exc.op.path)  # every other op would have succeeded: only it missed
        return self.submit(ops).result()

    def submit(self, ops: Sequence[Op]) -> Pending:
        """Send ``ops`` as one transaction (as ``commit``) without waiting for its answer;
        ``result()`` of the returned ``Pending`` waits and gives what ``commit`` gives."""
        fence = getattr(self._fence, "path", None)
        return self._submit(list(ops) if fence is None else [Check(fence, -1), *ops], fence)

    @contextlib.contextmanager
    def fenced(self, path: str) -> Iterator[None]:
        """Inside the block, every transaction this thread commits also checks that ``path``
        still exists (a leader's election znode, gone with its session); where it does not,
        the transaction writes nothing and raises ``LeadershipLostError`` (docs/security.md)."""
        outer = getattr(self._fence, "path", None)
        self._fence.path = path
        try:
            yield
        finally:
            self._fence.path = outer

    def check_fence(self) -> None:
        """Before a deletion with no transaction of its own (files): one Check-only transaction
        on this thread's fence; ``LeadershipLostError`` if it is gone, nothing without a fence."""
        fence = getattr(self._fence, "path", None)
        if fence is not None:
            self._submit([Check(fence, -1)], fence).result()

    def ops_size(self, ops: Sequence[Op]) -> int:
        """A safe upper bound of the bytes ``ops`` take in a transaction of this store."""
        return ops_size(ops, self.create_extra)

    def _submit(self, ops: list[Op], fence: str | None) -> Pending:
        size = ops_size(ops, self.create_extra)
        if size > MAX_REQUEST_BYTES:
            raise MetadataTooLargeError(
                f"transaction of {size} bytes exceeds ZooKeeper's 1 MB limit"
            )
        self.round_trips += 1
        with translated(f"transaction of {len(ops)} ops"):
            return Pending(ops, send(self.client, ops, self._acl), fence)

    def commit_chunked(self, ops: Sequence[Op]) -> None:
        """Run ``ops`` in as few transactions as ZooKeeper's limits allow (not atomic overall)."""
        for chunk in chunk_ops(ops):
            self.commit(chunk)

    def commit_retrying(
        self, build: Callable[[], Sequence[Op] | None], *, what: str, attempts: int = 200
    ) -> list[Any]:
        """Compare-and-set loop: rebuild ``ops`` from fresh reads until a commit succeeds.

        ``build`` returns the ops (or None when nothing needs writing). On a version
        or exists conflict it is called again after a short jittered back-off;
        other conflicts (a missing parent, say) propagate.
        """
        delay = 0.002
        for _ in range(attempts):
            ops = build()
            if not ops:
                return []
            try:
                return self.commit(ops)
            except TxnConflict as exc:
                if exc.reason not in (ConflictReason.VERSION, ConflictReason.EXISTS):
                    raise
                time.sleep(random.uniform(0, delay))
                delay = min(delay * 2, 0.2)
        raise IllegalStateError(f"{what}: gave up after {attempts} conflicting concurrent updates")

    def delete_tree(self, path: str) -> None:
        """Delete ``path`` and everything below it, children first, in batched transactions."""
        while True:
            nodes = self.descendants(path)
            if nodes is None:
                return
            ops = [Delete(p) for p in reversed(nodes)]
            try:
                self.commit_chunked(ops)
                return
            except TxnConflict as exc:
                if exc.reason not in (ConflictReason.NONODE, ConflictReason.NOTEMPTY):
                    raise

    def descendants(self, path: str) -> list[str] | None:
        """``path`` and every znode below it, parents before children (None if missing)."""
        if self.exists(path) is None:
            return None
        out = [path]
        level = [path]
        while level:
            kids = self.children_many(level)
            level = [f"{parent}/{k}" for parent, names in zip(level, kids) if names for k in names]
            out.extend(level)
        return out

    def protect(self, root: str, *, seal: str, seal_data: bytes, clock: str) -> str | None:
        """With ``auth``, close the namespace at ``root`` to clients without the credentials
        (see ``acl.protect``); None, or why this store may not write it. No-op without auth.

        Raises:
            PermissionDeniedError: the namespace is open and cannot be closed.
        """
        if self._auth is None:
            return None
        self.round_trips += 1
        with translated(f"protect {root}"):  # idempotent: retried after a connection loss
            return self.client.retry(
                protect,
                self.client,
                self.access,
                root,
                seal=seal,
                seal_data=seal_data,
                clock=clock,
                timeout=self.timeout,
            )

    def write_refusal(self, path: str) -> str | None:
        """Why this store may not create or delete children of ``path`` (its ACL refuses these
        credentials), or None if it may; computed from the ACL, nothing written."""
        self.round_trips += 1
        return write_refusal(self.client, self.access, self._auth, path)

    def server_time_ms(self, clock_path: str) -> int:
        """ZooKeeper's clock in epoch ms: the mtime of a write to ``clock_path``."""
        self.round_trips += 1
        with translated("read the ZooKeeper clock"):
            stat = self.client.retry(self.client.set, clock_path, b"")
        return stat.mtime
