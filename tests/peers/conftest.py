"""Fixtures of the parity tests: one real Kafka broker (KRaft, loopback) for the session,
started from the jars ``make peers`` fetched, stopped at the end; its tests share one worker
(``GROUPED_FIXTURES`` in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peers.kafka_broker import KafkaBroker

BROKER_SETTINGS = {
    # Session timeouts as short as leasekit's tests use (1 s and up), so a zombie member's
    # session expires within seconds; Kafka's defaults bound them below at 6 s and 45 s.
    "group.min.session.timeout.ms": "1000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> Iterator[KafkaBroker]:
    """A Kafka broker for the whole session (fresh storage and cluster id)."""
    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"), settings=BROKER_SETTINGS)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
