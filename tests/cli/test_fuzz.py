"""The command line with fuzzed durations, offsets and bucket numbers, run in-process against
the real ZooKeeper fixture: never a Python traceback, and for bad values a non-zero exit with a
readable error (docs/security.md, docs/cli.md)."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from helpers import grow
from helpers import run_cli as run
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from leasekit.cli.common import duration_arg
from leasekit.durations import parse_duration

CLI_FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)

numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-3, 10),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -(2**63)]),
).map(str)
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, 1e308, float("inf"), float("nan")]),
).map(str)
texts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
duration_texts = st.one_of(
    st.from_regex(r"[0-9]{1,30}(\.[0-9]{1,6})?(ms|s|m|h|d)", fullmatch=True),
    st.sampled_from(
        [
            "999999999999d",
            "9" * 400 + "s",
            "1" * 5000 + "d",
            "1e300s",
            "-1s",
            "100000d",
            "100001d",
            "8d",
            "0s",
        ]
    ),
)
cli_durations = st.one_of(numbers, floats, texts, duration_texts)
cli_numbers = st.one_of(numbers, floats, texts)
INT = re.compile(r"-?[0-9]+")


@pytest.fixture
def pinned(conn):
    """Table "t" (2 buckets, snapshots), lease "L" pinning them, group "g" with offsets."""
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    grow(table, 1)
    conn.lease("L", "1h").acquire_latest("t")
    with conn.consumer(
        "t", group_id="g", auto_offset_reset="earliest", enable_auto_commit=False
    ) as c:
        while not c.assignment():
            c.poll(timeout="0.05s")
        c.commit({tb: 0 for tb in c.assignment()})
    return table


def _duration(text: str) -> timedelta | None:
    """The duration the CLI reads from ``text``, None if it is not one."""
    try:
        return parse_duration(duration_arg(text))
    except ValueError:
        return None


def _readable(code: int, out: str, err: str, bad: bool | None) -> None:
    """No traceback; a failure is a readable error line; a bad value fails."""
    assert "Traceback" not in out + err
    if bad:
        assert code != 0, out
    if code != 0:
        lines = err.strip().splitlines()
        assert lines and "error:" in lines[-1] and len(lines[-1]) < 400, err


def _bad_int(text: str, low: int, high: int) -> bool | None:
    """Whether the CLI must refuse ``text`` as a whole number in [low, high); None when
    unsure (texts int() reads with spaces or underscores)."""
    if INT.fullmatch(text):
        return not low <= int(text) < high
    return None if re.fullmatch(r"[\s0-9_+-]+", text) else True


@CLI_FUZZ
@given(duration=cli_durations, renew=cli_durations)
@example(duration="999999999999d", renew="999999999999d")
@example(duration=str(2**70), renew="inf")
def test_cli_fuzz_lease_durations(capsys, target, pinned, duration, renew):
    # L2: lease acquire --duration, lease renew --duration
    for argv, text in (
        (["lease", "acquire", "fz", "--table", "t", f"--duration={duration}"], duration),
        (["lease", "renew", "fz", f"--duration={renew}"], renew),
    ):
        value = _duration(text)
        bad = value is None or not timedelta(0) < value <= timedelta(days=7)
        _readable(*run(capsys, *target, *argv), bad)


@CLI_FUZZ
@given(interval=cli_durations)
@example(interval="999999999999d")
@example(interval=str(2**70))
@example(interval="nan")
def test_cli_fuzz_janitor_interval(capsys, target, interval):
    # a bad --interval fails validation before anything starts
    value = _duration(interval)
    assume(value is None or value <= timedelta(0))
    started = time.monotonic()
    code, out, err = run(capsys, *target, "janitor", f"--interval={interval}")
    _readable(code, out, err, True)
    assert code == 2 and time.monotonic() - started < 5


@CLI_FUZZ
@given(option=st.sampled_from(["--to-offset", "--shift-by", "--by-duration"]), value=cli_numbers)
@example(option="--to-offset", value=str(2**64))
@example(option="--shift-by", value=str(-(2**70)))
@example(option="--by-duration", value="999999999999d")
def test_cli_fuzz_reset_offsets(capsys, target, pinned, option, value):
    # C13: reset-offsets dry runs with any target
    if option == "--to-offset":
        bad = _bad_int(value, 0, 2**63)
    elif option == "--shift-by":
        bad = _bad_int(value, -(2**63) + 1, 2**63)
    else:
        bad = _duration(value) is None
    _readable(*run(capsys, *target, "consumer", "reset-offsets", "g", f"{option}={value}"), bad)


@CLI_FUZZ
@given(bucket=cli_numbers)
@example(bucket=str(2**64))
@example(bucket="-1")
@example(bucket="99")
def test_cli_fuzz_release_bucket(capsys, target, pinned, bucket):
    # L9: lease release --bucket with any number
    code, out, err = run(
        capsys, *target, "lease", "release", "L", "--table", "t", f"--bucket={bucket}"
    )
    _readable(code, out, err, _bad_int(bucket, 0, 2**63))
    if code == 0 and INT.fullmatch(bucket) and int(bucket) >= 2:
        assert f"bucket(s) {int(bucket)} of t were not pinned by lease L" in out
