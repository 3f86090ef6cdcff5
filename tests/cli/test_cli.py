"""The ``leasekit`` command line and the demo, run in-process against the real ZooKeeper and
Spark fixtures (docs/cli.md)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import run_cli as run
from helpers import run_cli_json as run_json

from leasekit import cli, embedded
from leasekit.cli import demo
from leasekit.log.segments import list_segments

SCHEMA = "id BIGINT, name STRING, amount DOUBLE"


def replay_status_counts(table) -> dict[str, int]:
    """Live orders by status from the latest snapshot files read with pyarrow (not Spark),
    plus any log written after them (the demo's retention trims the older log). Only the
    active buckets are read: a bucket made by a split holds its share of its sealed parent's
    state from its first snapshot on (K3), and the demo snapshots every active bucket, so a
    sealed parent adds nothing (its records precede its children's, K2)."""
    import pyarrow.parquet as pq

    active = table.refresh().layout.active
    snaps = [s for s in table.snapshots() if s.table_bucket.bucket in active]
    latest = {s.table_bucket.bucket: s for s in snaps}  # oldest first: the last wins
    assert sorted(latest) == sorted(active), "every active bucket has a snapshot"
    frames = [
        pq.read_table(f, columns=["order_id", "status"]).to_pandas()
        for snap in latest.values()
        for f in snap.files
    ]
    state = pd.concat(frames) if frames else pd.DataFrame(columns=["order_id", "status"])
    tails = []
    for bucket, segments in list_segments(table, active).items():
        start = latest[bucket].log_offset
        for seg in segments:
            frame = pq.read_table(seg.file, columns=["order_id", "status", "_op"]).to_pandas()
            frame["_offset"] = range(seg.base_offset, seg.end_offset)
            tails.append(frame[frame["_offset"] >= start])
    if tails:
        log = pd.concat(tails).sort_values("_offset", kind="stable")
        last = log.drop_duplicates("order_id", keep="last")
        state = pd.concat(
            [
                state[~state["order_id"].isin(last["order_id"])],
                last[last["_op"] == "upsert"][["order_id", "status"]],
            ]
        )
    return state["status"].value_counts().to_dict()


def test_create_list_describe_plain(capsys, target) -> None:
    code, out, err = run(capsys, *target, "table", "create", "orders", "--schema", SCHEMA,
                         "--primary-key", "id", "--buckets", "3",
                         "--property", "kv.snapshot.num-retained=3")  # fmt: skip
    assert code == 0, err
    assert "created table orders" in out
    assert "id BIGINT NOT NULL, name STRING, amount DOUBLE" in out

    # global options after the subcommand
    code, out, _ = run(capsys, "table", "list", *target)
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["TABLE", "BUCKETS", "PRIMARY-KEY", "CREATED-AT"]
    assert row.split()[:3] == ["orders", "3", "id"]

    code, out, _ = run(capsys, "table", *target, "describe", "orders")
    assert code == 0
    assert "primary key  id" in out
    assert "kv.snapshot.num-retained = 3" in out
    assert "log.retention = 7d" in out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("BUCKET"))
    buckets = [line.split() for line in lines[start + 1 :]]
    assert buckets == [[str(b), "0", "0", "-", "-", "-"] for b in range(3)]


def test_json_before_and_after_the_subcommand(capsys, target, conn) -> None:
    conn.create_table("a_table", SCHEMA, "id", buckets=2)
    conn.create_table("b_table", "k STRING, v STRING", "k", buckets=1)
    before = run_json(capsys, "--json", *target, "table", "list")
    after = run_json(capsys, *target, "table", "list", "--json")
    assert before == after
    assert [t["table"] for t in before] == ["a_table", "b_table"]
    assert before[0]["buckets"] == 2 and before[0]["primary_key"] == ["id"]
    assert before[0]["created_at"].endswith("Z")

    conn.table("a_table").append([{"id": i, "name": f"n{i}", "amount": 1.0} for i in range(20)])
    info = run_json(capsys, *target, "table", "describe", "a_table", "--json")
    assert info["schema"] == "id BIGINT NOT NULL, name STRING, amount DOUBLE"
    assert info["primary_key"] == ["id"]
    assert info["properties"]["log.retention"] == 7 * 86400  # JSON: seconds
    assert info["properties"]["log.retention.bytes"] is None
    rows = info["bucket_offsets"]
    assert [r["bucket"] for r in rows] == [0, 1]
    assert sum(r["end_offset"] for r in rows) == 20
    assert all(r["latest_snapshot"] is None for r in rows)


def test_create_json_output(capsys, target) -> None:
    info = run_json(capsys, *target, "--json", "table", "create", "t",
                    "--schema", "a INT, b STRING", "--primary-key", "a,b",
                    "--property", "log.retention=2h")  # fmt: skip
    assert info["primary_key"] == ["a", "b"]
    assert info["buckets"] == 4
    assert info["properties"]["log.retention"] == 7200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bad name!", "--schema", SCHEMA, "--primary-key", "id"], "invalid table name"),
        (["t", "--schema", "id BIGINT,, name STRING", "--primary-key", "id"], "invalid schema"),
        (["t", "--schema", "id BIGNUM", "--primary-key", "id"], ""),
        (["t", "--schema", SCHEMA, "--primary-key", "id", "--property", "no.such=1"], "no.such"),
        (
            ["t", "--schema", SCHEMA, "--primary-key", "id", "--property", "log.retention=soon"],
            "log.retention",
        ),
        (["t", "--schema", SCHEMA, "--primary-key", "nope"], "'nope' is not in the schema"),
        (["t", "--schema", SCHEMA, "--primary-key", "id", "--buckets", "0"], "buckets"),
    ],
)
def test_bad_input_is_one_error_line(capsys, target, conn, args, message) -> None:
    code, out, err = run(capsys, *target, "table", "create", *args)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("leasekit: error: ")
    assert message in err
    assert "Traceback" not in err
    assert conn.tables() == []


