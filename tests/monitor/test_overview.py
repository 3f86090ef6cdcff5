"""group_overview (M2, M3) on the real ZooKeeper: state, lag, rates from the lag
history, ETA, retention headroom and AT_RISK, checked exactly on constructed cases."""

from __future__ import annotations

import math
import time
from datetime import timedelta

import pandas as pd
import pytest

import leasekit as lk
from leasekit import testing
from leasekit.monitor.lag import history
from leasekit.monitor.lag.overview import OVERVIEW_COLUMNS

TB = lk.TableBucket


def _commit(conn, offsets, group):
    with conn.consumer(group_id=group, enable_auto_commit=False) as c:
        c.assign(list(offsets))
        c.commit(offsets)


def _row(conn, group):
    return conn.group_overview().set_index("group").loc[group]


def _samples(ctx, group, table, at_ms, committed, end):
    """History rows of ``group`` at ``at_ms`` for buckets 0 and 1 of ``table``."""
    return [
        history.HistoryRow(at_ms, group, table, b, committed, end, end - committed, 0)
        for b in (0, 1)
    ]


@pytest.fixture
def lagging(conn):
    """Group g, no live member, 300 records behind in each of 2 buckets (total lag 600), with
    samples 4 and 1 minutes ago that give consume 5/s and produce 2/s (ETA 200 s), and one
    sample outside the 5-minute rate window that must not count."""
    table = conn.create_table("t", "id BIGINT", "id", buckets=2, properties={"log.retention": "2h"})
    table.append([{"id": i} for i in range(1000)])
    ends = table.end_offsets()
    _commit(conn, {tb: end - 300 for tb, end in ends.items()}, "g")
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    rows = [
        *_samples(ctx, "g", "t", now - 400_000, 0, 0),  # outside the window
        *_samples(ctx, "g", "t", now - 240_000, 100, 1000),
        *_samples(ctx, "g", "t", now - 60_000, 100 + 450, 1000 + 180),  # +900 and +360 in 180 s
    ]
    history.append_rows(ctx, rows)
    return table


def test_rates_eta_headroom_and_at_risk_on_a_constructed_case(conn, lagging, clock):
    # M2: rates over the last monitor.rate-window of the history; eta = lag / (consume - produce)
    row = _row(conn, "g")
    assert row["consume_rate"] == 5.0 and row["produce_rate"] == 2.0
    assert row["total_lag"] == 600
    assert row["eta"] == pd.Timedelta(seconds=200)
    # M3: headroom = log.retention - age of the oldest record not consumed
    assert row["retention_headroom"] == pd.Timedelta(hours=2) - row["max_time_lag"]
    assert row["status"] == "OK"  # 2h of headroom: above the eta and the 1h risk threshold

    clock.advance(timedelta(minutes=90))
    row = _row(conn, "g")
    assert row["retention_headroom"] == pd.Timedelta(hours=2) - row["max_time_lag"]
    assert pd.Timedelta(minutes=29) < row["retention_headroom"] <= pd.Timedelta(minutes=30)
    # below monitor.risk-threshold (1h), but stopped with lag for 90 minutes: Burrow's ERR is
    # the worse status (M6: ERR > AT_RISK > BEHIND > WARN > OK)
    assert row["status"] == "ERR"

    clock.advance(timedelta(minutes=30, seconds=-100))
    row = _row(conn, "g")
    assert pd.Timedelta(seconds=99) < row["retention_headroom"] <= pd.Timedelta(seconds=100)
    assert row["eta"] == pd.Timedelta(seconds=200)
    assert row["status"] == "ERR"

    clock.advance(timedelta(hours=1))
    assert _row(conn, "g")["retention_headroom"] == pd.Timedelta(0)  # deletable already


def test_the_rate_window_decides_which_samples_count(conn, lagging):
    # M2: monitor.rate-window; fewer than two samples in it -> NaN rates and NaT eta
    conn.update_settings({"monitor.rate-window": "10m"})
    row = _row(conn, "g")  # the sample 400 s ago (all 0) is the first now
    assert row["consume_rate"] == pytest.approx(2 * 550 / 340)
    assert row["produce_rate"] == pytest.approx(2 * 1180 / 340)
    conn.update_settings({"monitor.rate-window": "2m"})
    row = _row(conn, "g")
    assert math.isnan(row["consume_rate"]) and math.isnan(row["produce_rate"])
    assert pd.isna(row["eta"])


def test_eta_is_zero_without_lag_and_nat_when_not_catching_up(conn):
    # M2
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(100)])
    ends = table.end_offsets()
    _commit(conn, dict(ends), "done")
    _commit(conn, {tb: 0 for tb in ends}, "slow")
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    history.append_rows(
        ctx,
        [
            *_samples(ctx, "slow", "t", now - 120_000, 0, 0),
            *_samples(ctx, "slow", "t", now - 60_000, 10, 50),  # consume 1/3 /s, produce 5/3
        ],
    )
    frame = conn.group_overview().set_index("group")
    assert frame.loc["done", "eta"] == pd.Timedelta(0)
    assert pd.isna(frame.loc["done", "retention_headroom"])  # nothing to lose
    assert frame.loc["slow", "consume_rate"] < frame.loc["slow", "produce_rate"]
    assert pd.isna(frame.loc["slow", "eta"])
    assert frame.loc["slow", "retention_headroom"] > pd.Timedelta(days=6)


