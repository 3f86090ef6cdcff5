"""The smoke of every benchmark: ``python -m bench.run --all --quick``.

Each benchmark runs in a reduced form: its quick size, or its full size where that is cheap
and its headline depends on the size (``Benchmark.quick_full_size``), with
``Benchmark.quick_runs`` timed runs. Its results go to ``bench/results/quick/ID.json`` (ignored
by git); the committed results and ``bench/README.md`` are not touched. Its figure (the
headline, or ``Benchmark.quick_figure`` where a quick run measures the committed size as its
second size) is then compared with the committed results, ``bench/results/ID.json`` and any
``ID.set*.json``: **within** their runs' spread (min to max over the sets), or **moved**. A time
over less work than the committed one (``Benchmark.quick_less_work``) is expected to be faster,
so only a slower one moved. A table on stdout names each benchmark; the last line is JSON.
Exit status 0, 1 when a benchmark failed to run (the others still run).
"""

from __future__ import annotations

import json
import traceback
from typing import TYPE_CHECKING, Any, NamedTuple

from . import REGISTRY, load
from .common import Benchmark, Outcome, bench_spark, log, machine_info
from .records import QUICK_DIR, RESULTS_DIR, natural, write_record

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Committed", "Row", "committed", "compare", "run_all"]


class Committed(NamedTuple):
    """The committed figures of a benchmark: each set's headline and the spread of all runs."""

    medians: list[float]
    """The headline of each committed set (the latest first)."""
    low: float
    """The lowest run over the sets (the headline for a results file without runs)."""
    high: float
    """The highest run over the sets."""
    runs: int
    """How many runs the sets hold."""


class Row(NamedTuple):
    """One line of the smoke's table."""

    id: str
    unit: str
    """The unit of the figures ("" for ratios)."""
    committed: Committed | None
    figure: float | None
    verdict: str
    """"within", "moved", "no committed result", or "error"."""
    note: str
    """Which way a figure moved, how the smoke's figure differs, or the error."""


def committed(bench: Benchmark) -> Committed | None:
    """The committed results of ``bench`` (None when there are none)."""
    paths = [RESULTS_DIR / f"{bench.id}.json", *sorted(RESULTS_DIR.glob(f"{bench.id}.set*.json"))]
    medians, lows, highs, runs = [], [], [], 0
    for path in paths:
        if not path.exists():
            continue
        result = json.loads(path.read_text())
        value = float(result[bench.metric])
        spread = result.get("spread") or {}
        medians.append(value)
        lows.append(float(spread.get("min", value)))
        highs.append(float(spread.get("max", value)))
        runs += int(spread.get("n") or result.get("parameters", {}).get("runs") or 1)
    if not medians:
        return None
    return Committed(medians, min(lows), max(highs), runs)


def compare(bench: Benchmark, figure: float, past: Committed) -> tuple[str, str]:
    """The verdict on a smoke's figure against the committed spread, and which way it moved."""
    if past.low <= figure <= past.high:
        return "within", ""
    worse = figure > past.high if bench.op == "<=" else figure < past.low
    if bench.quick_less_work and not worse:
        return "within", "faster, over less work"
    return "moved", "worse" if worse else "better"


def quick_figure(bench: Benchmark, outcome: Outcome) -> float:
    """The figure of a quick outcome that is compared with the committed headline."""
    if not bench.quick_figure:
        return float(outcome.measured)
    value: Any = outcome.figures
    for key in bench.quick_figure.split("."):
        value = value[key]
    return float(value)


def _all_spark_jars() -> list[str]:
    """The jars every benchmark asks for (``Benchmark.spark_jars``), for the one session the
    smoke shares: Spark takes jars only when its JVM starts. A benchmark whose jars are missing
    is left to fail on its own, with its message."""
    jars: list[str] = []
    for bench_id in sorted(REGISTRY, key=natural):
        try:
            bench = load(bench_id)
            if bench.spark and bench.spark_jars is not None:
                jars.extend(j for j in bench.spark_jars() if j not in jars)
        except Exception:  # noqa: BLE001 - reported when that benchmark runs
            continue
    return jars