def test_missing_table_and_duplicate(capsys, target, conn) -> None:
    code, _, err = run(capsys, *target, "table", "describe", "ghost")
    assert (code, err) == (2, "leasekit: error: table 'ghost' does not exist\n")
    conn.create_table("t", SCHEMA, "id")
    code, _, err = run(capsys, *target, "table", "create", "t",
                       "--schema", SCHEMA, "--primary-key", "id")  # fmt: skip
    assert (code, err) == (2, "leasekit: error: table 't' exists already\n")


def test_argument_errors_exit_2(capsys, target) -> None:
    assert run(capsys, *target, "table", "create", "t", "--primary-key", "id")[0] == 2
    code, _, err = run(capsys, *target, "table", "create", "t", "--schema", SCHEMA,
                       "--primary-key", "id", "--property", "novalue")  # fmt: skip
    assert code == 2 and "expected KEY=VALUE" in err
    assert run(capsys, *target, "table")[0] == 2
    assert run(capsys)[0] == 2
    assert run(capsys, *target, "demo", "--rows", "0")[0] == 2
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "usage: leasekit" in out


def test_interrupt_exits_130(capsys, target, monkeypatch) -> None:
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.table, "_list", interrupted)
    code, _, err = run(capsys, *target, "table", "list")
    assert code == 130
    assert "Traceback" not in err


def test_table_snapshot(capsys, target, conn, spark) -> None:
    table = conn.create_table("events", SCHEMA, "id", buckets=4)
    table.append(pd.DataFrame({"id": range(100), "name": "x", "amount": 1.5}))
    table.append(pd.DataFrame({"id": range(50), "name": "y", "amount": 2.5}))
    table.delete(pd.DataFrame({"id": range(90, 100)}))

    snaps = run_json(capsys, *target, "table", "snapshot", "events", "--json")
    assert [s["bucket"] for s in snaps] == [0, 1, 2, 3]
    assert all(s["snapshot_id"] == 1 for s in snaps)
    assert sum(s["row_count"] for s in snaps) == 90
    ends = table.end_offsets()
    assert {s["bucket"]: s["log_offset"] for s in snaps} == {tb.bucket: o for tb, o in ends.items()}

    code, out, _ = run(capsys, *target, "table", "snapshot", "events")
    assert code == 0 and "nothing taken" in out

    info = run_json(capsys, *target, "--json", "table", "describe", "events")
    assert all(r["latest_snapshot"] == 1 for r in info["bucket_offsets"])
    offsets = [r["snapshot_log_offset"] for r in info["bucket_offsets"]]
    assert offsets == [ends[tb] for tb in table.buckets]


