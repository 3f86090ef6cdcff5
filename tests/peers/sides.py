"""One small consumer interface with two implementations, so that each parity scenario is
written once and run against a real Kafka broker (``KafkaSide``, kafka_side.py) and against
leasekit (``LeasekitSide``, leasekit_side.py).

Partitions and buckets are plain ints, record values are str, a reader's records are
``{partition: [(offset, value), ...]}``. An error is compared through ``attempt``: an
``Outcome`` that names the error's class and its kind of refusal ("commit-failed",
"not-assigned", "no-group", "group-not-empty", "invalid-argument", "no-offset",
"out-of-range"; Kafka's "metadata-too-large" has no leasekit counterpart: leasekit refuses
such metadata as an invalid argument)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

Records = dict[int, list[tuple[int, str]]]
"""Records handed out: partition -> [(offset, value)] in the order handed out."""

WAIT = 60.0
"""The longest a scenario waits for a condition (generous: a loaded machine is slow)."""


class Outcome(NamedTuple):
    """What one call did: ``kind`` "ok" with its ``value``, or the kind of refusal and the
    name of the error class raised."""

    kind: str
    error: str | None = None
    value: Any = None


class Reader(Protocol):
    """A consumer of one topic (Kafka) or table (leasekit), as the scenarios drive it."""

    calls: list[tuple[str, frozenset[int]]]
    """What its rebalance listener heard, in order: ("revoked" | "assigned", partitions)."""

    def poll(self, timeout: float = 0.2, max_records: int | None = None) -> Records: ...
    def getone(self, timeout: float = 10.0) -> tuple[int, int, str] | None: ...
    def assignment(self) -> set[int]: ...
    def position(self, partition: int) -> int: ...
    def committed(self, partition: int) -> int | None: ...
    def commit(self, offsets: dict[int, int | tuple[int, str]] | None = None) -> None: ...
    def seek(self, partition: int, offset: int) -> None: ...
    def seek_to_beginning(self, *partitions: int) -> None: ...
    def seek_to_end(self, *partitions: int) -> None: ...
    def offsets_for_times(self, times: dict[int, int]) -> dict[int, int | None]: ...
    def pause(self, *partitions: int) -> None: ...
    def resume(self, *partitions: int) -> None: ...
    def silence(self) -> None: ...
    def unsilence(self) -> None: ...
    def close(self) -> None: ...


class Side(Protocol):
    """Kafka or leasekit: topics (tables), writes, consumers and the group's admin view."""

    name: str

    def topic(self, partitions: int) -> str: ...
    def write(
        self, topic: str, values: dict[int, list[str]], timestamp_ms: int | None = None
    ) -> dict[int, list[int]]: ...
    def end_offsets(self, topic: str) -> dict[int, int]: ...
    def grow(self, topic: str) -> list[int]: ...
    def shrink(self, topic: str, partitions: list[int]) -> int: ...
    def reader(self, topic: str, group: str | None = None, **options: Any) -> Reader:
        """A consumer subscribed to ``topic`` (in ``group``, or without a group: every
        partition). Options: ``reset`` ("earliest", the default, "latest" or "none"),
        ``auto_commit`` (False) and ``auto_commit_s``, ``session_s`` (6), ``assignor``,
        ``commit_on_revoke`` (a metadata string: commit the revoked partitions' positions with
        it inside the revoke callback), ``zombie`` (a reader ``silence`` can make fall silent);
        on Kafka's side ``client``: "aiokafka" (the default), "cooperative" or "consumer"."""
        ...

    def committed_metadata(self, group: str, topic: str) -> dict[int, tuple[int, str]]: ...
    def lag(self, group: str, topic: str) -> dict[int, tuple[int | None, int, int | None]]: ...
    def reset_offsets(self, group: str, topic: str, offset: int, partitions: list[int]) -> None: ...
    def delete_group(self, group: str) -> None: ...
    def members(self, group: str) -> list[set[int]]: ...
    def kind_of(self, error: BaseException) -> str | None: ...
    def error_name(self, error: BaseException) -> str: ...
    def close(self) -> None: ...


def unique(prefix: str) -> str:
    """A topic, table or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def attempt(side: Side, call: Callable[..., Any], *args: Any) -> Outcome:
    """Run ``call``; its value, or the refusal it raised (an error the side does not map is
    raised again, so that an unexpected failure is never taken for an agreed refusal)."""
    try:
        return Outcome("ok", value=call(*args))
    except Exception as error:  # noqa: BLE001 - mapped below or raised again
        kind = side.kind_of(error)
        if kind is None:
            raise
        return Outcome(kind, side.error_name(error))


def wait_until(what: str, condition: Callable[[], bool], seconds: float = WAIT) -> None:
    """Wait for ``condition`` to hold, checking every 50 ms; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def merge(into: Records, more: Records) -> Records:
    for partition, records in more.items():
        into.setdefault(partition, []).extend(records)
    return into


def count(records: Records) -> int:
    return sum(len(r) for r in records.values())


def poll_until(
    readers: list[Reader], condition: Callable[[], bool], seconds: float = WAIT
) -> list[Records]:
    """Poll every reader in turn (a group's rebalances run inside poll) until ``condition``
    holds; the records each handed out meanwhile."""
    got: list[Records] = [{} for _ in readers]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out polling for the condition"
        for reader, records in zip(readers, got):
            merge(records, reader.poll(timeout=0.1))
    return got


def read(reader: Reader, total: int, seconds: float = WAIT) -> Records:
    """Poll until ``total`` records were handed out, then once more: a record handed out twice
    or beyond the ``total`` shows in the result (which the scenario compares whole)."""
    got: Records = {}
    deadline = time.monotonic() + seconds
    while count(got) < total:
        assert time.monotonic() < deadline, f"{count(got)} of {total} records came in time"
        merge(got, reader.poll(timeout=0.5))
    merge(got, reader.poll(timeout=0.3))
    return got


def values(records: Records) -> dict[int, list[str]]:
    return {p: [v for _, v in r] for p, r in sorted(records.items())}


@contextlib.contextmanager
def closing_all(*things: Any) -> Iterator[None]:
    """Close each thing at the end, whatever happens (each close on its own)."""
    try:
        yield
    finally:
        for thing in things:
            with contextlib.suppress(Exception):
                thing.close()
