"""Fixtures for the real-browser tests: a JupyterLab server on loopback, Debian's headless
Chromium driven by Playwright, and a notebook helper that opens a notebook, runs it and
saves screenshots under ``artifacts/browser/`` at the repository root.

Nothing here reaches the network: JupyterLab's news and update checks are off, and Chromium
runs without background networking. A missing Chromium or Playwright fails the test (it
does not skip it): ``make test`` installs Debian's ``chromium`` when it is absent.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "artifacts" / "browser"
CHROMIUM = os.environ.get("LEASEKIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_TIMEOUT = 60.0
"""Seconds JupyterLab may take to answer /api/status (it is slow on a loaded 2-core machine)."""
KERNEL_TIMEOUT_MS = 60_000
"""Milliseconds the notebook may take to open, start its kernel and run (first start is slow)."""

# Notification settings that keep JupyterLab from asking about, or fetching, news and updates.
_QUIET_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, so fixtures can tell a failed test at teardown."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120]


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """``artifacts/browser/`` at the repository root: screenshots, server and console logs."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of Debian's Chromium; the test fails, naming the package, when it is not there."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(
            f"Chromium not found at {CHROMIUM}: the browser tests need Debian's `chromium` package "
            "(run `make browser`, or `sudo apt-get install -y chromium`)",
            pytrace=False,
        )
    return CHROMIUM


class JupyterLab:
    """A running JupyterLab server: its base URL, token and notebook directory."""

    def __init__(self, url: str, token: str, root: Path, process: subprocess.Popen, log: Path):
        self.url = url
        self.token = token
        self.root = root
        self.process = process
        self.log = log

    def api(self, path: str, method: str = "GET", timeout: float = 5.0) -> object:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?reset&token={self.token}"

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])


def _isolated_env(home: Path) -> dict[str, str]:
    """The environment of the server: Jupyter's user directories in ``home``, so no user
    configuration, kernel spec or workspace of this machine comes in; the venv's lab
    extensions and its ``python3`` kernel are still found through sys.prefix."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
    for name in ("config", "data", "runtime", "ipython"):
        (home / name).mkdir(parents=True, exist_ok=True)
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        IPYTHONDIR=str(home / "ipython"),
        JUPYTER_PLATFORM_DIRS="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def _stop_server(lab: JupyterLab) -> None:
    """Shut the server down with its kernels: the REST shutdown first, then SIGTERM, then
    SIGKILL of the process group the server (and every kernel it started) runs in."""
    proc = lab.process
    if proc.poll() is None:
        try:
            lab.api("/api/shutdown", method="POST")
        except (OSError, urllib.error.URLError, ValueError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    try:  # kernels left behind by a server that did not shut down cleanly
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory, artifacts) -> Iterator[JupyterLab]:
    """A JupyterLab server on 127.0.0.1 with a random token, for the whole session."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "notebooks"
    root.mkdir()
    settings = base / "user-settings"
    for rel, values in _QUIET_SETTINGS.items():
        path = settings / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    workspaces = base / "workspaces"
    workspaces.mkdir()

    port = _free_port()
    token = secrets.token_hex(24)
    log = artifacts / "jupyterlab.log"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.open_browser=False",
        "--ServerApp.allow_remote_access=False",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        "--LabApp.expose_app_in_browser=True",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={workspaces}",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # CI containers run as root
        cmd.append("--ServerApp.allow_root=True")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=_isolated_env(base / "home"),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    lab = JupyterLab(f"http://127.0.0.1:{port}", token, root, proc, log)
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"JupyterLab exited with code {proc.returncode}; log {log}:\n{lab.log_tail()}",
                    pytrace=False,
                )
            try:
                lab.api("/api/status", timeout=2)
                break
            except (OSError, urllib.error.URLError, ValueError):
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"JupyterLab did not answer /api/status within "
                        f"{SERVER_START_TIMEOUT:.0f} s; log {log}:\n{lab.log_tail()}",
                        pytrace=False,
                    )
                time.sleep(0.25)
        yield lab
    finally:
        _stop_server(lab)


