"""A confluent-kafka consumer behind the scenarios' reader interface, for the group protocols
aiokafka lacks: ``"cooperative"`` (the classic protocol with the cooperative-sticky assignor,
incremental rebalances) and ``"consumer"`` (KIP-848's ``group.protocol=consumer``: the broker
assigns, a member heartbeats its way in). Its rebalance callbacks run inside ``poll``, as
leasekit's do."""

from __future__ import annotations

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

    def poll(self, timeout: float = 0.2, max_records: int | None = None) -> Records:
        out: Records = {}
        for message in self.consumer.consume(max_records or 500, timeout):
            if message.error() is not None:
                raise KafkaException(message.error())
            out.setdefault(message.partition(), []).append(
                (message.offset(), message.value().decode())
            )
        return out

    def getone(self, timeout: float = 10.0) -> tuple[int, int, str] | None:
        message = self.consumer.poll(timeout)
        if message is None:
            return None
        if message.error() is not None:
            raise KafkaException(message.error())
        return message.partition(), message.offset(), message.value().decode()

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def position(self, partition: int) -> int:
        return self.consumer.position([CTP(self.topic, partition)])[0].offset

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
