"""The pair of sides every parity scenario runs on: Kafka (the session's broker) and leasekit
(the test's connection), closed at the end of the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .kafka_side import KafkaSide
from .leasekit_side import LeasekitSide
from .sides import Side, closing_all


@pytest.fixture
def sides(kafka_broker, conn, zookeeper, warehouse, namespace) -> Iterator[list[Side]]:
    """[KafkaSide, LeasekitSide]: one scenario runs on each, in that order."""
    kafka = KafkaSide(kafka_broker.bootstrap)
    leasekit = LeasekitSide(conn, zookeeper, warehouse, namespace)
    with closing_all(leasekit, kafka):
        yield [kafka, leasekit]


def on_both(sides: list[Side], scenario: Callable[[Side], Any]) -> tuple[Any, Any]:
    """What ``scenario`` observed on Kafka, and on leasekit."""
    kafka, leasekit = sides
    return scenario(kafka), scenario(leasekit)


def agree(kafka: Any, leasekit: Any, expected: Any) -> None:
    """Both sides observed the same, and it is the value expected (so that the two cannot
    agree by being wrong the same way); a failure names the side that differs."""
    wrong = [
        (name, seen)
        for name, seen in (("kafka", kafka), ("leasekit", leasekit))
        if seen != expected
    ]
    assert not wrong, "\n".join([f"expected {expected!r}", *(f"{n} saw {s!r}" for n, s in wrong)])
