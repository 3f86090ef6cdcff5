"""Prometheus metrics (M5): the exporter in-process and as the CLI, and
``leasekit janitor --metrics-port``, scraped over HTTP and parsed with prometheus_client's
parser; the values equal what the library reports; a ZooKeeper outage shows as up 0 and the
exporter recovers when the server is back."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

import leasekit as lk
from leasekit import TableBucket, embedded, testing
from leasekit.errors import IllegalStateError, InvalidArgumentError
from leasekit.monitor.exporter.serve import MetricsServer

GROUP = "billing"


def scrape(url: str, *, namespaces: bool = False) -> dict[str, dict[tuple, float]]:
    """Every sample of one scrape: {name: {sorted label items: value}}, the namespace label
    left out unless ``namespaces``."""
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        text = response.read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = tuple(
                sorted((k, v) for k, v in sample.labels.items() if namespaces or k != "namespace")
            )
            out.setdefault(sample.name, {})[labels] = sample.value
    return out


def scrape_when(
    url: str, ready, timeout: float = 60.0, *, namespaces: bool = False
) -> dict[str, dict[tuple, float]]:
    """``scrape`` again until ``ready(got)``; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = scrape(url, namespaces=namespaces)
        if ready(got):
            return got
        assert time.monotonic() < deadline, f"metrics never got ready: {got.get('leasekit_up')}"
        time.sleep(0.2)


def _sampled(got) -> bool:
    return "leasekit_last_sample_timestamp_seconds" in got


def _populate(conn, clock) -> None:
    """Two tables with history (100-byte files), a group behind on one, two leases."""
    ctx = testing.context(conn)
    for name in ("orders", "audit"):
        table = conn.create_table(
            name, "id BIGINT", "id", buckets=4, properties={"log.retention": "1s"}
        )
        testing.seed_history(ctx, table, 4, 4, 10, file_bytes=100)  # log ends at 40
    clock.advance(timedelta(seconds=10))  # the log below the kept snapshots is past retention
    with conn.consumer(group_id=GROUP, enable_auto_commit=False) as c:
        offsets = {TableBucket("orders", b): 10 * b for b in range(4)}
        c.assign(list(offsets))
        c.commit(offsets)
    conn.acquire_kv_snapshot_lease("q3", {TableBucket("orders", 0): 1}, "1h")
    conn.acquire_kv_snapshot_lease("brief", {TableBucket("audit", 1): 4}, "10m")


