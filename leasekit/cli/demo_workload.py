"""The demo's workload: the orders it writes (kept as the expected state) and its consumer
group, polled in turn from the calling thread so the demo sets how much the group reads.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from ..consumers import lineage
from ..consumers.listener import BucketRebalanceListener
from ..errors import IllegalStateError
from ..structs import TableBucket

if TYPE_CHECKING:
    import pyarrow as pa

    from ..connection import Connection
    from ..consumers.consumer import Consumer
    from ..table import Table

__all__ = ["SCHEMA", "BUCKETS", "PROPERTIES", "GROUP_SIZE", "STATUSES", "Orders", "ConsumerGroup"]

SCHEMA = (
    "order_id BIGINT NOT NULL, customer STRING, status STRING, amount DOUBLE, updated_at TIMESTAMP"
)
BUCKETS = 8
PROPERTIES = {
    "kv.snapshot.num-retained": 1,
    "log.retention": "0s",
    "log.retention.respect-consumers": True,
}
"""Keep only the newest snapshot and no older log than the consumer group still needs, so the
plan shows what the lease and the group keep."""
GROUP_SIZE = 3
"""Consumers in the demo's group: 8 buckets split 3/3/2, then 4/4 once one has left, then 5/4
once the split bucket is drained and its two children assigned."""
_SETTLE_SECONDS = 30.0  # a join or takeover not done by then is an error, not a wait
STATUSES = ("created", "paid", "shipped", "delivered", "cancelled")
_DELIVERED, _CANCELLED = 3, 4
_UPDATE_SHARE = 0.6  # of each batch after the first: status changes of open orders
_CANCEL_SHARE = 0.05  # of status changes: the order is cancelled instead of advancing
_DELETE_SHARE = 0.03  # of live orders deleted after each batch after the first
_CUSTOMERS = 5_000


class Orders:
    """The orders the demo wrote, as the expected state: status per order id (-1: none)."""

    def __init__(self, capacity: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.status = np.full(capacity, -1, dtype=np.int8)
        self.customer = np.zeros(capacity, dtype=np.int64)
        self.amount = np.zeros(capacity, dtype=np.float64)
        self.next_id = 0

    def upserts(self, size: int, first: bool) -> np.ndarray:
        """Order ids of one batch: status changes of open orders, then new orders."""
        rng = self.rng
        open_ids = np.flatnonzero((self.status >= 0) & (self.status < _DELIVERED))
        changes = 0 if first else min(int(size * _UPDATE_SHARE), len(open_ids))
        changed = rng.choice(open_ids, size=changes, replace=False)
        cancel = rng.random(changes) < _CANCEL_SHARE
        self.status[changed] = np.where(cancel, _CANCELLED, self.status[changed] + 1)
        created = np.arange(self.next_id, self.next_id + size - changes)
        self.next_id += len(created)
        self.status[created] = 0
        self.customer[created] = rng.integers(0, _CUSTOMERS, len(created))
        self.amount[created] = np.round(rng.uniform(5, 500, len(created)), 2)
        return rng.permutation(np.concatenate([changed, created]))

    def deletes(self) -> np.ndarray:
        """Order ids to delete: a share of the live orders."""
        live = np.flatnonzero(self.status >= 0)
        gone = self.rng.choice(live, size=int(len(live) * _DELETE_SHARE), replace=False)
        self.status[gone] = -1
        return np.sort(gone)

    def frame(self, ids: np.ndarray, updated_at: pd.Timestamp) -> pd.DataFrame:
        return pd.DataFrame({
            "order_id": ids.astype(np.int64),
            "customer": np.char.mod("customer-%04d", self.customer[ids]).astype(object),
            "status": np.array(STATUSES, dtype=object)[self.status[ids]],
            "amount": self.amount[ids],
            "updated_at": updated_at,
        })  # fmt: skip

    def by_status(self) -> dict[str, int]:
        counts = np.bincount(self.status[self.status >= 0], minlength=len(STATUSES))
        return {s: int(n) for s, n in zip(STATUSES, counts) if n}


class Member(BucketRebalanceListener):
    """A consumer of the demo's group, by a short name. While ``hold`` is set, the buckets it
    is assigned are paused: a takeover moves buckets without reading, so the group keeps its
    pace."""

    consumer: Consumer
    """Set once the consumer is made, with this member as its listener."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.hold = False

    def on_buckets_assigned(self, assigned: set[TableBucket]) -> None:
        if self.hold and assigned:
            self.consumer.pause(*assigned)


