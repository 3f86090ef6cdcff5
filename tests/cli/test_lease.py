"""``leasekit lease list|acquire|renew|release|drop`` run in-process against the real
ZooKeeper and Spark fixtures (docs/cli.md, rules L1-L10)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

import pandas as pd
import pytest
from helpers import Compacted
from helpers import run_cli as run
from helpers import run_cli_json as run_json

from leasekit import TableBucket, testing

SCHEMA = "id BIGINT, name STRING, amount DOUBLE"


@pytest.fixture(scope="module")
def compacted(zookeeper, spark, tmp_path_factory):
    rows = pd.DataFrame({"id": range(200), "name": "x", "amount": 1.0})
    return Compacted(zookeeper, spark, tmp_path_factory.mktemp("orders"), SCHEMA, [rows])


@pytest.fixture
def orders(conn, compacted):
    """A 4-bucket table with one snapshot per bucket (copies of the module's compaction), plus
    ``empty``: 2 buckets, nothing written, and ``fresh``: 2 buckets with records, no snapshot."""
    table = compacted.make(conn)
    conn.create_table("empty", SCHEMA, "id", buckets=2)
    fresh = conn.create_table("fresh", SCHEMA, "id", buckets=2)
    fresh.append([{"id": i, "name": "x", "amount": 1.0} for i in range(20)])
    assert all(fresh.end_offsets().values())
    return table


def ts(text: str) -> datetime:
    assert text.endswith("Z")
    return datetime.fromisoformat(text[:-1] + "+00:00")


def lease_info(conn, lease_id: str):
    return next((i for i in conn.leases() if i.lease_id == lease_id), None)


def test_acquire_plain_pins_latest_and_keeps_the_lease(capsys, target, conn, orders) -> None:
    code, out, err = run(capsys, *target, "lease", "acquire", "nightly",
                         "--table", "orders", "--table", "empty", "--table", "fresh")  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(
        "lease nightly pins the latest snapshot of 6 bucket(s); it expires at "
    )
    assert [line.split() for line in lines[2:6]] == [
        ["TABLE", "ACQUIRED", "EMPTY", "UNAVAILABLE"],
        ["orders", "4", "0", "0"],
        ["empty", "2", "2", "0"],  # L15: pinned as empty
        ["fresh", "0", "0", "2"],
    ]
    assert lines[7] == "not pinned:"
    assert [line.split() for line in lines[9:11]] == [
        ["fresh", str(b), "-1", "records", "but", "no", "snapshot", "yet"] for b in range(2)
    ]
    # L6: the remedy is said where the problem is
    assert "take one with `leasekit table snapshot fresh` (or table.snapshot(spark))" in out
    assert "pinned as empty, snapshot 0" in out

    # L6, L8: the first acquire created the lease, and it outlives the command
    info = lease_info(conn, "nightly")
    assert info is not None
    empty = {TableBucket("empty", b): 0 for b in range(2)}
    assert info.pins == {**orders.latest_snapshots(), **empty}
    assert info.duration == timedelta(hours=1)
    assert info.expires_at.isoformat(timespec="milliseconds").replace("+00:00", "Z") in lines[0]


def test_acquire_json(capsys, target, conn, orders) -> None:
    data = run_json(capsys, *target, "lease", "acquire", "report", "--table", "orders",
                    "--table", "empty", "--duration", "2h")  # fmt: skip
    assert data["lease_id"] == "report"
    assert data["tables"] == [
        {"table": "orders", "acquired": 4, "empty": 0, "unavailable": 0},
        {"table": "empty", "acquired": 2, "empty": 2, "unavailable": 0},
    ]
    latest = orders.latest_snapshots()
    assert data["acquired"] == [
        *({"table": "empty", "bucket": b, "snapshot_id": 0} for b in range(2)),  # L15
        *({"table": "orders", "bucket": b, "snapshot_id": latest[tb]}
          for b, tb in enumerate(orders.buckets)),
    ]  # fmt: skip
    assert data["unavailable"] == []
    fresh = run_json(capsys, *target, "lease", "acquire", "other", "--table", "fresh")
    assert fresh["unavailable"] == [
        {"table": "fresh", "bucket": b, "snapshot_id": -1, "reason": "records but no snapshot yet"}
        for b in range(2)]  # fmt: skip
    info = lease_info(conn, "report")
    assert ts(data["expires_at"]) == info.expires_at
    assert info.expires_at - info.renewed_at == timedelta(hours=2)  # L7

    # a bare number is seconds, as in the Python API
    again = run_json(capsys, *target, "lease", "acquire", "report", "--table", "orders",
                     "--duration", "90")  # fmt: skip
    assert ts(again["expires_at"]) == ts(data["expires_at"])  # L7: only extends
    assert lease_info(conn, "report").duration == timedelta(seconds=90)


def test_list_plain_json_and_expired(capsys, target, conn, orders) -> None:
    code, out, _ = run(capsys, *target, "lease", "list")
    assert code == 0 and out.strip() == f"no leases in namespace {target[5]!r}"
    assert run_json(capsys, *target, "lease", "list") == []

    conn.lease("both", "2h").acquire_latest(["orders", "empty"])
    conn.acquire_kv_snapshot_lease("short", {TableBucket("orders", 1): 1}, "500ms")
    time.sleep(1.0)

    code, out, _ = run(capsys, *target, "lease", "list")
    assert code == 0
    header, *rows = [line.split() for line in out.splitlines()]
    assert header == ["LEASE-ID", "PINS", "TABLES", "DURATION", "RENEWED-AT", "EXPIRES-AT",
                      "EXPIRES-IN", "OWNER"]  # fmt: skip
    assert [r[:4] for r in rows] == [
        ["both", "6", "empty,orders", "2h"],  # L15: the empty table's buckets pinned empty
        ["short", "1", "orders", "500ms"],
    ]
    # expires in, as people read durations; negative once expired, not yet reclaimed
    assert rows[0][6:8] in (["1h", "59m"], ["2h", rows[0][7]]) or rows[0][6] == "2h"
    assert rows[1][6].startswith("-")

    data = run_json(capsys, *target, "lease", "list")
    assert [d["lease_id"] for d in data] == ["both", "short"]
    both = data[0]
    latest = orders.latest_snapshots()
    assert both["pins"] == [
        *({"table": "empty", "bucket": b, "snapshot_id": 0} for b in range(2)),
        *({"table": "orders", "bucket": tb.bucket, "snapshot_id": latest[tb]}
          for tb in orders.buckets),
    ]  # fmt: skip
    assert both["tables"] == ["empty", "orders"]
    assert both["duration"] == 7200  # JSON: seconds
    assert ts(both["expires_at"]) - ts(both["renewed_at"]) == timedelta(hours=2)
    assert both["owner"] == lease_info(conn, "both").owner
    assert data[1]["expires_in"] < 0


def test_renew_with_and_without_duration(capsys, target, conn, orders) -> None:
    first = run_json(capsys, *target, "lease", "acquire", "r1", "--table", "orders")
    expires = ts(first["expires_at"])

    # no --duration: the lease's own duration
    code, out, err = run(capsys, *target, "lease", "renew", "r1")
    assert code == 0, err
    assert out.startswith("renewed lease r1 (duration 1h); it expires at ")
    renewed = lease_info(conn, "r1")
    assert renewed.expires_at >= expires
    assert renewed.expires_at - renewed.renewed_at == timedelta(hours=1)

    longer = run_json(capsys, *target, "lease", "renew", "r1", "--duration", "2h")
    assert longer["duration"] == 7200
    now = conn.server_time()
    assert timedelta(hours=2) - timedelta(seconds=30) < ts(longer["expires_at"]) - now
    assert ts(longer["expires_at"]) - now <= timedelta(hours=2)
    assert ts(longer["expires_at"]) == lease_info(conn, "r1").expires_at

    # L7: renew only extends; a shorter duration leaves expires_at unchanged, and says so
    assert longer["extended"] is True
    code, out, err = run(capsys, *target, "lease", "renew", "r1", "--duration", "30m")
    assert code == 0, err
    assert "it still expires at" in out and "a renewal never shortens a lease" in out
    shorter = run_json(capsys, *target, "lease", "renew", "r1", "--duration", "10m")
    assert shorter["expires_at"] == longer["expires_at"] and shorter["extended"] is False
    assert lease_info(conn, "r1").expires_at == ts(longer["expires_at"])
    # ... and is the lease's duration from now on (the duration of the last renew)
    assert run_json(capsys, *target, "lease", "renew", "r1")["duration"] == 600

    code, _, err = run(capsys, *target, "lease", "renew", "ghost")
    assert (code, err) == (2, "leasekit: error: lease 'ghost' does not exist\n")  # L8


def test_release_buckets_then_the_whole_table(capsys, target, conn, orders) -> None:
    run_json(capsys, *target, "lease", "acquire", "rel", "--table", "orders")
    latest = orders.latest_snapshots()

    code, out, err = run(capsys, *target, "lease", "release", "rel", "--table", "orders",
                         "--bucket", "1")  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "released bucket(s) 1 of orders from lease rel; it still pins 3 bucket(s):"
    assert [line.split() for line in lines[2:]] == [
        ["TABLE", "BUCKET", "SNAPSHOT-ID"],
        *[["orders", str(b), str(latest[TableBucket("orders", b)])] for b in (0, 2, 3)],
    ]
    assert set(lease_info(conn, "rel").pins) == {TableBucket("orders", b) for b in (0, 2, 3)}

    # L9: idempotent; buckets the lease does not pin are ignored
    data = run_json(capsys, *target, "lease", "release", "rel", "--table", "orders",
                    "--bucket", "1", "--bucket", "2")  # fmt: skip
    assert data["released"] == [{"table": "orders", "bucket": 2}]
    assert data["not_pinned"] == [{"table": "orders", "bucket": 1}]
    assert [(p["bucket"], p["snapshot_id"]) for p in data["pins"]] == [
        (b, latest[TableBucket("orders", b)]) for b in (0, 3)
    ]

    code, out, _ = run(capsys, *target, "lease", "release", "rel", "--table", "orders")
    assert code == 0
    assert out.strip() == ("released every bucket of orders from lease rel; "
                           "it pins nothing now and stays until dropped or expired")  # fmt: skip
    info = lease_info(conn, "rel")
    assert info is not None and info.pins == {}  # L9: the lease stays, empty

    # L9: bucket numbers the table does not have are ignored too
    code, out, err = run(capsys, *target, "lease", "release", "rel", "--table", "orders",
                         "--bucket", "9")  # fmt: skip
    assert (code, err) == (0, "")
    assert out.strip() == ("released nothing of orders from lease rel; bucket(s) 9 of orders were "
                           "not pinned by lease rel; it pins nothing now and stays until dropped "
                           "or expired")  # fmt: skip
    code, _, err = run(capsys, *target, "lease", "release", "ghost", "--table", "orders")
    assert (code, err) == (2, "leasekit: error: lease 'ghost' does not exist\n")


def test_drop_twice(capsys, target, conn, orders) -> None:
    ctx = testing.context(conn)
    run_json(capsys, *target, "lease", "acquire", "gone", "--table", "orders")
    code, out, err = run(capsys, *target, "lease", "drop", "gone")
    assert (code, out, err) == (0, "dropped lease gone\n", "")
    assert lease_info(conn, "gone") is None
    assert all(
        not ctx.store.children(ctx.paths.snapshot(orders.table_id, tb.bucket, sid))
        for tb, sid in orders.latest_snapshots().items()
    )  # L10: pins went too

    # no such lease: an error (a typo is no success); with --if-exists, exit 0 like `rm -f`
    code, out, err = run(capsys, *target, "lease", "drop", "gone")
    assert (code, out) == (2, "")
    assert err == "leasekit: error: lease 'gone' does not exist; nothing dropped\n"
    code, out, err = run(capsys, *target, "lease", "drop", "gone", "--if-exists")
    assert (code, out, err) == (0, "no such lease gone; nothing dropped\n", "")
    data = run_json(capsys, *target, "lease", "drop", "gone", "--if-exists")
    assert data == {"lease_id": "gone", "dropped": False}
    _, help_text, _ = run(capsys, "lease", "drop", "--help")
    assert "--if-exists" in help_text and "no such lease" in help_text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["acquire", "a/b", "--table", "orders"], "invalid lease id 'a/b'"),  # L1
        (["renew", "a/b"], "invalid lease id 'a/b'"),
        (["release", "a/b", "--table", "orders"], "invalid lease id 'a/b'"),
        (["drop", "a/b"], "invalid lease id 'a/b'"),  # L2: never drop's "no such lease"
        (["drop", ".."], "invalid lease id '..'"),
        (["acquire", "x", "--table", "ghost"], "table 'ghost' does not exist"),
        (["acquire", "x", "--table", "orders", "--table", "ghost"], "table 'ghost' does not exist"),
        (["acquire", "x", "--table", "orders", "--duration", "0"], "greater than 0"),  # L2
        (["acquire", "x", "--table", "orders", "--duration", "0s"], "greater than 0"),
        (["acquire", "x", "--table", "orders", "--duration", "8d"], "exceeds lease.max-duration"),
        (["acquire", "x", "--table", "orders", "--duration", "soon"], "is not a duration"),
        (["release", "x", "--table", "ghost"], "table 'ghost' does not exist"),
    ],
)
def test_bad_input_is_one_error_line(capsys, target, conn, argv, message) -> None:
    conn.create_table("orders", SCHEMA, "id", buckets=2)
    code, out, err = run(capsys, *target, "lease", *argv)
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("leasekit: error: ") and message in err
    assert conn.leases() == []


def test_renew_bad_duration(capsys, target, conn, orders) -> None:
    run_json(capsys, *target, "lease", "acquire", "d", "--table", "orders")
    before = lease_info(conn, "d").expires_at
    for duration in ("0", "-5", "8d"):
        code, _, err = run(capsys, *target, "lease", "renew", "d", "--duration", duration)
        assert code == 2 and err.startswith("leasekit: error: lease duration"), err
    assert lease_info(conn, "d").expires_at == before


def test_argument_errors_exit_2(capsys, target) -> None:
    assert run(capsys, *target, "lease")[0] == 2
    assert run(capsys, *target, "lease", "acquire", "x")[0] == 2  # --table is required
    assert run(capsys, *target, "lease", "release", "x")[0] == 2
    assert run(capsys, *target, "lease", "release", "x", "--table", "t", "--bucket", "one")[0] == 2
