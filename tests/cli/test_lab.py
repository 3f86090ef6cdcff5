"""``leasekit lab`` (docs/cli.md: JupyterLab on a working copy of notebooks/): a real JupyterLab
started as a subprocess on loopback with a token; it serves a working copy of the shipped
notebooks (never the package's own files), its ``python3``
kernel runs this environment's Python, imports leasekit and connects to the command's
ZooKeeper and warehouse; with no ZooKeeper named, the warehouse's embedded server is
started and the kernels reuse it."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from leasekit import embedded
from leasekit.cli.workcopy import shipped_dir

READY_TIMEOUT = 60.0
SHIPPED = sorted(p.name for p in shipped_dir().glob("*.ipynb"))

KERNEL_CODE = """
import json, os, sys
import leasekit as lk
with lk.connect(namespace={namespace!r}) as c:
    print(json.dumps({{"prefix": sys.prefix, "cwd": os.getcwd(), "zookeeper": c.zookeeper,
                      "warehouse": c.warehouse, "tables": c.tables()}}))
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path) -> dict[str, str]:
    """No LEASEKIT_* setting from outside; Jupyter's user directories in ``home`` so no
    configuration or kernel spec of this machine comes in (the venv's are found through
    sys.prefix)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("LEASEKIT_", "JUPYTER", "JPY_"))
    }
    for name in ("config", "data", "runtime", "ipython"):
        (home / name).mkdir(parents=True, exist_ok=True)
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        IPYTHONDIR=str(home / "ipython"),
        HOME=str(home),
        JUPYTER_PLATFORM_DIRS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


class Lab:
    """A running ``leasekit lab``: its stdout lines as they come, the server's URL and token."""

    def __init__(self, proc: subprocess.Popen, log: Path, token: str):
        self.proc = proc
        self.log = log
        self.token = token
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        self.base = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def next_line(self, deadline: float) -> str:
        while True:
            if time.monotonic() > deadline:
                pytest.fail(
                    f"leasekit lab printed no URL in time; output {self.output}; "
                    f"log:\n{self.log_tail()}",
                    pytrace=False,
                )
            try:
                line = self.lines.get(timeout=0.25)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    pytest.fail(
                        f"leasekit lab exited with {self.proc.returncode}; output "
                        f"{self.output}; log:\n{self.log_tail()}",
                        pytrace=False,
                    )
                continue
            self.output.append(line)
            return line

    def wait_answering(self, base: str, deadline: float) -> dict:
        self.base = base
        while True:
            try:
                return self.api("/api/status", timeout=2)
            except (OSError, urllib.error.URLError, ValueError):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    pytest.fail(
                        f"JupyterLab did not answer /api/status; log:\n{self.log_tail()}",
                        pytrace=False,
                    )
                time.sleep(0.2)

    def api(self, path: str, method: str = "GET", body: dict | None = None, timeout: float = 10.0):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.base}{path}?token={self.token}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
        return json.loads(text) if text else None

    def run_in_kernel(self, notebook: str, code: str, timeout: float = 60.0) -> str:
        """Start a ``python3`` kernel for ``notebook`` (it runs in the notebook's directory, as
        when the notebook is opened) through the REST API, execute ``code`` over the kernel
        websocket, return its stdout, shut the kernel down."""
        import websocket  # websocket-client, a dependency of jupyter_server

        kernel = self.api("/api/kernels", method="POST", body={"name": "python3", "path": notebook})
        try:
            url = f"{self.base.replace('http://', 'ws://')}/api/kernels/{kernel['id']}/channels?token={self.token}"
            ws = websocket.create_connection(url, timeout=timeout)
            try:
                msg_id = uuid.uuid4().hex
                ws.send(
                    json.dumps(
                        {
                            "header": {
                                "msg_id": msg_id,
                                "msg_type": "execute_request",
                                "username": "test",
                                "session": uuid.uuid4().hex,
                                "date": "",
                                "version": "5.3",
                            },
                            "parent_header": {},
                            "metadata": {},
                            "channel": "shell",
                            "buffers": [],
                            "content": {
                                "code": code,
                                "silent": False,
                                "store_history": False,
                                "user_expressions": {},
                                "allow_stdin": False,
                                "stop_on_error": True,
                            },
                        }
                    )
                )
                out, errors = [], []
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    raw = ws.recv()
                    if not isinstance(raw, str):
                        continue
                    msg = json.loads(raw)
                    if msg.get("parent_header", {}).get("msg_id") != msg_id:
                        continue
                    kind, content = msg["msg_type"], msg["content"]
                    if kind == "stream":
                        out.append(content["text"])
                    elif kind == "error":
                        errors.append(f"{content['ename']}: {content['evalue']}")
                    elif kind == "status" and content["execution_state"] == "idle":
                        break
                assert not errors, errors
                return "".join(out)
            finally:
                ws.close()
        finally:
            with contextlib.suppress(OSError, urllib.error.URLError):
                self.api(f"/api/kernels/{kernel['id']}", method="DELETE")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM to ``leasekit lab``, which passes it on to JupyterLab (a clean stop that
        shuts its kernels down); SIGKILL of both process groups if that did not end them."""
        proc, server = self.proc, self.server_pid()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        for pgid in (proc.pid, server):
            if pgid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=10)

    def server_pid(self) -> int | None:
        for line in self.output:
            if line.startswith("JupyterLab (pid "):
                return int(line.split()[2].rstrip(")"))
            with contextlib.suppress(ValueError, TypeError):
                if '"pid":' in line:
                    return int(line.split(":")[1].strip().rstrip(","))
        return None


@pytest.fixture
def start_lab(tmp_path) -> Iterator:
    """``start_lab(*argv, cwd=...)``: ``python -m leasekit.cli *argv lab ...`` with stdout read
    line by line and JupyterLab's log in a file; every one started is stopped at the end."""
    started: list[Lab] = []

    def start(*argv: str, cwd: Path, token: str) -> Lab:
        log = tmp_path / f"lab-{len(started)}.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "leasekit.cli", *argv],
                cwd=cwd,
                env=_env(tmp_path / "jupyter-home"),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,
            )
        lab = Lab(proc, log, token)
        started.append(lab)
        return lab

    yield start
    for lab in started:
        lab.stop()


