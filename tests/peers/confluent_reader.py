"""A confluent-kafka consumer behind the scenarios' reader interface, for the group protocols
aiokafka lacks: ``"cooperative"`` (the classic protocol with the cooperative-sticky assignor,
incremental rebalances) and ``"consumer"`` (KIP-848's ``group.protocol=consumer``: the broker
assigns, a member heartbeats its way in). Its rebalance callbacks run inside ``poll``, as
leasekit's do."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException
from confluent_kafka import TopicPartition as CTP

from .sides import Records, unique

TIMEOUT = 60.0
NO_OFFSET = -1001
"""librdkafka's OFFSET_INVALID: no position, or no committed offset."""


class ConfluentReader:
    """A confluent-kafka consumer of one topic, subscribed in a group."""

    def __init__(
        self, bootstrap: str, topic: str, group: str | None, *, protocol: str, **options: Any
    ) -> None:
        self.topic, self.calls = topic, []
        self.commit_on_revoke = options.pop("commit_on_revoke", None)
        settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group or unique("no-group"),
            "auto.offset.reset": options.pop("reset", "earliest"),
            "enable.auto.commit": options.pop("auto_commit", False),
            "auto.commit.interval.ms": int(options.pop("auto_commit_s", 5) * 1000),
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        session_ms = int(options.pop("session_s", 6) * 1000)
        if protocol == "consumer":  # KIP-848: the broker's settings time the member's session
            settings["group.protocol"] = "consumer"
        else:
            assert protocol == "cooperative", protocol
            settings["partition.assignment.strategy"] = "cooperative-sticky"
            settings["session.timeout.ms"] = session_ms
            settings["heartbeat.interval.ms"] = min(200, session_ms // 4)
        assert not options, f"options {sorted(options)} are not known"
        self.consumer = Consumer(settings)
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)
        self._pending: list[Any] = []
        """Records fetched by ``position`` to learn where a partition stands, not handed out."""
        self._closed = False

    def _assigned(self, consumer: Consumer, partitions: list[CTP]) -> None:
        self.calls.append(("assigned", frozenset(tp.partition for tp in partitions)))

    def _revoked(self, consumer: Consumer, partitions: list[CTP]) -> None:
        self.calls.append(("revoked", frozenset(tp.partition for tp in partitions)))
        if self.commit_on_revoke is not None and partitions:
            at = consumer.position([CTP(self.topic, tp.partition) for tp in partitions])
            wanted = [
                CTP(self.topic, tp.partition, tp.offset, metadata=self.commit_on_revoke)
                for tp in at
                if tp.offset >= 0
            ]
            if wanted:
                consumer.commit(offsets=wanted, asynchronous=False)

    def _fetch(self, limit: int, timeout: float) -> list[Any]:
        messages = self.consumer.consume(limit, timeout)
        for message in messages:
            if message.error() is not None:
                raise KafkaException(message.error())
        return messages

    def poll(self, timeout: float = 0.2, max_records: int | None = None) -> Records:
        limit = max_records or 500
        messages, self._pending = self._pending[:limit], self._pending[limit:]
        if not messages:
            messages = self._fetch(limit, timeout)
        out: Records = {}
        for message in messages:
            out.setdefault(message.partition(), []).append(
                (message.offset(), message.value().decode())
            )
        return out

    def getone(self, timeout: float = 10.0) -> tuple[int, int, str] | None:
        got = self.poll(timeout, max_records=1)
        return next(((p, o, v) for p, records in got.items() for o, v in records), None)

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def position(self, partition: int) -> int:
        """librdkafka knows a position only once a record of the partition was consumed after
        its assignment: until then this fetches (and keeps, for the next poll) records, and the
        first of the partition is where it stands."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            kept = [m.offset() for m in self._pending if m.partition() == partition]
            if kept:
                return kept[0]
            at = self.consumer.position([CTP(self.topic, partition)])[0].offset
            if at >= 0:
                return at
            assert time.monotonic() < deadline, f"no position for partition {partition}"
            self._pending += self._fetch(500, 0.1)

    def committed(self, partition: int) -> int | None:
        tp = self.consumer.committed([CTP(self.topic, partition)], timeout=TIMEOUT)[0]
        return None if tp.offset == NO_OFFSET else tp.offset

    def commit(self, offsets: dict[int, int | tuple[int, str]] | None = None) -> None:
        if offsets is None:
            self.consumer.commit(asynchronous=False)
            return
        wanted = []
        for p, o in offsets.items():
            offset, meta = o if isinstance(o, tuple) else (o, None)
            wanted.append(CTP(self.topic, p, offset, metadata=meta))
        self.consumer.commit(offsets=wanted, asynchronous=False)

    def seek(self, partition: int, offset: int) -> None:
        self.consumer.seek(CTP(self.topic, partition, offset))

    def seek_to_beginning(self, *partitions: int) -> None:
        for p in partitions:
            self.seek(p, OFFSET_BEGINNING)

    def seek_to_end(self, *partitions: int) -> None:
        for p in partitions:
            self.seek(p, OFFSET_END)

    def offsets_for_times(self, times: dict[int, int]) -> dict[int, int | None]:
        asked = [CTP(self.topic, p, t) for p, t in times.items()]
        got = self.consumer.offsets_for_times(asked, timeout=TIMEOUT)
        return {tp.partition: None if tp.offset < 0 else tp.offset for tp in got}

    def pause(self, *partitions: int) -> None:
        self.consumer.pause([CTP(self.topic, p) for p in partitions])

    def resume(self, *partitions: int) -> None:
        self.consumer.resume([CTP(self.topic, p) for p in partitions])

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.consumer.close()