def _check_against_library(conn, clock, url: str) -> None:
    """M5: the scraped values are the library's (expiry on the expiry clock, ``clock``)."""
    before = conn.describe_group(GROUP)
    got = scrape_when(url, _sampled)
    after = conn.describe_group(GROUP)
    assert got["leasekit_up"] == {(): 1.0}
    lags = {
        (("bucket", str(r.bucket)), ("group", GROUP), ("table", r.table)): float(r.lag)
        for r in before.itertuples()
    }
    assert got["leasekit_group_lag"] == lags  # 40, 30, 20, 10
    for r, later in zip(before.itertuples(), after.itertuples()):
        key = (("bucket", str(r.bucket)), ("group", GROUP), ("table", r.table))
        seconds = got["leasekit_group_time_lag_seconds"][key]
        assert r.time_lag.total_seconds() <= seconds <= later.time_lag.total_seconds()
    # M5: per bucket, committed and end offsets and the Burrow status
    for r in before.itertuples():
        key = (("bucket", str(r.bucket)), ("group", GROUP), ("table", r.table))
        assert got["leasekit_group_committed_offset"][key] == r.current_offset
        end = got["leasekit_bucket_log_end_offset"][(("bucket", str(r.bucket)), ("table", r.table))]
        assert end == r.log_end_offset == 40
        shown = {k: v for k, v in got["leasekit_bucket_status"].items() if set(key) <= set(k)}
        assert shown == {tuple(sorted((*key, ("status", r.status)))): 1.0}  # the current one
    # per group: the overview's status (M6 order), flags, max lag, rates, eta, headroom
    row = conn.group_overview().set_index("group").loc[GROUP]
    group = (("group", GROUP),)
    assert got["leasekit_group_status"] == {
        (("group", GROUP), ("status", s)): float(s == row["status"])
        for s in ("OK", "WARN", "BEHIND", "AT_RISK", "ERR")
    }
    assert got["leasekit_group_behind"] == {group: 0.0}
    assert got["leasekit_group_at_risk"][group] in (0.0, 1.0)
    assert got["leasekit_group_max_lag"] == {group: 40.0}
    # M2: nothing is committed: the rate is unknown (NaN) before two lag history samples and 0
    # after (a background pass that took over monitor.interval is followed by the next at once)
    rate = got["leasekit_group_consume_rate"][group]
    eta = got["leasekit_group_eta_seconds"][group]
    assert (math.isnan(rate) and math.isnan(eta)) or (rate == 0.0 and eta == math.inf)
    assert 0 <= got["leasekit_group_retention_headroom_seconds"][group] < 1  # 1s retention
    assert not any(("table", "__lag_history") in k for f in got.values() for k in f)
    assert got["leasekit_group_members"] == {(("group", GROUP),): 0.0}
    now = conn.server_time() + clock.offset
    for info in conn.leases():
        expires_in = got["leasekit_lease_expires_in_seconds"][(("lease", info.lease_id),)]
        assert abs(expires_in - (info.expires_at - now).total_seconds()) < 5
    inventory = conn.lease_inventory().set_index("lease_id")
    for lease, row in inventory.iterrows():
        key = (("lease", lease),)
        assert got["leasekit_lease_pinned_bytes"][key] == row["pinned_bytes"] == 100
        assert got["leasekit_lease_exclusive_bytes"][key] == row["exclusive_bytes"]
        assert got["leasekit_lease_state"][(("lease", lease), ("state", row["state"]))] == 1.0
    assert got["leasekit_lease_exclusive_bytes"][(("lease", "q3"),)] == 300.0
    assert got["leasekit_lease_exclusive_bytes"][(("lease", "brief"),)] == 0.0  # newest 2
    for table in ("orders", "audit"):
        reclaimable = got["leasekit_retention_reclaimable_bytes"][(("table", table),)]
        assert reclaimable == conn.retention_plan(table).reclaimable_bytes > 0
    assert got["leasekit_sample_failures_total"] == {(): 0.0}
    assert 0 <= got["leasekit_last_sample_age_seconds"][()] < 60


def test_exporter_in_process(conn, clock):
    # M5: metric names and values, scraped over HTTP and parsed with prometheus_client
    _populate(conn, clock)
    conn.update_settings({"monitor.interval": "1s"})
    with MetricsServer(testing.context(conn), port=0) as server:  # every monitor.interval
        assert server.port > 0 and server.sampler.interval_s == 1.0
        _check_against_library(conn, clock, server.url)
        # M1: the exporter also samples the lag history
        deadline = time.monotonic() + 30
        while conn.lag_history(GROUP).empty:
            assert time.monotonic() < deadline, "the exporter never sampled the lag history"
            time.sleep(0.2)
        # heavy figures are recomputed every interval: a lease dropped leaves them
        conn.drop_kv_snapshot_lease("brief")
        got = scrape_when(
            server.url,
            lambda g: (("lease", "brief"),) not in g.get("leasekit_lease_pinned_bytes", {}),
        )
        assert (("lease", "brief"),) not in got.get("leasekit_lease_expires_in_seconds", {})
    with pytest.raises(OSError):  # closed: nothing listens any more
        urllib.request.urlopen(server.url, timeout=5)


