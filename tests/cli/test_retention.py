"""``leasekit retention plan|run`` in-process and ``leasekit janitor`` as a process, against the
real ZooKeeper fixture (docs/retention.md, docs/cli.md; rules R1, R5, R6, L11)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import grow
from helpers import run_cli as run
from helpers import run_cli_json as run_json

import leasekit as lk
from leasekit import testing
from leasekit.sizes import human_bytes
from leasekit.zk import SetData

TB = lk.TableBucket
SCHEMA = "id BIGINT, v STRING"
COLUMNS = ["KIND", "TABLE", "BUCKET", "ITEM-ID", "ACTION", "REASON", "SIZE-BYTES"]
DELETED = ["KIND", "TABLE", "BUCKET", "ITEM-ID", "REASON", "SIZE-BYTES"]


@pytest.fixture
def orders(conn):
    """Two buckets with snapshots 1-3; lease q3 pins 0/1, lease old (expired) pins 1/1."""
    conn.update_settings({"lease.expiry-grace": "0s"})
    table = conn.create_table("orders", SCHEMA, "id", buckets=2)
    grow(table, 3)
    conn.lease("q3", "1h").acquire({TB("orders", 0): 1})
    conn.lease("old", "200ms").acquire({TB("orders", 1): 1})
    time.sleep(0.3)
    return table


def rows_of(out: str, columns: list[str] = COLUMNS) -> list[list[str]]:
    lines = out.splitlines()
    assert lines[0].split() == columns
    rows = []
    for line in lines[1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def snapshot_ids(table) -> set[tuple[int, int]]:
    return {(s.table_bucket.bucket, s.snapshot_id) for s in table.snapshots()}


def test_plan_plain(capsys, target, conn, orders) -> None:
    # R6: every item with its action and reason; the summary line counts them
    code, out, err = run(capsys, *target, "retention", "plan")
    assert code == 0, err
    rows = rows_of(out)
    by_item = {(r[0], r[1], r[2], r[3]): r for r in rows}
    assert by_item[("lease", "-", "-", "old")][4] == "delete"
    assert by_item[("lease", "-", "-", "q3")][4:6] == ["keep", "valid"]
    assert by_item[("snapshot", "orders", "0", "1")][4:7] == ["keep", "pinned", "by"]
    assert by_item[("snapshot", "orders", "1", "1")][4] == "delete"
    assert " ".join(by_item[("snapshot", "orders", "1", "1")][5:-1]).startswith(
        "older than the newest 2 of bucket, not pinned; its lease(s) old expire in this pass"
    )
    assert by_item[("snapshot", "orders", "0", "3")][4:9] == ["keep", "newest", "2", "of", "bucket"]
    size = human_bytes(orders.snapshots(0)[-1].size_bytes)  # one byte format
    assert " ".join(by_item[("snapshot", "orders", "0", "3")][-2:]) == size
    plan = conn.retention_plan()
    deletes = len(plan.deletes)
    assert deletes == 2
    assert out.rstrip().splitlines()[-1] == (
        f"reclaimable {human_bytes(plan.reclaimable_bytes)}: {len(plan.items) - deletes} keep, "
        f"{deletes} delete"
    )
    assert plan.reclaimable_bytes > 0
    assert snapshot_ids(orders) == {(b, s) for b in (0, 1) for s in (1, 2, 3)}  # changes nothing


def _ageless(items: list[dict]) -> list[dict]:
    return [{**i, "reason": re.sub(r"\(age [^)]*\)", "(age)", i["reason"])} for i in items]


def test_plan_json_and_table_scope(capsys, target, conn, orders) -> None:
    data = run_json(capsys, *target, "retention", "plan")
    assert set(data) == {"items", "reclaimable_bytes", "internal", "skipped"}
    assert data["internal"] == {"items": 0, "deletes": 0, "bytes": 0}
    plan = conn.retention_plan()
    assert data["reclaimable_bytes"] == plan.reclaimable_bytes
    assert data["skipped"] == []
    expected = plan.to_pandas().astype(object).where(plan.to_pandas().notna(), None)
    # the two plans were made a moment apart: the ages in their reasons may differ by a second
    assert _ageless(data["items"]) == _ageless(expected.to_dict("records"))

    conn.create_table("empty", SCHEMA, "id", buckets=1)
    scoped = run_json(capsys, *target, "retention", "plan", "--table", "empty")
    assert [(i["kind"], i["item_id"]) for i in scoped["items"]] == [
        ("lease", "old"),
        ("lease", "q3"),
    ]
    code, out, _ = run(capsys, *target, "retention", "plan", "--table", "empty")
    assert code == 0  # leases are namespace-wide: every plan covers them
    assert out.rstrip().splitlines()[-1] == "reclaimable 0 B: 1 keep, 1 delete"

    code, out, err = run(capsys, *target, "retention", "plan", "--table", "ghost")
    assert (code, out, err) == (2, "", "leasekit: error: table 'ghost' does not exist\n")


def test_run_dry_run_changes_nothing(capsys, target, conn, orders) -> None:
    ctx = testing.context(conn)
    plan = conn.retention_plan()
    code, out, err = run(capsys, *target, "retention", "run", "--dry-run")
    assert code == 0, err
    assert out.splitlines()[0] == (
        f"dry run: would delete 2 item(s) and free {human_bytes(plan.reclaimable_bytes)}; "
        "nothing changed"
    )
    assert [r[:4] for r in rows_of("\n".join(out.splitlines()[2:]), DELETED)] == [
        ["lease", "-", "-", "old"],
        ["snapshot", "orders", "1", "1"],
    ]
    data = run_json(capsys, *target, "retention", "run", "--dry-run")
    assert data["dry_run"] is True and data["errors"] == []
    assert data["freed_bytes"] == plan.reclaimable_bytes
    assert snapshot_ids(orders) == {(b, s) for b in (0, 1) for s in (1, 2, 3)}
    assert sorted(ctx.store.children(ctx.paths.leases)) == ["old", "q3"]


def test_run_deletes_plain_and_json(capsys, target, conn, orders) -> None:
    # R5: the expired lease goes first, so the snapshot it alone pinned goes in the same pass
    ctx = testing.context(conn)
    freed = conn.retention_plan().reclaimable_bytes
    data = run_json(capsys, *target, "retention", "run")
    assert data["dry_run"] is False and data["errors"] == []
    assert data["freed_bytes"] == freed
    assert [(d["kind"], d["table"], d["bucket"], d["item_id"]) for d in data["deleted"]] == [
        ("lease", None, None, "old"),
        ("snapshot", "orders", 1, 1),
    ]
    assert snapshot_ids(orders) == {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3)}
    assert ctx.store.children(ctx.paths.leases) == ["q3"]

    code, out, err = run(capsys, *target, "retention", "run", "--table", "orders")
    assert code == 0, err
    assert out.strip() == "deleted 0 item(s), freed 0 B"


def test_internal_tables_counted_not_listed(capsys, target, conn, orders) -> None:
    # internal tables (the lag history) are never listed unless asked for; retention
    # still covers them (M1) and says how many of its items are theirs
    from leasekit.monitor.lag import history

    conn.update_settings({"monitor.retention": "1s"})
    ctx = testing.context(conn)
    with conn.consumer(group_id="billing", enable_auto_commit=False) as consumer:
        consumer.assign([TB("orders", 0)])
        consumer.commit({TB("orders", 0): 1})
    history.sample(ctx, force=True)
    time.sleep(1.2)
    history.sample(ctx, force=True)
    plan = conn.retention_plan()
    internal = [i for i in plan.items if i.table_bucket and i.table_bucket.table.startswith("__")]
    assert internal, "the lag history has segments and snapshots for retention to judge"

    code, out, err = run(capsys, *target, "retention", "plan")
    assert code == 0, err
    assert "__lag_history" not in " ".join(" ".join(r) for r in rows_of(out))
    assert f"{len(internal)} of these item(s) are of leasekit's internal tables" in out
    keeps = sum(i.action == "keep" for i in plan.items)
    assert f": {keeps} keep, {len(plan.items) - keeps} delete" in out
    data = run_json(capsys, *target, "retention", "plan")
    assert data["internal"]["items"] == len(internal)
    assert all(not (i["table"] or "").startswith("__") for i in data["items"])
    listed = run_json(capsys, *target, "retention", "plan", "--internal")
    assert sum((i["table"] or "").startswith("__") for i in listed["items"]) == len(internal)
    assert listed["internal"]["items"] == 0

    data = run_json(capsys, *target, "retention", "run")
    # the old lag history segments go, counted but not listed; with monitor.retention 1s, a
    # busy machine may let the next sample age past it between the plan above and this run
    planned = sum(i.action == "delete" for i in internal)
    assert planned >= 1 and data["internal"]["deletes"] >= planned
    assert all(not (d["table"] or "").startswith("__") for d in data["deleted"])


def test_corrupt_lease_is_skipped_and_reported(capsys, target, conn, orders) -> None:
    ctx = testing.context(conn)
    bad = ctx.paths.lease("q3")
    ctx.store.commit([SetData(bad, b"\xc1garbage")])
    data = run_json(capsys, *target, "retention", "plan")
    assert len(data["skipped"]) == 1 and bad in data["skipped"][0]
    code, out, _ = run(capsys, *target, "retention", "plan")
    assert code == 0 and "skipped (unreadable metadata, left untouched):" in out
    code, out, _ = run(capsys, *target, "retention", "run")
    assert code == 0
    assert out.startswith("deleted 2 item(s)")
    assert "1 error(s), retried by the next pass:" in out and bad in out
    assert (0, 1) in snapshot_ids(orders)  # still pinned by the unreadable lease


def test_janitor_rejects_a_bad_interval(capsys, target) -> None:
    for bad in ("0s", "soon"):
        code, out, err = run(capsys, *target, "janitor", "--interval", bad)
        assert code == 2 and out == ""
        assert err.startswith("leasekit: error: janitor interval") and len(err.splitlines()) == 1


LOG_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO leasekit\.janitor: janitor pass: "
    r"deleted \d+ items, freed \d+ bytes, merged \d+ segments into \d+, \d+ errors in "
    r"(\d+ms|\d+(\.\d)?s|\d+m( \d+s)?)$"
)


def test_janitor_process_reclaims_and_stops_on_signals(target, conn, orders) -> None:
    # L11: the running janitor reclaims the expired lease; SIGTERM and Ctrl-C end it with 0
    ctx = testing.context(conn)
    command = [sys.executable, "-m", "leasekit.cli", "janitor", "--interval", "1s", *target]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for signum in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        lines: list[str] = []
        reader = threading.Thread(target=lines.extend, args=(proc.stderr,), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + 20
            while not any(LOG_LINE.match(line) for line in list(lines)):
                assert proc.poll() is None, "".join(lines)
                assert time.monotonic() < deadline, "".join(lines)
                time.sleep(0.05)
            proc.send_signal(signum)
            assert proc.wait(timeout=15) == 0, "".join(lines)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reader.join(timeout=5)
        assert proc.stdout.read() == ""
        proc.stdout.close()
        proc.stderr.close()
        err = "".join(lines)
        assert "Traceback" not in err
        assert "janitor pass skipped" not in err
        assert ctx.store.exists(ctx.paths.lease("old")) is None
    election = ctx.store.election(f"{ctx.paths.janitor}/election", "probe")
    assert election.contenders() == []
    assert snapshot_ids(orders) == {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3)}
