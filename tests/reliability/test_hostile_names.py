"""Znodes with names leasekit never creates (docs/security.md, "Hostile znodes"): on a namespace
without ``auth`` anyone may create ``/<ns>/tables/bad name!`` holding a valid table record. Every
listing skips such a name, with one log line, and the rest carries on: retention, the janitor, the
CLI, the exporter and the consumers; ``conn.table("bad name!")`` is still refused as bad input."""

from __future__ import annotations

import logging
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta

import pytest
from helpers import run_cli_json
from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

import leasekit as lk
from leasekit import janitor, testing
from leasekit.monitor.exporter.serve import MetricsServer

TB = lk.TableBucket

HOSTILE = ["bad name!", "__not_internal", "-dash", "\u202eevil"]


@pytest.fixture
def raw(zookeeper) -> Iterator[KazooClient]:
    """A plain kazoo client: what anyone may use on a namespace without ``auth``."""
    client = KazooClient(hosts=zookeeper, timeout=30)
    client.start()
    yield client
    client.stop()
    client.close()


def _copy_tree(raw: KazooClient, source: str, target: str) -> None:
    data, _ = raw.get(source)
    raw.create(target, data)
    for child in raw.get_children(source):
        _copy_tree(raw, f"{source}/{child}", f"{target}/{child}")


@pytest.fixture
def orders(conn, clock):
    """3 snapshots and 3 segments per bucket (100-byte files), the newest snapshot retained;
    lease "old" pins snapshot 1 of bucket 0 and has expired (past its grace), "keeper" not."""
    ctx = testing.context(conn)
    conn.update_settings({"lease.expiry-grace": "30s"})
    table = conn.create_table(
        "orders", "id BIGINT", "id", buckets=2, properties={"kv.snapshot.num-retained": 1}
    )
    testing.seed_history(ctx, table, 3, 3, 10, file_bytes=100)
    conn.acquire_kv_snapshot_lease("old", {TB("orders", 0): 1}, "1m")
    conn.acquire_kv_snapshot_lease("keeper", {}, "2h")
    clock.advance(timedelta(seconds=60 + 31))
    return table


def _hostile_table(conn, raw: KazooClient, name: str) -> str:
    """Create ``tables/<name>`` holding a copy of the valid record of "orders"; its path."""
    ctx = testing.context(conn)
    path = ctx.paths.table(name)
    raw.create(path, ctx.store.get(ctx.paths.table("orders")).data)
    return path


