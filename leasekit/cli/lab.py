"""``leasekit lab``: JupyterLab on a working copy of the shipped notebooks, its kernels on this
ZooKeeper and warehouse.

JupyterLab serves ``~/leasekit-notebooks`` (or ``--notebooks DIR``), never the package's own
notebooks: the shipped ones are copied there when missing and kept up to date while untouched;
an edited copy is never overwritten (``cli.workcopy``). Outputs and autosaves stay there.

The server runs with this Python (``python -m jupyterlab``), so its ``python3`` kernel is the
one of the same environment and imports leasekit. Its environment gets ``LEASEKIT_WAREHOUSE``
(an absolute path: a kernel's working directory is its notebook's) and, when a ZooKeeper was
named (``--zookeeper`` or ``LEASEKIT_ZOOKEEPER``), ``LEASEKIT_ZOOKEEPER``; so ``lk.connect()``
in a notebook opens the same store. Without one, the embedded server of the (local)
warehouse is started here, and the kernels' ``connect()`` reuses it (or starts it again if it
was stopped meanwhile). The namespace has no environment variable: notebooks pass
``namespace=`` to ``connect``.

Once the server answers, its URL (with the token) is printed. Ctrl-C, SIGTERM or SIGHUP stop
JupyterLab and its kernels; the command exits with the server's exit code. Options after
``--`` go to JupyterLab as they are (``-- --IdentityProvider.token=...``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from .common import add_command
from .output import emit, format_fields, note
from .workcopy import DEFAULT_DIR, Copied, prepare

__all__ = ["register"]

_READY_TIMEOUT = 120.0  # seconds to wait for the server's info file before giving up printing it
_POLL = 0.1


def _warehouse(args: argparse.Namespace) -> Any:
    from ..connection import DEFAULT_WAREHOUSE
    from ..warehouse import Warehouse

    return Warehouse(args.warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE)


def _store(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """What the kernels will connect to, and the environment that tells them."""
    warehouse = _warehouse(args)
    env = dict(os.environ, LEASEKIT_WAREHOUSE=warehouse.location)
    zookeeper = args.zookeeper or os.environ.get("LEASEKIT_ZOOKEEPER") or None
    fields: dict[str, Any] = {
        "zookeeper": zookeeper,
        "embedded": zookeeper is None,
        "warehouse": warehouse.location,
        "namespace": args.namespace,
    }
    if zookeeper is not None:
        env["LEASEKIT_ZOOKEEPER"] = zookeeper
        return fields, env
    if not warehouse.is_local:
        raise InvalidArgumentError(
            f"the embedded ZooKeeper needs a local warehouse; pass --zookeeper HOSTS for the "
            f"warehouse {warehouse.location}"
        )
    from .. import embedded

    data_dir = os.path.join(warehouse.location, "_zookeeper")
    fields["zookeeper"] = embedded.ensure_running(data_dir)
    fields["zookeeper_data_dir"] = os.path.realpath(data_dir)
    env.pop("LEASEKIT_ZOOKEEPER", None)  # connect() finds the server through the warehouse
    return fields, env


def _command(args: argparse.Namespace, notebooks: str) -> list[str]:
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={notebooks}"]
    if args.port is not None:
        cmd.append(f"--ServerApp.port={args.port}")
    if args.ip is not None:
        cmd.append(f"--ServerApp.ip={args.ip}")
    if args.no_browser:
        cmd.append("--ServerApp.open_browser=False")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # JupyterLab refuses root without it
        cmd.append("--ServerApp.allow_root=True")
    extra = list(args.jupyter_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return cmd + extra


def _lab_url(info: dict[str, Any]) -> str:
    url = f"{str(info.get('url') or '').rstrip('/')}/lab"
    token = info.get("token")
    return f"{url}?{urllib.parse.urlencode({'token': token})}" if token else url


def _server_info(info_file: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(info_file.read_text())
    except (OSError, ValueError):
        return None  # not written yet, or being written
    return data if isinstance(data, dict) and data.get("url") else None


@contextlib.contextmanager
def _forward_signals(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Pass Ctrl-C and SIGTERM on to the server (running in its own session, so the terminal's
    Ctrl-C reaches it only through here, once); SIGHUP becomes SIGTERM, a clean stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def forward(signum: int, frame: Any) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    wanted = [signal.SIGINT, signal.SIGTERM] + (
        [signal.SIGHUP] if hasattr(signal, "SIGHUP") else []
    )
    previous = {signum: signal.signal(signum, forward) for signum in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_SAID = {
    "copied": "{name}: copied in",
    "updated": "{name}: updated to the shipped version (the copy was unedited)",
    "beside": "{name}: you edited it, so it was kept; the newer shipped version is {path}",
}


def _working_copy(args: argparse.Namespace) -> str:
    """Prepare the working copy; say what changed in it (on stderr)."""
    done: list[Copied] = prepare(args.notebooks)
    for item in done:
        if item.action in _SAID:
            note(_SAID[item.action].format(name=item.name, path=item.path))
    return os.path.abspath(os.path.expanduser(args.notebooks))


def _lab(args: argparse.Namespace) -> int:
    if args.port is not None and not 0 <= args.port <= 65535:
        raise InvalidArgumentError(f"--port must be between 0 and 65535, got {args.port}")
    notebooks = _working_copy(args)
    fields, env = _store(args)
    fields = {"notebooks": notebooks, **fields}
    if not args.json:
        print(format_fields(fields), flush=True)
        if args.namespace != "leasekit":
            print(f"notebooks connect with lk.connect(namespace={args.namespace!r})", flush=True)

    from jupyter_core.paths import jupyter_runtime_dir

    note("starting JupyterLab ...")
    proc = subprocess.Popen(
        _command(args, notebooks), env=env, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        with _forward_signals(proc):
            info_file = Path(jupyter_runtime_dir()) / f"jpserver-{proc.pid}.json"
            deadline = time.monotonic() + _READY_TIMEOUT
            info = None
            while info is None and proc.poll() is None and time.monotonic() < deadline:
                info = _server_info(info_file)
                if info is None:
                    time.sleep(_POLL)
            if info is not None and proc.poll() is None:
                ready = {"url": _lab_url(info), "pid": proc.pid, **fields}
                emit(args, ready, lambda f: f"JupyterLab (pid {f['pid']}) is at {f['url']}")
                sys.stdout.flush()
            code = proc.wait()
    except BaseException:
        if proc.poll() is None:  # never leave the server behind
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    return code if code >= 0 else 128 - code


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``lab`` to the top-level subcommands."""
    cmd = add_command(
        commands,
        "lab",
        "run JupyterLab on a working copy of the shipped notebooks; its kernels connect to "
        "this ZooKeeper and warehouse (the embedded server is started if needed)",
        common,
        _lab,
        epilog="Options after -- are passed to JupyterLab, e.g. "
        "`leasekit lab --port 8890 -- --IdentityProvider.token=secret`.",
    )
    cmd.add_argument(
        "--notebooks",
        default=DEFAULT_DIR,
        metavar="DIR",
        help=f"the working copy JupyterLab serves: the shipped notebooks are copied there when "
        f"missing, edited copies are never overwritten (default: {DEFAULT_DIR})",
    )
    cmd.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="N",
        help="the port to listen on (default: JupyterLab's, 8888 or the next free)",
    )
    cmd.add_argument(
        "--ip",
        default=None,
        metavar="ADDR",
        help="the address to listen on (default: JupyterLab's, localhost)",
    )
    cmd.add_argument("--no-browser", action="store_true", help="do not open a web browser")
    cmd.add_argument(
        "jupyter_args",
        nargs="*",
        metavar="-- JUPYTER_OPTION",
        help="options passed to JupyterLab as they are",
    )
