"""Durations read the same wherever people read them (docs/panels.md: "4m 40s", "2h 5m",
"3d 4h"): the retention plan's reasons and the CLI's text use ``human_duration``, while the
CLI's --json carries plain numbers of seconds (never "166403ms")."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pyarrow as pa
from helpers import grow, run_cli

import leasekit as lk
from leasekit import testing
from leasekit.durations import human_duration

TB = lk.TableBucket
RAW = re.compile(r"\d{4,}ms|\d+ days|\d+:\d\d:\d\d\.\d")  # "1157829ms", "0 days 00:00:25.89"


def test_human_duration_reads_like_the_panels():
    assert human_duration(timedelta(minutes=4, seconds=40)) == "4m 40s"
    assert human_duration(timedelta(hours=2, minutes=5, seconds=59)) == "2h 5m"
    assert human_duration(timedelta(days=3, hours=4)) == "3d 4h"
    assert human_duration(1157.829) == "19m 17s"  # never "1157829ms"
    assert human_duration(25.893) == "25.8s"


def _setup(conn, clock):
    conn.update_settings({"lease.expiry-grace": "90s", "orphan.min-age": "90m"})
    table = conn.create_table(
        "t", "id BIGINT, v STRING", "id", buckets=2, properties={"log.retention": "36h"}
    )
    grow(table, 3)
    conn.lease("short", "1m").acquire({TB("t", 0): 1})
    testing.context(conn).warehouse.write_parquet(
        f"{table.data_dir}/log/0/stray.parquet", pa.table({"id": [1]})
    )
    clock.advance(65)  # "short" expired 5 s ago: in its grace
    return table


def test_retention_reasons_use_human_durations(conn, clock):
    _setup(conn, clock)
    reasons = [i.reason for i in conn.retention_plan().items]
    text = "\n".join(reasons)
    assert "reclaimed after the 1m 30s grace" in text  # lease.expiry-grace 90s
    assert "(orphan.min-age 1h 30m)" in text  # 90m
    assert re.search(r"within log\.retention 1d 12h \(age 1m \d+s\)", text), text  # 36h, 65 s
    assert not RAW.search(text), text


def test_cli_retention_plan_text_is_human_and_json_plain_seconds(conn, clock, target, capsys):
    _setup(conn, clock)
    code, out, err = run_cli(capsys, *target, "retention", "plan")
    assert code == 0, err
    # (the command runs on the ZooKeeper clock: the lease is still valid there)
    assert "orphan.min-age 1h 30m" in out and "log.retention 1d 12h" in out
    assert not RAW.search(out), out
    code, out, err = run_cli(capsys, *target, "settings", "show")
    assert code == 0 and "1m 30s" in out and "1h 30m" in out and not RAW.search(out), out
    code, out, err = run_cli(capsys, *target, "--json", "settings", "show")
    settings = json.loads(out)
    values = {row["setting"]: row["value"] for row in settings["settings"]}
    assert code == 0 and values["lease.expiry-grace"] == 90 and values["orphan.min-age"] == 5400
