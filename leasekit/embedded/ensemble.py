"""A ZooKeeper ensemble on loopback, run from the same jars as the embedded server.

Each member has its own directory under ``base_dir`` (``zk<N>/``: ``zoo.cfg``, ``data/myid``,
``server.log``) and its own client, quorum and election ports on 127.0.0.1. Members use the
embedded server's tick and session bounds (``tickTime=500``, sessions of 1 s to 2 minutes),
so a client's session timeout means the same on both.

Meant for tests and trying out failover on one machine: the members are child processes of
this one (detached, in sessions of their own) and nothing here is shared with other
processes the way the embedded server's ``server.json`` is.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from leasekit.embedded.java import find_java
from leasekit.embedded.process import (
    bind_port,
    classpath,
    config_lines,
    four_letter,
    jvm_flags,
    kill_and_wait,
    log_tail,
    pid_alive,
    probe,
    spawn,
    wait_stopped,
)
from leasekit.errors import IllegalStateError, InvalidArgumentError, ZooKeeperUnavailableError

__all__ = ["Ensemble", "QUORUM_MAIN_CLASS"]

QUORUM_MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

# In ticks of 500 ms: a follower has 5 s to sync with a new leader and is dropped after
# 2 s without hearing from it.
_INIT_LIMIT = 10
_SYNC_LIMIT = 4


@dataclass
class _Member:
    myid: int
    root: Path
    client_port: int
    peer_port: int
    election_port: int
    pid: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"


class Ensemble:
    """``size`` ZooKeeper servers forming one ensemble on 127.0.0.1.

    >>> ensemble = Ensemble(tmp_dir)
    >>> ensemble.start()                 # returns once a quorum serves on every member
    >>> lk.connect(ensemble.connect_string, warehouse)
    >>> ensemble.kill(ensemble.leader())  # SIGKILL; the others elect a new leader
    >>> ensemble.restart(0)              # same ports and data: it rejoins as a follower
    >>> ensemble.stop()
    """

    def __init__(
        self, base_dir: str | os.PathLike[str], size: int = 3, *, heap: str = "256m"
    ) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise InvalidArgumentError(f"size must be a positive int, got {size!r}")
        self.base_dir = Path(base_dir).expanduser().resolve()
        self.size = size
        self.heap = heap
        self._members: list[_Member] = []

    # -- addresses -------------------------------------------------------------------------

    @property
    def addresses(self) -> list[str]:
        """Client addresses of the members, ``"127.0.0.1:PORT"``, by index."""
        return [m.address for m in self._members]

    @property
    def connect_string(self) -> str:
        """The comma-separated connect string for ``leasekit.connect``."""
        if not self._members:
            raise IllegalStateError("the ensemble was not started")
        return ",".join(self.addresses)

    def pid(self, index: int) -> int:
        return self._member(index).pid

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, *, timeout: float = 90.0) -> str:
        """Start every member and wait until each serves; return the connect string."""
        if self._members:
            raise IllegalStateError("the ensemble was already started")
        self._members = self._allocate()
        for member in self._members:
            self._write_config(member)
        try:
            for member in self._members:
                self._launch(member)
            self.wait_serving(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self.connect_string

    def wait_serving(self, indexes: list[int] | None = None, *, timeout: float = 60.0) -> None:
        """Wait until the members ``indexes`` (default: every running one) serve clients."""
        members = (
            [self._member(i) for i in indexes]
            if indexes is not None
            else [m for m in self._members if m.pid and pid_alive(m.pid)]
        )
        deadline = time.monotonic() + timeout
        for member in members:
            while True:
                seen = probe(member.address, member.root)
                if seen == "ours":
                    break
                if seen == "other":
                    raise ZooKeeperUnavailableError(
                        f"port {member.client_port} of server {member.myid} is taken"
                    )
                if not pid_alive(member.pid):
                    raise ZooKeeperUnavailableError(self._failure(member, "exited"))
                if time.monotonic() >= deadline:
                    raise ZooKeeperUnavailableError(self._failure(member, "did not serve in time"))
                time.sleep(0.05)

    def kill(self, index: int) -> None:
        """SIGKILL member ``index`` (no shutdown: its data dir stays as the kill left it)."""
        member = self._member(index)
        if not member.pid or not pid_alive(member.pid):
            raise IllegalStateError(f"server {member.myid} is not running")
        kill_and_wait(member.pid)
        member.pid = 0

    def restart(self, index: int, *, timeout: float = 60.0) -> None:
        """Start member ``index`` again on its ports and data; return once it serves."""
        member = self._member(index)
        if member.pid and pid_alive(member.pid):
            raise IllegalStateError(f"server {member.myid} is still running")
        self._launch(member)
        self.wait_serving([index], timeout=timeout)

    def stop(self, *, timeout: float = 15.0) -> None:
        """Stop every member (SIGTERM, SIGKILL after ``timeout``)."""
        running = [m for m in self._members if m.pid and pid_alive(m.pid)]
        for member in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(member.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for member in running:
            if not wait_stopped(member.pid, member.address, member.root, deadline):
                kill_and_wait(member.pid)
            member.pid = 0

    def __enter__(self) -> Ensemble:
        if not self._members:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state -----------------------------------------------------------------------------

    def mode(self, index: int) -> str | None:
        """``"leader"``, ``"follower"`` (or another ``Mode:`` of ``srvr``); None when the member
        does not answer or does not serve."""
        try:
            reply = four_letter(self._member(index).address, "srvr")
        except ZooKeeperUnavailableError:
            return None
        for line in reply.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def leader(self) -> int | None:
        """Index of the member that says ``Mode: leader``; None while there is none."""
        for index in range(len(self._members)):
            if self.mode(index) == "leader":
                return index
        return None

    def wait_leader(self, *, timeout: float = 60.0) -> int:
        """Wait until one member leads and every running member serves; return the leader."""
        deadline = time.monotonic() + timeout
        while True:
            leader = self.leader()
            if leader is not None:
                self.wait_serving(timeout=max(0.1, deadline - time.monotonic()))
                return leader
            if time.monotonic() >= deadline:
                raise ZooKeeperUnavailableError("no member of the ensemble became leader in time")
            time.sleep(0.05)

    # -- internals -------------------------------------------------------------------------

    def _member(self, index: int) -> _Member:
        if not self._members:
            raise IllegalStateError("the ensemble was not started")
        if not isinstance(index, int) or not 0 <= index < len(self._members):
            raise InvalidArgumentError(
                f"no server {index!r} in an ensemble of {len(self._members)}"
            )
        return self._members[index]

    def _allocate(self) -> list[_Member]:
        ports: list[int] = []
        while len(ports) < 3 * self.size:
            port = bind_port(0)
            if port is None:
                raise ZooKeeperUnavailableError("no free loopback port for ZooKeeper")
            if port not in ports:
                ports.append(port)
        members = []
        for i in range(self.size):
            root = self.base_dir / f"zk{i + 1}"
            (root / "data").mkdir(parents=True, exist_ok=True)
            members.append(_Member(i + 1, root, *ports[3 * i : 3 * i + 3]))
        return members

    def _write_config(self, member: _Member) -> None:
        lines = [
            *config_lines(member.root / "data", member.client_port),
            f"initLimit={_INIT_LIMIT}",
            f"syncLimit={_SYNC_LIMIT}",
            *(f"server.{m.myid}=127.0.0.1:{m.peer_port}:{m.election_port}" for m in self._members),
        ]
        (member.root / "zoo.cfg").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (member.root / "data" / "myid").write_text(f"{member.myid}\n", encoding="ascii")

    def _launch(self, member: _Member) -> None:
        flags = [f for f in jvm_flags() if not f.startswith("-Xmx")]
        argv = [
            find_java(),
            f"-Xmx{self.heap}",
            *flags,
            "-cp",
            classpath(),
            QUORUM_MAIN_CLASS,
            str(member.root / "zoo.cfg"),
        ]
        member.pid = spawn(argv, member.root / "server.log")

    def _failure(self, member: _Member, what: str) -> str:
        log = member.root / "server.log"
        return (
            f"ZooKeeper server {member.myid} ({member.address}) {what}; "
            f"last lines of {log}:\n{log_tail(log)}"
        )
