"""Group consumers for B9 and B10, each polled by a thread of its own as applications run them,
with what each member did recorded: every fetch its polls made, its listener's calls and the
records its polls returned, timed by ``time.perf_counter``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

import leasekit as lk
from leasekit import testing

if TYPE_CHECKING:
    from leasekit.connection import Connection
    from leasekit.zk.formats import AssignmentRecord

__all__ = ["Fetch", "Event", "PolledMember", "AssignmentWatch", "ids_per_bucket", "buckets_of"]

TB = lk.TableBucket


@dataclass(frozen=True)
class Fetch:
    """One fetch inside a poll: the consumer read its assigned, unpaused buckets."""

    start: float
    """``perf_counter`` when the fetch began."""
    end: float
    """``perf_counter`` when it had read every bucket it was going to."""
    generation: int | None
    """The consumer's generation then."""
    assignment: frozenset[lk.TableBucket]
    """Its assignment then."""
    paused: frozenset[lk.TableBucket]
    """Its paused buckets then."""
    skipped: frozenset[lk.TableBucket]
    """Assigned, unpaused buckets this fetch did not read (``last_poll_timestamp`` not renewed)."""


@dataclass(frozen=True)
class Event:
    """A call of the member's rebalance listener."""

    time: float
    """``perf_counter`` at the call."""
    kind: str
    """``"revoked"`` or ``"assigned"``."""
    generation: int | None
    """The consumer's generation during the call."""
    buckets: frozenset[lk.TableBucket]
    """The buckets the call named."""


class _Listener(lk.BucketRebalanceListener):
    def __init__(self, member: PolledMember) -> None:
        self._member = member

    def on_buckets_revoked(self, revoked: set[lk.TableBucket]) -> None:
        self._member._event("revoked", revoked)

    def on_buckets_assigned(self, assigned: set[lk.TableBucket]) -> None:
        self._member._event("assigned", assigned)


