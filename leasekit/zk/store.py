"""The ZooKeeper session of the ZooKeeper layer: ZkStore's reads, transactions, compare-and-set,
the server clock, and the translation of kazoo's errors into ``leasekit.errors``."""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from kazoo import exceptions as kx
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import RetryFailedError
from kazoo.security import make_digest_acl

from ..errors import (
    IllegalStateError,
    InvalidArgumentError,
    LeasekitError,
    MetadataTooLargeError,
    PermissionDeniedError,
    ZooKeeperUnavailableError,
)
from .ops import (
    MAX_REQUEST_BYTES,
    Create,
    Delete,
    Node,
    Op,
    SetData,
    Stat,
    TxnConflict,
    _stat,
    chunk_ops,
    op_size,
)
from .reads import (
    _GET_CHILDREN,
    _GET_DATA,
    READS_PER_REQUEST,
    MultiRead,
    _FallbackOnUnimplemented,
    _Singles,
)

log = logging.getLogger(__package__)  # "leasekit.zk": the layer logs (and passes to kazoo) one logger

T = TypeVar("T")

_CONFLICTS: dict[type[BaseException], str] = {
    kx.NoNodeError: "nonode",
    kx.NodeExistsError: "exists",
    kx.BadVersionError: "version",
    kx.NotEmptyError: "notempty",
}


@contextlib.contextmanager
def translated(what: str = "ZooKeeper call") -> Iterator[None]:
    """Translate kazoo errors raised inside into ``leasekit.errors``."""
    try:
        yield
    except LeasekitError:
        raise
    except (kx.NoAuthError, kx.AuthFailedError) as exc:
        raise PermissionDeniedError(f"{what}: ZooKeeper denied access ({type(exc).__name__})") from None
    except (
        kx.ConnectionLoss,
        kx.SessionExpiredError,
        kx.OperationTimeoutError,
        kx.ConnectionClosedError,
        KazooTimeoutError,
        RetryFailedError,
        kx.SessionMovedError,
    ) as exc:
        raise ZooKeeperUnavailableError(f"{what}: ZooKeeper unavailable ({type(exc).__name__})") from None
    except kx.BadArgumentsError as exc:
        raise InvalidArgumentError(f"{what}: bad arguments ({exc})") from None
    except kx.KazooException as exc:
        raise IllegalStateError(f"{what}: ZooKeeper error {type(exc).__name__}: {exc}") from None


class Election:
    """A leader election: ``run(func)`` blocks until this client leads, runs ``func`` and gives
    up leadership when it returns; ``cancel()`` stops waiting; ``contenders()`` lists ids."""

    def __init__(self, recipe: Any) -> None:
        self._recipe = recipe

    def run(self, func: Callable[..., Any], *args: Any) -> Any:
        with translated("leader election"):
            return self._recipe.run(func, *args)

    def cancel(self) -> None:
        with contextlib.suppress(kx.KazooException):
            self._recipe.cancel()

    def contenders(self) -> list[str]:
        with translated("list election contenders"):
            return list(self._recipe.contenders())


