"""What an operator plugs in (M5): the alert rules in deploy/prometheus pass
``promtool check rules`` and their unit tests (``promtool test rules``), every alert is tested
firing and silent, the example configuration is valid, and the Grafana dashboard and the rules
name only metrics and labels the exporter serves, so neither can drift from it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from leasekit import testing
from leasekit.monitor.exporter.serve import MetricsServer
from tests.monitor.test_metrics import _populate, _sampled, scrape_when

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "leasekit-alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "leasekit-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "leasekit.json"
PROMETHEUS_OWN = {"up"}
"""Series Prometheus itself records for each target, not served by the exporter."""
ABOUT = (
    ("LeasekitGroup", ("namespace", "group")),
    ("LeasekitBucket", ("namespace", "group", "table")),
    ("LeasekitLease", ("namespace", "lease")),
    ("LeasekitExporter", ("instance",)),
    ("Leasekit", ("namespace",)),
)
"""The labels an alert's summary names, by the start of its name."""
DASHBOARD_VARIABLES = {"$namespace": "ns", "$group": "g", "$__rate_interval": "1m"}


def promtool() -> str:
    """The path of promtool; the test fails naming the package when it is missing."""
    path = shutil.which("promtool") or (
        "/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None
    )
    if path is None:
        pytest.fail(
            "promtool is missing: install Debian's package 'prometheus' "
            "(apt-get install -y --no-install-recommends prometheus, or `make prometheus`)"
        )
    return path


def _promtool(*argv: str, cwd: Path = PROMETHEUS_DIR) -> str:
    done = subprocess.run([promtool(), *argv], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _alerts() -> dict[str, dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _panel_exprs() -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables'."""
    board = json.loads(DASHBOARD.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            found = re.fullmatch(r"label_values\((.*), \w+\)", var["definition"])
            assert found, var["definition"]
            exprs.append(found.group(1))
    return exprs


def _substituted(expr: str) -> str:
    for var, value in DASHBOARD_VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def test_alert_rules_pass_promtool(tmp_path):
    # docs/monitoring.md: the shipped rules, their unit
    # tests and the example configuration are valid
    out = _promtool("check", "rules", RULES.name)
    assert f"SUCCESS: {len(_alerts())} rules found" in out
    out = _promtool("test", "rules", RULE_TESTS.name)
    assert "SUCCESS" in out
    _promtool("check", "config", "prometheus.yml")
    # the rules' unit tests do catch a change: an alert that waits less than its rule says
    changed = RULES.read_text().replace("for: 10m", "for: 1m", 1)
    (tmp_path / RULES.name).write_text(changed)
    shutil.copy(RULE_TESTS, tmp_path)
    done = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0 and "LeasekitGroupBehind" in done.stdout + done.stderr


def test_every_alert_is_tested_firing_and_silent():
    # docs/monitoring.md: falling behind, at risk, stalled or stopped
    # groups, expiring and orphaned leases, exporter down: each alert
    # has a for:, a severity and annotations naming what it is about
    alerts = _alerts()
    wanted = {"LeasekitGroupBehind", "LeasekitGroupAtRisk", "LeasekitGroupStalled",
              "LeasekitGroupStopped", "LeasekitLeaseExpiring", "LeasekitLeaseOrphaned",
              "LeasekitExporterDown", "LeasekitNamespaceUnreadable"}  # fmt: skip
    assert wanted <= set(alerts)
    for name, rule in alerts.items():
        assert re.fullmatch(r"\d+[smh]", rule["for"]), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert set(rule["annotations"]) == {"summary", "description"}, name
        about = next(labels for prefix, labels in ABOUT if name.startswith(prefix))
        for label in about:
            assert f"{{{{ $labels.{label} }}}}" in rule["annotations"]["summary"], name
    checks = [
        c for t in yaml.safe_load(RULE_TESTS.read_text())["tests"] for c in t["alert_rule_test"]
    ]
    firing = {c["alertname"] for c in checks if c["exp_alerts"]}
    silent = {c["alertname"] for c in checks if not c["exp_alerts"]}
    assert firing == silent == set(alerts)


def test_dashboard_is_a_grafana_dashboard_of_valid_promql(tmp_path):
    # docs/monitoring.md: a Grafana dashboard (schema 39) with a Prometheus data source variable and
    # the namespace and group variables; every expression parses as PromQL (promtool checks each
    # as a recording rule)
    board = json.loads(DASHBOARD.read_text())
    assert board["schemaVersion"] == 39 and board["uid"] == "leasekit"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"namespace", "group"} <= set(variables)
    assert "$namespace" in variables["group"]["definition"]
    panels = [p for p in board["panels"] if p["type"] != "row"]
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    titles = " | ".join(p["title"] for p in panels).lower()
    for topic in ("status", "lag per bucket", "time lag", "rates", "eta", "headroom",
                  "expires in", "lease states", "reclaimable"):  # fmt: skip
        assert topic in titles, topic
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:expr_{i}", "expr": _substituted(e)}
        for i, e in enumerate(_panel_exprs())
    ]}]}  # fmt: skip
    (tmp_path / "dashboard-rules.yml").write_text(yaml.safe_dump(rules))
    _promtool("check", "rules", "dashboard-rules.yml", cwd=tmp_path)


def _served(conn, clock) -> dict[str, set[str]]:
    """Every metric name the exporter serves (families with no sample too), with the label
    names of its series."""
    _populate(conn, clock)
    with MetricsServer(testing.context(conn), port=0, interval="1h") as server:
        scrape_when(server.url, _sampled)
        with urllib.request.urlopen(server.url, timeout=30) as response:
            text = response.read().decode()
    served: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            served.setdefault(line.split()[2], {"namespace"})
        elif line and not line.startswith("#"):
            name, _, labels = line.partition("{")
            name = name.split()[0]
            served.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    return served


def _uses(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names its selector matches on) of each leasekit selector."""
    out = []
    for name, selector in re.findall(r"\b(leasekit_\w+|up)\b(?:\{([^}]*)\})?", expr):
        out.append((name, set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", selector or ""))))
    return out


def test_dashboard_and_rules_use_only_what_the_exporter_serves(conn, clock):
    # M5: the dashboard's panels and variables, the rules' expressions and the metrics their
    # annotations name are all served (names and labels), so neither drifts from the exporter
    served = _served(conn, clock)
    sources = [("dashboard", e) for e in _panel_exprs()]
    for name, rule in _alerts().items():
        sources.append((name, rule["expr"]))
        sources += [(name, text) for text in rule["annotations"].values()]
    missing = []
    for where, expr in sources:
        for metric, labels in _uses(expr):
            if metric in PROMETHEUS_OWN:
                continue
            if metric not in served:
                missing.append(f"{where}: {metric} is not served")
            elif not labels <= served[metric]:
                missing.append(f"{where}: {metric} has no label {sorted(labels - served[metric])}")
    assert not missing, "\n".join(missing)
    for where, expr in sources:  # group-by labels exist on what they aggregate
        for by in re.findall(r"by \(([^)]*)\)", expr):
            names = {n.strip() for n in by.split(",")}
            metrics = [m for m, _ in _uses(expr) if m in served]
            assert any(names <= served[m] for m in metrics), (where, expr)
