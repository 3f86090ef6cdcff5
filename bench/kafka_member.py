"""The Kafka group member B17 kills, and its handle in the benchmark's process.

``python -m bench.kafka_member BOOTSTRAP TOPIC GROUP SETTINGS_JSON`` runs a confluent-kafka
consumer of TOPIC in GROUP (``auto.offset.reset=earliest``, auto-commit off, the variant's
client settings from SETTINGS_JSON): it polls, commits what a poll returned synchronously
after every poll that returned records (as B10's leasekit member commits after every poll),
and prints one JSON line on stdout whenever its state changes: member id and assignment (the
partitions its rebalance callbacks assigned and did not revoke). It runs until it is killed.

``MemberProcess`` starts it and reads its state lines; ``kill()`` sends SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["MemberProcess", "main"]

REPO = Path(__file__).resolve().parent.parent


class MemberProcess:
    """The member in a separate OS process, with the last state it reported."""

    def __init__(self, bootstrap: str, topic: str, group: str, client: dict[str, Any]) -> None:
        self.state: dict[str, Any] = {}
        self._lock = threading.Lock()
        # a pipe nobody reads could fill and block it
        self._stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.kafka_member", bootstrap, topic, group]
            + [json.dumps(client)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="bench-kafka-member")
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout or ():
            with self._lock:
                self.state = json.loads(line)

    def last(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.state)

    def assigned(self) -> frozenset[int]:
        return frozenset(self.last().get("assignment", ()))

    def kill(self) -> float:
        """SIGKILL now; the ``perf_counter`` time of the kill."""
        killed = time.perf_counter()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._reader.join(5)
        return killed

    def stop(self) -> str:
        """Kill it if still running; its stderr."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._stderr.seek(0)
        return self._stderr.read()


def main(argv: list[str]) -> int:
    from confluent_kafka import Consumer, KafkaException

    bootstrap, topic, group, settings = argv
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **json.loads(settings),
        }
    )
    assigned: set[int] = set()

    def gained(_c: Any, partitions: list[Any]) -> None:
        assigned.update(tp.partition for tp in partitions)

    def lost(_c: Any, partitions: list[Any]) -> None:
        assigned.difference_update(tp.partition for tp in partitions)

    consumer.subscribe([topic], on_assign=gained, on_revoke=lost, on_lost=lost)
    last = None
    while True:
        first = consumer.poll(0.2)
        messages = [] if first is None else [first, *consumer.consume(1000, 0)]
        if any(m.error() is None for m in messages):
            try:
                consumer.commit(asynchronous=False)
            except KafkaException:
                pass  # its partitions moved meanwhile: the next poll follows the group
        state = {"member_id": consumer.memberid(), "assignment": sorted(assigned)}
        if state != last:
            print(json.dumps(state), flush=True)
            last = state


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
