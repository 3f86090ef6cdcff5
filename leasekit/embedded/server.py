"""The embedded standalone ZooKeeper server, run from the jars the pyspark wheel ships.

Owns the server's data dir: start (race-free, detached), status, stop and kill.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from leasekit.embedded.java import find_java
from leasekit.errors import IllegalStateError, InvalidArgumentError, ZooKeeperUnavailableError

__all__ = ["ServerStatus", "ensure_running", "status", "stop", "kill", "four_letter"]

MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
STATE_FORMAT = 1  # bump when server.json changes incompatibly

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

_JVM_FLAGS = (
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

_NOT_SERVING = "not currently serving"
_START_ATTEMPTS = 3
_POLL = 0.05


class ServerStatus(NamedTuple):
    """What is known about the embedded server of one data dir."""

    pid: int
    """Process id recorded when the server was started."""
    address: str
    """Client address, ``"127.0.0.1:PORT"``."""
    data_dir: str
    """Absolute path of the data dir."""
    started_at: datetime
    """When the server was started (UTC)."""
    running: bool
    """True when the server answers on its port and serves this data dir."""
    version: str | None
    """ZooKeeper version from ``srvr`` (for example ``"3.9.5"``); None when not running."""


class _State(NamedTuple):
    pid: int
    port: int
    started_at: datetime


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


def ensure_running(data_dir: str | os.PathLike[str], *, timeout: float = 60.0) -> str:
    """Return the address of the server for ``data_dir``, starting one if none runs."""
    if not timeout > 0:
        raise InvalidArgumentError(f"timeout must be positive, got {timeout!r}")
    root = _prepare(data_dir)
    deadline = time.monotonic() + timeout
    with _locked(root, deadline):
        state = _read_state(root)
        preferred = None
        if state is not None:
            address = _address(state.port)
            if _probe(address, root) == "ours":
                return address
            if _is_our_process(state.pid, root):
                # Started by someone who died before it answered, or hung: give it
                # a bounded chance, then replace it so one data dir has one server.
                grace = min(deadline, time.monotonic() + 15.0)
                if _wait_serving(address, root, state.pid, grace) == "ours":
                    return address
                _kill_and_wait(state.pid)
            preferred = state.port
        return _start(root, preferred, deadline)


def status(data_dir: str | os.PathLike[str]) -> ServerStatus | None:
    """Describe the server of ``data_dir``; None when no server was ever recorded."""
    root = Path(data_dir).resolve()
    state = _read_state(root)
    if state is None:
        return None
    address = _address(state.port)
    running = _probe(address, root) == "ours"
    version = None
    if running:
        with contextlib.suppress(ZooKeeperUnavailableError):
            version = _parse_version(four_letter(address, "srvr"))
    return ServerStatus(state.pid, address, str(root), state.started_at, running, version)


def stop(data_dir: str | os.PathLike[str], *, timeout: float = 30.0) -> bool:
    """Stop the server of ``data_dir`` (SIGTERM, SIGKILL after ``timeout``); True if one ran."""
    root = Path(data_dir).resolve()
    if not root.is_dir():
        return False
    deadline = time.monotonic() + max(timeout, 0.0)
    with _locked(root, deadline + 10.0):
        state = _read_state(root)
        if state is None:
            return False
        address = _address(state.port)
        ours = _is_our_process(state.pid, root)
        answering = _probe(address, root) == "ours"
        if not ours and answering:
            raise IllegalStateError(
                f"a server for {root} answers on {address} but pid {state.pid} is not it;"
                " stop it by hand"
            )
        if ours:
            with contextlib.suppress(ProcessLookupError):
                os.kill(state.pid, signal.SIGTERM)
            if not _wait_stopped(state.pid, address, root, deadline):
                _kill_and_wait(state.pid)
        (root / "server.json").unlink(missing_ok=True)
        return ours


def kill(data_dir: str | os.PathLike[str]) -> bool:
    """SIGKILL the server of ``data_dir`` without cleanup (state kept); True if one ran."""
    root = Path(data_dir).resolve()
    if not root.is_dir():
        return False
    with _locked(root, time.monotonic() + 30.0):
        state = _read_state(root)
        if state is None or not _is_our_process(state.pid, root):
            return False
        _kill_and_wait(state.pid)
        return True


def _start(root: Path, preferred: int | None, deadline: float) -> str:
    java = find_java()
    classpath = _classpath()
    failures: list[str] = []
    for attempt in range(_START_ATTEMPTS):
        port = _bind_port(preferred) if attempt == 0 and preferred else None
        if port is None and (port := _bind_port(0)) is None:
            raise ZooKeeperUnavailableError("no free loopback port for ZooKeeper")
        config = _write_config(root, port)
        argv = [java, *_JVM_FLAGS, "-cp", classpath, MAIN_CLASS, str(config)]
        pid = _spawn(argv, root / "server.log")
        _write_state(root, pid, port, java, argv)
        address = _address(port)
        outcome = _wait_serving(address, root, pid, deadline)
        if outcome == "ours":
            return address
        _kill_and_wait(pid)
        failures.append(f"port {port}: {outcome}")
        if outcome == "timed out":
            break
    raise ZooKeeperUnavailableError(
        f"embedded ZooKeeper for {root} did not start ({'; '.join(failures)});"
        f" last lines of {root / 'server.log'}:\n{_log_tail(root / 'server.log')}"
    )


def _spawn(argv: list[str], log_path: Path) -> int:
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


def _wait_serving(address: str, root: Path, pid: int, deadline: float) -> str:
    """Poll until the server serves ``root``: "ours", "exited", "port taken" or "timed out"."""
    while True:
        probe = _probe(address, root)
        if probe == "ours":
            return "ours"
        if probe == "other":
            return "port taken"
        if not _pid_alive(pid):
            return "exited"
        if time.monotonic() >= deadline:
            return "timed out"
        time.sleep(_POLL)


def _write_config(root: Path, port: int) -> Path:
    config = root / "zoo.cfg"
    config.write_text("\n".join(config_lines(root / "data", port)) + "\n", encoding="ascii")
    return config


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


def _classpath() -> str:
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


def _bind_port(port: int) -> int | None:
    """Return ``port`` (0: any free one) if it can be bound on loopback now, else None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR as the server uses it, so TIME_WAIT leftovers do not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return None
        return int(sock.getsockname()[1])


