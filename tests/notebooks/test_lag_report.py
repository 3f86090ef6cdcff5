"""notebooks/consumer_lag_report.ipynb run through papermill with a real kernel against the
session's ZooKeeper (DESIGN §10): the per-bucket table goes to a CSV, one verdict line ends
the run, and the run fails with ``LagAlert`` when the group is ERR or over a threshold
(§6.6 lag and time lag measured now; Burrow's rules for the status)."""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import papermill
import pytest
from papermill.exceptions import PapermillExecutionError

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag import history

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "consumer_lag_report.ipynb"
TB = lk.TableBucket
GROUP = "billing"


@pytest.fixture
def orders(conn):
    """Table ``orders`` (2 buckets) read to its end by the group ``billing`` in three rounds,
    each committed explicitly; the consumer is closed, so no live member owns a bucket."""
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    with conn.consumer(
        "orders", group_id=GROUP, enable_auto_commit=False, auto_offset_reset="earliest"
    ) as consumer:
        for round_ in range(3):
            table.append([{"id": round_ * 100 + i, "v": "a"} for i in range(20)])
            seen = 0
            while seen < 20:
                seen += sum(batch.num_rows for batch in consumer.poll("1s").values())
            consumer.commit()
    return table


def _run(tmp_path: Path, conn, **parameters):
    """Execute the notebook in ``tmp_path``; (output notebook, CSV rows, the error or None)."""
    out = tmp_path / "lag_report_out.ipynb"
    params = {
        "zookeeper": conn.zookeeper,
        "warehouse": conn.warehouse,
        "namespace": conn.namespace,
        "group_id": GROUP,
        "max_lag": 10,
        "max_time_lag": "15m",
        "output_path": "report.csv",
        **parameters,
    }
    error = None
    try:
        papermill.execute_notebook(
            str(NOTEBOOK),
            str(out),
            parameters=params,
            kernel_name="python3",
            cwd=str(tmp_path),
            progress_bar=False,
        )
    except PapermillExecutionError as exc:
        error = exc
    nb = nbformat.read(out, as_version=4)  # papermill writes it on failure too
    report = tmp_path / params["output_path"]
    rows = list(csv.DictReader(report.open())) if report.exists() else None
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
    # §6.6: lag is measured now (log end now - committed), so a few rows appended after the
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
    # lag over time: a bqplot Figure on a 24-hour UTC axis, with no point printed above it
    history = next(c for c in nb.cells if c.get("id") == "history")
    assert [o.output_type for o in history.outputs] == ["stream", "execute_result"]
    (said,) = _stream(nb, "history").splitlines()  # one line, not a line per point
    assert said.startswith(f"no lag history of {GROUP} in the last 6h: the janitor")
    plot = history.outputs[1]
    assert "application/vnd.jupyter.widget-view+json" in plot["data"]
    assert plot["data"]["text/plain"].startswith("Figure(")
    (time_axis,) = [a for a in _axes(nb) if a["label"] == "time (UTC)"]
    assert time_axis["tick_format"] in ("%H:%M:%S", "%H:%M", "%Y-%m-%d %H:%M")  # no %I
    assert time_axis["tick_values"] is not None  # ticks a whole step apart, no label twice
    # durations read as people read them, never pandas' "0 days 00:00:25.893000"
    assert "days" not in _stream(nb, "buckets") + _html(nb, "buckets")


def _axes(nb) -> list[dict]:
    """The bqplot axes of the saved widget state."""
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return [m["state"] for m in state.values() if m["model_name"] == "AxisModel"]


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
    # §6.6 rule 3 (Burrow's STOP, ahead of the zero-lag-at-commit rule since Burrow #290): no
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


def _history_rows(conn, group, ages_s, committed, end):
    """Lag history samples of ``group`` for both buckets of ``orders``, ``ages_s`` seconds ago."""
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    return [
        history.HistoryRow(now - age * 1000, group, "orders", b, committed, end, end - committed, 0)
        for age in ages_s
        for b in (0, 1)
    ]


def test_lag_over_time_reads_the_lag_history_of_the_last_hours(tmp_path, conn, orders):
    # M1: the chart covers hours of samples (not the last 10 commits); `since` decides how many
    rows = _history_rows(conn, GROUP, [7 * 3600, 5 * 3600, 3 * 3600, 600], 5, 9)
    history.append_rows(testing.context(conn), rows)
    nb, _, error = _run(tmp_path, conn)
    assert error is None, error
    text = _stream(nb, "history")
    assert "lag history: 3 samples, " in text and "(last 6h)" in text
    nb, _, error = _run(tmp_path, conn, since="8h")
    end = testing.context(conn).server_clock.fresh_ms()  # after the chart's right end (now)
    assert error is None and "lag history: 4 samples, " in _stream(nb, "history")
    (time_axis,) = [a for a in _axes(nb) if a["label"] == "time (UTC)"]
    # 7 hours: hours and minutes on a 24-hour clock, with the date when they cross midnight
    days = {
        datetime.fromtimestamp(ms / 1000, timezone.utc).date()
        for ms in (min(r.time_ms for r in rows), end)
    }
    assert time_axis["tick_format"] == ("%H:%M" if len(days) == 1 else "%Y-%m-%d %H:%M")


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
