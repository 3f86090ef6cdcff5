"""``leasekit consumer overview|history``: every group at a glance (rates, ETA, retention
headroom, AT_RISK) and a group's lag history, as text tables (durations like "4m 40s") or
with ``--json`` in their exact forms."""

from __future__ import annotations

import argparse
from typing import Any

from ..durations import eta_text, headroom_text
from ..errors import InvalidArgumentError, InvalidDurationError
from ..live import NO_SAMPLER
from .common import add_command, connect, duration_arg
from .output import emit, format_table, frame_rows

__all__ = ["register_monitor", "OVERVIEW", "HISTORY"]

OVERVIEW = [
    "group",
    "state",
    "members",
    "status",
    "total_lag",
    "max_time_lag",
    "consume_rate",
    "produce_rate",
    "eta",
    "retention_headroom",
    "last_commit",
]
"""The overview's text columns (``--json`` has every column of ``group_overview``)."""
HISTORY = ["time", "lag", "time_lag", "committed", "end"]
BUCKET_HISTORY = ["time", "table", "bucket", "lag", "time_lag", "committed", "end"]


_NOTES = (
    ("AT_RISK", "AT RISK of losing records to retention"),
    ("BEHIND", "BEHIND, consuming slower than their tables grow (their lag is rising)"),
)
"""The lines under the overview's table naming the groups in each of these statuses."""


def _shown(row: dict[str, Any]) -> dict[str, Any]:
    """An overview row for the text table: rates rounded, eta "never" when the group is not
    catching up ("-" only without two lag samples, M6), a headroom with no limit "∞"."""
    out = dict(row)
    out["eta"] = eta_text(row["eta"], row["consume_rate"])
    for key in ("consume_rate", "produce_rate"):
        if out[key] is not None:
            out[key] = round(out[key], 2)
    out["retention_headroom"] = headroom_text(row["retention_headroom"])
    return out


def _overview(args: argparse.Namespace) -> int:
    with connect(args, read_only=True) as conn:
        rows = frame_rows(conn.group_overview())
    data = {"groups": rows}

    def render(d: dict[str, Any]) -> str:
        if not d["groups"]:
            return "no consumer groups"
        table = format_table([_shown(r) for r in d["groups"]], OVERVIEW)
        notes = [
            f"{text}: {', '.join(groups)}"
            for status, text in _NOTES
            if (groups := [r["group"] for r in d["groups"] if r["status"] == status])
        ]
        return table + "".join(f"\n\n{note}" for note in notes)

    emit(args, data, render)
    return 0


def _time(text: str | None, what: str) -> Any:
    """A duration back from now ("6h", "90") or an ISO 8601 date-time; None stays None."""
    from ..durations import parse_duration, parse_timestamp

    if text is None:
        return None
    try:
        return parse_duration(duration_arg(text), what=what)
    except InvalidDurationError:
        pass
    try:
        return parse_timestamp(text, what=what)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"{what} must be a duration back from now (6h, 90s) or an ISO 8601 date-time, "
            f"got {text[:40]!r}"
        ) from None


def _history(args: argparse.Namespace) -> int:
    since, until = _time(args.since, "--since"), _time(args.until, "--until")
    with connect(args, read_only=True) as conn:
        frame = conn.lag_history(args.group, since=since, until=until, by_bucket=args.by_bucket)
    data = {"group": args.group, "samples": frame_rows(frame)}
    columns = BUCKET_HISTORY if args.by_bucket else HISTORY

    def render(d: dict[str, Any]) -> str:
        if not d["samples"]:
            why, command = NO_SAMPLER
            return (
                f"no lag history samples of group {d['group']} in that range: {why}.\n"
                f"Start one with: {command}"
            )
        return f"LAG HISTORY of group {d['group']}\n\n" + format_table(d["samples"], columns)

    emit(args, data, render)
    return 0


def register_monitor(actions: Any, common: argparse.ArgumentParser) -> None:
    """Add ``overview`` and ``history`` to the ``consumer`` actions."""
    add_command(
        actions,
        "overview",
        "every group: state, lag, status, rates, eta, retention headroom (AT_RISK)",
        common,
        _overview,
    )
    history = add_command(
        actions, "history", "a group's sampled lag over time (the lag history)", common, _history
    )
    history.add_argument("group", metavar="GROUP")
    history.add_argument(
        "--since",
        metavar="T",
        help="a duration back from now (6h) or an ISO 8601 date-time (default: 6h)",
    )
    history.add_argument(
        "--until", metavar="T", help="a duration back from now or a date-time (default: now)"
    )
    history.add_argument("--by-bucket", action="store_true", help="one row per bucket and sample")
