"""B13, the scrape half: one Prometheus scrape of ``leasekit exporter``'s metrics over 100
consumer groups x 100 buckets (target <= 1 s).

A 100-bucket table gets 4 log segments of 100 records per bucket (``seed_history``, no files:
nothing reads them) and 100 groups commit an offset for every bucket, three times each (so
every bucket has a commit window and a Burrow status); 10 leases pin snapshots. A
``MetricsServer`` (the exporter's server, on a free port, its background pass once an hour)
is scraped over HTTP with urllib once its background pass (a lag history sample, the
retention plan, the lease bytes) is done: the figure is the wall time of one GET of ``/metrics``,
i.e. reading every group's lag, time lag and status and every lease's state and expiry from
ZooKeeper and rendering 10,000+ series. Each run is checked: the body parses with
prometheus_client's parser, ``leasekit_up`` is 1, there is one lag series per group and
bucket, and one group's lags equal ``describe_group``'s. Each run also times the scrape
Prometheus makes, which asks for OpenMetrics first (its ``Accept`` header), reported as
``openmetrics_s`` beside the plain text format's figure; that body is parsed with
prometheus_client's OpenMetrics parser.
"""

from __future__ import annotations

import time
import urllib.request
from typing import TYPE_CHECKING, Any

from leasekit import testing

