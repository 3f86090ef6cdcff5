"""The Kafka clients of the side-by-side benchmarks B14, B16 and B18: aiokafka and
confluent-kafka consumers with the settings they are measured with, an event loop that drives
aiokafka from the benchmarks' synchronous code, and topics of more partitions than one
request may create.

Both clients get their best settings for reading a topic from its beginning: fetches of up to
100 MiB (50 MiB per partition), no cap on the records one ``getmany`` returns, and librdkafka's
prefetch queue as deep as it goes (``queued.min.messages``, ``queued.max.messages.kbytes``).
CRC checks are off in aiokafka as they are by default in librdkafka (and as pyarrow reads
Parquet pages without verifying their checksums on leasekit's side).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from .peer import create_topic

__all__ = [
    "PEERS",
    "AIOKAFKA_CONSUMER",
    "CONFLUENT_CONSUMER",
    "AioLoop",
    "aiokafka_consumer",
    "confluent_consumer",
    "create_wide_topic",
    "commit_when_ready",
]

PEERS = ("aiokafka", "confluent")
"""The Kafka clients every side-by-side figure is measured with."""

AIOKAFKA_CONSUMER: dict[str, Any] = {
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "fetch_max_bytes": 100 * 2**20,
    "max_partition_fetch_bytes": 50 * 2**20,
    "max_poll_records": None,
    "check_crcs": False,
}

CONFLUENT_CONSUMER: dict[str, Any] = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.max.bytes": 100 * 2**20,
    "max.partition.fetch.bytes": 50 * 2**20,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 2_000_000,
    "log_level": 3,
}

CREATE_STEP = 5_000
"""Partitions created per request: KRaft refuses a request of more than 10,000 metadata
records ("excessively large batch operation"), one per partition."""


class AioLoop:
    """One event loop on which aiokafka's clients live; ``run`` drives a coroutine to its end."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


async def aiokafka_consumer(bootstrap: str, group_id: str | None = None, **extra: Any) -> Any:
    """A started ``AIOKafkaConsumer`` with ``AIOKAFKA_CONSUMER`` (and ``extra``) settings."""
    from aiokafka import AIOKafkaConsumer

    logging.getLogger("aiokafka").setLevel(logging.ERROR)  # not a coordinator's first retries
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group_id, **{**AIOKAFKA_CONSUMER, **extra}
    )
    await consumer.start()
    return consumer


def confluent_consumer(bootstrap: str, group_id: str, **extra: Any) -> Any:
    """A confluent-kafka ``Consumer`` with ``CONFLUENT_CONSUMER`` (and ``extra``) settings."""
    from confluent_kafka import Consumer

    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group_id, **CONFLUENT_CONSUMER, **extra}
    )


def create_wide_topic(bootstrap: str, name: str, partitions: int, timeout: float = 600.0) -> float:
    """Create topic ``name`` with ``partitions`` partitions, ``CREATE_STEP`` at a time (the
    topic, then more partitions); return the seconds it took once every partition has a
    leader."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    started = time.perf_counter()
    create_topic(bootstrap, name, min(partitions, CREATE_STEP), timeout)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for total in range(2 * CREATE_STEP, partitions + CREATE_STEP, CREATE_STEP):
        for future in admin.create_partitions(
            [NewPartitions(name, min(total, partitions))]
        ).values():
            future.result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(name, timeout=30).topics[name]
        listed = topic.partitions.values()
        if len(listed) == partitions and all(p.leader >= 0 for p in listed):
            return time.perf_counter() - started
        if time.monotonic() >= deadline:
            raise TimeoutError(f"topic {name}: partitions without a leader after {timeout} s")
        time.sleep(0.2)


def commit_when_ready(consumer: Any, offsets: list[Any], timeout: float = 120.0) -> None:
    """A synchronous confluent-kafka commit of ``offsets``, retried (the partitions that failed)
    while the group's coordinator is not ready: a new broker creates ``__consumer_offsets`` on
    the first group's first request and answers NOT_COORDINATOR until it has loaded, for the
    request or for some of its partitions."""
    from confluent_kafka import KafkaError, KafkaException

    waiting = {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.REQUEST_TIMED_OUT,
    }
    deadline = time.monotonic() + timeout
    while offsets:
        try:
            done = consumer.commit(offsets=offsets, asynchronous=False)
            failed = [tp for tp in done if tp.error is not None]
            errors = {tp.error.code() for tp in failed}
        except KafkaException as e:
            failed, errors = offsets, {e.args[0].code()}
        if failed and (not errors <= waiting or time.monotonic() >= deadline):
            raise RuntimeError(f"commit of {len(failed)} offsets failed: {sorted(errors)}")
        if failed:
            time.sleep(0.2)
        wanted = {(tp.topic, tp.partition) for tp in failed}
        offsets = [tp for tp in offsets if (tp.topic, tp.partition) in wanted]