class ConsumerGroup:
    """The demo's consumer group. Its consumers are polled in turn from the calling thread
    (each used by that thread alone), so the demo decides how much the group reads; every
    poll's offsets are kept, per bucket in the order read, with the member that read them and
    the poll's sequence number (across buckets)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.members: list[Member] = []
        self.live: list[Member] = []
        self.reads: dict[TableBucket, list[Read]] = {tb: [] for tb in table.buckets}
        self.consumed = 0
        self.polls = 0

    def open(self, conn: Connection, table: str, group_id: str, size: int) -> None:
        """Create ``size`` consumers of ``table`` in ``group_id``; they join at their first poll."""
        for i in range(size):
            member = Member(f"consumer-{i + 1}")
            member.consumer = conn.consumer(
                table,
                group_id=group_id,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                listener=member,
            )
            self.members.append(member)
            self.live.append(member)

    def close(self) -> None:
        for member in self.members:
            member.consumer.close()  # a second close does nothing

    def settle(self, what: str) -> float:
        """Poll the live members in turn until they follow one generation and own every
        bucket once; the seconds it took."""
        started = time.perf_counter()
        while not self.balanced():
            if time.perf_counter() - started > _SETTLE_SECONDS:
                owned = {
                    m.name: sorted(tb.bucket for tb in m.consumer.assignment()) for m in self.live
                }
                raise IllegalStateError(
                    f"{what}: the group did not settle in {_SETTLE_SECONDS:.0f} s; "
                    f"generations {[m.consumer.generation for m in self.live]}, "
                    f"buckets {owned}"
                )
            for member in self.live:
                self._count(member, member.consumer.poll(timeout="0.05s"))
        return time.perf_counter() - started

    def balanced(self) -> bool:
        generations = {m.consumer.generation for m in self.live}
        owned = [tb for m in self.live for tb in m.consumer.assignment()]
        return (
            len(generations) == 1
            and None not in generations
            and len(owned) == len(set(owned))
            and set(owned) == self.due()
        )

    def due(self) -> set[TableBucket]:
        """The buckets the group reads now (K5): the active ones whose ancestors it has
        drained, and the sealed ones it has not (committed short of their seal)."""
        layout = self.table.refresh().layout
        committed = self.committed(lineage.sealed(layout))
        return {TableBucket(self.table.name, b) for b in lineage.to_read(layout, committed)}

    def committed(self, buckets: Any = None) -> dict[int, int | None]:
        """The group's committed offset of ``buckets`` (default: every bucket the table ever
        had), read now; None where it has none."""
        name, consumer = self.table.name, self.live[0].consumer
        wanted = range(self.table.refresh().layout.count) if buckets is None else buckets
        return {b: consumer.committed(TableBucket(name, b)) for b in wanted}

    def assignment(self) -> list[dict[str, Any]]:
        """One row per live member: its name, member id, buckets and generation."""
        return [
            {
                "member": m.name,
                "member_id": m.consumer.member_id,
                "buckets": sorted(tb.bucket for tb in m.consumer.assignment()),
                "generation": m.consumer.generation,
            }
            for m in self.live
        ]

    def consume(self, records: int) -> int:
        """Read up to ``records`` records in small polls, the live members in turn, so each
        reads about as much, from each of its buckets; how many were read."""
        left = records
        owned = sum(len(m.consumer.assignment()) for m in self.live)
        chunk = max(1, records // max(1, len(self.live) * owned))
        reading = list(self.live)
        while left > 0 and reading:
            for member in list(reading):
                got = self._count(
                    member, member.consumer.poll(timeout="1s", max_records=min(chunk, left))
                )
                if not got:  # nothing new within a second: it has read its buckets up
                    reading.remove(member)
                left -= got
                if left <= 0:
                    break
        return records - left

    def commit(self) -> None:
        for member in self.live:
            member.consumer.commit()

    def takeover(self) -> dict[str, Any]:
        """Close the oldest member (it commits, hands its buckets back and leaves: C10) and
        poll the others, holding their buckets, until they own every bucket."""
        leaving = self.live.pop(0)
        consumer = leaving.consumer
        moved = sorted(consumer.assignment())
        committed = {tb: consumer.committed(tb) for tb in moved}
        before, member_id = consumer.generation, consumer.member_id
        for member in self.live:
            member.hold = True
            member.consumer.pause(*member.consumer.assignment())
        started = time.perf_counter()
        consumer.commit()
        consumer.close()
        self.settle("takeover")
        seconds = time.perf_counter() - started
        owners = {tb: m for m in self.live for tb in m.consumer.assignment()}
        starts = {tb: owners[tb].consumer.position(tb) for tb in moved}
        for member in self.live:
            member.hold = False
            member.consumer.resume(*member.consumer.assignment())
        return {
            "closed": leaving.name,
            "member_id": member_id,
            "generation": [before, self.live[0].consumer.generation],
            "seconds": seconds,
            "moved": [
                {
                    "bucket": tb.bucket,
                    "from": leaving.name,
                    "to": owners[tb].name,
                    "committed": committed[tb],
                    "starts_at": starts[tb],
                }
                for tb in moved
            ],
        }

    def follow_split(self, parent: TableBucket, seal: int) -> dict[str, Any]:
        """Parent first (K5): the member owning the sealed ``parent`` reads it up to ``seal``
        unless the group has committed that far already, and commits; then the live members
        poll, holding their buckets, until they own what the group reads now (the children).
        Who drained it, the children's owners, the generation, the seconds it took and the
        assignment then (``assignment``)."""
        if (self.committed([parent.bucket])[parent.bucket] or 0) < seal:
            owner = next(m for m in self.live if parent in m.consumer.assignment())
            self._drain(owner, parent, seal)
        self.commit()
        for member in self.live:
            member.hold = True
            member.consumer.pause(*member.consumer.assignment())
        seconds = self.settle("split")
        owners = {tb: m.name for m in self.live for tb in m.consumer.assignment()}
        for member in self.live:
            member.hold = False
            member.consumer.resume(*member.consumer.assignment())
        last = self.reads[parent][-1].member if self.reads[parent] else None
        children = self.table.refresh().layout.children(parent.bucket)
        for child in children:
            self.reads.setdefault(TableBucket(parent.table, child), [])
        return {
            "parent_drained_by": last,
            "children_assigned_to": {c: owners.get(TableBucket(parent.table, c)) for c in children},
            "generation": self.live[0].consumer.generation,
            "seconds": seconds,
            "assignment": self.assignment(),
        }

    def _drain(self, member: Member, parent: TableBucket, seal: int) -> None:
        """``member`` reads ``parent`` alone (its other buckets paused) up to ``seal``."""
        consumer = member.consumer
        others = [
            tb for tb in consumer.assignment() if tb != parent and tb not in consumer.paused()
        ]
        consumer.pause(*others)
        started = time.perf_counter()
        while consumer.position(parent) < seal:
            if time.perf_counter() - started > _SETTLE_SECONDS:
                raise IllegalStateError(
                    f"{member.name} did not read {parent} to its seal {seal} in "
                    f"{_SETTLE_SECONDS:.0f} s; at {consumer.position(parent)}"
                )
            self._count(member, consumer.poll(timeout="1s"))
        consumer.resume(*others)
        consumer.commit()

    def _count(self, member: Member, batches: dict[TableBucket, pa.Table]) -> int:
        got = 0
        for tb, data in batches.items():
            self.polls += 1
            offsets = data.column("_offset").to_numpy()
            self.reads.setdefault(tb, []).append(Read(member.name, offsets, self.polls))
            got += data.num_rows
        self.consumed += got
        return got

    def read_in_order(
        self, begin: dict[TableBucket, int], committed: dict[int, int | None]
    ) -> bool:
        """C12: each bucket's records were returned once each, in order, from ``begin`` (0 for
        a bucket made by a rescale) to its committed offset, whichever members read them."""
        for tb, reads in self.reads.items():
            start = begin.get(tb, 0)
            end = committed.get(tb.bucket)
            end = start if end is None else end
            offsets = np.concatenate([r.offsets for r in reads]) if reads else np.empty(0, np.int64)
            if not np.array_equal(offsets, np.arange(start, end)):
                return False
        return True

    def read_parent_first(self, parent: TableBucket, seal: int) -> bool:
        """K5: ``parent``'s records were read up to ``seal`` before any of its children's, and
        each child's first record read was its offset 0."""
        reads = self.reads[parent]
        if seal and (not reads or int(reads[-1].offsets[-1]) != seal - 1):
            return False
        last = reads[-1].poll if reads else 0
        children = self.table.refresh().layout.children(parent.bucket)
        for child in children:
            first = next(iter(self.reads.get(TableBucket(parent.table, child), [])), None)
            if first is not None and (first.poll <= last or int(first.offsets[0]) != 0):
                return False
        return True

    def first_read(self, tb: TableBucket, member: str) -> int | None:
        """The first offset ``member`` read of ``tb``; None if it read none."""
        return next((int(r.offsets[0]) for r in self.reads[tb] if r.member == member), None)


class Read(NamedTuple):
    """One poll's records of one bucket."""

    member: str
    """The member that read them."""
    offsets: np.ndarray
    """Their offsets, ascending."""
    poll: int
    """The sequence number of the read, across every bucket and member."""
