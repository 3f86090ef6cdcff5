"""Lag health of a group's buckets (docs/concepts.md, after Burrow's evaluator): a pure function
of the window of last commits (each with its time and the log end then), the lag now,
whether a live member owns the bucket and the time now. The first rule that applies decides.
Before them, a bucket whose next record (at the committed offset) lies in a segment whose file
is missing while the metadata lists it is ``MISSING``: no consumer can read on (an ERR)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ...structs import GroupStatus, TableBucket

if TYPE_CHECKING:
    from ...zk.formats import Commit

__all__ = [
    "OK",
    "WARN",
    "ERR",
    "STOP",
    "STALL",
    "REWIND",
    "MISSING",
    "GroupStatus",
    "bucket_status",
    "group_status",
    "STOP_AFTER_MS",
    "STALL_AFTER_MS",
]

OK, WARN, ERR = "OK", "WARN", "ERR"
STOP, STALL, REWIND = "STOP", "STALL", "REWIND"
MISSING = "MISSING"
"""The segment file holding the bucket's next record is missing (reported as ERR)."""
STOP_AFTER_MS = STALL_AFTER_MS = 60_000
_SEVERITY = {OK: 0, WARN: 1, ERR: 2}


def bucket_status(
    window: Sequence[Commit],
    lag_now: int,
    owned: bool,
    now_ms: int,
    *,
    stop_after_ms: int = STOP_AFTER_MS,
    stall_after_ms: int = STALL_AFTER_MS,
) -> str:
    """One bucket's status from its commit ``window`` (oldest first, not empty)."""
    if lag_now <= 0:  # 1
        return OK
    if any(b.offset < a.offset for a, b in zip(window, window[1:])):  # 2
        return REWIND
    idle = now_ms - window[-1].time_ms
    span = window[-1].time_ms - window[0].time_ms
    if not owned and idle > max(span, stop_after_ms):  # 3
        return STOP
    lags = [c.log_end - c.offset for c in window]
    if any(lag <= 0 for lag in lags):  # 4
        return OK
    if owned and idle > stall_after_ms:  # 5
        return STALL
    if len(lags) >= 3 and all(b > a for a, b in zip(lags, lags[1:])):  # 6
        return WARN
    return OK  # 7


def group_status(statuses: Iterable[tuple[TableBucket, str]]) -> GroupStatus:
    """The group's status from its buckets' (the worst one; none: OK)."""
    buckets = dict(statuses)
    worst = OK
    for status in buckets.values():
        level = OK if status == OK else WARN if status == WARN else ERR
        if _SEVERITY[level] > _SEVERITY[worst]:
            worst = level
    return GroupStatus(worst, buckets)