def _probe(address: str, root: Path) -> str:
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


def _parse_version(srvr: str) -> str | None:
    for line in srvr.splitlines():
        if line.startswith("Zookeeper version:"):
            full = line.split(":", 1)[1].strip()
            return full.split(",", 1)[0].split("-", 1)[0]
    return None


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidArgumentError(f"address must be host:port, got {address!r}")
    return host.strip("[]"), int(port)


def _address(port: int) -> str:
    return f"127.0.0.1:{port}"


def _pid_alive(pid: int) -> bool:
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


def _is_our_process(pid: int, root: Path) -> bool:
    """True if ``pid`` is a live ZooKeeper server run with this data dir's zoo.cfg."""
    if pid <= 0:
        return False
    if Path("/proc").is_dir():  # elsewhere there is no portable way to read the arguments
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        if MAIN_CLASS.encode() not in args or os.fsencode(root / "zoo.cfg") not in args:
            return False
    return _pid_alive(pid)


def _wait_stopped(pid: int, address: str, root: Path, deadline: float) -> bool:
    while _pid_alive(pid) or _probe(address, root) == "ours":
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)
    return True


def _kill_and_wait(pid: int, timeout: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(_POLL)


def _prepare(data_dir: str | os.PathLike[str]) -> Path:
    root = Path(data_dir).expanduser().resolve()
    try:
        (root / "data").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot create ZooKeeper data dir {root}: {exc}") from exc
    return root


@contextlib.contextmanager
def _locked(root: Path, deadline: float) -> Iterator[None]:
    """Hold the exclusive lock on ``<root>/server.lock`` (polling until ``deadline``)."""
    fd = os.open(root / "server.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ZooKeeperUnavailableError(
                        f"timed out waiting for {root / 'server.lock'}"
                    ) from None
                time.sleep(_POLL)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _read_state(root: Path) -> _State | None:
    try:
        raw = json.loads((root / "server.json").read_text())
        started = datetime.fromisoformat(raw["started_at"])
        if started.tzinfo is None:
            started = started.replace(tzinfo=timezone.utc)
        return _State(int(raw["pid"]), int(raw["port"]), started.astimezone(timezone.utc))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_state(root: Path, pid: int, port: int, java: str, argv: list[str]) -> None:
    state = {
        "format": STATE_FORMAT,
        "pid": pid,
        "port": port,
        "started_at": datetime.now(timezone.utc).isoformat(),
        "java": java,
        "cmdline": argv,
    }
    tmp = root / f"server.json.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, root / "server.json")


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_bytes()[-16384:].decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"
