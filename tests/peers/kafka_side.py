"""Kafka's side of the parity scenarios: topics, writes and the group's admin view through
confluent-kafka, consumers through aiokafka (asynchronous: each runs on a private event loop,
driven synchronously) or, for what aiokafka lacks (cooperative-sticky, KIP-848's
``group.protocol=consumer``), through confluent-kafka's consumer."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
from aiokafka import errors as aioerrors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.structs import OffsetAndMetadata, TopicPartition
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from .confluent_reader import ConfluentReader
from .sides import Records, unique

ASSIGNORS = {
    "roundrobin": RoundRobinPartitionAssignor,
    "range": RangePartitionAssignor,
    "sticky": StickyPartitionAssignor,
}
GROUP_NOT_EMPTY = {KafkaError.NON_EMPTY_GROUP, KafkaError.UNKNOWN_MEMBER_ID}
"""What the coordinator answers an offsets change from outside a group that has members."""
TIMEOUT = 60.0


class Loop:
    """A private asyncio loop: run on a thread of its own (background work such as heartbeats
    goes on between calls, as in Kafka's Java client), or ``detached``, run only inside calls, so
    that a consumer left alone sends no heartbeat at all (a stopped process, a zombie)."""

    def __init__(self, detached: bool = False) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = None
        if not detached:
            self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
            self.thread.start()

    def run(self, coro: Any, timeout: float = TIMEOUT) -> Any:
        if self.thread is None:
            return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if self.thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(TIMEOUT)
        self.loop.close()


class _Listener(ConsumerRebalanceListener):
    """Records the calls; with ``commit_on_revoke`` set, commits each revoked partition's
    position with that metadata inside ``on_partitions_revoked``."""

    def __init__(self, reader: AioReader) -> None:
        self.reader = reader

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.reader.calls.append(("revoked", frozenset(tp.partition for tp in revoked)))
        meta, consumer = self.reader.commit_on_revoke, self.reader.consumer
        if meta is not None and revoked and consumer is not None:
            wanted = {tp: (await consumer.position(tp), meta) for tp in revoked}
            await consumer.commit(wanted)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.reader.calls.append(("assigned", frozenset(tp.partition for tp in assigned)))


class AioReader:
    """An aiokafka consumer of one topic, subscribed (with or without a group)."""

    def __init__(self, side: KafkaSide, topic: str, group: str | None, **options: Any) -> None:
        self.topic, self.calls = topic, []
        self.commit_on_revoke = options.pop("commit_on_revoke", None)
        self.consumer: Any = None
        self._own_loop = options.pop("zombie", False)
        self.loop = Loop(detached=True) if self._own_loop else side.loop
        self._closed = False
        session_ms = int(options.pop("session_s", 6) * 1000)
        settings = {
            "bootstrap_servers": side.bootstrap,
            "group_id": group,
            "auto_offset_reset": options.pop("reset", "earliest"),
            "enable_auto_commit": options.pop("auto_commit", False),
            "auto_commit_interval_ms": int(options.pop("auto_commit_s", 5) * 1000),
            "session_timeout_ms": session_ms,
            "heartbeat_interval_ms": min(200, session_ms // 4),
            "metadata_max_age_ms": 1000,
            "fetch_max_wait_ms": 100,
        }
        if "assignor" in options:
            settings["partition_assignment_strategy"] = (ASSIGNORS[options.pop("assignor")],)
        assert not options, f"options {sorted(options)} are not known"
        self.consumer = self.loop.run(self._start(settings))

    async def _start(self, settings: dict[str, Any]) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(**settings)
        consumer.subscribe([self.topic], listener=_Listener(self))
        await consumer.start()
        return consumer

    def _call(self, method: Any, *args: Any) -> Any:
        """A synchronous method of the consumer, called on its loop (aiokafka's objects
        belong to the loop that runs them)."""

        async def call() -> Any:
            return method(*args)

        return self.loop.run(call())

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, partition)

    def poll(self, timeout: float = 0.2, max_records: int | None = None) -> Records:
        got = self.loop.run(
            self.consumer.getmany(timeout_ms=int(timeout * 1000), max_records=max_records)
        )
        return {
            tp.partition: [(r.offset, r.value.decode()) for r in records]
            for tp, records in got.items()
            if records
        }

    def getone(self, timeout: float = 10.0) -> tuple[int, int, str] | None:
        try:
            record = self.loop.run(asyncio.wait_for(self.consumer.getone(), timeout))
        except asyncio.TimeoutError:
            return None
        return record.partition, record.offset, record.value.decode()

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self._call(self.consumer.assignment)}

    def position(self, partition: int) -> int:
        return self.loop.run(self.consumer.position(self._tp(partition)))

    def committed(self, partition: int) -> int | None:
        return self.loop.run(self.consumer.committed(self._tp(partition)))

    def commit(self, offsets: dict[int, int | tuple[int, str]] | None = None) -> None:
        wanted = None
        if offsets is not None:
            wanted = {
                self._tp(p): OffsetAndMetadata(*o) if isinstance(o, tuple) else o
                for p, o in offsets.items()
            }
        self.loop.run(self.consumer.commit(wanted))

    def seek(self, partition: int, offset: int) -> None:
        self._call(self.consumer.seek, self._tp(partition), offset)

    def seek_to_beginning(self, *partitions: int) -> None:
        self.loop.run(self.consumer.seek_to_beginning(*map(self._tp, partitions)))

    def seek_to_end(self, *partitions: int) -> None:
        self.loop.run(self.consumer.seek_to_end(*map(self._tp, partitions)))

    def offsets_for_times(self, times: dict[int, int]) -> dict[int, int | None]:
        asked = {self._tp(p): t for p, t in times.items()}
        got = self.loop.run(self.consumer.offsets_for_times(asked))
        return {tp.partition: None if o is None else o.offset for tp, o in got.items()}

    def pause(self, *partitions: int) -> None:
        self._call(self.consumer.pause, *map(self._tp, partitions))

    def resume(self, *partitions: int) -> None:
        self._call(self.consumer.resume, *map(self._tp, partitions))

    def silence(self) -> None:
        """A zombie's loop runs only inside its calls: left alone, it sends no heartbeat."""
        assert self._own_loop, "only a zombie reader can be silenced"

    def unsilence(self) -> None:
        assert self._own_loop, "only a zombie reader can be silenced"

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.loop.run(self.consumer.stop())
        finally:
            if self._own_loop:
                self.loop.close()


class KafkaSide:
    """The real broker, through confluent-kafka's admin client and producer."""

    name = "kafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.loop = Loop()
        self.aioadmin: Any = None
        self.readers: list[Any] = []

    def topic(self, partitions: int) -> str:
        name = unique("parity")
        for future in self.admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(TIMEOUT)
        return name

    def grow(self, topic: str) -> list[int]:
        """Add one partition (Kafka's only way to rescale a topic): its id."""
        count = len(self.end_offsets(topic))
        for future in self.admin.create_partitions([NewPartitions(topic, count + 1)]).values():
            future.result(TIMEOUT)
        self.producer.list_topics(topic, timeout=TIMEOUT)  # the producer learns of it now
        return [count]

    def shrink(self, topic: str, partitions: list[int]) -> int:
        """Ask for fewer partitions: Kafka refuses (INVALID_PARTITIONS)."""
        count = len(self.end_offsets(topic))
        asked = [NewPartitions(topic, count - len(partitions) + 1)]
        for future in self.admin.create_partitions(asked).values():
            future.result(TIMEOUT)
        raise AssertionError("Kafka took fewer partitions")

    def write(
        self, topic: str, values: dict[int, list[str]], timestamp_ms: int | None = None
    ) -> dict[int, list[int]]:
        """Append ``values`` to each partition in order; the records' timestamps."""
        stamps: dict[int, list[tuple[int, int]]] = {}

        def delivered(error: Any, message: Any) -> None:
            assert error is None, error
            stamps.setdefault(message.partition(), []).append(
                (message.offset(), message.timestamp()[1])
            )

        for partition, vals in values.items():
            for value in vals:
                extra = {} if timestamp_ms is None else {"timestamp": timestamp_ms}
                self.producer.produce(
                    topic, value.encode(), partition=partition, on_delivery=delivered, **extra
                )
        assert self.producer.flush(TIMEOUT) == 0
        return {p: [t for _, t in sorted(s)] for p, s in stamps.items()}

    def end_offsets(self, topic: str) -> dict[int, int]:
        partitions = self.admin.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions
        asked = {CTP(topic, p): OffsetSpec.latest() for p in partitions}
        ends = self.admin.list_offsets(asked)
        return {tp.partition: future.result(TIMEOUT).offset for tp, future in ends.items()}

    def reader(self, topic: str, group: str | None = None, **options: Any) -> Any:
        client = options.pop("client", "aiokafka")
        if client == "aiokafka":
            made: Any = AioReader(self, topic, group, **options)
        else:
            made = ConfluentReader(self.bootstrap, topic, group, protocol=client, **options)
        self.readers.append(made)
        return made

    def _group_offsets(self, group: str, topic: str) -> dict[int, tuple[int, str]]:
        """The group's committed offsets with their metadata, read by aiokafka's admin client
        (confluent-kafka's list_consumer_group_offsets decodes a metadata string past its end
        at times: a UnicodeDecodeError, or bytes that were never committed)."""

        async def listed() -> Any:
            if self.aioadmin is None:
                self.aioadmin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
                await self.aioadmin.start()
            return await self.aioadmin.list_consumer_group_offsets(group)

        return {  # confluent-kafka commits metadata with its C string's terminator: cut it
            tp.partition: (om.offset, (om.metadata or "").removesuffix("\x00"))
            for tp, om in self.loop.run(listed()).items()
            if tp.topic == topic and om.offset >= 0
        }

    def committed_metadata(self, group: str, topic: str) -> dict[int, tuple[int, str]]:
        return self._group_offsets(group, topic)

    def lag(self, group: str, topic: str) -> dict[int, tuple[int | None, int, int | None]]:
        committed = self._group_offsets(group, topic)
        out = {}
        for p, end in self.end_offsets(topic).items():
            offset = committed[p][0] if p in committed else None
            out[p] = (offset, end, None if offset is None else end - offset)
        return out

    def reset_offsets(self, group: str, topic: str, offset: int, partitions: list[int]) -> None:
        tps = [CTP(topic, p, offset) for p in partitions]

        def alter() -> None:
            asked = [ConsumerGroupTopicPartitions(group, tps)]
            result = self.admin.alter_consumer_group_offsets(asked)[group].result(TIMEOUT)
            for tp in result.topic_partitions:
                if tp.error is not None:
                    raise KafkaException(tp.error)

        _retrying(alter)

    def delete_group(self, group: str) -> None:
        _retrying(lambda: self.admin.delete_consumer_groups([group])[group].result(TIMEOUT))

    def members(self, group: str) -> list[set[int]]:
        described = _retrying(
            lambda: self.admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        )
        return [{tp.partition for tp in m.assignment.topic_partitions} for m in described.members]

    def kind_of(self, error: BaseException) -> str | None:
        kinds = {
            aioerrors.CommitFailedError: "commit-failed",
            aioerrors.IllegalStateError: "not-assigned",
            aioerrors.IllegalOperation: "no-group",
            aioerrors.NoOffsetForPartitionError: "no-offset",
            aioerrors.OffsetOutOfRangeError: "out-of-range",
            ValueError: "invalid-argument",
            aioerrors.OffsetMetadataTooLargeError: "metadata-too-large",
        }
        if type(error) in kinds:  # the exact class: a subclass is another refusal
            return kinds[type(error)]
        if isinstance(error, KafkaException) and error.args[0].code() in GROUP_NOT_EMPTY:
            return "group-not-empty"
        return None

    def error_name(self, error: BaseException) -> str:
        """The class name; for confluent-kafka's KafkaException, with the broker's error code."""
        if isinstance(error, KafkaException):
            return f"KafkaException({error.args[0].name()})"
        return type(error).__name__

    def close(self) -> None:
        for reader in self.readers:
            try:
                reader.close()
            except Exception:  # noqa: BLE001 - closing what a test left open, best effort
                pass
        if self.aioadmin is not None:
            self.loop.run(self.aioadmin.close())
        self.loop.close()
        self.producer = self.admin = None  # their librdkafka threads end with them


COORDINATOR_NOT_READY = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def _retrying(call: Any) -> Any:
    """An admin call, again while the group's coordinator is not ready (a broker that has
    just created its offsets topic answers NOT_COORDINATOR for a moment)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            return call()
        except KafkaException as error:
            if error.args[0].code() not in COORDINATOR_NOT_READY or time.monotonic() > deadline:
                raise
        time.sleep(0.2)