class PolledMember:
    """A group consumer of ``tables`` whose thread polls it until ``stop()`` and then closes it.

    The consumer is built here (no I/O); its first poll, which joins the group, runs on the
    thread after ``start()``. Each fetch is recorded by wrapping the instance's fetch step (the
    part of ``poll`` that reads the assigned buckets, right after the group was followed).
    """

    def __init__(
        self,
        conn: Connection,
        tables: Iterable[str],
        group: str,
        *,
        name: str,
        poll_timeout: str = "0.5s",
        **options: Any,
    ) -> None:
        self.name = name
        self.poll_timeout = poll_timeout
        self.consumer = conn.consumer(*tables, group_id=group, listener=_Listener(self), **options)
        self.first_poll: float | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._fetches: list[Fetch] = []
        self._events: list[Event] = []
        self._returned: dict[lk.TableBucket, list[tuple[float, int, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"bench-{name}", daemon=True)
        original = self.consumer._fetch

        def fetch(limit: int) -> dict[lk.TableBucket, pa.Table]:
            start, start_ms = time.perf_counter(), int(time.time() * 1000)
            out = original(limit)
            end = time.perf_counter()
            c = self.consumer
            assignment, paused = frozenset(c.assignment()), frozenset(c.paused())
            skipped = frozenset(
                tb for tb in assignment - paused if (c.last_poll_timestamp(tb) or 0) < start_ms
            )
            with self._lock:
                self._fetches.append(Fetch(start, end, c.generation, assignment, paused, skipped))
            return out

        self.consumer._fetch = fetch  # type: ignore[method-assign]

    # -- the polling thread -------------------------------------------------------------------

    def start(self) -> PolledMember:
        self._thread.start()
        return self

    def _run(self) -> None:
        c = self.consumer
        try:
            while not self._stop.is_set():
                if self.first_poll is None:
                    self.first_poll = time.perf_counter()
                got = c.poll(timeout=self.poll_timeout)
                now = time.perf_counter()
                with self._lock:
                    for tb, data in got.items():
                        offsets = data.column("_offset")
                        self._returned.setdefault(tb, []).append(
                            (now, offsets[0].as_py(), offsets[-1].as_py() + 1)
                        )
        except BaseException as exc:  # noqa: BLE001 - reported by the benchmark
            self.error = exc
        finally:
            try:
                c.close()
            except BaseException as exc:  # noqa: BLE001
                self.error = self.error or exc

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float = 30.0) -> None:
        self._thread.join(timeout)

    # -- what it did --------------------------------------------------------------------------

    def _event(self, kind: str, buckets: set[lk.TableBucket]) -> None:
        event = Event(time.perf_counter(), kind, self.consumer.generation, frozenset(buckets))
        with self._lock:
            self._events.append(event)

    @property
    def member_id(self) -> str | None:
        return self.consumer.member_id

    def fetches(self, since: float = 0.0) -> list[Fetch]:
        with self._lock:
            return [f for f in self._fetches if f.end >= since]

    def fetches_from(self, index: int) -> list[Fetch]:
        """The fetches recorded after the first ``index`` (since the last ``forget``)."""
        with self._lock:
            return self._fetches[index:]

    def events(self, since: float = 0.0) -> list[Event]:
        with self._lock:
            return [e for e in self._events if e.time >= since]

    def last_fetch(self) -> Fetch | None:
        with self._lock:
            return self._fetches[-1] if self._fetches else None

    def returned(self) -> dict[lk.TableBucket, list[tuple[float, int, int]]]:
        """Per bucket, each poll's ``(time, first offset, end offset)`` of the records returned."""
        with self._lock:
            return {tb: list(v) for tb, v in self._returned.items()}

    def returned_past(self, tb: lk.TableBucket, offset: int) -> bool:
        """Whether a poll returned records of ``tb`` ending past ``offset``."""
        with self._lock:
            return any(end > offset for _, _, end in self._returned.get(tb, ()))

    def consumed_to(self) -> dict[lk.TableBucket, int]:
        """Per bucket, the end of the records returned so far."""
        with self._lock:
            return {tb: max(e for _, _, e in v) for tb, v in self._returned.items()}

    def forget(self, before: float) -> None:
        """Drop what was recorded before ``before`` (between runs)."""
        with self._lock:
            self._fetches = [f for f in self._fetches if f.end >= before]
            self._events = [e for e in self._events if e.time >= before]


class AssignmentWatch:
    """The group's published assignments, from a watch on its assignment znode: each generation
    with the ``perf_counter`` time it was seen. The watch has a ZooKeeper session of its own: on
    the connection the consumers share, its callback would queue behind theirs (a data watch per
    bucket) and see a generation late."""

    def __init__(self, conn: Connection, group: str) -> None:
        ctx = testing.context(conn)
        self._store = ctx.store.sibling(ctx.store.session_timeout)
        self._store.open()
        from leasekit.zk import Node
        from leasekit.zk.formats import AssignmentRecord

        self._lock = threading.Condition()
        self.seen: list[tuple[float, AssignmentRecord]] = []
        path = ctx.paths.group_assignment(group)

        def changed(data: bytes | None, stat: Any) -> None:
            if data is None or stat is None:
                return
            record = AssignmentRecord.decode(Node(data, stat), path)
            with self._lock:
                if not self.seen or record.generation > self.seen[-1][1].generation:
                    self.seen.append((time.perf_counter(), record))
                self._lock.notify_all()

        self._watch = self._store.watch(path, changed)

    def latest(self) -> AssignmentRecord | None:
        with self._lock:
            return self.seen[-1][1] if self.seen else None

    def wait_for(
        self, ready: Callable[[AssignmentRecord], bool], timeout: float
    ) -> AssignmentRecord | None:
        """The first published assignment for which ``ready`` holds, waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                for _, record in self.seen:
                    if ready(record):
                        return record
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(left)

    def close(self) -> None:
        self._watch.remove()
        self._store.close()


def buckets_of(record: AssignmentRecord, member_id: str | None) -> frozenset[lk.TableBucket]:
    """The buckets ``record`` gives ``member_id``."""
    tables = record.buckets.get(member_id or "", {})
    return frozenset(TB(t, b) for t, bs in tables.items() for b in bs)


def ids_per_bucket(buckets: int, per_bucket: int, only: Iterable[int] | None = None) -> np.ndarray:
    """``per_bucket`` BIGINT keys landing in each of ``buckets`` buckets (or only in the bucket
    numbers ``only``), so that an append writes exactly ``per_bucket`` records to each."""
    from leasekit.tables.bucketing import bucket_ids

    start = 0
    chosen: list[np.ndarray] = []
    counts = np.zeros(buckets, dtype=np.int64)
    while counts.min() < per_bucket:
        ids = np.arange(start, start + buckets * per_bucket * 4, dtype=np.int64)
        start += len(ids)
        b = bucket_ids(pa.table({"id": ids}), ["id"], buckets)
        order = np.argsort(b, kind="stable")
        b, ids = b[order], ids[order]
        first = np.searchsorted(b, np.arange(buckets))
        rank = np.arange(len(b)) - first[b]
        keep = rank < (per_bucket - counts[b])
        chosen.append(ids[keep])
        counts += np.bincount(b[keep], minlength=buckets)
    ids = np.sort(np.concatenate(chosen))
    if only is None:
        return ids
    return ids[
        np.isin(
            bucket_ids(pa.table({"id": ids}), ["id"], buckets), np.fromiter(only, dtype=np.int32)
        )
    ]
