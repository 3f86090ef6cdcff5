"""``leasekit consumer list|describe|reset-offsets|delete`` (docs/cli.md, C13)."""

from __future__ import annotations

import re
import time

import pytest
from helpers import run_cli as run
from helpers import run_cli_json as run_json

import leasekit as lk
from leasekit import testing

TB = lk.TableBucket


@pytest.fixture
def orders(conn):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(20)])
    with conn.consumer(group_id="billing", enable_auto_commit=False) as c:
        c.assign([TB("orders", 0)])
        c.commit({TB("orders", 0): 2})
    return table


def test_list_and_describe_like_kafka_consumer_groups(capsys, target, orders):
    assert run_json(capsys, "consumer", "list", *target) == {"groups": ["billing"]}
    code, out, _ = run(capsys, "consumer", "describe", "billing", *target)
    assert code == 0
    assert out.startswith("GROUP billing: OK\nGENERATION -  LEADER -  no live members\n")
    header = out.splitlines()[3].split()
    assert header == [
        "GROUP",
        "TABLE",
        "BUCKET",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "TIME-LAG",
        "CONSUMER-ID",
        "HOST",
        "LAST-COMMIT",
        "STATUS",
    ]
    data = run_json(capsys, "consumer", "describe", "billing", *target)
    rows = {r["bucket"]: r for r in data["buckets"]}
    end = orders.end_offsets()[TB("orders", 0)]
    assert rows[0]["current_offset"] == 2 and rows[0]["lag"] == end - 2
    assert (
        rows[1]["current_offset"] is None and rows[1]["lag"] is None
    )  # never committed: not huge lag
    assert data["generation"] is None and data["leader"] is None and data["unowned"] == []
    assert (
        run(capsys, "consumer", "describe", "billing", "--members", *target)[1]
        == "group billing has no live members\n"
    )


def test_reset_offsets_is_a_dry_run_without_execute(capsys, conn, target, orders):
    # C13
    code, out, _ = run(capsys, "consumer", "reset-offsets", "billing", "--to-earliest", *target)
    assert code == 0 and out.startswith("dry run: nothing changed")
    assert conn.describe_group("billing")["current_offset"].tolist()[0] == 2
    data = run_json(
        capsys,
        "consumer",
        "reset-offsets",
        "billing",
        "--shift-by",
        "5",
        "--table",
        "orders",
        "--bucket",
        "0",
        "--execute",
        *target,
    )
    assert data["executed"] is True and [r["new_offset"] for r in data["plan"]] == [7]
    assert conn.describe_group("billing")["current_offset"].tolist()[0] == 7
    for spelling in (
        ["--to-latest"],
        ["--to-current"],
        ["--to-offset", "3"],
        ["--by-duration", "1h"],
        ["--to-datetime", "2020-01-01T00:00:00Z"],
    ):
        assert run(capsys, "consumer", "reset-offsets", "billing", *spelling, *target)[0] == 0
    code, _, err = run(
        capsys, "consumer", "reset-offsets", "billing", "--to-datetime", "yesterday", *target
    )
    assert code == 2 and "ISO 8601" in err


def test_delete(capsys, target, orders):
    assert run_json(capsys, "consumer", "delete", "billing", *target) == {
        "group": "billing",
        "deleted": True,
    }
    assert run_json(capsys, "consumer", "list", *target) == {"groups": []}