def _notebooks(path: Path) -> Path:
    path.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import leasekit as lk")])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path / "hello.ipynb")
    return path


def test_lab_serves_the_notebooks_and_its_kernel_reaches_the_named_zookeeper(
    tmp_path, start_lab, conn, zookeeper, namespace
):
    conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    notebooks = _notebooks(tmp_path / "nbs")
    port, token = _free_port(), uuid.uuid4().hex
    lab = start_lab(
        "--zookeeper",
        zookeeper,
        "--warehouse",
        conn.warehouse,
        "lab",
        "--namespace",
        namespace,
        "--notebooks",
        "nbs",
        "--port",
        str(port),
        "--ip",
        "127.0.0.1",
        "--no-browser",
        "--",
        f"--IdentityProvider.token={token}",
        "--ServerApp.port_retries=0",
        cwd=tmp_path,
        token=token,
    )
    deadline = time.monotonic() + READY_TIMEOUT
    while not (line := lab.next_line(deadline)).startswith("JupyterLab (pid "):
        pass
    assert line.endswith(f" is at http://127.0.0.1:{port}/lab?token={token}")
    fields = dict(
        ln.split(None, 1) for ln in lab.output[:-1] if not ln.startswith("notebooks connect")
    )
    assert fields["notebooks"] == str(notebooks) and fields["zookeeper"] == zookeeper
    assert fields["embedded"] == "false" and fields["warehouse"] == conn.warehouse
    assert f"notebooks connect with lk.connect(namespace={namespace!r})" in lab.output
    lab.wait_answering(f"http://127.0.0.1:{port}", deadline)

    contents = lab.api("/api/contents")
    served = sorted((c["name"], c["type"]) for c in contents["content"])
    assert served == sorted([("hello.ipynb", "notebook")] + [(n, "notebook") for n in SHIPPED])
    specs = lab.api("/api/kernelspecs")
    assert specs["default"] == "python3"
    assert specs["kernelspecs"]["python3"]["spec"]["argv"][0] in (
        "python",
        "python3",
        sys.executable,
    )
    # the kernel runs this environment's Python, imports leasekit, and lk.connect() without a
    # ZooKeeper or warehouse argument opens the store the command was given
    seen = json.loads(lab.run_in_kernel("hello.ipynb", KERNEL_CODE.format(namespace=namespace)))
    assert seen["prefix"] == sys.prefix
    assert seen["zookeeper"] == zookeeper and seen["warehouse"] == conn.warehouse
    assert seen["tables"] == ["orders"] and seen["cwd"] == str(notebooks)
    with pytest.raises(urllib.error.HTTPError) as denied:  # the token is required
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents", timeout=5)
    assert denied.value.code == 403
    # SIGTERM to the command reaches JupyterLab, which stops cleanly; the command exits with it
    server = lab.server_pid()
    lab.stop()
    assert lab.proc.returncode == 0
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)


def test_lab_without_zookeeper_starts_the_warehouse_embedded_server(tmp_path, start_lab):
    # the default working copy is ~/leasekit-notebooks, made from the shipped notebooks; a
    # relative warehouse reaches the kernels (whose cwd is the working copy) as an absolute path
    notebooks = _notebooks(tmp_path / "jupyter-home" / "leasekit-notebooks")
    warehouse = tmp_path / "wh"
    data_dir = warehouse / "_zookeeper"
    port, token = _free_port(), uuid.uuid4().hex
    try:
        lab = start_lab(
            "lab",
            "--warehouse",
            "wh",
            "--json",
            "--port",
            str(port),
            "--ip",
            "127.0.0.1",
            "--no-browser",
            "--",
            f"--IdentityProvider.token={token}",
            "--ServerApp.port_retries=0",
            cwd=tmp_path,
            token=token,
        )
        deadline = time.monotonic() + READY_TIMEOUT
        text = ""
        while True:
            text += lab.next_line(deadline) + "\n"
            with contextlib.suppress(ValueError):
                doc = json.loads(text)
                break
        server = embedded.status(data_dir)
        assert server is not None and server.running
        assert doc["embedded"] is True and doc["zookeeper"] == server.address
        assert doc["warehouse"] == str(warehouse) and doc["notebooks"] == str(notebooks)
        assert sorted(p.name for p in notebooks.glob("*.ipynb")) == sorted(
            ["hello.ipynb", *SHIPPED]
        )
        assert doc["url"] == f"http://127.0.0.1:{port}/lab?token={token}"
        lab.wait_answering(f"http://127.0.0.1:{port}", deadline)
        seen = json.loads(
            lab.run_in_kernel("hello.ipynb", KERNEL_CODE.format(namespace="leasekit"))
        )
        assert seen["zookeeper"] == server.address and seen["warehouse"] == str(warehouse)
        assert seen["prefix"] == sys.prefix and seen["cwd"] == str(notebooks)
    finally:
        embedded.stop(data_dir)


def test_importing_the_cli_does_not_import_jupyter():
    code = (
        "import sys, leasekit.cli; "
        "print(sorted(m for m in ('jupyterlab', 'jupyter_server', 'jupyter_core', 'tornado') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
