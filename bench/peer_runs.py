"""Timed runs of leasekit against the Kafka clients (B14, B16, B18): every side measured in one
run, in counterbalanced order, and the figures over the runs.

A side is prepared untimed (a consumer built and connected, a group joined) and then measured:
its ``Timed.run`` returns the seconds it measured (the whole read, or each commit or query of a
series) and what it got, which the benchmark checks. A run measures each side twice in
counterbalanced order (``common.counterbalanced``: L A C C A L, then C A L L A C), each time
after a settle step; a side's figure in the run is the median of the seconds its two timings
measured (for one figure per timing, their mean). Beside it, each side's own CPU seconds over
both timings: this process and the server it talks to (leasekit's ZooKeeper server, the Kafka
broker's JVM), and the CPU seconds the rest of the machine used meanwhile.

Every figure is oriented so that > 1 means leasekit is ahead: a client's ratio is its seconds
over leasekit's (for a throughput over the same records, leasekit's rate over the client's),
its CPU ratio its CPU seconds over leasekit's. A run's ``ratio`` is against the faster client
of that run; the figures of each client are reported beside it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .common import (
    SideMeter,
    counterbalanced,
    load_average,
    median,
    ratio_or_none,
    settle,
    slow_runs,
    spread,
)

__all__ = ["Timed", "timed_run", "summary"]

LEASEKIT = "leasekit"


@dataclass
class Timed:
    """A side made ready: ``run`` does the measured work once, returning the seconds it measured
    and what it got; ``close`` releases what preparing it made (untimed)."""

    run: Callable[[], tuple[list[float], Any]]
    close: Callable[[], None] = field(default=lambda: None)


def timed_run(
    i: int,
    sides: dict[str, Callable[[], Timed]],
    cpu: dict[str, Callable[[], float | None]],
    check: Callable[[str, Any], None],
) -> dict[str, Any]:
    """Run ``i``: each of ``sides`` (leasekit first, then the clients; each prepares one timing)
    twice in counterbalanced order; ``cpu`` reads a side's own CPU seconds, ``check`` is given
    what each timing got."""
    order = counterbalanced(i, list(sides))
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    meters: dict[str, list[SideMeter]] = {name: [] for name in sides}
    for name in order:
        timing = sides[name]()
        settle(None)
        with SideMeter(None, own=cpu[name]) as meter:
            measured, got = timing.run()
        timing.close()
        check(name, got)
        seconds[name].append(measured)
        meters[name].append(meter)
    record: dict[str, Any] = {"order": order, "load_average": load_average()}
    for name in sides:
        flat = [s for timing in seconds[name] for s in timing]
        record[f"{name}_s"] = median(flat)
        record[f"{name}_timings_s"] = [round(s, 5) for s in flat]
        for key in ("cpu_s", "other_cpu_s"):
            values = [getattr(m, key) for m in meters[name]]
            record[f"{name}_{key}"] = None if None in values else round(sum(values), 3)
    peers = [name for name in sides if name != LEASEKIT]
    for peer in peers:
        record[f"{peer}_ratio"] = record[f"{peer}_s"] / record[f"{LEASEKIT}_s"]
        record[f"{peer}_cpu_ratio"] = ratio_or_none(
            record[f"{peer}_cpu_s"], record[f"{LEASEKIT}_cpu_s"]
        )
    fastest = min(peers, key=lambda peer: record[f"{peer}_s"])
    record["fastest"] = fastest
    record["ratio"] = record[f"{fastest}_ratio"]
    record["cpu_ratio"] = record[f"{fastest}_cpu_ratio"]
    others = [record[f"{name}_other_cpu_s"] for name in sides]
    record["other_cpu_s"] = None if None in others else round(sum(others), 3)
    return record


def summary(
    results: Sequence[dict[str, Any]], peers: Sequence[str], target: float
) -> dict[str, Any]:
    """The figures over every run: the median ratio against the faster client of each run with
    its spread, each client's own ratio, seconds and CPU ratio, leasekit's seconds, the load."""

    def cpu(key: str) -> float | None:
        values = [r[key] for r in results]
        return None if None in values else round(median(values), 3)

    figures: dict[str, Any] = {
        "ratio": round(median([r["ratio"] for r in results]), 3),
        "spread": spread([r["ratio"] for r in results]),
        "cpu_ratio": cpu("cpu_ratio"),
        "fastest_peer": Counter(r["fastest"] for r in results).most_common(1)[0][0],
        "fastest_per_run": [r["fastest"] for r in results],
        f"{LEASEKIT}_s": round(median([r[f"{LEASEKIT}_s"] for r in results]), 5),
        f"{LEASEKIT}_cpu_s": cpu(f"{LEASEKIT}_cpu_s"),
    }
    for peer in peers:
        figures[peer] = {
            "ratio": round(median([r[f"{peer}_ratio"] for r in results]), 3),
            "spread": spread([r[f"{peer}_ratio"] for r in results]),
            "s": round(median([r[f"{peer}_s"] for r in results]), 5),
            "cpu_s": cpu(f"{peer}_cpu_s"),
            "cpu_ratio": cpu(f"{peer}_cpu_ratio"),
        }
    figures.update(
        load_average=median([r["load_average"] or 0.0 for r in results]),
        load_averages=[r["load_average"] for r in results],
        other_cpu_s=[r["other_cpu_s"] for r in results],
        slow_runs=slow_runs(results, "ratio", target, ">="),
    )
    return figures
