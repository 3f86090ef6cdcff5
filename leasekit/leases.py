"""KV snapshot leases in ZooKeeper: acquire, renew, release, drop, expire and read back.

A pin is a child znode of the pinned snapshot's znode, so pinning a snapshot and deleting it
exclude each other by ZooKeeper's own rules (no global lock). The lease keeps its pins as
per-table arrays (one znode per 1,000 buckets) changed in the same transactions as the pins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from .durations import check_id, parse_duration, to_ms
from .errors import (
    CorruptMetadataError,
    InvalidArgumentError,
    InvalidDurationError,
    InvalidTypeError,
    LeaseExpiredError,
    LeaseNotFoundError,
)
from .records import AcquireResult, LeaseInfo, TableBucket
from .zk import (
    Create,
    Delete,
    Node,
    Op,
    SetData,
    Stat,
    TxnConflict,
    chunk_ops,
    decode,
    encode,
    to_datetime,
)
from .zkpaths import CHUNK

if TYPE_CHECKING:
    from .connection import Connection
    from .tables import Table

__all__ = ["acquire", "renew", "release", "drop", "expire", "info", "list_leases", "lease_duration_ms", "pins_of"]

log = logging.getLogger(__name__)

LIVE, DROPPING = "live", "dropping"
OPS_PER_TXN = 5000


class LeaseRecord(NamedTuple):
    """The lease znode's value with its stat; ``stat.mtime_ms`` is the last acquire or renew."""

    duration_ms: int
    floor_ms: int
    owner: str
    state: str
    stat: Stat

    @property
    def expires_ms(self) -> int:
        """Expiry: never earlier than a previous expiry (renew only extends, L7)."""
        return max(self.floor_ms, self.stat.mtime_ms + self.duration_ms)

    def value(self, duration_ms: int, owner: str, state: str = LIVE) -> bytes:
        """Stored form after an acquire or renew that keeps every earlier expiry as a floor."""
        return encode({"d": duration_ms, "f": self.expires_ms, "o": owner, "s": state})


def _record(node: Node, path: str) -> LeaseRecord:
    v = decode(node.data, path)
    try:
        return LeaseRecord(int(v["d"]), int(v["f"]), str(v["o"]), str(v["s"]), node.stat)
    except (KeyError, TypeError, ValueError):
        raise CorruptMetadataError(f"lease record at {path} is missing fields", path) from None


def _new_record(duration_ms: int, owner: str) -> bytes:
    return encode({"d": duration_ms, "f": 0, "o": owner, "s": LIVE})


class Chunk(NamedTuple):
    """A lease's pinned snapshot ids for one chunk of one table's buckets (0: not pinned)."""

    table_id: str
    chunk: int
    table: str
    ids: list[int]
    stat: Stat | None


def _chunk(node: Node | None, path: str, table_id: str, chunk: int, table: str) -> Chunk:
    if node is None:
        return Chunk(table_id, chunk, table, [0] * CHUNK, None)
    v = decode(node.data, path)
    ids = list(v["a"])
    return Chunk(table_id, chunk, v["t"], ids + [0] * (CHUNK - len(ids)), node.stat)


def _chunk_value(table: str, ids: list[int]) -> bytes:
    end = len(ids)
    while end and ids[end - 1] == 0:
        end -= 1
    return encode({"t": table, "a": ids[:end]})


def lease_duration_ms(conn: Connection, duration: Any) -> int:
    """L2: a duration > 0 and <= the namespace's lease.max-duration, in ms (no I/O)."""
    value = parse_duration(duration, what="lease duration")
    if value <= timedelta(0):
        raise InvalidDurationError(f"lease duration must be greater than 0, got {duration!r}")
    limit = conn.cached_settings()["lease.max-duration"]
    if value > limit:
        raise InvalidDurationError(f"lease duration {duration!r} exceeds lease.max-duration ({limit})")
    return to_ms(value)


