"""Results files: where they go, the summary and record of one benchmark's outcome, and the
natural order of benchmark ids (B2 before B10)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .common import Benchmark, Outcome

__all__ = ["BENCH_DIR", "RESULTS_DIR", "QUICK_DIR", "summary", "write_record", "natural"]

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
"""The committed results: ``ID.json`` (the latest full run), ``ID.set1.json`` (a set kept)."""
QUICK_DIR = RESULTS_DIR / "quick"
"""Results of quick runs (``--quick``, ``--all --quick``): ignored by git, never committed."""

ORDER = re.compile(r"(\D*)(\d*)")


def summary(bench: Benchmark, outcome: Outcome) -> dict[str, Any]:
    """The summary of an outcome: the headline against the target, the checks, the figures."""
    met = bench.passes(outcome.measured)
    return {
        "id": bench.id,
        bench.metric: outcome.measured,
        "target": bench.target,
        "target_op": bench.op,
        **({"target_note": bench.target_note} if bench.target_note else {}),
        **({"unit": bench.unit} if bench.unit else {}),
        "pass": met and all(outcome.checks.values()),
        "target_met": met,
        "checks": outcome.checks,
        "what": bench.what,
        **outcome.figures,
    }


def write_record(
    path: Path, bench: Benchmark, outcome: Outcome, machine: dict[str, Any]
) -> dict[str, Any]:
    """Write the results file of an outcome to ``path`` (the summary, the date, the parameters,
    the machine and every run's figures); returns the summary."""
    head = summary(bench, outcome)
    record = {
        **head,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "parameters": outcome.parameters,
        "machine": machine,
        "runs": outcome.runs,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=jsonable) + "\n")
    return head


def jsonable(value: Any) -> Any:
    """A JSON form of what ``json`` cannot write itself (numpy scalars, anything else as text)."""
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def natural(name: str) -> tuple[Any, ...]:
    """A sort key putting B2 before B10."""
    prefix, number = ORDER.match(name).groups()  # type: ignore[union-attr]
    return prefix, int(number or 0), name