from .common import (
    Benchmark,
    Outcome,
    Timer,
    instrumented,
    load_average,
    log,
    median,
    settle,
    spread,
    temp_warehouse,
    timed,
    zk_cpu_seconds,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from leasekit.connection import Connection

__all__ = ["BENCHMARK", "run"]

FULL = {"groups": 100, "buckets": 100, "leases": 10, "commits": 3}
QUICK = {**FULL, "groups": 10}
TABLE = "orders"

# Where a scrape spends its time (exclusive seconds per label); the rest is HTTP and glue.
PROFILE = {
    "read_groups": "leasekit.monitor.exporter.metrics:read_all_groups",
    "read_leases": "leasekit.monitor.exporter.metrics:read_leases",
    "assess": "leasekit.monitor.exporter.metrics:assess_groups",
    "families": "leasekit.monitor.exporter.metrics:_Families.add_groups",
    "render": "leasekit.monitor.exporter.exposition:render",
}


def _seed(conn: Connection, p: dict[str, Any]) -> None:
    """The table, the groups' commits and the leases."""
    import leasekit as lk

    table = conn.create_table(TABLE, "id BIGINT", "id", buckets=p["buckets"])
    testing.seed_history(testing.context(conn), table, 4, 4, 100)  # log ends at 400
    buckets = [lk.TableBucket(TABLE, b) for b in range(p["buckets"])]
    for g in range(p["groups"]):
        with conn.consumer(group_id=f"group-{g:03d}", enable_auto_commit=False) as consumer:
            consumer.assign(buckets)
            for c in range(p["commits"]):
                consumer.commit({tb: (g + tb.bucket + 100 * c) % 400 for tb in buckets})
    for i in range(p["leases"]):
        pins = {tb: 1 + (i % 4) for tb in buckets[i :: p["leases"]]}
        conn.acquire_kv_snapshot_lease(f"lease-{i}", pins, "1h")


PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
"""The ``Accept`` header of Prometheus 2.x's scrapes."""


def _scrape(url: str, accept: str | None = None) -> tuple[float, str]:
    def get() -> str:
        headers = {} if accept is None else {"Accept": accept}
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read().decode()

    return timed(get)


def _check(conn: Connection, text: str, p: dict[str, Any]) -> dict[str, bool]:
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(text):
        samples.setdefault(family.name, []).extend(family.samples)
    up = [s.value for s in samples.get("leasekit_up", [])]
    lags = samples.get("leasekit_group_lag", [])
    first = {int(s.labels["bucket"]): s.value for s in lags if s.labels["group"] == "group-000"}
    described = conn.describe_group("group-000")
    expected = {int(r.bucket): float(r.lag) for r in described.itertuples()}
    return {
        "up": up == [1.0],
        "one_lag_series_per_group_and_bucket": len(lags) == p["groups"] * p["buckets"],
        "lags_equal_describe_group": first == expected,
        "every_lease_has_an_expiry": (
            len(samples.get("leasekit_lease_expires_in_seconds", [])) == p["leases"]
        ),
    }


def _openmetrics_series(text: str) -> int:
    """The lag series of an OpenMetrics body, parsed by prometheus_client's parser."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    families = text_string_to_metric_families(text)
    return sum(len(f.samples) for f in families if f.name == "leasekit_group_lag")


def _scrape_once(conn: Connection, url: str, p: dict[str, Any], checks: dict[str, bool]) -> dict:
    """One timed scrape, checked, with its breakdown."""
    ctx = testing.context(conn)
    settle(None)
    trips, cpu = ctx.store.round_trips, zk_cpu_seconds(conn)
    timer = Timer()
    with instrumented(timer, PROFILE):
        scrape_s, text = _scrape(url)
    cpu_after = zk_cpu_seconds(conn)
    for name, ok in _check(conn, text, p).items():
        checks[name] = checks.get(name, True) and ok
    settle(None)
    openmetrics_s, om_text = _scrape(url, PROMETHEUS_ACCEPT)
    ok = _openmetrics_series(om_text) == p["groups"] * p["buckets"]
    checks["openmetrics_parses"] = checks.get("openmetrics_parses", True) and ok
    return {
        "scrape_s": scrape_s,
        "openmetrics_s": openmetrics_s,
        "bytes": len(text),
        "series": text.count("\n") - text.count("\n#"),
        "round_trips": ctx.store.round_trips - trips,
        "breakdown_s": {k: round(timer.seconds.get(k, 0.0), 3) for k in PROFILE},
        "zk_cpu_s": None if cpu is None or cpu_after is None else round(cpu_after - cpu, 3),
        "load_average": load_average(),
    }


def _summary(results: list[dict[str, Any]], p: dict[str, Any], seed_s: float) -> dict:
    """Medians and spreads over the runs, the last run's counts."""
    times = [r["scrape_s"] for r in results]
    figures = {
        "scrape_s": round(median(times), 3),
        "spread": spread(times),
        "openmetrics_s": round(median([r["openmetrics_s"] for r in results]), 3),
        "openmetrics_spread": spread([r["openmetrics_s"] for r in results]),
        "breakdown_s": {
            k: round(median([r["breakdown_s"][k] for r in results]), 3) for k in PROFILE
        },
        "round_trips": results[-1]["round_trips"],
        "series": results[-1]["series"],
        "bytes": results[-1]["bytes"],
        "load_average": median([r["load_average"] or 0.0 for r in results]),
        "load_averages": [r["load_average"] for r in results],
        "seed_s": round(seed_s, 1),
    }
    figures["note"] = (
        f"one GET of /metrics: {figures['series']:,} series of {p['groups']} groups x "
        f"{p['buckets']} buckets and {p['leases']} leases; as Prometheus asks, OpenMetrics: "
        f"{figures['openmetrics_s']} s"
    )
    return figures


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    from leasekit.monitor.exporter.serve import MetricsServer

    p = QUICK if quick else FULL
    results: list[dict[str, Any]] = []
    checks: dict[str, bool] = {}
    with temp_warehouse("B13") as conn:
        log(f"B13 scrape: seeding {p['groups']} groups x {p['buckets']} buckets")
        seed_s, _ = timed(lambda: _seed(conn, p))
        ctx = testing.context(conn)
        with MetricsServer(ctx, port=0, address="127.0.0.1", interval="1h") as server:
            while server.sampler.figures is None:  # its one background pass, untimed
                time.sleep(0.1)
            _scrape(server.url)  # warm-up, untimed
            for i in range(runs):
                result = _scrape_once(conn, server.url, p, checks)
                results.append(result)
                log(
                    f"B13 scrape: run {i + 1}/{runs}: {result['scrape_s']:.3f}s "
                    f"(OpenMetrics {result['openmetrics_s']:.3f}s), "
                    f"{result['series']:,} series, {result['bytes']:,} bytes"
                )
                time.sleep(0.2)
    figures = _summary(results, p, seed_s)
    return Outcome(
        figures["scrape_s"], figures, results, {**p, "runs": runs, "quick": quick}, checks
    )


BENCHMARK = Benchmark(
    id="B13-SCRAPE",
    what="one Prometheus scrape of the exporter over 100 groups x 100 buckets",
    metric="value",
    target=1.0,
    op="<=",
    run=run,
    unit="s",
    spark=False,
    quick_note="10 of 100 groups",
    quick_less_work=True,
)
