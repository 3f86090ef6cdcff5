"""Every lease of a namespace as stored, read in three pipelined round trips, and its state
for the inventory (M4): active, expiring, orphaned or expired.

A lease is ``orphaned`` when the keepalive that last acquired or renewed it has no holder
znode any more (its process died, or its block ended without dropping it) and nobody has
renewed it for a third of its duration; ``expiring`` when less than a tenth of its duration
is left; ``expired`` once past its expiry (until retention reclaims it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ...errors import CorruptMetadataError
from ...zk import GetChildren
from ...zk.formats import EMPTY_PIN, LIVE, LeaseRecord, PinChunk

if TYPE_CHECKING:
    from ...context import Context

__all__ = ["LEASE_STATES", "LeaseEntry", "LeaseBook", "read_leases", "lease_state"]

LEASE_STATES = ("active", "expiring", "orphaned", "expired")
"""Every state ``lease_state`` gives, the healthy one first."""

Pin = tuple[str, int, int]
"""(table id, bucket, snapshot id)."""


class LeaseEntry(NamedTuple):
    """One lease as stored, with whether its keepalive holder is alive."""

    lease_id: str
    """The lease's id."""
    record: LeaseRecord
    """Its record (with the znode's stat: mtime is the last acquire or renew)."""
    holder_alive: bool
    """Whether the keepalive named by ``record.holder`` still has its holder znode."""
    pins: dict[Pin, None]
    """Every pin (table id, bucket, snapshot id), in bucket order."""
    tables: dict[str, str]
    """Name of each table id it pins."""

    @property
    def live(self) -> bool:
        """False while the lease is being dropped (invisible to users)."""
        return self.record.state == LIVE

    @property
    def owner(self) -> str:
        """host:pid of the client that last acquired or renewed it."""
        return self.record.owner

    @property
    def host(self) -> str:
        """The host part of ``owner``."""
        host, sep, _ = self.owner.rpartition(":")
        return host if sep else self.owner


class LeaseBook(NamedTuple):
    """Every lease of a namespace read at one time."""

    now_ms: int
    """The expiry clock's time of the reading (ZooKeeper clock through the context's clock)."""
    leases: list[LeaseEntry]
    """By lease id; leases being dropped included (``live`` False)."""
    skipped: list[str]
    """Why a lease or pin array could not be read (it is left out)."""


def read_leases(ctx: Context) -> LeaseBook:
    """Every lease with its pins and whether its keepalive holder lives, in three pipelined
    round trips: the lease and holder listings, the pin listings, then the clock with every
    lease record and pin array.

    Raises:
        ZooKeeperUnavailableError: ZooKeeper did not answer.
    """
    paths, store = ctx.paths, ctx.store
    listed = store.read_many([GetChildren(paths.leases), GetChildren(paths.keepalives)])
    for result in listed:
        if result.error is not None:
            raise result.error
    ids: list[str] = listed[0].value or []  # type: ignore[assignment]
    holders = frozenset(listed[1].value or [])  # type: ignore[arg-type]
    chunk_names = store.children_many([paths.lease_pins(i) for i in ids])
    chunk_keys = [(i, n) for i, names in zip(ids, chunk_names) for n in (names or [])]
    chunk_paths = [f"{paths.lease_pins(i)}/{n}" for i, n in chunk_keys]
    now, nodes = ctx.read_with_clock([*(paths.lease(i) for i in ids), *chunk_paths])
    skipped: list[str] = []
    pins: dict[str, dict[Pin, None]] = {i: {} for i in ids}
    tables: dict[str, dict[str, str]] = {i: {} for i in ids}
    for (lease_id, name), path, node in zip(chunk_keys, chunk_paths, nodes[len(ids) :]):
        if node is None:
            continue
        try:
            chunk = PinChunk.decode(node, path, *paths.parse_lease_chunk(name))
        except (CorruptMetadataError, ValueError) as exc:
            skipped.append(str(exc))
            continue
        for bucket, sid in chunk.array.items():
            if sid == EMPTY_PIN:
                continue  # pinned as empty: nothing to keep (L15)
            pins[lease_id][(chunk.table_id, bucket, sid)] = None
            tables[lease_id][chunk.table_id] = chunk.table
    leases = []
    for lease_id, node in zip(ids, nodes[: len(ids)]):
        if node is None:
            continue  # dropped meanwhile
        try:
            record = LeaseRecord.decode(node, paths.lease(lease_id))
        except CorruptMetadataError as exc:
            skipped.append(str(exc))
            continue
        alive = bool(record.holder) and record.holder in holders
        leases.append(LeaseEntry(lease_id, record, alive, pins[lease_id], tables[lease_id]))
    return LeaseBook(ctx.clock(now), leases, skipped)


def lease_state(entry: LeaseEntry, now_ms: int) -> str:
    """The lease's state at ``now_ms`` (M4, L7): ``expired`` past its expiry; ``orphaned`` when
    its keepalive holder is gone and it went a third of its duration without renewal;
    ``expiring`` with less than a tenth of its duration left; else ``active``."""
    record = entry.record
    if now_ms > record.expires_ms:
        return "expired"
    renewed_ms = record.stat.mtime_ms if record.stat else now_ms
    unrenewed = 3 * (now_ms - renewed_ms) >= record.duration_ms
    if record.holder and not entry.holder_alive and unrenewed:
        return "orphaned"
    if 10 * (record.expires_ms - now_ms) < record.duration_ms:
        return "expiring"
    return "active"