@pytest.fixture(scope="session")
def browser(chromium) -> Iterator[object]:
    """Headless Chromium (Debian's, by path; Playwright's own browsers are never used)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(
            "the browser tests need the `playwright` Python package (pip install -e '.[dev]')",
            pytrace=False,
        )
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


class Notebook:
    """A notebook opened in JupyterLab in a Playwright page."""

    def __init__(self, page, lab: JupyterLab, shots: Path, prefix: str):
        self.page = page
        self.lab = lab
        self.shots = shots
        self.prefix = prefix
        self._shot = 0

    def screenshot(self, label: str, element=None) -> Path:
        """A full-page PNG, numbered in the order taken: ``<test>-<n>-<label>.png``. The
        notebook scrolls inside the page, so ``element`` (a locator) is scrolled into view
        first and also saved on its own, whole, as ``<test>-<n>-<label>-element.png``."""
        self._shot += 1
        path = self.shots / f"{self.prefix}-{self._shot}-{_slug(label)}.png"
        if element is not None:
            element.scroll_into_view_if_needed()
            element.screenshot(path=str(path.with_name(f"{path.stem}-element.png")))
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def open(self, cells: list[str], name: str) -> None:
        """Write a notebook of these code cells and open it; returns once its kernel is idle."""
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
        }
        nbformat.write(nb, self.lab.root / name)
        self.page.goto(self.lab.notebook_url(name), wait_until="domcontentloaded")
        self.page.wait_for_function(
            """name => {
                const app = window.jupyterapp;
                if (!app || !app.shell) return false;
                const w = app.shell.currentWidget;
                if (!w || !w.context || w.context.path !== name || !w.context.isReady) return false;
                const kernel = w.sessionContext && w.sessionContext.session
                    && w.sessionContext.session.kernel;
                return !!kernel && kernel.status === 'idle';
            }""",
            arg=name,
            timeout=KERNEL_TIMEOUT_MS,
            polling=250,
        )

    def run_all(self) -> None:
        """Run every cell (the ``notebook:run-all-cells`` command, whose promise settles once
        the cells have run or one has failed), then wait for the kernel to be idle again."""
        self.page.evaluate(
            """async () => {
                await window.jupyterapp.commands.execute('notebook:run-all-cells');
            }"""
        )
        self.page.wait_for_function(
            """() => {
                const w = window.jupyterapp.shell.currentWidget;
                const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
                if (!kernel || kernel.status !== 'idle') return false;
                const code = w.content.widgets.filter(c => c.model.type === 'code');
                const failed = code.some(c => c.model.outputs.toJSON()
                                                .some(o => o.output_type === 'error'));
                return failed || code.every(c => c.model.executionCount !== null);
            }""",
            timeout=KERNEL_TIMEOUT_MS,
            polling=250,
        )

    def errors(self, pending: bool = True) -> list[str]:
        """Every error the notebook shows: exceptions raised by cells, tracebacks written to
        stderr, ipywidgets' error views and, with ``pending``, "Loading widget…" placeholders
        (an error once the widget should have rendered). Other stderr output is no error."""
        return self.page.evaluate(
            """pending => {
                const out = [];
                const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
                if (w && w.content && w.content.widgets) {
                    for (const cell of w.content.widgets) {
                        if (cell.model.type !== 'code') continue;
                        for (const o of cell.model.outputs.toJSON()) {
                            if (o.output_type === 'error') {
                                out.push(`${o.ename}: ${o.evalue}`);
                            }
                        }
                    }
                }
                const stderr = '.jp-OutputArea-output'
                    + '[data-mime-type="application/vnd.jupyter.stderr"]';
                for (const el of document.querySelectorAll(stderr)) {
                    if (el.textContent.includes('Traceback')) out.push(el.textContent.trim());
                }
                for (const el of document.querySelectorAll('.jupyter-widgets-error-widget')) {
                    out.push('widget error: ' + el.textContent.trim());
                }
                const shown = '.jp-OutputArea-output.jupyter-widgets,'
                    + '.jp-OutputArea-output .jupyter-widgets';
                for (const el of document.querySelectorAll(shown)) {
                    if (el.textContent.trim().startsWith('Error displaying widget')) {
                        out.push(el.textContent.trim());
                    }
                }
                for (const el of document.querySelectorAll('.jp-OutputArea-output')) {
                    if (pending && el.textContent.includes('Loading widget')) {
                        out.push('widget not rendered: ' + el.textContent.trim());
                    }
                }
                return [...new Set(out)];
            }""",
            pending,
        )

    def wait_for_widget(self, selector: str, timeout_ms: int = KERNEL_TIMEOUT_MS):
        """The locator of ``selector`` once visible; fails at once when the notebook shows an
        error instead, and with the notebook's errors when it does not appear in time."""
        deadline = time.monotonic() + timeout_ms / 1000
        locator = self.page.locator(selector)
        while True:
            if locator.count() and locator.first.is_visible():
                return locator
            errors = self.errors(pending=False)
            if errors:
                pytest.fail(
                    f"{selector} did not render; the notebook shows:\n" + "\n\n".join(errors),
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{selector} did not render within {timeout_ms / 1000:.0f} s; the "
                    "notebook shows:\n" + "\n\n".join(self.errors() or ["no error"]),
                    pytrace=False,
                )
            self.page.wait_for_timeout(250)


@pytest.fixture
def notebook(request, browser, jupyter_lab, artifacts) -> Iterator[Notebook]:
    """A fresh page; a failing test leaves a full-page screenshot and the page's console log
    in the artifacts folder, and its message points at them and at the server log."""
    context = browser.new_context(viewport={"width": 1400, "height": 1400})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
    page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))
    page.on(
        "request",
        lambda r: (
            None
            if r.url.startswith((jupyter_lab.url, "data:", "blob:"))
            else console.append(f"[request off the server] {r.url}")
        ),
    )
    prefix = _slug(request.node.name)
    for old in artifacts.glob(f"{prefix}-*"):
        old.unlink()
    nb = Notebook(page, jupyter_lab, artifacts, prefix)
    try:
        yield nb
    finally:
        report = getattr(request.node, "rep_call", None)
        setup = getattr(request.node, "rep_setup", None)
        failed = (report is not None and report.failed) or (setup is not None and setup.failed)
        (artifacts / f"{prefix}-console.log").write_text("\n".join(console) + "\n")
        if failed:
            try:
                shot = nb.screenshot("failure")
                sys.stderr.write(
                    f"\nscreenshot of the failure: {shot}\nserver log: {jupyter_lab.log}\n"
                )
            except Exception as exc:  # the page may be gone; the report matters more
                sys.stderr.write(f"\nno failure screenshot: {exc}\n")
        context.close()
        _shutdown_kernels(jupyter_lab)  # each test's notebook starts a kernel of its own


def _shutdown_kernels(lab: JupyterLab) -> None:
    try:
        for kernel in lab.api("/api/kernels"):
            lab.api(f"/api/kernels/{kernel['id']}", method="DELETE", timeout=10)
    except (OSError, urllib.error.URLError, ValueError):
        pass  # the server is gone: its teardown kills what is left
