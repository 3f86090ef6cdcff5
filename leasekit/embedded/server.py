"""The embedded standalone ZooKeeper server, run from the jars the pyspark wheel ships.

Owns the server's data dir: start (race-free, detached), status, stop and kill.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

from leasekit.embedded.java import find_java
from leasekit.embedded.process import (
    MAIN_CLASS,
    POLL,
    bind_port,
    classpath,
    config_lines,
    four_letter,
    jvm_flags,
    kill_and_wait,
    log_tail,
    parse_version,
    pid_alive,
    probe,
    spawn,
    wait_stopped,
)
from leasekit.errors import IllegalStateError, InvalidArgumentError, ZooKeeperUnavailableError

__all__ = ["MAIN_CLASS", "ServerStatus", "ensure_running", "status", "stop", "kill", "four_letter"]
STATE_FORMAT = 1  # bump when server.json changes incompatibly

_START_ATTEMPTS = 3
LAST_PORT = "last-port"
"""File of the data dir naming the client port of its last server: a start after a stop takes
that port again when it is free, so connections open meanwhile reconnect by themselves."""


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


def ensure_running(data_dir: str | os.PathLike[str], *, timeout: float = 60.0) -> str:
    """Return the address of the server for ``data_dir``, starting one if none runs."""
    if not timeout > 0:
        raise InvalidArgumentError(f"timeout must be positive, got {timeout!r}")
    root = _prepare(data_dir)
    deadline = time.monotonic() + timeout
    with _locked(root, deadline):
        state = _read_state(root)
        preferred = _read_last_port(root)  # after a stop: clients know that port (docs/cli.md)
        if state is not None:
            address = _address(state.port)
            if probe(address, root) == "ours":
                return address
            if _is_our_process(state.pid, root):
                # Started by someone who died before it answered, or hung: give it
                # a bounded chance, then replace it so one data dir has one server.
                grace = min(deadline, time.monotonic() + 15.0)
                if _wait_serving(address, root, state.pid, grace) == "ours":
                    return address
                kill_and_wait(state.pid)
            preferred = state.port
        return _start(root, preferred, deadline)


def status(data_dir: str | os.PathLike[str]) -> ServerStatus | None:
    """Describe the server of ``data_dir``; None when no server was ever recorded."""
    root = Path(data_dir).resolve()
    state = _read_state(root)
    if state is None:
        return None
    address = _address(state.port)
    running = probe(address, root) == "ours"
    version = None
    if running:
        with contextlib.suppress(ZooKeeperUnavailableError):
            version = parse_version(four_letter(address, "srvr"))
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
        answering = probe(address, root) == "ours"
        if not ours and answering:
            raise IllegalStateError(
                f"a server for {root} answers on {address} but pid {state.pid} is not it;"
                " stop it by hand"
            )
        if ours:
            with contextlib.suppress(ProcessLookupError):
                os.kill(state.pid, signal.SIGTERM)
            if not wait_stopped(state.pid, address, root, deadline):
                kill_and_wait(state.pid)
        _write_last_port(root, state.port)  # the next start takes it again when it is free
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
        kill_and_wait(state.pid)
        return True


def _start(root: Path, preferred: int | None, deadline: float) -> str:
    java = find_java()
    jars = classpath()
    failures: list[str] = []
    for attempt in range(_START_ATTEMPTS):
        port = bind_port(preferred) if attempt == 0 and preferred else None
        if port is None and (port := bind_port(0)) is None:
            raise ZooKeeperUnavailableError("no free loopback port for ZooKeeper")
        config = _write_config(root, port)
        argv = [java, *jvm_flags(), "-cp", jars, MAIN_CLASS, str(config)]
        pid = spawn(argv, root / "server.log")
        _write_state(root, pid, port, java, argv)
        address = _address(port)
        outcome = _wait_serving(address, root, pid, deadline)
        if outcome == "ours":
            return address
        kill_and_wait(pid)
        failures.append(f"port {port}: {outcome}")
        if outcome == "timed out":
            break
    raise ZooKeeperUnavailableError(
        f"embedded ZooKeeper for {root} did not start ({'; '.join(failures)});"
        f" last lines of {root / 'server.log'}:\n{log_tail(root / 'server.log')}"
    )


def _wait_serving(address: str, root: Path, pid: int, deadline: float) -> str:
    """Poll until the server serves ``root``: "ours", "exited", "port taken" or "timed out"."""
    while True:
        seen = probe(address, root)
        if seen == "ours":
            return "ours"
        if seen == "other":
            return "port taken"
        if not pid_alive(pid):
            return "exited"
        if time.monotonic() >= deadline:
            return "timed out"
        time.sleep(POLL)


def _write_config(root: Path, port: int) -> Path:
    config = root / "zoo.cfg"
    config.write_text("\n".join(config_lines(root / "data", port)) + "\n", encoding="ascii")
    return config


def _address(port: int) -> str:
    return f"127.0.0.1:{port}"


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
    return pid_alive(pid)


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
                time.sleep(POLL)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _read_last_port(root: Path) -> int | None:
    """The client port the last server of ``root`` had (kept by ``stop``), None if unknown."""
    try:
        port = int((root / LAST_PORT).read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _write_last_port(root: Path, port: int) -> None:
    tmp = root / f"{LAST_PORT}.{os.getpid()}.tmp"
    tmp.write_text(f"{port}\n")
    os.replace(tmp, root / LAST_PORT)


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