def test_lease_states_in_metrics(conn, clock):
    # M4 in M5: the state gauge follows the clock; an expired lease has a negative expiry
    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    testing.seed_empty_snapshots(testing.context(conn), table)
    conn.acquire_kv_snapshot_lease("short", {TableBucket("t", 0): 1}, "1h")
    with MetricsServer(testing.context(conn), port=0, interval="1h") as server:
        got = scrape(server.url)
        assert got["leasekit_lease_state"][(("lease", "short"), ("state", "active"))] == 1.0
        clock.advance(timedelta(minutes=56))
        got = scrape(server.url)
        states = got["leasekit_lease_state"]
        assert states[(("lease", "short"), ("state", "expiring"))] == 1.0
        assert sum(states.values()) == 1.0
        clock.advance(timedelta(minutes=5))
        got = scrape(server.url)
        assert got["leasekit_lease_state"][(("lease", "short"), ("state", "expired"))] == 1.0
        assert got["leasekit_lease_expires_in_seconds"][(("lease", "short"),)] < 0


def test_server_arguments(conn):
    ctx = testing.context(conn)
    with pytest.raises(InvalidArgumentError):
        MetricsServer(ctx, port=70000)
    with pytest.raises(lk.InvalidDurationError):
        MetricsServer(ctx, port=0, interval="soon")
    with MetricsServer(ctx, port=0, interval="1h") as server:
        with pytest.raises(IllegalStateError, match="cannot serve metrics"):
            MetricsServer(ctx, port=server.port, address="127.0.0.1").start()


def _serving(proc: subprocess.Popen) -> str:
    """The metrics URL a CLI process announces on stderr."""
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        found = re.search(r"on (http://\S+/metrics)", line)
        if found:
            return found.group(1)
    raise AssertionError("no metrics URL announced:\n" + "".join(lines))


def _run_cli(target: list[str], *argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "leasekit.cli", *target, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_exporter_cli(conn, clock, target):
    # M5: `leasekit exporter --port --interval` in a process of its own (its clock is
    # ZooKeeper's: the populated history is real seconds old, so wait past log.retention)
    _populate(conn, clock)
    clock.advance(timedelta(seconds=-10))
    time.sleep(1.5)
    proc = _run_cli(target, "exporter", "--port", "0", "--interval", "1s")
    try:
        url = _serving(proc)
        _check_against_library(conn, clock, url)
    finally:
        assert _stop(proc) == 0


def test_janitor_serves_metrics(conn, clock, target):
    # M5: `leasekit janitor --metrics-port` serves the same metrics from the janitor's process
    _populate(conn, clock)
    clock.advance(timedelta(seconds=-10))
    time.sleep(1.5)
    proc = _run_cli(target, "janitor", "--interval", "1h", "--metrics-port", "0")
    try:
        url = _serving(proc)
        got = scrape_when(url, _sampled)
        lags = {k[0][1]: v for k, v in got["leasekit_group_lag"].items()}
        assert lags == {"0": 40.0, "1": 30.0, "2": 20.0, "3": 10.0}
        assert got["leasekit_up"] == {(): 1.0}
        assert set(got["leasekit_lease_expires_in_seconds"]) == {
            (("lease", "q3"),),
            (("lease", "brief"),),
        }
    finally:
        assert _stop(proc) == 0


def test_zookeeper_outage_reported_and_recovered(tmp_path, warehouse):
    # M5: a ZooKeeper outage does not crash the exporter: scrapes say up 0 at once, and it
    # recovers once the server is back (on the same port)
    zk_dir = tmp_path / "zk"
    address = embedded.ensure_running(zk_dir)
    try:
        with lk.connect(address, warehouse, namespace="outage", timeout="4s") as conn:
            table = conn.create_table("t", "id BIGINT", "id", buckets=2)
            testing.seed_empty_snapshots(testing.context(conn), table)
            conn.acquire_kv_snapshot_lease("q3", {TableBucket("t", 0): 1}, "1h")
            with MetricsServer(testing.context(conn), port=0, interval="1s") as server:
                got = scrape_when(server.url, _sampled)
                assert got["leasekit_up"] == {(): 1.0}
                embedded.kill(zk_dir)
                got = scrape_when(server.url, lambda g: g["leasekit_up"] == {(): 0.0}, 30)
                assert "leasekit_lease_expires_in_seconds" not in got
                started = time.monotonic()
                scrape(server.url)
                assert time.monotonic() - started < 1  # a session down answers at once
                assert embedded.ensure_running(zk_dir) == address
                got = scrape_when(server.url, lambda g: g["leasekit_up"] == {(): 1.0}, 60)
                assert (("lease", "q3"),) in got["leasekit_lease_expires_in_seconds"]
    finally:
        embedded.stop(zk_dir)
    assert os.path.isdir(zk_dir)


def test_rendering_matches_prometheus_client():
    # the server's rendering is prometheus_client's text format and OpenMetrics, byte for byte
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

    from leasekit.monitor.exporter.exposition import render

    def families():
        lag = GaugeMetricFamily("x_lag", 'doc with \\ and\nnewline', labels=["table", "group"])
        lag.add_metric(['a"b\\c\nd', "g"], 3)
        lag.add_metric(["t", "g2"], 1.5e12)
        lag.add_metric(["t", "g3"], float("nan"))
        up = GaugeMetricFamily("x_up", "plain")
        up.add_metric([], 1)
        failures = CounterMetricFamily("x_failures", "count", labels=["namespace"])
        failures.add_metric(["ns"], 7)
        empty = GaugeMetricFamily("x_none", "no samples", labels=["lease"])
        age = GaugeMetricFamily("x_age_seconds", 'with "quotes"', unit="seconds")
        age.add_metric([], float("inf"))
        return [lag, up, failures, empty, age]

    class Static:
        def collect(self):
            return families()

    registry = CollectorRegistry()
    registry.register(Static())
    assert render(families()) == generate_latest(registry)
    assert render(families(), openmetrics=True) == openmetrics_latest(registry)


def test_collector_in_a_registry(conn, clock):
    # the collector is a prometheus_client collector: it works in any registry
    from prometheus_client import CollectorRegistry, generate_latest

    from leasekit.monitor.exporter.metrics import LeasekitCollector
    from leasekit.monitor.exporter.sampler import Sampler

    _populate(conn, clock)
    ctx = testing.context(conn)
    registry = CollectorRegistry()
    collector = LeasekitCollector(ctx, Sampler(ctx, 3600))
    registry.register(collector)
    try:
        text = generate_latest(registry).decode()
    finally:
        collector.close()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"leasekit_group_lag", "leasekit_lease_state", "leasekit_up"} <= names


