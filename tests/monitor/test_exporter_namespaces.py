"""One ``leasekit exporter`` process for many namespaces (M5): ``--namespace``
repeated and ``--all-namespaces``, run as the CLI in a process of its own and scraped over
HTTP. Every series keeps its namespace; a namespace that cannot be read or opened is
``leasekit_up`` 0 while the others are served; each namespace served gets its lag history
sampled (M1)."""

from __future__ import annotations

import json
import time

from helpers import run_cli

import leasekit as lk
from leasekit import TableBucket, testing
from leasekit.connection import namespaces
from leasekit.ownership import marker_path
from tests.monitor.test_metrics import _run_cli, _serving, _stop, scrape_when

GROUP = "billing"


def _seed(conn, lag: int) -> None:
    """A table of 2 buckets, ``GROUP`` committed so that bucket 0 lags ``lag`` records."""
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(200)])
    ends = table.end_offsets()
    with conn.consumer(group_id=GROUP, enable_auto_commit=False) as consumer:
        first, second = TableBucket("orders", 0), TableBucket("orders", 1)
        offsets = {first: ends[first] - lag, second: ends[second]}
        consumer.assign(list(offsets))
        consumer.commit(offsets)


def _scrape_when(url: str, ready) -> dict[str, dict[tuple, float]]:
    """Scrapes, with the namespace label, until ``ready(got)``."""
    return scrape_when(url, ready, namespaces=True)


def _up(got) -> dict[str, float]:
    return {dict(k)["namespace"]: v for k, v in got.get("leasekit_up", {}).items()}


def _lag(got, namespace: str) -> dict[str, float]:
    return {
        dict(k)["bucket"]: v
        for k, v in got["leasekit_group_lag"].items()
        if dict(k)["namespace"] == namespace
    }


def _labels(got) -> set[str]:
    """Every label value of the scrape."""
    return {v for family in got.values() for key in family for _, v in key}


def test_exporter_serves_many_namespaces_and_reports_the_unreadable(
    conn, zookeeper, warehouse, namespace
):
    # M5: `leasekit exporter --namespace A --namespace B ...`: one process, every series
    # labelled with its namespace; a namespace whose settings are garbage, and one whose
    # warehouse directory belongs to another store (it cannot be opened), are leasekit_up 0
    # while the others are served; M1: each namespace served is sampled
    second, garbled, foreign = f"{namespace}b", f"{namespace}c", f"{namespace}d"
    _seed(conn, lag=7)
    with lk.connect(zookeeper, warehouse, namespace=second) as other:
        _seed(other, lag=3)
    with lk.connect(zookeeper, warehouse, namespace=garbled) as bad:
        _seed(bad, lag=1)
        ctx = testing.context(bad)
        ctx.store.set(ctx.paths.settings, b"\xc1 not msgpack")
    with lk.connect(zookeeper, warehouse, namespace=foreign):
        pass
    marker = f"{warehouse}/{marker_path(foreign)}"
    with open(marker, "w") as f:
        json.dump({"identity": "another-store", "namespace": foreign}, f)
    target = ["--zookeeper", zookeeper, "--warehouse", warehouse]
    names = [namespace, second, garbled, foreign]
    argv = [a for n in names for a in ("--namespace", n)]
    proc = _run_cli(target, "exporter", *argv, "--port", "0", "--interval", "1s")
    try:
        url = _serving(proc)
        got = _scrape_when(url, lambda g: len(_up(g)) == 4)
        assert _up(got) == {namespace: 1.0, second: 1.0, garbled: 0.0, foreign: 0.0}
        assert _lag(got, namespace) == {"0": 7.0, "1": 0.0}
        assert _lag(got, second) == {"0": 3.0, "1": 0.0}
        assert {dict(k)["namespace"] for k in got["leasekit_group_lag"]} == {namespace, second}
        for family in got.values():  # every series keeps its namespace
            assert all("namespace" in dict(key) for key in family)
        assert not any(v.startswith("__") for v in _labels(got))  # internal tables: no label
        deadline = time.monotonic() + 30
        with lk.connect(zookeeper, warehouse, namespace=second) as other:
            while conn.lag_history(GROUP).empty or other.lag_history(GROUP).empty:
                assert time.monotonic() < deadline, "a namespace served was never sampled"
                time.sleep(0.2)
    finally:
        assert _stop(proc) == 0


def test_exporter_all_namespaces_follows_the_warehouse(
    conn, zookeeper, warehouse, namespace, tmp_path
):
    # M5: `leasekit exporter --all-namespaces`: every namespace of the ensemble whose data is in
    # the warehouse, those created later too; a namespace of another warehouse is not served
    second, elsewhere, later = f"{namespace}b", f"{namespace}x", f"{namespace}z"
    _seed(conn, lag=5)
    with lk.connect(zookeeper, warehouse, namespace=second) as other:
        _seed(other, lag=2)
    (tmp_path / "other").mkdir()
    with lk.connect(zookeeper, str(tmp_path / "other"), namespace=elsewhere) as away:
        _seed(away, lag=1)
    assert namespaces(zookeeper, warehouse) == sorted([namespace, second])
    target = ["--zookeeper", zookeeper, "--warehouse", warehouse]
    proc = _run_cli(target, "exporter", "--all-namespaces", "--port", "0", "--interval", "1s")
    try:
        url = _serving(proc)
        got = _scrape_when(url, lambda g: len(_up(g)) == 2)
        assert _up(got) == {namespace: 1.0, second: 1.0}
        assert _lag(got, namespace) == {"0": 5.0, "1": 0.0}
        assert _lag(got, second) == {"0": 2.0, "1": 0.0}
        assert elsewhere not in _labels(got)
        with lk.connect(zookeeper, warehouse, namespace=later) as new:  # found while running
            _seed(new, lag=4)
        got = _scrape_when(url, lambda g: later in _up(g) and later in _labels(g))
        assert _up(got)[later] == 1.0
        assert _lag(_scrape_when(url, lambda g: _lag(g, later)), later) == {"0": 4.0, "1": 0.0}
    finally:
        assert _stop(proc) == 0


def test_exporter_namespace_options(capsys, target):
    # docs/monitoring.md: --namespace and --all-namespaces exclude each other; a missing warehouse
    # is an error, never created by --all-namespaces
    code, _, err = run_cli(capsys, *target, "exporter", "--namespace", "a", "--all-namespaces")
    assert code == 2 and "not both" in err
    missing = ["--zookeeper", target[1], "--warehouse", target[3] + "-nowhere"]
    code, _, err = run_cli(capsys, *missing, "exporter", "--all-namespaces", "--port", "0")
    assert code == 2 and "no warehouse at" in err
    code, out, _ = run_cli(capsys, "exporter", "--help")
    assert code == 0 and "--all-namespaces" in out and "repeatable" in out
