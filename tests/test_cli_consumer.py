"""``leasekit consumer list|describe|reset-offsets|delete`` (DESIGN 6.9, C13)."""

from __future__ import annotations

import pytest
from helpers import run_cli as run
from helpers import run_cli_json as run_json

import leasekit as lk

TB = lk.TableBucket


@pytest.fixture
def target(zookeeper, warehouse, namespace) -> list[str]:
    return ["--zookeeper", zookeeper, "--warehouse", warehouse, "--namespace", namespace]


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
    assert out.startswith("GROUP billing: OK")
    header = out.splitlines()[2].split()
    assert header == ["GROUP", "TABLE", "BUCKET", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "TIME-LAG",
                      "CONSUMER-ID", "HOST", "LAST-COMMIT", "STATUS"]
    data = run_json(capsys, "consumer", "describe", "billing", *target)
    rows = {r["bucket"]: r for r in data["buckets"]}
    end = orders.end_offsets()[TB("orders", 0)]
    assert rows[0]["current_offset"] == 2 and rows[0]["lag"] == end - 2
    assert rows[1]["current_offset"] is None and rows[1]["lag"] is None  # never committed: not huge lag


def test_reset_offsets_is_a_dry_run_without_execute(capsys, conn, target, orders):
    # C13
    code, out, _ = run(capsys, "consumer", "reset-offsets", "billing", "--to-earliest", *target)
    assert code == 0 and out.startswith("dry run: nothing changed")
    assert conn.describe_group("billing")["current_offset"].tolist()[0] == 2
    data = run_json(capsys, "consumer", "reset-offsets", "billing", "--shift-by", "5", "--table", "orders",
                    "--bucket", "0", "--execute", *target)
    assert data["executed"] is True and [r["new_offset"] for r in data["plan"]] == [7]
    assert conn.describe_group("billing")["current_offset"].tolist()[0] == 7
    for spelling in (["--to-latest"], ["--to-current"], ["--to-offset", "3"], ["--by-duration", "1h"],
                     ["--to-datetime", "2020-01-01T00:00:00Z"]):
        assert run(capsys, "consumer", "reset-offsets", "billing", *spelling, *target)[0] == 0
    code, _, err = run(capsys, "consumer", "reset-offsets", "billing", "--to-datetime", "yesterday", *target)
    assert code == 2 and "ISO 8601" in err


def test_delete(capsys, target, orders):
    assert run_json(capsys, "consumer", "delete", "billing", *target) == {"group": "billing", "deleted": True}
    assert run_json(capsys, "consumer", "list", *target) == {"groups": []}