# -- acquire ------------------------------------------------------------------------------


def acquire(
    conn: Connection,
    lease_id: str,
    wanted: Mapping[Table, Mapping[int, int]],
    duration_ms: int,
    *,
    refresh: Callable[[Table, list[int]], dict[int, int]] | None = None,
) -> AcquireResult:
    """Pin ``{table: {bucket: snapshot_id}}`` for the lease, creating it on first use (L3, L4, L8).

    One pipelined read, then transactions of up to OPS_PER_TXN ops, each carrying the pins of
    whole chunks together with those chunks' arrays and the lease record (whose mtime becomes
    the acquire time). A snapshot that is missing, or deleted while we pin, is reported
    unavailable; with ``refresh`` (acquire_latest) its bucket is looked up again (L6).
    """
    check_id(lease_id)
    paths, store = conn.paths, conn.store
    rec_path = paths.lease(lease_id)
    tables = {t.table_id: t for t in wanted}
    work: dict[tuple[str, int], dict[int, int]] = {}
    for table, buckets in wanted.items():
        for bucket, sid in buckets.items():
            work.setdefault((table.table_id, bucket // CHUNK), {})[bucket] = sid
    acquired: dict[TableBucket, int] = {}
    unavailable: dict[TableBucket, int] = {}
    pending = sorted(work)
    expires_ms = 0
    stale = True
    record: LeaseRecord | None = None
    chunks: dict[tuple[str, int], Chunk] = {}
    first = True
    while pending or first:
        if stale:
            chunk_paths = [paths.lease_chunk(lease_id, tid, c) for tid, c in pending]
            now, nodes = store.read_with_clock(paths.clock, [rec_path, *chunk_paths])
            record = _check_live(conn, nodes[0], rec_path, now, creating=True)
            chunks = {key: _chunk(n, p, key[0], key[1], tables[key[0]].name)
                      for key, p, n in zip(pending, chunk_paths, nodes[1:])}
            stale = False
        if record is None:
            ops: list[Op] = [Create(rec_path, _new_record(duration_ms, conn.owner)), Create(paths.lease_pins(lease_id))]
        else:
            ops = [SetData(rec_path, record.value(duration_ms, conn.owner), record.stat.version)]
        pin_ops: dict[int, tuple[TableBucket, int]] = {}
        chunk_ops_at: dict[tuple[str, int], tuple[int, list[int]]] = {}
        batch: list[tuple[str, int]] = []
        for key in pending:
            ch, table = chunks[key], tables[key[0]]
            ids = list(ch.ids)
            new_ops: list[Op] = []
            new_pins: dict[int, tuple[TableBucket, int]] = {}
            for bucket, sid in sorted(work[key].items()):
                current = ids[bucket % CHUNK]
                if current == sid:
                    continue
                new_pins[len(ops) + len(new_ops)] = (TableBucket(table.name, bucket), sid)
                new_ops.append(Create(paths.pin(key[0], bucket, sid, lease_id)))
                if current:
                    new_ops.append(Delete(paths.pin(key[0], bucket, current, lease_id)))
                ids[bucket % CHUNK] = sid
            if batch and len(ops) + len(new_ops) + 1 > OPS_PER_TXN:
                break
            batch.append(key)
            if ids != ch.ids:
                chunk_path = paths.lease_chunk(lease_id, key[0], key[1])
                value = _chunk_value(table.name, ids)
                new_ops.append(Create(chunk_path, value) if ch.stat is None else SetData(chunk_path, value, ch.stat.version))
                chunk_ops_at[key] = (len(ops) + len(new_ops) - 1, ids)
            ops += new_ops
            pin_ops.update(new_pins)
        try:
            results = store.commit(ops)
        except TxnConflict as exc:
            _resolve(conn, exc, pin_ops, work, tables, lease_id, unavailable, refresh)
            stale = True
            continue
        first = False
        stat = results[0] if isinstance(results[0], Stat) else store.exists(rec_path)
        if stat is None:
            raise LeaseExpiredError(f"lease {lease_id!r} was dropped while acquiring")
        expires_ms = max(record.expires_ms if record else 0, stat.mtime_ms + duration_ms)
        record = LeaseRecord(duration_ms, record.expires_ms if record else 0, conn.owner, LIVE, stat)
        for key in batch:
            if key in chunk_ops_at:
                index, ids = chunk_ops_at[key]
                version = results[index].version if isinstance(results[index], Stat) else 0
                old = chunks[key]
                chunks[key] = old._replace(ids=ids, stat=(old.stat or stat)._replace(version=version))
            table = tables[key[0]]
            for bucket, sid in work[key].items():
                acquired[TableBucket(table.name, bucket)] = sid
        pending = [k for k in pending if k not in batch]
    return AcquireResult(acquired, unavailable, to_datetime(expires_ms))


def _check_live(conn: Connection, node: Node | None, path: str, now: int, *, creating: bool = False) -> LeaseRecord | None:
    lease_id = path.rsplit("/", 1)[1]
    if node is None:
        if creating:
            return None
        raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
    record = _record(node, path)
    if record.state != LIVE:
        raise LeaseExpiredError(f"lease {lease_id!r} is being dropped")
    if conn.clock(now) > record.expires_ms:
        raise LeaseExpiredError(f"lease {lease_id!r} expired at {to_datetime(record.expires_ms).isoformat()}")
    return record


def _resolve(conn: Connection, exc: TxnConflict, pin_ops: dict[int, tuple[TableBucket, int]],
             work: dict[tuple[str, int], dict[int, int]], tables: dict[str, Table], lease_id: str,
             unavailable: dict[TableBucket, int],
             refresh: Callable[[Table, list[int]], dict[int, int]] | None) -> None:
    """Adjust the work after a failed acquire transaction; the caller re-reads and retries."""
    paths = conn.paths
    if exc.index == 0 and exc.reason == "nonode":
        raise LeaseExpiredError(f"lease {lease_id!r} was dropped or expired while acquiring")
    if not (isinstance(exc.op, Create) and exc.reason == "nonode" and exc.index in pin_ops):
        return  # a concurrent change to the lease or a pin: re-read and rebuild
    # One pinned snapshot is gone; find every missing one of this batch in one pipelined read.
    by_id = {t.name: t for t in tables.values()}
    targets = list(pin_ops.values())
    snap_paths = [paths.snapshot(by_id[tb.table].table_id, tb.bucket, sid) for tb, sid in targets]
    present = conn.store.get_many(snap_paths)
    missing = [(tb, sid) for (tb, sid), node in zip(targets, present) if node is None]
    retry: dict[Table, list[int]] = {}
    for tb, sid in missing:
        table = by_id[tb.table]
        work[(table.table_id, tb.bucket // CHUNK)].pop(tb.bucket, None)
        unavailable[tb] = sid
        if refresh is not None:
            retry.setdefault(table, []).append(tb.bucket)
    for table, buckets in retry.items():
        for bucket, sid in refresh(table, buckets).items():
            tb = TableBucket(table.name, bucket)
            if sid != unavailable.get(tb):
                unavailable.pop(tb, None)
                work[(table.table_id, bucket // CHUNK)][bucket] = sid


# -- renew, release, drop, expire --------------------------------------------------------


def renew(conn: Connection, lease_id: str, duration_ms: int | None) -> int:
    """Extend the lease; returns the new expiry (ms). Only extends, never shortens (L7, L8)."""
    check_id(lease_id)
    path = conn.paths.lease(lease_id)
    while True:
        now, (node,) = conn.store.read_with_clock(conn.paths.clock, [path])
        record = _check_live(conn, node, path, now)
        if record is None:  # pragma: no cover - _check_live raises for a missing lease
            raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
        duration = record.duration_ms if duration_ms is None else duration_ms
        try:
            stat = conn.store.set(path, record.value(duration, conn.owner), record.stat.version)
        except TxnConflict as exc:
            if exc.reason == "nonode":
                raise LeaseExpiredError(f"lease {lease_id!r} was dropped or expired while renewing") from None
            continue
        return max(record.expires_ms, stat.mtime_ms + duration)


def _read_chunks(conn: Connection, lease_id: str) -> list[tuple[str, Chunk]]:
    names = conn.store.children(conn.paths.lease_pins(lease_id)) or []
    chunk_paths = [f"{conn.paths.lease_pins(lease_id)}/{n}" for n in names]
    out = []
    for name, path, node in zip(names, chunk_paths, conn.store.get_many(chunk_paths)):
        if node is None:
            continue
        table_id, _, chunk = name.partition(".")
        out.append((path, _chunk(node, path, table_id, int(chunk), "")))
    return out


def pins_of(conn: Connection, lease_id: str, table: Table | None = None) -> dict[TableBucket, int]:
    """The lease's pins (of one table, if given)."""
    out: dict[TableBucket, int] = {}
    for _, ch in _read_chunks(conn, lease_id):
        if table is not None and ch.table_id != table.table_id:
            continue
        for i, sid in enumerate(ch.ids):
            if sid:
                out[TableBucket(ch.table, ch.chunk * CHUNK + i)] = sid
    return out


def release(conn: Connection, lease_id: str, buckets: Mapping[Table, Iterable[int]]) -> None:
    """Unpin these buckets; idempotent, buckets the lease does not pin are ignored (L9)."""
    check_id(lease_id)
    paths = conn.paths
    if conn.store.exists(paths.lease(lease_id)) is None:
        raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
    for table, wanted in buckets.items():
        by_chunk: dict[int, set[int]] = {}
        for b in wanted:
            by_chunk.setdefault(b // CHUNK, set()).add(b)
        for chunk, members in sorted(by_chunk.items()):
            path = paths.lease_chunk(lease_id, table.table_id, chunk)

            def build(path: str = path, chunk: int = chunk, members: set[int] = members,
                      table: Table = table) -> list[Op]:
                node = conn.store.get(path)
                if node is None:
                    return []
                ch = _chunk(node, path, table.table_id, chunk, table.name)
                ids = list(ch.ids)
                ops: list[Op] = []
                for b in sorted(members):
                    if ids[b % CHUNK]:
                        ops.append(Delete(paths.pin(table.table_id, b, ids[b % CHUNK], lease_id)))
                        ids[b % CHUNK] = 0
                if not ops:
                    return []
                ops.append(SetData(path, _chunk_value(ch.table, ids), node.stat.version) if any(ids)
                           else Delete(path, node.stat.version))
                return ops

            try:
                conn.store.commit_retrying(build, what=f"release from lease {lease_id}")
            except TxnConflict as exc:
                if exc.reason != "nonode":
                    raise
                _forget_missing_pins(conn, lease_id)
                conn.store.commit_retrying(build, what=f"release from lease {lease_id}")


def _forget_missing_pins(conn: Connection, lease_id: str) -> None:
    """Clear array entries whose pin znode is gone (its table was force-dropped)."""
    for path, ch in _read_chunks(conn, lease_id):
        targets = [(i, sid) for i, sid in enumerate(ch.ids) if sid]
        nodes = conn.store.get_many([conn.paths.pin(ch.table_id, ch.chunk * CHUNK + i, sid, lease_id)
                                     for i, sid in targets])
        ids = list(ch.ids)
        for (i, _), node in zip(targets, nodes):
            if node is None:
                ids[i] = 0
        if ids != ch.ids and ch.stat is not None:
            try:
                conn.store.commit([SetData(path, _chunk_value(ch.table, ids), ch.stat.version) if any(ids)
                                   else Delete(path, ch.stat.version)])
            except TxnConflict:
                pass


def drop(conn: Connection, lease_id: str) -> bool:
    """Remove the lease and all its pins; False if it does not exist (L10)."""
    check_id(lease_id)
    return reclaim(conn, lease_id, expected_version=None)


def reclaim(conn: Connection, lease_id: str, expected_version: int | None) -> bool:
    """Delete a lease with its pins. With ``expected_version``, only if nobody renewed it since.

    Small leases go in one transaction. Large ones are first marked as dropping (invisible
    to users, still protecting their snapshots), then emptied chunk by chunk.
    """
    paths, store = conn.paths, conn.store
    rec_path = paths.lease(lease_id)
    while True:
        node = store.get(rec_path)
        if node is None:
            return False
        version = node.stat.version
        if expected_version is not None and version != expected_version and _record(node, rec_path).state == LIVE:
            return False
        chunks = _read_chunks(conn, lease_id)
        pin_ops: list[Op] = []
        for path, ch in chunks:
            pin_ops += [Delete(paths.pin(ch.table_id, ch.chunk * CHUNK + i, sid, lease_id))
                        for i, sid in enumerate(ch.ids) if sid]
            pin_ops.append(Delete(path, ch.stat.version if ch.stat else -1))
        try:
            if len(pin_ops) + 2 <= OPS_PER_TXN:
                store.commit([*pin_ops, Delete(paths.lease_pins(lease_id)), Delete(rec_path, version)])
                return True
            record = _record(node, rec_path)
            if record.state == LIVE:
                store.set(rec_path, record.value(record.duration_ms, record.owner, DROPPING), version)
            for batch in chunk_ops(pin_ops, max_ops=OPS_PER_TXN):
                store.commit(batch)
            store.commit([Delete(paths.lease_pins(lease_id)), Delete(rec_path)])
            return True
        except TxnConflict as exc:
            if exc.op.path == rec_path and exc.reason == "nonode":
                return False
            if exc.reason == "nonode" and "/pins/" not in exc.op.path:
                _forget_missing_pins(conn, lease_id)  # a pin went with a force-dropped table


def expire(conn: Connection) -> list[str]:
    """Reclaim every lease past expires_at + lease.expiry-grace; returns their ids (L11)."""
    ids = conn.store.children(conn.paths.leases) or []
    paths = [conn.paths.lease(i) for i in ids]
    now, nodes = conn.store.read_with_clock(conn.paths.clock, paths)
    now = conn.clock(now)
    grace = to_ms(conn.settings()["lease.expiry-grace"])
    reclaimed = []
    for lease_id, path, node in zip(ids, paths, nodes):
        if node is None:
            continue
        try:
            record = _record(node, path)
        except CorruptMetadataError as exc:
            log.warning("skipping lease %s: %s", lease_id, exc)
            continue
        if record.state == DROPPING or now > record.expires_ms + grace:
            if reclaim(conn, lease_id, expected_version=node.stat.version):
                reclaimed.append(lease_id)
    return reclaimed


# -- reading ------------------------------------------------------------------------------


def _info(conn: Connection, lease_id: str, node: Node) -> LeaseInfo | None:
    path = conn.paths.lease(lease_id)
    record = _record(node, path)
    if record.state != LIVE:
        return None
    return LeaseInfo(
        lease_id, pins_of(conn, lease_id), timedelta(milliseconds=record.duration_ms),
        to_datetime(node.stat.ctime_ms), to_datetime(node.stat.mtime_ms), to_datetime(record.expires_ms),
        record.owner,
    )


def info(conn: Connection, lease_id: str) -> LeaseInfo:
    """The lease as stored; ``LeaseNotFoundError`` if it does not exist."""
    check_id(lease_id)
    node = conn.store.get(conn.paths.lease(lease_id))
    result = None if node is None else _info(conn, lease_id, node)
    if result is None:
        raise LeaseNotFoundError(f"lease {lease_id!r} does not exist")
    return result


def list_leases(conn: Connection) -> list[LeaseInfo]:
    """Every lease of the namespace (expired ones too, until reclaimed), by id."""
    ids = conn.store.children(conn.paths.leases) or []
    nodes = conn.store.get_many([conn.paths.lease(i) for i in ids])
    out = []
    for lease_id, node in zip(ids, nodes):
        if node is not None:
            item = _info(conn, lease_id, node)
            if item is not None:
                out.append(item)
    return out


def validity(conn: Connection, lease_id: str) -> LeaseRecord:
    """The live, unexpired lease record; ``LeaseExpiredError`` otherwise (for reads, L12)."""
    check_id(lease_id)
    path = conn.paths.lease(lease_id)
    now, (node,) = conn.store.read_with_clock(conn.paths.clock, [path])
    if node is None:
        raise LeaseExpiredError(f"lease {lease_id!r} does not exist (expired or dropped)")
    record = _check_live(conn, node, path, now)
    if record is None:  # pragma: no cover
        raise LeaseExpiredError(f"lease {lease_id!r} does not exist")
    return record


def check_snapshot_ids(conn: Connection, snapshot_ids: object) -> dict[Table, dict[int, int]]:
    """Validate ``{TableBucket: snapshot_id}`` and group it by table (tables looked up once)."""
    from .tables import load_table

    if not isinstance(snapshot_ids, Mapping):
        raise InvalidTypeError("snapshot_ids must be a mapping of TableBucket to snapshot id")
    by_name: dict[str, dict[int, int]] = {}
    for tb, sid in snapshot_ids.items():
        if not isinstance(tb, TableBucket):
            raise InvalidTypeError(f"snapshot_ids keys must be TableBucket, not {type(tb).__name__}")
        if isinstance(sid, bool) or not isinstance(sid, int):
            raise InvalidTypeError(f"snapshot id for {tb} must be an int, not {type(sid).__name__}")
        if sid < 1:
            raise InvalidArgumentError(f"snapshot ids start at 1, got {sid} for {tb}")
        by_name.setdefault(tb.table, {})[tb.bucket] = sid
    out: dict[Table, dict[int, int]] = {}
    for name, wanted in by_name.items():
        table = load_table(conn, name)
        out[table] = {table.bucket_number(b): sid for b, sid in wanted.items()}
    return out


def leases_pinning(conn: Connection, table_id: str) -> list[str]:
    """Ids of live, unexpired leases that pin any bucket of the table."""
    ids = conn.store.children(conn.paths.leases) or []
    kids = conn.store.children_many([conn.paths.lease_pins(i) for i in ids])
    candidates = [i for i, names in zip(ids, kids) if names and any(n.startswith(f"{table_id}.") for n in names)]
    paths = [conn.paths.lease(i) for i in candidates]
    now, nodes = conn.store.read_with_clock(conn.paths.clock, paths)
    out = []
    for lease_id, path, node in zip(candidates, paths, nodes):
        if node is None:
            continue
        record = _record(node, path)
        if record.state == LIVE and conn.clock(now) <= record.expires_ms:
            out.append(lease_id)
    return out


def forget_table(conn: Connection, table_id: str) -> None:
    """Remove a dropped table's pin arrays from every lease (its pin znodes go with its data)."""
    ids = conn.store.children(conn.paths.leases) or []
    kids = conn.store.children_many([conn.paths.lease_pins(i) for i in ids])
    ops: list[Op] = [Delete(f"{conn.paths.lease_pins(i)}/{n}")
                     for i, names in zip(ids, kids) for n in (names or []) if n.startswith(f"{table_id}.")]
    for op in ops:
        try:
            conn.store.commit([op])
        except TxnConflict:
            pass  # the lease went away meanwhile
