"""Lag health rules (docs/concepts.md), each in order: the first that applies decides."""

from __future__ import annotations

import pytest

import leasekit as lk
from leasekit.consumers.admin import health
from leasekit.zk.formats import Commit

TB = lk.TableBucket
NOW = 1_000_000


def _window(*commits):
    """(seconds before NOW, offset, log end) per commit, oldest first."""
    return [Commit(NOW - s * 1000, o, e) for s, o, e in commits]


CASES = [
    # (rule, window, lag now, owned by a live member, expected)
    ("1 lag now 0 wins over a rewind", _window((30, 10, 20), (20, 5, 20)), 0, True, "OK"),
    ("1 lag now 0 wins over a stop", _window((600, 10, 20)), 0, False, "OK"),
    ("2 rewind", _window((30, 10, 20), (20, 5, 25), (10, 8, 30)), 5, True, "REWIND"),
    ("2 rewind before stop", _window((900, 10, 20), (800, 5, 25)), 5, False, "REWIND"),
    (
        "3 stop: unowned, idle past stop_after",
        _window((200, 10, 20), (120, 12, 20)),
        8,
        False,
        "STOP",
    ),
    (
        "3 stop before zero lag at a commit (Burrow #290)",
        _window((200, 20, 20), (120, 20, 25)),
        8,
        False,
        "STOP",
    ),
    (
        "3 no stop when idle shorter than the window span",
        _window((1000, 10, 20), (500, 11, 20), (90, 12, 25)),
        8,
        False,
        "OK",
    ),
    ("4 lag 0 at some commit", _window((50, 10, 20), (40, 20, 20), (30, 21, 25)), 9, True, "OK"),
    (
        "4 zero lag at a commit wins over a stall",
        _window((200, 20, 20), (100, 21, 21)),
        5,
        True,
        "OK",
    ),
    (
        "5 stall: owned, no commit past stall_after",
        _window((300, 10, 20), (90, 12, 25)),
        8,
        True,
        "STALL",
    ),
    (
        "6 warn: lag grew at every step",
        _window((30, 10, 20), (20, 12, 25), (10, 14, 30)),
        16,
        True,
        "WARN",
    ),
    ("6 no warn with two commits", _window((20, 12, 25), (10, 14, 30)), 16, True, "OK"),
    (
        "6 no warn when lag held once",
        _window((30, 10, 20), (20, 15, 25), (10, 20, 30)),
        10,
        True,
        "OK",
    ),
    ("7 otherwise ok", _window((30, 10, 20), (20, 15, 22), (10, 18, 23)), 5, True, "OK"),
]


@pytest.mark.parametrize("rule, window, lag, owned, expected", CASES, ids=[c[0] for c in CASES])
def test_bucket_status_rules_in_order(rule, window, lag, owned, expected):
    # lag health, rules 1-7 (docs/concepts.md)
    assert health.bucket_status(window, lag, owned, NOW) == expected


def test_thresholds_are_parameters():
    window = _window((100, 10, 20))
    assert health.bucket_status(window, 8, True, NOW) == "STALL"
    assert health.bucket_status(window, 8, True, NOW, stall_after_ms=200_000) == "OK"
    assert health.bucket_status(window, 8, False, NOW) == "STOP"
    assert health.bucket_status(window, 8, False, NOW, stop_after_ms=200_000) == "OK"


def test_group_status_is_the_worst_bucket_with_errors_as_err():
    assert health.group_status([]).status == "OK"
    assert health.group_status([(TB("t", 0), "OK"), (TB("t", 1), "WARN")]).status == "WARN"
    # MISSING: a lost segment file (docs/concepts.md)
    for err in ("STOP", "STALL", "REWIND", "MISSING"):
        status = health.group_status([(TB("t", 0), "WARN"), (TB("t", 1), err)])
        assert status.status == "ERR" and status.buckets[TB("t", 1)] == err


def _burrow(now_s, *commits):
    """Commits (epoch seconds, offset, lag at commit) as a window, and the time now in ms."""
    return [Commit(int(t * 1000), o, o + lag) for t, o, lag in commits], int(now_s * 1000)


_RAMP = [(100, 1000, 0), (200, 2000, 50), (300, 3000, 100), (400, 4000, 150), (500, 5000, 200)]
_RAMP_LAGGING = [
    (100, 1000, 50),
    (200, 2000, 100),
    (300, 3000, 150),
    (400, 4000, 200),
    (500, 5000, 250),
]
_STEADY = [(1512224618.356 + i, 792748079 + i, 0) for i in range(15)][
    -10:
]  # our window keeps 10 commits

# Burrow's evaluator cases (its caching_test.go, numbered as there), in our model: lag health
# has no broker-offset window, repeated identical commits are not stored (so "the offset never
# moved" is a single commit long ago, and a live owner makes it STALL), and Burrow's STOP has
# no minimum idle time (stop_after 0 here).
BURROW = [
    (0, _burrow(600, *_RAMP), 200, False, "OK"),
    (1, _burrow(900, *_RAMP), 200, False, "OK"),  # idle 400 s equals the span: not greater
    (2, _burrow(1000, *_RAMP), 200, False, "STOP"),  # STOP before the zero lag at a commit (#290)
    (3, _burrow(1000, *_RAMP_LAGGING), 250, False, "STOP"),
    (4, _burrow(600, (100, 1000, 0)), 200, True, "OK"),
    (5, _burrow(600, (100, 1000, 100)), 300, True, "STALL"),
    (6, _burrow(600, (100, 1000, 100)), 100, True, "STALL"),
    (
        7,
        _burrow(
            600,
            (100, 1000, 100),
            (200, 2000, 150),
            (300, 3000, 200),
            (400, 2000, 1250),
            (500, 4000, 300),
        ),
        300,
        True,
        "REWIND",
    ),
    (8, _burrow(1000, *_RAMP_LAGGING), 0, False, "OK"),
    (9, _burrow(1512224650, *_STEADY), 931, False, "STOP"),
]


@pytest.mark.parametrize(
    "case, window_now, lag, owned, expected", BURROW, ids=[f"burrow-{c[0]}" for c in BURROW]
)
def test_burrow_evaluator_cases(case, window_now, lag, owned, expected):
    # docs/concepts.md: Burrow's own cases give the same status under our rules
    window, now = window_now
    assert health.bucket_status(window, lag, owned, now, stop_after_ms=0) == expected