class ZkStore:
    """A ZooKeeper session with leasekit's codec, transactions and retries.

    ``hosts`` is a kazoo connect string; ``auth`` a (user, password) pair that
    turns on digest ACLs for everything this store creates.
    """

    def __init__(
        self,
        hosts: str,
        *,
        timeout: float = 10.0,
        auth: tuple[str, str] | None = None,
    ) -> None:
        self.hosts = hosts
        self.timeout = timeout
        self._auth = auth
        self._client: KazooClient | None = None
        self.round_trips = 0
        """Request batches sent and awaited (a pipelined batch counts once)."""
        self._multi_read = True

    # -- session --------------------------------------------------------------------------

    def open(self) -> None:
        """Connect; ``ZooKeeperUnavailableError`` if no server answers within the timeout."""
        auth_data = None
        default_acl = None
        if self._auth is not None:
            user, password = self._auth
            auth_data = [("digest", f"{user}:{password}")]
            default_acl = [make_digest_acl(user, password, all=True)]
        retry = {"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0, "ignore_expire": True}
        client = KazooClient(
            hosts=self.hosts,
            timeout=max(self.timeout, 4.0),
            auth_data=auth_data,
            default_acl=default_acl,
            connection_retry=dict(retry),
            command_retry=dict(retry, deadline=self.timeout),
            logger=log,
        )
        try:
            client.start(timeout=self.timeout)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ZooKeeperUnavailableError(
                f"cannot reach ZooKeeper at {self.hosts} within {self.timeout:g}s"
            ) from None
        except kx.AuthFailedError:
            client.stop()
            client.close()
            raise PermissionDeniedError(f"ZooKeeper at {self.hosts} rejected the credentials") from None
        self._client = client

    def close(self) -> None:
        """End the session (its ephemeral znodes go with it)."""
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

    def get(self, path: str) -> Node | None:
        """The znode at ``path``, or None if it does not exist."""
        self.round_trips += 1
        with translated(f"read {path}"):
            try:
                data, stat = self.client.retry(self.client.get, path)
            except kx.NoNodeError:
                return None
        return Node(data, _stat(stat))

    def get_many(self, paths: Sequence[str]) -> list[Node | None]:
        """Read many znodes in pipelined multiRead batches; None where a znode is missing."""
        results = self._read_many([(_GET_DATA, p) for p in paths], f"read {len(paths)} znodes")
        return [None if r is None else Node(r[0], _stat(r[1])) for r in results]

    def _read_many(self, ops: Sequence[tuple[int, str]], what: str) -> list[Any]:
        """Results of getData/getChildren ops (None for a missing znode), batched by multiRead."""

        def attempt() -> list[Any]:
            return self._collect(self._send_batches(ops))

        if not ops:
            return []
        return self._pipelined(attempt, what)

    def _send_batches(self, ops: Sequence[tuple[int, str]]) -> list[Any]:
        """Send ``ops`` as multiRead requests of READS_PER_REQUEST, without waiting."""
        return [self._send_reads(ops[i:i + READS_PER_REQUEST]) for i in range(0, len(ops), READS_PER_REQUEST)]

    def _collect(self, pending: Sequence[Any]) -> list[Any]:
        """Results of sent batches in order: None for a missing znode; other errors raise."""
        out: list[Any] = []
        for result in pending:
            for item in result.get(timeout=self.timeout * 3):
                if isinstance(item, kx.NoNodeError):
                    out.append(None)
                elif isinstance(item, BaseException):
                    raise item
                else:
                    out.append(item)
        return out

    def _send_reads(self, ops: Sequence[tuple[int, str]]) -> Any:
        client = self.client
        result = client.handler.async_result()
        if self._multi_read:
            client._call(MultiRead(tuple(ops)), result)
            return _FallbackOnUnimplemented(self, ops, result)
        return _Singles(self, ops)

    def children(self, path: str) -> list[str] | None:
        """Sorted child names of ``path``, or None if it does not exist."""
        self.round_trips += 1
        with translated(f"list {path}"):
            try:
                return sorted(self.client.retry(self.client.get_children, path))
            except kx.NoNodeError:
                return None

    def election(self, path: str, identifier: str) -> Election:
        """A leader election at ``path`` with kazoo's recipe, errors translated."""
        return Election(self.client.Election(path, identifier))

    def watch(self, path: str, callback: Callable[[bytes | None], None]) -> None:
        """Call ``callback`` with the data of ``path`` now and after every change (None: deleted)."""
        self.client.DataWatch(path, lambda data, stat: callback(data))

    def read_with_clock(self, clock_path: str, paths: Sequence[str]) -> tuple[int, list[Node | None]]:
        """The ZooKeeper clock (epoch ms) and the znodes at ``paths``, in one pipelined batch.

        The clock is read first, so every node read is at least as new as that time.
        """

        def attempt() -> tuple[int, list[Node | None]]:
            clock = self.client.set_async(clock_path, b"")
            pending = self._send_batches([(_GET_DATA, p) for p in paths])
            now = clock.get(timeout=self.timeout).mtime
            return now, [None if r is None else Node(r[0], _stat(r[1])) for r in self._collect(pending)]

        return self._pipelined(attempt, f"read the clock and {len(paths)} znodes")

    def children_many(self, paths: Sequence[str]) -> list[list[str] | None]:
        """Sorted children of many znodes in pipelined multiRead batches; None where missing."""
        results = self._read_many([(_GET_CHILDREN, p) for p in paths], f"list {len(paths)} znodes")
        return [None if r is None else sorted(r) for r in results]

    def exists(self, path: str) -> Stat | None:
        self.round_trips += 1
        with translated(f"stat {path}"):
            stat = self.client.retry(self.client.exists, path)
        return None if stat is None else _stat(stat)

    def _pipelined(self, attempt: Callable[[], T], what: str) -> T:
        self.round_trips += 1
        with translated(what):
            return self.client.retry(attempt)

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
        transaction is idempotent and how to check whether it committed.
        """
        if not ops:
            return []
        size = sum(op_size(op) for op in ops)
        if size > MAX_REQUEST_BYTES:
            raise MetadataTooLargeError(f"transaction of {size} bytes exceeds ZooKeeper's 1 MB limit")
        self.round_trips += 1
        with translated(f"transaction of {len(ops)} ops"):
            txn = self.client.transaction()
            for op in ops:
                if isinstance(op, Create):
                    txn.create(op.path, op.data, ephemeral=op.ephemeral)
                elif isinstance(op, SetData):
                    txn.set_data(op.path, op.data, version=op.version)
                elif isinstance(op, Delete):
                    txn.delete(op.path, version=op.version)
                else:
                    txn.check(op.path, op.version)
            results = txn.commit()
        for index, result in enumerate(results):
            if isinstance(result, BaseException) and not isinstance(result, kx.RolledBackError):
                reason = next((r for cls, r in _CONFLICTS.items() if isinstance(result, cls)), None)
                if reason is None:
                    with translated(f"transaction op {ops[index].path}"):
                        raise result
                raise TxnConflict(index, ops[index], reason or "unknown")
        return [_stat(r) if hasattr(r, "mtime") else r for r in results]

    def commit_chunked(self, ops: Sequence[Op]) -> None:
        """Run ``ops`` in as few transactions as ZooKeeper's limits allow (not atomic overall)."""
        for chunk in chunk_ops(ops):
            self.commit(chunk)

    def commit_retrying(self, build: Callable[[], Sequence[Op] | None], *, what: str,
                        attempts: int = 200) -> list[Any]:
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
                if exc.reason not in ("version", "exists"):
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
                if exc.reason not in ("nonode", "notempty"):
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

    def server_time_ms(self, clock_path: str) -> int:
        """ZooKeeper's clock in epoch ms: the mtime of a write to ``clock_path``."""
        self.round_trips += 1
        with translated("read the ZooKeeper clock"):
            stat = self.client.retry(self.client.set, clock_path, b"")
        return stat.mtime