def run_all(runs: int | None = None) -> int:
    """Run the smoke of every benchmark and print the table; ``runs`` overrides each
    benchmark's ``quick_runs``."""
    rows: list[Row] = []
    spark: SparkSession | None = None
    try:
        for bench_id in sorted(REGISTRY, key=natural):
            bench = load(bench_id)
            if bench.spark and spark is None:
                spark = bench_spark(jars=_all_spark_jars())
            rows.append(_smoke(bench, spark, bench.quick_runs if runs is None else runs))
    finally:
        if spark is not None:
            spark.stop()
    print(table(rows), flush=True)
    print(json.dumps([_jsonable_row(r) for r in rows]), flush=True)
    return 1 if any(r.verdict == "error" for r in rows) else 0


def _smoke(bench: Benchmark, spark: SparkSession | None, runs: int) -> Row:
    """One benchmark's smoke: its run in a session of its own (Spark settings a benchmark
    makes stay with it), its results file under bench/results/quick/, its row."""
    quick = not bench.quick_full_size
    log(f"{bench.id}: {'quick' if quick else 'full'} size, {runs} run{'s' * (runs > 1)}")
    past = committed(bench)
    try:
        session = spark.newSession() if bench.spark and spark is not None else None
        machine = machine_info(session)
        outcome = bench.run(session, quick, runs)
        write_record(QUICK_DIR / f"{bench.id}.json", bench, outcome, machine)
        figure = quick_figure(bench, outcome)
    except Exception as exc:  # a smoke goes on to the next benchmark
        log(f"{bench.id}: failed\n{traceback.format_exc()}")
        return Row(bench.id, bench.unit, past, None, "error", f"{type(exc).__name__}: {exc}")
    failed = [k for k, ok in outcome.checks.items() if not ok]
    notes = [bench.quick_note] if bench.quick_note else []
    notes += [f"check failed: {', '.join(failed)}"] if failed else []
    if past is None:
        return Row(bench.id, bench.unit, None, figure, "no committed result", "; ".join(notes))
    verdict, way = compare(bench, figure, past)
    log(f"{bench.id}: {figure:g} against {past.low:g}–{past.high:g}: {verdict} {way}".rstrip())
    note = "; ".join([way, *notes] if way else notes)
    return Row(bench.id, bench.unit, past, figure, verdict, note)


def table(rows: list[Row]) -> str:
    """The smoke's table (Markdown): benchmark, committed median(s) and spread, the quick
    figure, the verdict and notes."""
    lines = [
        "| benchmark | committed median | committed spread | quick | verdict | note |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        past, unit = r.committed, f" {r.unit}" if r.unit else ""
        medians = " / ".join(f"{m:.3f}{unit}" for m in past.medians) if past else "–"
        runs = f"{past.runs} run{'s' * (past.runs > 1)}" if past else ""
        spread = f"{past.low:.3f}–{past.high:.3f}{unit} ({runs})" if past else "–"
        figure = "–" if r.figure is None else f"{r.figure:.3f}{unit}"
        lines.append(f"| {r.id} | {medians} | {spread} | {figure} | {r.verdict} | {r.note} |")
    moved = [r.id for r in rows if r.verdict in ("moved", "error")]
    lines.append("")
    lines.append(f"moved or failed: {', '.join(moved)}" if moved else "every figure within")
    return "\n".join(lines)


def _jsonable_row(r: Row) -> dict[str, Any]:
    past = r.committed
    return {
        "id": r.id,
        "unit": r.unit,
        "committed_medians": past.medians if past else None,
        "committed_spread": [past.low, past.high] if past else None,
        "quick": r.figure,
        "verdict": r.verdict,
        "note": r.note,
    }
