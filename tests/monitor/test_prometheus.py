"""Alerting proven on a real Prometheus (M6): Debian's ``prometheus`` server on
loopback scrapes a ``leasekit exporter`` process every second with the shipped alert rules
loaded; a group falling behind bursty appends fires ``LeasekitGroupBehind`` for that group, and
the alert resolves once the group catches up. The dashboard's expressions all evaluate there.

The shipped rules wait minutes (``for: 10m`` for BEHIND); the copy loaded here has every
``for:`` shortened to 1s, nothing else changed, so the test takes seconds."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.monitor.test_alerting import RULES, _panel_exprs, _substituted
from tests.monitor.test_behind import GROUP, Consumer
from tests.monitor.test_metrics import _run_cli, _serving, _stop

pytestmark = pytest.mark.xdist_group("prometheus")  # it holds a Prometheus server and a port
PROMETHEUS = "/usr/bin/prometheus"
ALERT = "LeasekitGroupBehind"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(tmp_path: Path, exporter: str) -> Path:
    """A configuration scraping ``exporter`` (host:port) every second, with a copy of the
    shipped rules whose ``for:`` are 1s."""
    rules = re.sub(r"(?m)^(\s+for:) \S+$", r"\1 1s", RULES.read_text())
    assert rules.count("for: 1s") == RULES.read_text().count("for:")
    (tmp_path / RULES.name).write_text(rules)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [RULES.name],
        "scrape_configs": [{"job_name": "leasekit", "static_configs": [{"targets": [exporter]}]}],
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def _start_prometheus(tmp_path: Path, config: Path) -> tuple[subprocess.Popen, str]:
    """Prometheus on a free loopback port, its data in ``tmp_path``; (process, API base URL)
    once it is ready."""
    if not Path(PROMETHEUS).exists() and shutil.which("prometheus") is None:
        pytest.fail(
            f"{PROMETHEUS} is missing: install Debian's package 'prometheus' "
            "(apt-get install -y --no-install-recommends prometheus, or `make prometheus`)"
        )
    port = _free_port()
    log = open(tmp_path / "prometheus.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [shutil.which("prometheus") or PROMETHEUS, f"--config.file={config}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return proc, base
        except OSError:
            pass
        assert time.monotonic() < deadline, "Prometheus never got ready"
        time.sleep(0.2)


def _api(base: str, path: str, **query: str) -> dict:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]


def _behind_alert(base: str, namespace: str) -> dict | None:
    """The BEHIND alert of ``GROUP`` in ``namespace`` as Prometheus has it (None: inactive)."""
    for alert in _api(base, "alerts")["alerts"]:
        labels = alert["labels"]
        if (labels["alertname"], labels.get("group"), labels.get("namespace")) == (
            ALERT, GROUP, namespace,
        ):  # fmt: skip
            return alert
    return None


def _stop_prometheus(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_prometheus_fires_and_resolves_behind(conn, target, namespace, tmp_path):
    # M6 through M5 and the shipped rules: BEHIND fires on a real Prometheus for the group
    # falling behind, and resolves when it catches up
    conn.update_settings({"monitor.interval": "1s", "monitor.rate-window": "10s"})
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    exporter = _run_cli(target, "exporter", "--port", "0", "--address", "127.0.0.1",
                        "--interval", "1s")  # fmt: skip
    consumer = Consumer(conn, rate=50)
    prometheus = None
    try:
        url = _serving(exporter)
        prometheus, base = _start_prometheus(tmp_path, _config(tmp_path, url.split("/")[2]))
        consumer.start()
        next_id, deadline = 0, time.monotonic() + 60
        while (alert := _behind_alert(base, namespace)) is None or alert["state"] != "firing":
            assert consumer.error is None, consumer.error
            assert time.monotonic() < deadline, f"{ALERT} never fired: {alert}"
            table.append([{"id": next_id + i, "v": "x"} for i in range(150)])  # ~3x consumed
            next_id += 150
            time.sleep(1)
        assert alert["labels"]["severity"] == "warning"
        assert alert["annotations"]["summary"] == (
            f"Group {GROUP} is falling behind in namespace {namespace}"
        )
        for expr in _panel_exprs():  # every dashboard expression evaluates on Prometheus
            _api(base, "query", query=_substituted(expr).replace('"ns"', f'"{namespace}"'))
        lag = _api(base, "query", query=f'leasekit_group_lag{{namespace="{namespace}"}}')
        assert {r["metric"]["bucket"] for r in lag["result"]} == {"0", "1"}

        consumer.drain.set()  # appends stop; the group catches up
        deadline = time.monotonic() + 60
        while _behind_alert(base, namespace) is not None:
            assert consumer.error is None, consumer.error
            assert time.monotonic() < deadline, f"{ALERT} never resolved"
            time.sleep(0.5)
        up = _api(base, "query", query='up{job="leasekit"}')["result"]
        assert [r["value"][1] for r in up] == ["1"]
    finally:
        consumer.stop.set()
        consumer.join(30)
        if prometheus is not None:
            _stop_prometheus(prometheus)
        assert _stop(exporter) == 0
