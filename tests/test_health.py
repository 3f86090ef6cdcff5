"""Lag health rules of DESIGN §6.6, each in order: the first that applies decides."""

from __future__ import annotations

import pytest

import leasekit as lk
from leasekit.consumers import health
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
    ("3 stop: unowned, idle past stop_after", _window((200, 10, 20), (120, 12, 20)), 8, False, "STOP"),
    ("3 stop before zero lag at a commit (Burrow #290)", _window((200, 20, 20), (120, 20, 25)), 8, False, "STOP"),
    ("3 no stop when idle shorter than the window span",
     _window((1000, 10, 20), (500, 11, 20), (90, 12, 25)), 8, False, "OK"),
    ("4 lag 0 at some commit", _window((50, 10, 20), (40, 20, 20), (30, 21, 25)), 9, True, "OK"),
    ("4 zero lag at a commit wins over a stall", _window((200, 20, 20), (100, 21, 21)), 5, True, "OK"),
    ("5 stall: owned, no commit past stall_after", _window((300, 10, 20), (90, 12, 25)), 8, True, "STALL"),
    ("6 warn: lag grew at every step", _window((30, 10, 20), (20, 12, 25), (10, 14, 30)), 16, True, "WARN"),
    ("6 no warn with two commits", _window((20, 12, 25), (10, 14, 30)), 16, True, "OK"),
    ("6 no warn when lag held once", _window((30, 10, 20), (20, 15, 25), (10, 20, 30)), 10, True, "OK"),
    ("7 otherwise ok", _window((30, 10, 20), (20, 15, 22), (10, 18, 23)), 5, True, "OK"),
]


@pytest.mark.parametrize("rule, window, lag, owned, expected", CASES, ids=[c[0] for c in CASES])
def test_bucket_status_rules_in_order(rule, window, lag, owned, expected):
    # §6.6 lag health, rules 1-7
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
    for err in ("STOP", "STALL", "REWIND"):
        status = health.group_status([(TB("t", 0), "WARN"), (TB("t", 1), err)])
        assert status.status == "ERR" and status.buckets[TB("t", 1)] == err
