"""The server processes' plumbing, shared by the embedded server and the ensemble: the
classpath from pyspark's jars, zoo.cfg, free ports, detached spawning, four-letter probes,
waiting and killing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import signal
import socket
import time
from pathlib import Path

from leasekit.errors import InvalidArgumentError, ZooKeeperUnavailableError

__all__ = [
    "MAIN_CLASS",
    "JVM_FLAGS",
    "jvm_flags",
    "POLL",
    "four_letter",
    "probe",
    "parse_version",
    "config_lines",
    "classpath",
    "bind_port",
    "spawn",
    "pid_alive",
    "wait_stopped",
    "kill_and_wait",
    "log_tail",
]

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

# Minimal classpath for a standalone NIO server with log4j2 logging.
_REQUIRED_JARS = (
    "zookeeper-[0-9]*.jar",
    "zookeeper-jute-*.jar",
    "slf4j-api-*.jar",
    "log4j-slf4j2-impl-*.jar",
    "log4j-api-*.jar",
    "log4j-core-*.jar",
    "metrics-core-*.jar",
    "snappy-java-*.jar",
)
_OPTIONAL_JARS = ("commons-io-*.jar", "audience-annotations-*.jar")

JVM_FLAGS = (
    # ZooKeeper keeps its last 500 transactions on the heap (zookeeper.commitLogCount, which
    # it never lowers below 500): acquires of 100,000 pins send ~1 MB transactions, and a
    # few of them filled a 1 GB heap. -Xmx is a limit, not a reservation.
    "-Xmx2g",
    "-XX:+UseSerialGC",
    "-Djava.net.preferIPv4Stack=true",
    "-Dzookeeper.admin.enableServer=false",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dlog4j2.level=WARN",
)


def jvm_flags() -> list[str]:
    """``JVM_FLAGS``, then the flags of ``SERVER_JVMFLAGS`` (the variable ZooKeeper's own
    ``zkServer.sh`` reads): given later, they win where both set the same option.

    Raises:
        InvalidArgumentError: ``SERVER_JVMFLAGS`` is not valid shell words.
    """
    extra = os.environ.get("SERVER_JVMFLAGS", "")
    try:
        return [*JVM_FLAGS, *shlex.split(extra)]
    except ValueError as exc:
        raise InvalidArgumentError(f"SERVER_JVMFLAGS {extra!r}: {exc}") from None


_NOT_SERVING = "not currently serving"
POLL = 0.05
"""Seconds between polls of a starting or stopping server."""


def four_letter(address: str, cmd: str, *, timeout: float = 1.0) -> str:
    """Send a ZooKeeper four-letter word to ``address`` ("host:port") and return the reply."""
    if len(cmd) != 4 or not cmd.isascii() or not cmd.isalpha():
        raise InvalidArgumentError(f"not a four-letter word: {cmd!r}")
    host, port = _split_address(address)
    chunks: list[bytes] = []
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(cmd.encode("ascii"))
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        raise ZooKeeperUnavailableError(f"{cmd} to {address} failed: {exc}") from exc
    return b"".join(chunks).decode("utf-8", errors="replace")


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgumentError(f"address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


def probe(address: str, root: Path) -> str:
    """Classify the server at ``address``: "ours", "starting", "other" or "down"."""
    try:
        if four_letter(address, "ruok") != "imok":
            return "down"
        conf = four_letter(address, "conf")
    except ZooKeeperUnavailableError:
        return "down"
    if _NOT_SERVING in conf:
        return "starting"
    expected = str(root / "data" / "version-2")
    for line in conf.splitlines():
        if line.startswith("dataDir="):
            return "ours" if line[len("dataDir=") :].strip() == expected else "other"
    return "starting"


def parse_version(srvr: str) -> str | None:
    for line in srvr.splitlines():
        if line.startswith("Zookeeper version:"):
            full = line.split(":", 1)[1].strip()
            return full.split(",", 1)[0].split("-", 1)[0]
    return None


def config_lines(data_dir: Path, port: int) -> list[str]:
    """zoo.cfg settings of a leasekit server (standalone, or one member of an ensemble)."""
    return [
        # Sessions expire on tick boundaries: a 500 ms tick lets a consumer's session_timeout
        # (its group liveness) be as short as 1 s and end within half a second of it, while
        # leases and clients may still ask for up to 2 minutes.
        "tickTime=500",
        "minSessionTimeout=1000",
        "maxSessionTimeout=120000",
        # Properties files are ISO-8859-1 with \uXXXX escapes, as JSON strings are.
        f"dataDir={json.dumps(str(data_dir))[1:-1]}",
        f"clientPort={port}",
        "clientPortAddress=127.0.0.1",
        "maxClientCnxns=0",
        "admin.enableServer=false",
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,conf",
        "autopurge.snapRetainCount=3",
        "autopurge.purgeInterval=1",
    ]


def classpath() -> str:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperUnavailableError(
            "pyspark is not installed; its jars run the ZooKeeper server"
        )
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    entries: list[str] = []
    for pattern in _REQUIRED_JARS + _OPTIONAL_JARS:
        matches = sorted(jars.glob(pattern))
        if matches:
            entries.append(str(matches[-1]))
        elif pattern in _REQUIRED_JARS:
            raise ZooKeeperUnavailableError(f"no {pattern} in {jars}; reinstall pyspark")
    return os.pathsep.join(entries)


def bind_port(port: int) -> int | None:
    """Return ``port`` (0: any free one) if it can be bound on loopback now, else None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as the server uses it, so TIME_WAIT leftovers do not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return None
        return int(sock.getsockname()[1])


def spawn(argv: list[str], log_path: Path) -> int:
    """Start ``argv`` in its own session, detached from the caller; return its pid."""
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    # Python ignores SIGPIPE and callers may ignore others; the server gets defaults.
    defaults = {signal.SIGPIPE, signal.SIGHUP, signal.SIGINT, signal.SIGTERM}
    return os.posix_spawn(
        argv[0],
        argv,
        dict(os.environ),
        file_actions=actions,
        setsid=True,
        setsigdef=defaults,
        setsigmask=(),
    )


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; reaps it if it is our exited child; zombies count as gone."""
    try:
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return Path(f"/proc/{pid}").exists() or not Path("/proc").is_dir()
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def wait_stopped(pid: int, address: str, root: Path, deadline: float) -> bool:
    while pid_alive(pid) or probe(address, root) == "ours":
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL)
    return True


def kill_and_wait(pid: int, timeout: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(POLL)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_bytes()[-16384:].decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"
