"""``leasekit consumer overview|history`` (docs/cli.md, docs/monitoring.md): text tables with
durations as people read them, ``--json`` in exact forms."""

from __future__ import annotations

import time

import pytest
from helpers import run_cli as run
from helpers import run_cli_json as run_json

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag import history

TB = lk.TableBucket


@pytest.fixture
def sampled(conn):
    """Group billing, 18 records behind in bucket 0, sampled twice 1.2 s apart."""
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(40)])
    with conn.consumer(group_id="billing", enable_auto_commit=False) as c:
        c.assign([TB("orders", 0)])
        c.commit({TB("orders", 0): 2})
    conn.update_settings({"monitor.interval": "100ms"})
    ctx = testing.context(conn)
    assert history.sample(ctx) == 2
    time.sleep(1.2)
    assert history.sample(ctx) == 2
    return table


def test_overview_text_and_json(capsys, target, sampled):
    code, out, err = run(capsys, "consumer", "overview", *target)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == [
        "GROUP",
        "STATE",
        "MEMBERS",
        "STATUS",
        "TOTAL-LAG",
        "MAX-TIME-LAG",
        "CONSUME-RATE",
        "PRODUCE-RATE",
        "ETA",
        "RETENTION-HEADROOM",
        "LAST-COMMIT",
    ]
    lag = sampled.end_offsets()[TB("orders", 0)] - 2
    assert lines[1].split()[:5] == ["billing", "empty", "0", "OK", str(lag)]
    assert "6d 23h" in lines[1]  # the headroom, as people read durations
    data = run_json(capsys, "consumer", "overview", *target)
    (row,) = data["groups"]
    assert row["group"] == "billing" and row["total_lag"] == lag and row["tables"] == ["orders"]
    assert row["consume_rate"] == 0.0 and row["produce_rate"] == 0.0
    assert row["eta"] is None  # not catching up
    # JSON carries plain seconds, never "166403ms"
    assert 6 * 86400 < row["retention_headroom"] <= 7 * 86400
    assert isinstance(row["max_time_lag"], float)
    assert row["last_commit"].endswith("Z")


def test_overview_marks_groups_at_risk(capsys, target, sampled, conn):
    # M3: a group at risk is named under the table
    conn.update_settings({"monitor.risk-threshold": "8d"})
    code, out, _ = run(capsys, "consumer", "overview", *target)
    assert code == 0 and "AT_RISK" in out
    assert out.rstrip().endswith("AT RISK of losing records to retention: billing")


def test_overview_shows_a_falling_behind_group_as_behind_with_eta_never(capsys, target, conn):
    # M6: BEHIND in the status column and named under the table; its eta reads "never", and
    # "-" is left for a group without two samples in the rate window
    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(300)])
    for group in ("slow", "new"):
        with conn.consumer(group_id=group, enable_auto_commit=False) as c:
            c.assign([TB("orders", 0)])
            c.commit({TB("orders", 0): 100})
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    rows = [(now - 120_000, 0, 0), (now - 30_000, 30, 270)]  # consume 1/3 of produce
    history.append_rows(
        ctx,
        [history.HistoryRow(t, "slow", "orders", 0, c, e, e - c, 0) for t, c, e in rows],
    )
    code, out, err = run(capsys, "consumer", "overview", *target)
    assert code == 0, err
    lines = out.splitlines()
    header = lines[0].split()
    new, slow = (dict(zip(header, line.split()[: len(header)])) for line in lines[1:3])
    assert slow["GROUP"] == "slow" and slow["STATUS"] == "BEHIND" and slow["ETA"] == "never"
    assert new["GROUP"] == "new" and new["STATUS"] == "OK" and new["ETA"] == "-"
    assert out.rstrip().endswith(
        "BEHIND, consuming slower than their tables grow (their lag is rising): slow"
    )
    data = run_json(capsys, "consumer", "overview", *target)
    assert {r["group"]: r["status"] for r in data["groups"]} == {"new": "OK", "slow": "BEHIND"}


def test_history_text_json_and_by_bucket(capsys, target, sampled):
    code, out, err = run(capsys, "consumer", "history", "billing", *target)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "LAG HISTORY of group billing"
    assert lines[2].split() == ["TIME", "LAG", "TIME-LAG", "COMMITTED", "END"]
    assert len(lines) == 5  # two samples
    assert lines[3].split()[1] == str(sampled.end_offsets()[TB("orders", 0)] - 2)
    data = run_json(capsys, "consumer", "history", "billing", "--since", "1h", *target)
    assert [s["committed"] for s in data["samples"]] == [2, 2]
    assert all(s["time"].endswith("Z") for s in data["samples"])
    assert isinstance(data["samples"][0]["time_lag"], float)  # JSON: seconds
    newest = data["samples"][1]["time"]
    data = run_json(capsys, "consumer", "history", "billing", "--since", newest, *target)
    assert len(data["samples"]) == 1
    data = run_json(capsys, "consumer", "history", "billing", "--by-bucket", *target)
    assert [(s["table"], s["bucket"]) for s in data["samples"]] == [
        ("orders", 0),
        ("orders", 1),
    ] * 2
    data = run_json(
        capsys, "consumer", "history", "billing", "--since", "2h", "--until", "1h", *target
    )
    assert data["samples"] == []


def test_history_without_samples_says_why_and_how_to_record_them(capsys, target, conn):
    # M1: no sampler ran: the answer names the command that starts one
    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(10)])
    with conn.consumer(group_id="fresh", enable_auto_commit=False) as c:
        c.assign([TB("orders", 0)])
        c.commit({TB("orders", 0): 2})
    code, out, err = run(capsys, "consumer", "history", "fresh", *target)
    assert code == 0, err
    assert out.startswith("no lag history samples of group fresh in that range")
    assert "Start one with: leasekit janitor (or: leasekit exporter)" in out


def test_history_of_an_unknown_group_and_bad_times_are_errors(capsys, target, sampled):
    code, _, err = run(capsys, "consumer", "history", "nobody", *target)
    assert code != 0 and "'nobody'" in err
    code, _, err = run(capsys, "consumer", "history", "billing", "--since", "yesterday", *target)
    assert code != 0 and "--since" in err