def test_openmetrics_when_the_scraper_asks(conn, clock):
    # docs/monitoring.md: OpenMetrics when the scraper asks for it (Prometheus's own Accept header),
    # the text format 0.0.4 otherwise; both carry the same series
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

    _populate(conn, clock)
    prometheus_accept = (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
        "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    with MetricsServer(testing.context(conn), port=0, interval="1h") as server:
        scrape_when(server.url, _sampled)
        bodies = {}
        for accept in (None, "application/openmetrics-text", prometheus_accept):
            request = urllib.request.Request(server.url, headers={"Accept": accept or "*/*"})
            with urllib.request.urlopen(request, timeout=30) as response:
                bodies[accept] = (response.headers["Content-Type"], response.read().decode())
    plain_type, plain = bodies[None]
    assert plain_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "# EOF" not in plain
    keys = {
        (s.name, tuple(sorted(s.labels.items())))
        for f in text_string_to_metric_families(plain)
        for s in f.samples
    }
    for accept in ("application/openmetrics-text", prometheus_accept):
        content_type, text = bodies[accept]
        assert content_type.startswith("application/openmetrics-text; version=1.0.0;")
        assert text.endswith("# EOF\n")
        samples = [s for f in parse_om(text) for s in f.samples]  # strict: raises if invalid
        assert {(s.name, tuple(sorted(s.labels.items()))) for s in samples} == keys
        lags = {s.labels["bucket"]: s.value for s in samples if s.name == "leasekit_group_lag"}
        assert lags == {"0": 40.0, "1": 30.0, "2": 20.0, "3": 10.0}
