"""notebooks/consumer_lag_report.ipynb run through papermill with a real kernel against the
session's ZooKeeper: the per-bucket table goes to a CSV, one verdict line ends
the run, and the run fails with ``LagAlert`` when the group is ERR or over a threshold
(lag and time lag measured now, docs/consumers.md; Burrow's rules for the status)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from lag_report_run import (
    GROUP,
    HISTORY_AGES_S,
    HISTORY_LAGS,
    chart_svg,
    history_rows,
    make_orders,
    not_static,
    series_points,
    x_ticks,
)
from lag_report_run import run as run_report

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag import history

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    """Table ``orders`` (2 buckets) read to its end by the group ``billing``, committed, with
    no live member (``lag_report_run.make_orders``)."""
    return make_orders(conn)


def _run(tmp_path, conn, **parameters):
    """Execute the notebook in ``tmp_path``; (output notebook, CSV rows, the error or None)."""
    nb, _, rows, error = run_report(tmp_path, conn, **parameters)
    return nb, rows, error


def _stream(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _verdicts(nb) -> list[str]:
    text = "".join(_stream(nb, c.id) for c in nb.cells if c.cell_type == "code")
    return [line for line in text.splitlines() if line.startswith("VERDICT:")]


def _errors(nb) -> list[str]:
    return [
        o.ename
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]


def _by_bucket(rows) -> dict[int, dict[str, str]]:
    return {int(r["bucket"]): r for r in rows}


def test_healthy_group_passes_with_ok_verdict_csv_and_plot(tmp_path, conn, orders):
    # lag is measured now (log end now - committed), so a few rows appended after the
    # last commit show up; under max_lag per bucket and with lag 0 at a commit (Burrow rule 4)
    # the group is OK and the run passes
    committed = orders.end_offsets()
    orders.append([{"id": 1000 + i, "v": "b"} for i in range(4)])
    ends = orders.end_offsets()
    nb, rows, error = _run(tmp_path, conn)
    assert error is None and _errors(nb) == []
    verdicts = _verdicts(nb)
    assert len(verdicts) == 1
    worst = max(ends[tb] - committed[tb] for tb in ends)
    assert verdicts[0].startswith(f"VERDICT: OK — group {GROUP}, status OK, max lag {worst},")
    assert len(rows) == 2  # one row per bucket
    for bucket, row in _by_bucket(rows).items():
        tb = TB("orders", bucket)
        assert int(row["current_offset"]) == committed[tb]
        assert int(row["log_end_offset"]) == ends[tb]
        assert int(row["lag"]) == ends[tb] - committed[tb]
        assert row["status"] == "OK" and row["group"] == GROUP
    # the table as people read it: headed in words, "-" where there is no value
    (table,) = [
        o["data"]["text/html"]
        for o in next(c for c in nb.cells if c.get("id") == "buckets").outputs
        if "text/html" in o.get("data", {})
    ]
    assert "<th>log end</th>" in table and "<th>last commit</th>" in table
    assert "current_offset" not in table and "NA&gt;" not in table and "NaN" not in table
    # lag over time: an image on a 24-hour UTC axis, with no point printed above it
    history = next(c for c in nb.cells if c.get("id") == "history")
    assert [o.output_type for o in history.outputs] == ["stream", "execute_result"]
    (said,) = _stream(nb, "history").splitlines()  # one line, not a line per point
    assert said.startswith(f"no lag history of {GROUP} in the last 6h: the janitor")
    svg = chart_svg(nb)  # the chart is saved as an image, not a widget or Figure(...)
    assert not history.outputs[1]["data"]["text/plain"].startswith("Figure(")
    ticks = x_ticks(svg)
    assert len(ticks) == len(set(ticks)) >= 3  # ticks a whole step apart, no label twice
    assert all(
        re.fullmatch(r"\d\d:\d\d", t) or re.fullmatch(r"\d\d-\d\d \d\d:\d\d", t) for t in ticks
    )
    assert [len(p) for p in series_points(svg)] == [1]  # no sample: the lag now only
    assert not_static(nb) == []  # every output reads without the kernel
    # durations read as people read them, never pandas' "0 days 00:00:25.893000"
    assert "days" not in _stream(nb, "buckets") + _html(nb, "buckets")


def _html(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)


def test_lag_over_threshold_fails_the_run_after_verdict_and_csv(tmp_path, conn, orders):
    # the threshold is per bucket: every bucket more than max_lag behind is named; the
    # status is still OK (rule 4: lag was 0 at a commit), the threshold alone fails the run
    committed = orders.end_offsets()
    orders.append([{"id": 2000 + i, "v": "c"} for i in range(80)])
    ends = orders.end_offsets()
    assert all(ends[tb] - committed[tb] > 10 for tb in ends)
    nb, rows, error = _run(tmp_path, conn)
    assert error is not None and error.ename == "LagAlert"
    assert _errors(nb) == ["LagAlert"]
    (verdict,) = _verdicts(nb)
    assert verdict.startswith(f"VERDICT: ALERT — group {GROUP}, status OK, ")
    assert "lag over 10 in 2 bucket(s) (" in verdict
    for tb in ends:
        assert f"{tb.table}/{tb.bucket} {ends[tb] - committed[tb]}" in verdict
    assert {b: int(r["lag"]) for b, r in _by_bucket(rows).items()} == {
        tb.bucket: ends[tb] - committed[tb] for tb in ends
    }


def test_stopped_group_is_err_and_fails_the_run(tmp_path, conn, orders):
    # the STOP rule (Burrow's STOP, ahead of the zero-lag-at-commit rule since Burrow #290): no
    # live member owns the lagging buckets and nothing was committed for longer than
    # max(window span, stop_after) -> STOP, reported as the group's ERR; under every
    # threshold, the status alone fails the run
    orders.append([{"id": 3000 + i, "v": "d"} for i in range(4)])
    nb, rows, error = _run(tmp_path, conn, stop_after="0s", max_lag=1_000)
    assert error is not None and error.ename == "LagAlert"
    (verdict,) = _verdicts(nb)
    lagging = sorted(int(r["bucket"]) for r in rows if int(r["lag"]) > 0)
    assert lagging
    assert verdict.startswith(f"VERDICT: ALERT — group {GROUP}, status ERR, ")
    assert "status ERR (" + ", ".join(f"orders/{b} STOP" for b in lagging) + ")" in verdict
    assert "lag over" not in verdict
    assert {int(r["bucket"]): r["status"] for r in rows} == {
        b: "STOP" if b in lagging else "OK" for b in range(2)
    }  # rule 1: lag 0 is OK


def test_time_lag_over_threshold_fails_the_run(tmp_path, conn, orders):
    # time lag = ZooKeeper time now - _timestamp of the first record not yet consumed;
    # max_time_lag "0s" is crossed by any bucket behind at all
    orders.append([{"id": 4000 + i, "v": "e"} for i in range(4)])
    nb, rows, error = _run(tmp_path, conn, max_time_lag="0s", max_lag=1_000)
    assert error is not None and error.ename == "LagAlert"
    (verdict,) = _verdicts(nb)
    lagging = [r for r in rows if int(r["lag"]) > 0]
    assert all(float(r["time_lag_seconds"]) > 0 for r in lagging)
    assert f"time lag over 0ms in {len(lagging)} bucket(s) (" in verdict


def test_unknown_group_fails_the_run_at_once_naming_the_groups(tmp_path, conn, orders):
    # a group id that is no group of the namespace (a misspelt id) is an error, never "status OK"
    nb, rows, error = _run(tmp_path, conn, group_id="billing-typo")
    assert error is not None and error.ename == "LagAlert"
    expected = (
        f"VERDICT: ALERT — group billing-typo: no such consumer group in namespace "
        f"{conn.namespace} (its groups: {GROUP})"
    )
    assert _verdicts(nb) == [expected] and error.evalue == expected
    assert "status OK" not in "".join(_stream(nb, c.id) for c in nb.cells if c.cell_type == "code")
    assert rows is None  # it failed before writing a report


def test_group_without_commits_fails_the_run(tmp_path, conn, orders):
    # a group that has live members but never committed has nothing to judge: it alerts
    with conn.consumer("orders", group_id="newcomer", enable_auto_commit=False) as consumer:
        consumer.poll("1s")
        nb, rows, error = _run(tmp_path, conn, group_id="newcomer")
    assert error is not None and error.ename == "LagAlert"
    (verdict,) = _verdicts(nb)
    assert verdict.startswith("VERDICT: ALERT — group newcomer, ")
    assert verdict.endswith(": no committed offsets")


def test_lag_over_time_reads_the_lag_history_of_the_last_hours(
    tmp_path, conn, orders, lag_report_with_history
):
    # M1: the chart covers hours of samples (not the last 10 commits); `since` decides how many
    rows = history_rows(conn, GROUP, HISTORY_AGES_S, 5, 9)
    history.append_rows(testing.context(conn), rows)
    nb, _, error = _run(tmp_path, conn)
    assert error is None, error
    text = _stream(nb, "history")
    assert "lag history: 3 samples, " in text and "(last 6h)" in text
    # the same samples in the shared run over 8h (the browser test reads what it saved)
    (nb, _, _, error), _, end = lag_report_with_history
    assert error is None and "lag history: 4 samples, " in _stream(nb, "history")
    svg = chart_svg(nb)
    (points,) = series_points(svg)
    assert len(points) == 2 * 5 - 1  # 4 samples (both buckets summed) and the lag now, stepped
    lags = [2 * lag for lag in HISTORY_LAGS] + [0]  # both buckets' samples, then the lag now
    heights = [y for _, y in points[0::2]]  # at each point (SVG's y grows downwards)
    assert sorted(range(5), key=lambda i: heights[i]) == sorted(range(5), key=lambda i: -lags[i])
    # 8 hours: hours and minutes on a 24-hour clock, with the date when they cross midnight
    days = {
        datetime.fromtimestamp(ms / 1000, timezone.utc).date() for ms in (end - 8 * 3600_000, end)
    }
    ticks = x_ticks(svg)
    assert len(ticks) == len(set(ticks)) >= 3
    form = r"\d\d:\d\d" if len(days) == 1 else r"(\d\d-\d\d )?\d\d:\d\d"
    assert all(re.fullmatch(form, t) for t in ticks), ticks
    assert not_static(nb) == []


def test_group_at_risk_fails_the_run(tmp_path, conn, orders):
    # M3: retention headroom (log.retention 7d minus the age of the first unconsumed record)
    # below monitor.risk-threshold makes the group AT_RISK, and the report alerts
    orders.append([{"id": 5000 + i, "v": "f"} for i in range(4)])
    conn.update_settings({"monitor.risk-threshold": "8d"})
    nb, _, error = _run(tmp_path, conn, max_lag=1_000, stop_after="7d")
    assert error is not None and error.ename == "LagAlert"
    (verdict,) = _verdicts(nb)
    assert verdict.startswith(f"VERDICT: ALERT — group {GROUP}, status OK, ")
    assert "AT_RISK (retention may delete unconsumed records in 6d 23h, eta " in verdict
    assert "retention headroom 6d 23h — AT_RISK" in _stream(nb, "health")
