"""The Kafka broker the parity tests and benchmarks run: fetched once, started fresh, never
reused blindly, stopped alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from leasekit.embedded.process import pid_alive
from peers import maven
from peers.kafka_broker import BrokerError, KafkaBroker

ROOT = Path(__file__).resolve().parents[2]


def test_broker_round_trip(kafka_broker):
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    for future in admin.create_topics([NewTopic("round-trip", 3, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    for i in range(30):
        producer.produce("round-trip", value=b"v%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    settings = {"bootstrap.servers": kafka_broker.bootstrap, "group.id": "rt"}
    consumer = Consumer({**settings, "auto.offset.reset": "earliest"})
    consumer.subscribe(["round-trip"])
    values = []
    while len(values) < 30:
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        values.append(message.value())
    consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(30))
    assert admin.list_topics(timeout=10).cluster_id == kafka_broker.cluster_id


def test_cached_jars_fetch_nothing(monkeypatch):
    """A second fetch finds the cache and runs no Maven at all (none is on PATH here)."""
    first = maven.fetch("kafka")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert maven.fetch("kafka") == first
    assert any(first.glob("kafka_2.13-*.jar"))


def test_missing_jars_say_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setenv("LEASEKIT_PEERS_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(maven.PeerMissingError, match="make peers"):
        KafkaBroker(tmp_path / "b").start()


def test_crashed_runs_broker_is_killed_not_reused(tmp_path):
    """A run that dies without stopping its broker leaves it running; the next start kills it
    and starts a fresh broker with a new cluster id on new ports."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("broker_crash.py")), str(tmp_path / "old")],
        capture_output=True, text=True, timeout=180, env=env, check=True,
    )  # fmt: skip
    old_pid = int(out.stdout.split()[0])
    assert pid_alive(old_pid)
    broker = KafkaBroker(tmp_path / "new")
    try:
        broker.start()
        assert not pid_alive(old_pid)
        assert broker.pid != old_pid
    finally:
        broker.stop()
    assert not pid_alive(broker.pid or old_pid)


def test_another_cluster_on_the_port_is_refused(kafka_broker, tmp_path):
    """The readiness check compares cluster ids: a broker that answers on the port but was not
    formatted by this launcher is an error, not a broker to use."""
    impostor = KafkaBroker(tmp_path)
    impostor.port = kafka_broker.port
    impostor.cluster_id = "not-the-one-it-formatted"
    impostor.pid = os.getpid()
    with pytest.raises(BrokerError, match="another broker holds the port"):
        impostor._wait_ready(float("inf"))
    impostor.pid = None
