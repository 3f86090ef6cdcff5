"""The Kafka side of the side-by-side benchmarks (B14-B18, B12-peer): a broker of its own for
each benchmark, topics, and the same records written to both systems.

``kafka_broker()`` starts a fresh broker (``peers.kafka_broker``, jars from ``make peers``) in
a temporary directory, with Kafka's defaults apart from what one broker needs and the settings
given, and stops it at the end. ``create_topic`` makes a topic of N partitions and waits until
every partition has a leader. ``produce`` writes values to partitions through confluent-kafka
with batching, so seeding 2,000,000 records takes seconds, not minutes; what is timed is what a
consumer does afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import Any

from peers.kafka_broker import KafkaBroker

from .common import log, process_cpu_seconds

__all__ = [
    "kafka_broker",
    "create_topic",
    "produce",
    "end_offsets",
    "broker_cpu_seconds",
    "PRODUCER_SETTINGS",
]

PRODUCER_SETTINGS: dict[str, Any] = {
    # Large batches: seeding is not what is measured.
    "linger.ms": 50,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "compression.type": "none",
    "acks": "all",
}


@contextlib.contextmanager
def kafka_broker(label: str, settings: dict[str, Any] | None = None) -> Iterator[KafkaBroker]:
    """A started broker in a temporary directory, stopped and removed on exit."""
    root = tempfile.mkdtemp(prefix=f"leasekit-bench-{label.lower()}-kafka-")
    broker = KafkaBroker(root, settings=settings, heap="2g")
    try:
        started = time.perf_counter()
        broker.start()
        log(f"Kafka broker at {broker.bootstrap} ({time.perf_counter() - started:.1f} s to start)")
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 120.0) -> None:
    """Create topic ``name`` with ``partitions`` partitions; return once each has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout)
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        ready = topic is not None and topic.error is None and len(topic.partitions) == partitions
        if ready and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"topic {name}: partitions without a leader after {timeout} s")
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, bytes | None, bytes]]) -> int:
    """Write ``(partition, key, value)`` records; return how many, once all are acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_SETTINGS})
    count = 0
    for partition, key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(300)
    if remaining:
        raise RuntimeError(f"{remaining} records to {topic} not acknowledged after 300 s")
    return count


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset (high watermark)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-end-offsets"})
    try:
        ends = {}
        for partition in range(partitions):
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 30)
            ends[partition] = high
        return ends
    finally:
        consumer.close()


def broker_cpu_seconds(broker: KafkaBroker) -> float | None:
    """CPU seconds the broker's JVM has used so far (for the CPU ratio beside a wall ratio)."""
    return process_cpu_seconds(broker.pid) if broker.pid is not None else None