def test_respect_consumers_makes_the_headroom_infinite(conn, clock):
    # M3: retention that waits for consumers cannot take what a group has not consumed
    table = conn.create_table(
        "t", "id BIGINT", "id", buckets=1, properties={"log.retention.respect-consumers": True}
    )
    table.append([{"id": i} for i in range(10)])
    _commit(conn, {tb: 0 for tb in table.buckets}, "g")
    clock.advance(timedelta(days=30))
    row = _row(conn, "g")
    assert pd.isna(row["retention_headroom"]) and row["status"] == "ERR"


def test_overview_columns_state_and_members(conn):
    # docs/monitoring.md: one row per group; live and empty groups
    assert list(conn.group_overview().columns) == OVERVIEW_COLUMNS
    assert conn.group_overview().empty
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(20)])
    _commit(conn, {TB("t", 0): 1}, "idle")
    with conn.consumer("t", group_id="busy", auto_offset_reset="earliest") as c:
        c.poll(timeout="5s")
        c.commit()
        frame = conn.group_overview()
    assert list(frame.columns) == OVERVIEW_COLUMNS
    assert frame["group"].tolist() == ["busy", "idle"]
    busy, idle = (frame.set_index("group").loc[g] for g in ("busy", "idle"))
    assert busy["state"] == "live" and busy["members"] == 1 and busy["generation"] >= 0
    assert busy["total_lag"] == 0 and busy["max_time_lag"] == pd.Timedelta(0)
    assert idle["state"] == "empty" and idle["members"] == 0 and pd.isna(idle["generation"])
    assert idle["tables"] == ["t"] and idle["total_lag"] == table.end_offsets()[TB("t", 0)] - 1
    assert isinstance(idle["last_commit"], pd.Timestamp) and idle["last_commit"].tz is not None
    assert str(frame["eta"].dtype).startswith("timedelta64")
    assert str(frame["consume_rate"].dtype) == "float64"


def test_rates_come_from_samples_the_sampler_takes(conn):
    # M1, M2: two real samples: twice as many records appended as committed in between
    conn.update_settings({"monitor.interval": "100ms"})
    table = conn.create_table("t", "id BIGINT", "id", buckets=1)
    table.append([{"id": i} for i in range(10)])
    _commit(conn, {TB("t", 0): 0}, "g")
    ctx = testing.context(conn)
    assert history.sample(ctx) == 1
    time.sleep(0.5)
    table.append([{"id": 100 + i} for i in range(100)])
    _commit(conn, {TB("t", 0): 50}, "g")
    assert history.sample(ctx) == 1
    row = _row(conn, "g")
    assert row["consume_rate"] > 0
    assert row["produce_rate"] == pytest.approx(2 * row["consume_rate"])
    assert pd.isna(row["eta"])  # not catching up


@pytest.fixture
def falling(conn):
    """Group g committed just now, 100 records behind in each of 2 buckets of a table keeping
    its log 30 minutes, with samples 3 and 1 minutes ago: consume 1/s, produce 5/s, the lag up
    by 480 records between them."""
    table = conn.create_table(
        "t", "id BIGINT", "id", buckets=2, properties={"log.retention": "30m"}
    )
    table.append([{"id": i} for i in range(400)])
    _commit(conn, {tb: end - 100 for tb, end in table.end_offsets().items()}, "g")
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    history.append_rows(
        ctx,
        [
            *_samples(ctx, "g", "t", now - 180_000, 0, 0),
            *_samples(ctx, "g", "t", now - 60_000, 60, 300),  # +120 and +600 in 120 s
        ],
    )
    return table


def test_a_group_consuming_slower_than_its_tables_grow_is_behind(conn, falling, clock):
    # M6: consume (1/s) < 0.9 x produce (5/s) over the rate window, lag higher at its end:
    # BEHIND even though Burrow's per-commit rules say OK; eta NaT
    assert conn.group_status("g").status == "OK"
    # AT_RISK is worse than BEHIND: 30 minutes of retention, below monitor.risk-threshold (1h)
    assert _row(conn, "g")["status"] == "AT_RISK"
    conn.update_settings({"monitor.risk-threshold": "0s"})
    row = _row(conn, "g")
    assert row["consume_rate"] == 1.0 and row["produce_rate"] == 5.0
    assert row["status"] == "BEHIND" and pd.isna(row["eta"])  # no eta: not at risk before it
    # ERR is worse still: two minutes later the group has not committed (Burrow's STOP)
    conn.update_settings({"monitor.rate-window": "10m"})
    clock.advance(timedelta(minutes=2))
    assert _row(conn, "g")["status"] == "ERR"


def test_behind_needs_the_rate_below_nine_tenths_and_a_rising_lag(conn):
    # M6: consume exactly 0.9 x produce is not behind; nor is a group with fewer than two
    # samples in the window, however large its lag
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(400)])
    ends = table.end_offsets()
    for group in ("edge", "below", "single"):
        _commit(conn, {tb: end - 100 for tb, end in ends.items()}, group)
    ctx = testing.context(conn)
    now = ctx.server_clock.fresh_ms()
    history.append_rows(
        ctx,
        [
            *_samples(ctx, "edge", "t", now - 120_000, 0, 0),
            *_samples(ctx, "edge", "t", now - 20_000, 90, 100),  # 0.9 x, lag +20
            *_samples(ctx, "below", "t", now - 120_000, 0, 0),
            *_samples(ctx, "below", "t", now - 20_000, 89, 100),  # 0.89 x, lag +22
            *_samples(ctx, "single", "t", now - 20_000, 0, 100),
        ],
    )
    frame = conn.group_overview().set_index("group")
    assert frame.loc["edge", "status"] == "OK" and pd.isna(frame.loc["edge", "eta"])
    assert frame.loc["below", "status"] == "BEHIND"
    assert frame.loc["single", "status"] == "OK" and math.isnan(frame.loc["single", "consume_rate"])