def test_demo_run(conn, spark) -> None:
    lines: list[str] = []
    result = demo.run(conn, spark, rows=6_000, batches=3, out=lines.append)
    assert result["rows_written"] == 6_000
    assert result["rows_read"] == result["live_keys"] > 0
    assert sum(result["count_by_status"].values()) == result["live_keys"]
    assert result["deletes"] > 0
    expected = replay_status_counts(conn.table("demo_orders"))
    assert result["count_by_status"] == expected
    assert result["live_keys"] == sum(expected.values())
    # L12, K4: the read went through a lease that pinned the 8 buckets before the split (still
    # read the same after it), dropped afterwards; the table has 9 active buckets now
    assert result["lease"]["pinned_buckets"] == 8 and result["buckets"] == 9
    assert result["lease"]["snapshot_ids"] == [1]
    assert conn.leases() == []
    summary = "\n".join(lines)
    assert re.search(rf"live keys\s+{result['live_keys']}\n", summary)
    assert "rows read by Spark" in summary and "count by status" in summary
    # the story in the order it happened, then the checks, then a short summary last
    titles = [
        "demo: 6000 order upserts in 3 batches into demo_orders (8 buckets)",
        "demo: table demo_orders is set up so that retention has work to show:",
        "Consumer group demo_orders-audit: 3 consumers joined in",
        "Takeover after batch 2:",
        "Lease after batch 2: demo_orders-report pinned the latest snapshots of all 8 buckets",
        "Split after batch 2:",
        "Consumer group demo_orders-audit (before retention):",
        "Retention plan, bucket ",
        "Retention ran: deleted ",
        "Spark: count by status",
        "Checks",
        "Summary",
    ]
    at = [summary.find("\n" + t) if i else summary.find(t) for i, t in enumerate(titles)]
    assert -1 not in at and at == sorted(at), dict(zip(titles, at))
    assert re.search(r"\n  kv.snapshot.num-retained=1 +keep only the newest snapshot", summary)
    assert re.search(r"\n  log.retention=0ms +keep no log for its age alone", summary)
    checks = summary.split("\nChecks\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(checks) == 11 and all(re.match(r"  ok +\S", c) for c in checks), checks
    assert max(map(len, checks)) < 100  # one short line each
    tail = summary.split("\nSummary\n", 1)[1].splitlines()
    assert len(tail) <= 12 and max(map(len, tail)) < 100
    assert re.search(r"checks +11 of 11 passed", summary)
    # the plan kept the snapshot the lease pinned, for that reason, and retention ran
    assert "pinned by lease demo_orders-report until" in summary
    assert result["retention"]["snapshots_kept_by_lease"] == 8
    assert result["rows_read_through_lease"] > 0 and result["retention"]["errors"] == []
    # C9: three consumers split the 8 buckets, each bucket once, balanced within 1 (3/3/2), at
    # one generation; the assignment is printed one line per member
    group = result["group"]
    joined = group["joined"]["assignment"]
    assert group["members"] == len(joined) == 3 and len({m["member_id"] for m in joined}) == 3
    assert sorted(b for m in joined for b in m["buckets"]) == list(range(8))
    assert sorted(len(m["buckets"]) for m in joined) == [2, 3, 3]
    assert len({m["generation"] for m in joined}) == 1
    for m in joined:
        buckets = ", ".join(map(str, m["buckets"]))
        assert re.search(
            rf"{m['member']}\s+{m['member_id']}\s+{buckets}\s+{m['generation']}\n", summary
        )
    # C12: the closed member's buckets moved to the other two at a newer generation, which
    # resumed at its committed offsets; no record was skipped or read twice across the takeover
    takeover = group["takeover"]
    closed = next(m for m in joined if m["member"] == takeover["closed"])
    others = {m["member"] for m in joined} - {closed["member"]}
    assert [r["bucket"] for r in takeover["moved"]] == closed["buckets"]
    assert {r["to"] for r in takeover["moved"]} <= others
    assert takeover["generation"][1] > takeover["generation"][0] == closed["generation"]
    assert all(r["resumed_at"] == r["committed"] is not None for r in takeover["moved"])
    assert f"Takeover after batch 2: {closed['member']} committed and closed" in summary
    for r in takeover["moved"]:
        assert re.search(
            rf"\n\s*{r['bucket']}\s+{closed['member']}\s+{r['to']}\s+{r['committed']}\s+{r['committed']}\n",
            summary,
        )
        assert group["read"][r["bucket"]]["by"] == [closed["member"], r["to"]]
    # K5: after batch 2 the hottest bucket (the most records when the lease pinned: its
    # snapshot 1) was split; the group read it to its seal, then its children from offset 0
    table = conn.table("demo_orders")
    rescale, pinned_ends = (
        result["rescale"],
        {s.table_bucket.bucket: s.log_offset for s in table.snapshots() if s.snapshot_id == 1},
    )
    hottest = max(range(8), key=lambda b: (pinned_ends[b], -b))
    parent, children = rescale["bucket"], rescale["children"]
    lineage = {row.table_bucket.bucket: row for row in table.lineage()}
    assert parent == hottest and children == [8, 9] and rescale["after_batch"] == 2
    assert rescale["sealed_at"] == pinned_ends[parent] == lineage[parent].sealed_at > 0
    assert lineage[parent].children == (8, 9) and lineage[8].parents == lineage[9].parents == (
        parent,
    )
    assert rescale["parent_drained_by"] in others
    assert set(rescale["children_assigned_to"]) == {8, 9}
    assert set(rescale["children_assigned_to"].values()) <= others
    assert rescale["generation"] > takeover["generation"][1]
    owners = {m["member"]: m["member_id"] for m in joined}
    owners = {c: owners[m] for c, m in rescale["children_assigned_to"].items()}
    assert (
        f"Split after batch 2: bucket {parent}, the hottest ({rescale['sealed_at']:,} records), "
        f"sealed at offset {rescale['sealed_at']:,} → 8, 9; the group read {parent} to its "
        f"seal, then 8 → {rescale['children_assigned_to'][8]}, "
        f"9 → {rescale['children_assigned_to'][9]} at generation {rescale['generation']}"
    ) in summary
    assert f"the group read bucket {parent} to its seal before its children" in summary
    assert "the split copied no file" in summary  # K3
    described = conn.describe_group("demo_orders-audit").set_index("bucket")
    assert sorted(described.index) == [b for b in range(10) if b != parent]  # drained: gone
    for c, member_id in owners.items():  # the describe table printed while they owned them
        assert re.search(rf"\n\s*{c}(\s+\d+){{3}}\s+\S+\s+{member_id}\s", summary)
    committed = {b: int(described.loc[b, "current_offset"]) for b in described.index}
    committed[parent] = rescale["sealed_at"]
    assert {b: r["records"] for b, r in group["read"].items()} == committed
    assert group["read"][parent]["by"][-1] == rescale["parent_drained_by"]
    assert all(group["read"][c]["records"] > 0 for c in (8, 9))  # batch 3's records, from 0
    assert all(group["read"][c]["by"] == [rescale["children_assigned_to"][c]] for c in (8, 9))
    assert "read once, in order (none skipped)" in summary
    # the demo's group read half of what was written; its describe table shows the lag
    # measured now, the time lag and the health; R3: retention kept the log it has not read
    assert group["records_consumed"] == sum(n // 2 for n in (2_000, 2_000, 2_000))
    assert group["lag"] == sum(table.end_offsets().values()) - group["records_consumed"]
    assert group["lag"] > 0 and group["max_time_lag_s"] >= 0 and group["status"] in ("OK", "WARN")
    assert "Consumer group demo_orders-audit" in summary and "TIME-LAG" in summary
    assert "consumer group demo_orders-audit has not committed past it" in summary


def test_demo_command_is_rerunnable(capsys, target, conn, spark) -> None:
    first = run_json(capsys, *target, "demo", "--rows", "3000", "--batches", "3", "--json")
    code, out, err = run(capsys, *target, "demo", "--rows", "4000", "--batches", "2")
    assert code == 0, err
    assert out.splitlines()[-1] == (
        f"ZooKeeper {target[1]} was given (--zookeeper or $LEASEKIT_ZOOKEEPER): the demo "
        "started no server"
    )
    assert first["rows_read"] == first["live_keys"]
    assert first["zookeeper"] == target[1] and first["warehouse"] == target[3]
    live = sum(replay_status_counts(conn.table("demo_orders")).values())
    assert re.search(rf"rows read by Spark\s+{live} ", out)
    assert re.search(rf"live keys\s+{live}\n", out)
    assert re.search(r"rows written\s+4000\n", out)
    # M1: the demo samples the lag history as it works, so its group's lag over time is there
    # with no sampler started (a sample after each of the 2 batches and one at the end)
    code, out, err = run(capsys, *target, "consumer", "history", "demo_orders-audit")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "LAG HISTORY of group demo_orders-audit" and len(lines) >= 3 + 3 + 3
    lags = [int(line.split()[1]) for line in lines[-3:]]
    assert lags == sorted(lags) and lags[-1] > 0  # it reads at half the pace: the lag grows


def test_demo_says_the_embedded_server_stays_running(capsys, tmp_path, spark, monkeypatch) -> None:
    # the demo starts the warehouse's embedded ZooKeeper and leaves it running for
    # what comes next; its last line says so, and how to stop it
    monkeypatch.delenv("LEASEKIT_ZOOKEEPER", raising=False)
    monkeypatch.delenv("LEASEKIT_WAREHOUSE", raising=False)
    wh = tmp_path / "wh"
    try:
        code, out, err = run(capsys, "--warehouse", str(wh), "demo", "--rows", "1000",
                             "--batches", "2")  # fmt: skip
        assert code == 0, err
        status = embedded.status(wh / "_zookeeper")
        assert status is not None and status.running
        assert out.splitlines()[-2:] == [
            "",
            f"The embedded ZooKeeper at {status.address} stays running for the warehouse {wh}; "
            f"`leasekit --warehouse {wh} zookeeper stop` stops it.",
        ]
        assert out.index("\nSummary\n") < out.rindex("The embedded ZooKeeper")
        code, out, _ = run(capsys, "--warehouse", str(wh), "zookeeper", "stop")  # as it says
        assert code == 0 and out.startswith(f"stopped ZooKeeper at {status.address}")
    finally:
        embedded.stop(wh / "_zookeeper")


def test_zookeeper_status_start_stop(capsys, tmp_path) -> None:
    wh = str(tmp_path / "wh")
    data_dir = Path(wh) / "_zookeeper"
    try:
        code, out, _ = run(capsys, "zookeeper", "status", "--warehouse", wh)
        assert code == 3 and "not running" in out

        code, out, _ = run(capsys, "--warehouse", wh, "zookeeper", "start")
        assert code == 0 and out.startswith("ZooKeeper started at 127.0.0.1:")
        status = run_json(capsys, "--warehouse", wh, "--json", "zookeeper", "status")
        assert status["running"] is True
        assert status["address"] in out
        assert status["data_dir"] == str(data_dir.resolve())
        assert status["version"]
        code, out, _ = run(capsys, "--warehouse", wh, "zookeeper", "status")
        assert code == 0 and "running     true" in out

        again = run_json(capsys, "--warehouse", wh, "zookeeper", "start", "--json")
        assert (again["started"], again["address"]) == (False, status["address"])

        code, out, _ = run(capsys, "--warehouse", wh, "zookeeper", "stop")
        assert code == 0 and out.startswith(f"stopped ZooKeeper at {status['address']}")
        assert run(capsys, "--warehouse", wh, "zookeeper", "status")[0] == 3
        code, out, _ = run(capsys, "--warehouse", wh, "zookeeper", "stop")
        assert code == 0 and "no ZooKeeper was running" in out
    finally:
        embedded.stop(data_dir)


def test_zookeeper_rejects_external_address(capsys, zookeeper, tmp_path) -> None:
    code, _, err = run(capsys, "--zookeeper", zookeeper, "--warehouse", str(tmp_path),
                       "zookeeper", "status")  # fmt: skip
    assert code == 2 and err.startswith("leasekit: error: `leasekit zookeeper` manages")


def test_console_script_help() -> None:
    script = Path(sys.executable).with_name("leasekit")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage: leasekit" in done.stdout


def test_module_entry_point_help() -> None:
    done = subprocess.run([sys.executable, "-m", "leasekit.cli", "--help"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "usage: leasekit" in done.stdout


def test_import_is_cheap() -> None:
    code = (
        "import sys, leasekit.cli; "
        "print(sorted(m for m in ('pyspark', 'kazoo', 'pyarrow') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_tables_show_durations_and_bytes_as_people_read_them_and_json_plain_numbers():
    # durations (and byte sizes) read the same everywhere ("4m 40s", "1.5 KiB"); JSON
    # has plain numbers: seconds and bytes, never "166403ms"
    from datetime import timedelta

    from leasekit.cli.output import format_table, to_json

    table = format_table(
        [{"bucket": 0, "time_lag": timedelta(seconds=280), "size_bytes": 1536, "bytes": 0}]
    )
    assert "4m 40s" in table and "280s" not in table
    assert "1.5 KiB" in table and "1536" not in table and table.splitlines()[1].endswith("0 B")
    assert to_json({"time_lag": timedelta(seconds=280)}) == {"time_lag": 280.0}
    assert to_json({"time_lag": timedelta(milliseconds=166403)}) == {"time_lag": 166.403}