def test_describe_shows_generation_leader_owners_and_members(capsys, conn, target, orders):
    # the header names the generation and the leader; each bucket its live owner, "-"
    # for one no live member owns (as kafka-consumer-groups --describe); --members lists the members
    a = conn.consumer("orders", group_id="g", auto_offset_reset="earliest")
    b = conn.consumer("orders", group_id="g", auto_offset_reset="earliest")
    with a, b:
        a.poll()
        deadline = time.monotonic() + 15
        while not (len(a.assignment()) == len(b.assignment()) == 1) and time.monotonic() < deadline:
            a.poll(timeout="0.05s")
            b.poll(timeout="0.05s")
        owner = {tb.bucket: c.member_id for c in (a, b) for tb in c.assignment()}
        code, out, _ = run(capsys, "consumer", "describe", "g", *target)
        lines = out.splitlines()
        assert code == 0 and lines[1] == f"GENERATION {a.generation}  LEADER {a.member_id}"
        assert {int(line.split()[2]): line.split()[7] for line in lines[4:]} == owner
        data = run_json(capsys, "consumer", "describe", "g", *target)
        assert (data["generation"], data["leader"], data["unowned"]) == (
            a.generation,
            a.member_id,
            [],
        )
        assert {r["bucket"]: r["consumer_id"] for r in data["buckets"]} == owner

        code, out, _ = run(capsys, "consumer", "describe", "g", "--members", *target)
        lines = out.splitlines()
        assert lines[:2] == ["GROUP g", f"GENERATION {a.generation}  LEADER {a.member_id}"]
        assert lines[3].split() == ["CONSUMER-ID", "HOST", "#BUCKETS", "BUCKETS", "ASSIGNED"]
        for line, c in zip(lines[4:], (a, b)):  # oldest first
            (bucket,) = (tb.bucket for tb in c.assignment())
            assert line.split() == [
                c.member_id,
                testing.context(conn).owner,
                "1",
                f"orders({bucket})",
                f"orders({bucket})",
            ]
        members = run_json(capsys, "consumer", "describe", "g", "--members", *target)
        assert [(m["consumer_id"], m["leader"], m["buckets"]) for m in members["members"]] == [
            (
                c.member_id,
                c is a,
                [{"table": "orders", "bucket": tb.bucket} for tb in c.assignment()],
            )
            for c in (a, b)
        ]

        (gone,) = b.assignment()
        b.close()  # before a polls again, b's bucket has no live owner
        code, out, _ = run(capsys, "consumer", "describe", "g", *target)
        lines = out.splitlines()
        assert lines[1].startswith("GENERATION ") and lines[1].endswith(
            f"LEADER {a.member_id}  UNOWNED 1"
        )
        row = next(line.split() for line in lines[4:] if int(line.split()[2]) == gone.bucket)
        assert row[7:9] == ["-", "-"]  # CONSUMER-ID and HOST
        data = run_json(capsys, "consumer", "describe", "g", *target)
        assert data["unowned"] == [{"table": "orders", "bucket": gone.bucket}]


def _settle(consumer, wanted, seconds: float = 15.0) -> None:
    """Poll until the consumer's assignment is ``wanted``."""
    deadline = time.monotonic() + seconds
    while set(consumer.assignment()) != wanted and time.monotonic() < deadline:
        consumer.poll(timeout="0.05s")
    assert set(consumer.assignment()) == wanted


def test_describe_says_new_buckets_wait_for_their_parent(capsys, conn, target):
    # K5: parent first: the buckets a split made wait, unowned, until the group has read their
    # parent to its seal; the describe table says so where their owner would be. K6: the
    # sealed parent is described until drained, then it leaves
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    table.append([{"id": i} for i in range(2_000)])
    c = conn.consumer("orders", group_id="g", auto_offset_reset="earliest")
    with c:
        _settle(c, {TB("orders", 0), TB("orders", 1)})
        c.commit({TB("orders", 0): 2, TB("orders", 1): 2})
        sealed_at = table.end_offsets()[TB("orders", 1)]
        table.split_bucket(1)
        table.append([{"id": i} for i in range(2_000, 2_400)])

        code, out, err = run(capsys, "consumer", "describe", "g", *target)
        assert code == 0, err
        lines = out.splitlines()
        assert lines[1].endswith(f"LEADER {c.member_id}  WAITING 2 (parent first)")
        assert "UNOWNED" not in lines[1]
        rows = {int(line.split()[2]): line for line in lines[4:8]}
        assert sorted(rows) == [0, 1, 2, 3]
        for child in (2, 3):
            assert re.search(r"\s-\s+waiting for 1 \(parent\)\s+-\s+-\s+-$", rows[child])
        assert c.member_id in rows[1]
        assert lines[8:] == [
            "",
            f"bucket 1 of orders: sealed at offset {sealed_at:,} → 2, 3; 2, 3 wait until the "
            "group has read 1 to its seal (parent first)",
        ]
        data = run_json(capsys, "consumer", "describe", "g", *target)
        assert data["unowned"] == []
        assert data["waiting"] == [
            {"table": "orders", "bucket": 2, "parents": [1]},
            {"table": "orders", "bucket": 3, "parents": [1]},
        ]
        assert {r["bucket"]: r["consumer_id"] for r in data["buckets"]}[2] is None

        c.commit({TB("orders", 1): sealed_at})  # drained: the children are assigned
        _settle(c, {TB("orders", b) for b in (0, 2, 3)})
        code, out, err = run(capsys, "consumer", "describe", "g", *target)
        assert code == 0, err
        lines = out.splitlines()
        assert "WAITING" not in lines[1] and "waiting for" not in out
        assert sorted(int(line.split()[2]) for line in lines[4:]) == [0, 2, 3]
        assert run_json(capsys, "consumer", "describe", "g", *target)["waiting"] == []
