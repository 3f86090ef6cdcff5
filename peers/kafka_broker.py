"""A real Apache Kafka broker on loopback, for the parity tests and the benchmarks.

``KafkaBroker(root).start()`` writes a KRaft configuration for one combined broker and
controller on two free loopback ports, formats its storage with a fresh cluster id
(``kafka.tools.StorageTool format --standalone``), starts ``kafka.Kafka`` from the jars
``peers.maven`` fetched, and waits until the broker answers a metadata request with that
cluster id: a broker that someone else left on the port is never taken for ours. ``stop()``
ends that process only (SIGTERM, then SIGKILL) and removes its storage.

A run that crashed leaves its broker running; each start first kills the brokers of this
cache's run directory whose owning process has exited (checked by pid and by the command line
naming their own configuration), so such leftovers neither pile up nor get reused.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from leasekit.embedded.java import find_java
from leasekit.embedded.process import bind_port, kill_and_wait, log_tail, pid_alive, spawn

from .maven import cache_dir, classpath

__all__ = ["KafkaBroker", "BrokerError", "DEFAULT_SETTINGS", "reap_orphans"]

DEFAULT_SETTINGS: dict[str, str] = {
    # One broker: the internal topics cannot have more replicas than that.
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    # What Kafka's own sample server.properties sets for a development broker: the first
    # rebalance of a new group starts at once instead of waiting 3 s for more members.
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
}
"""Broker settings beyond Kafka's defaults; ``KafkaBroker(settings=...)`` adds or overrides."""

JVM_FLAGS = ("-XX:+UseSerialGC", "-Djava.net.preferIPv4Stack=true", "-Djava.awt.headless=true")
LOG4J = """\
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
"""


class BrokerError(RuntimeError):
    """The broker did not format, start or answer; the message holds its log's tail."""


def _run_dir() -> Path:
    return cache_dir() / "run"


def reap_orphans() -> list[int]:
    """Kill the brokers whose owning process has exited; return their pids."""
    reaped = []
    run = _run_dir()
    for record_path in sorted(run.glob("broker-*.json")) if run.is_dir() else []:
        try:
            record = json.loads(record_path.read_text())
            pid, owner, config = int(record["pid"]), int(record["owner"]), str(record["config"])
        except (OSError, ValueError, KeyError, TypeError):
            record_path.unlink(missing_ok=True)
            continue
        if pid_alive(owner):
            continue
        if pid_alive(pid) and _runs_config(pid, config):
            kill_and_wait(pid)
            reaped.append(pid)
        shutil.rmtree(Path(str(record.get("root", ""))) / "data", ignore_errors=True)
        record_path.unlink(missing_ok=True)
    return reaped


def _runs_config(pid: int, config: str) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return config.encode() in argv


class KafkaBroker:
    """One Kafka broker and controller (KRaft) on loopback, storage under ``root``."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        settings: dict[str, Any] | None = None,
        heap: str = "1g",
        log_level: str = "WARN",
    ) -> None:
        self.root = Path(root)
        self.settings = {**DEFAULT_SETTINGS, **{k: str(v) for k, v in (settings or {}).items()}}
        self.heap = heap
        self.log_level = log_level
        self.cluster_id = ""
        self.port = 0
        self.controller_port = 0
        self.pid: int | None = None

    @property
    def bootstrap(self) -> str:
        """The client listener, ``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.root / "broker.log"

    def start(self, *, timeout: float = 120.0) -> str:
        """Format and start the broker; return its bootstrap address once it answers.

        Raises:
            BrokerError: it exited, or did not answer within ``timeout`` seconds.
            PeerMissingError: the jars are not in the cache (``make peers``).
        """
        if self.pid is not None:
            raise BrokerError(f"broker already started (pid {self.pid})")
        reap_orphans()
        cp = classpath("kafka")
        java = find_java()
        self.root.mkdir(parents=True, exist_ok=True)
        self.port, self.controller_port = _free_ports(2)
        self.cluster_id = _cluster_id()
        config = self._write_config()
        base = [java, *JVM_FLAGS, f"-Dlog4j2.configurationFile={self.root / 'log4j2.properties'}"]
        self._format(base, cp, config, timeout)
        argv = [*base, f"-Xmx{self.heap}", "-cp", cp, "kafka.Kafka", str(config)]
        self.pid = spawn(argv, self.log_path)
        self._record(config)
        try:
            self._wait_ready(time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def stop(self, *, timeout: float = 30.0, keep_storage: bool = False) -> None:
        """End this broker (SIGTERM, SIGKILL after ``timeout``) and remove its storage."""
        pid, self.pid = self.pid, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            kill_and_wait(pid)
            (_run_dir() / f"broker-{pid}.json").unlink(missing_ok=True)
        if not keep_storage:
            shutil.rmtree(self.root / "data", ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the broker (a crash); its storage stays for ``restart``."""
        if self.pid is not None:
            kill_and_wait(self.pid)

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self) -> Path:
        listeners = (
            f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
        )
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.root / "data"),
            **self.settings,
        }
        config = self.root / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        (self.root / "log4j2.properties").write_text(LOG4J.format(level=self.log_level))
        return config

    def _format(self, base: list[str], cp: str, config: Path, timeout: float) -> None:
        import subprocess

        shutil.rmtree(self.root / "data", ignore_errors=True)
        argv = [*base, "-Xmx256m", "-cp", cp, "kafka.tools.StorageTool", "format",
                "-t", self.cluster_id, "-c", str(config), "--standalone"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise BrokerError(f"kafka-storage format failed (exit {done.returncode}):\n{tail}")

    def _record(self, config: Path) -> None:
        run = _run_dir()
        run.mkdir(parents=True, exist_ok=True)
        record = {"pid": self.pid, "owner": os.getpid(), "config": str(config)}
        record["root"] = str(self.root)
        (run / f"broker-{self.pid}.json").write_text(json.dumps(record))

    def _wait_ready(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while True:
            if self.pid is None or not pid_alive(self.pid):
                tail = log_tail(self.log_path)
                raise BrokerError(f"the Kafka broker exited while starting:\n{tail}")
            try:
                metadata = admin.list_topics(timeout=1.0)
            except Exception:  # noqa: BLE001 - not answering yet: KafkaException, timeouts
                metadata = None
            if metadata is not None and metadata.brokers:
                if metadata.cluster_id != self.cluster_id:
                    raise BrokerError(
                        f"{self.bootstrap} answers as cluster {metadata.cluster_id}, not the "
                        f"{self.cluster_id} this launcher formatted: another broker holds the port"
                    )
                return
            if time.monotonic() >= deadline:
                tail = log_tail(self.log_path)
                raise BrokerError(f"the Kafka broker did not answer in time:\n{tail}")
            time.sleep(0.2)


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them (a UUID in URL-safe base64 without padding),
    never starting with "-", which the storage tool would take for an option (Kafka's own
    ``Uuid.randomUuid`` draws again in that case too)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = bind_port(0)
        if port is not None and port not in ports:
            ports.append(port)
    return ports