def _skip_lines(caplog, name: str) -> list[str]:
    """The listing's log lines about ``name`` (a janitor pass also warns of what it skipped,
    each pass, as it does of unreadable znodes)."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "leasekit.tables.catalog" and repr(name) in r.getMessage()
    ]


@pytest.mark.parametrize("name", HOSTILE)
def test_listings_skip_a_hostile_table_name_with_one_log_line(conn, raw, orders, caplog, name):
    # docs/security.md: the name is skipped wherever tables are listed and said once in the log; the
    # plan names it in ``skipped``; the user's own bad input is still refused
    caplog.set_level(logging.WARNING, logger="leasekit")
    _hostile_table(conn, raw, name)
    assert conn.tables() == ["orders"]
    plan = conn.retention_plan()
    assert len(plan.skipped) == 1  # said with the name escaped: it may hold control characters
    assert (
        f"{testing.context(conn).paths.tables} skipped: invalid table name {name!r}"
        in (plan.skipped[0])
    )
    assert conn.retention_plan().skipped == plan.skipped
    assert conn.tables() == ["orders"]
    assert len(_skip_lines(caplog, name)) == 1
    with pytest.raises(lk.InvalidArgumentError):
        conn.table(name)
    with pytest.raises(lk.InvalidArgumentError):
        conn.retention_plan(name)


def test_retention_janitor_cli_and_exporter_carry_on_past_a_hostile_table(
    conn, raw, orders, capsys, target, caplog
):
    # R5, L11: the expired lease is removed and the snapshots only it pinned go, by the
    # pass, the janitor and the CLI alike; `table list` lists the good table (exit 0); the
    # exporter samples without failure
    caplog.set_level(logging.WARNING, logger="leasekit")
    _hostile_table(conn, raw, "bad name!")
    plan = conn.retention_plan()
    leases = {i.item_id: i.action for i in plan.items if i.kind == "lease"}
    assert leases == {"old": "delete", "keeper": "keep"}
    snapshots = {
        (i.table_bucket.bucket, i.item_id): i.action for i in plan.items if i.kind == "snapshot"
    }
    assert snapshots == {(b, s): "keep" if s == 3 else "delete" for b in (0, 1) for s in (1, 2, 3)}

    report = conn.run_retention(dry_run=True)
    assert "old" in {i.item_id for i in report.deleted}
    report = janitor.run_once(conn)
    assert {i.item_id for i in report.deleted if i.kind == "lease"} == {"old"}
    assert {(s.table_bucket.bucket, s.snapshot_id) for s in orders.snapshots()} == {(0, 3), (1, 3)}
    assert [i.lease_id for i in conn.leases()] == ["keeper"]
    assert conn.run_retention().deleted == []  # the next pass carries on too

    rows = run_cli_json(capsys, *target, "table", "list")
    assert [r["table"] for r in rows] == ["orders"]
    assert run_cli_json(capsys, *target, "retention", "plan") is not None

    conn.update_settings({"monitor.interval": "1s"})
    with MetricsServer(testing.context(conn), port=0) as server:
        got = _scrape_sampled(server.url)
    assert got["leasekit_up"] == [1.0]
    assert got["leasekit_sample_failures_total"] == [0.0]
    assert "leasekit_retention_reclaimable_bytes" in got
    assert len(_skip_lines(caplog, "bad name!")) == 1
    assert len(_skip_lines(caplog, "bad name!")) == 1


def _scrape_sampled(url: str, timeout: float = 60.0) -> dict[str, list[float]]:
    """The sample values by metric name, once the exporter has sampled."""
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
        got: dict[str, list[float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                got.setdefault(sample.name, []).append(sample.value)
        if "leasekit_last_sample_timestamp_seconds" in got:
            return got
        assert time.monotonic() < deadline, "the exporter never sampled"
        time.sleep(0.2)


def test_groups_inventory_and_pattern_subscriptions_skip_a_hostile_table(conn, raw, orders):
    # C17: group and lease views over tables, and a pattern subscription matching
    # everything, leave the hostile name out and go on with "orders"
    _hostile_table(conn, raw, "bad name!")
    with conn.consumer(group_id="billing", enable_auto_commit=False) as c:
        c.assign([TB("orders", 0), TB("orders", 1)])
        c.commit({TB("orders", 0): 5, TB("orders", 1): 5})
    described = conn.describe_group("billing")
    assert set(described["table"]) == {"orders"}
    overview = conn.group_overview()
    assert list(overview["group"]) == ["billing"]
    assert set(conn.lease_inventory()["lease_id"]) == {"old", "keeper"}
    with conn.consumer(group_id="pattern") as c:  # "latest": the seeded files are not read
        c.subscribe(pattern=".*")
        end = time.monotonic() + 30
        while {tb.table for tb in c.assignment()} != {"orders"}:
            assert time.monotonic() < end, c.assignment()
            c.poll("0.2s")


def test_hostile_lease_and_group_names_are_listed_without_failing(
    conn, raw, orders, capsys, target
):
    # L1: lease and group ids are listed by name too; one that breaks the id rule stops no
    # listing, no plan and no pass
    ctx = testing.context(conn)
    with conn.consumer(group_id="billing", enable_auto_commit=False) as c:
        c.assign([TB("orders", 0)])
        c.commit({TB("orders", 0): 5})
    _copy_tree(raw, ctx.paths.lease("keeper"), ctx.paths.lease("bad lease!"))
    _copy_tree(raw, ctx.paths.group("billing"), ctx.paths.group("bad group!"))
    conn.retention_plan()
    janitor.run_once(conn)
    assert "old" not in {i.lease_id for i in conn.leases()}
    conn.lease_inventory()
    conn.group_overview()
    for command in (["lease", "list"], ["lease", "inventory"], ["consumer", "list"],
                    ["consumer", "overview"], ["retention", "plan"]):  # fmt: skip
        run_cli_json(capsys, *target, *command)
