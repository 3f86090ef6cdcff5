"""Live panels at scale (B8): a panel's ZooKeeper watches grow with the tables, groups
and leases it shows, not with their buckets, because every writer sets the table's or group's
change marker in the transaction that changes it; and every kind of change still reaches an
open panel (appends, deletes, commits, resets, membership, snapshots, leases, retention, drops)."""

from __future__ import annotations

import time

import pytest
from leasekit.widgets import ConsumerPanel, LeasePanel, RetentionPanel

import leasekit as lk
from leasekit.testing import context, seed_history

TB = lk.TableBucket
BUCKETS = 1000


def wait_until(what, condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def other(zookeeper, warehouse, namespace):
    """A second connection to the same namespace: another analyst or process."""
    with lk.connect(zookeeper, warehouse, namespace=namespace) as connection:
        yield connection


def test_panel_watches_grow_with_tables_and_groups_not_buckets(conn):
    # B8: about 4 watches per bucket before (3,957 for a consumer panel over 1,000 buckets)
    big = conn.create_table("big", "id BIGINT, v STRING", "id", buckets=BUCKETS)
    seed_history(context(conn), big, 2, 2, 10)
    conn.reset_offsets("g", to="earliest", tables=["big"], dry_run=False)
    conn.acquire_kv_snapshot_lease("all", {TB("big", b): 2 for b in range(BUCKETS)}, "1h")
    panels = [ConsumerPanel(conn, "g"), RetentionPanel(conn, "big"), LeasePanel(conn)]
    try:
        for panel in panels:
            panel.refresh()
            assert panel.last_error == "" and panel.refreshes >= 1
        panels[2].lease.value = "all"  # every bucket pinned: 1 pin array
        time.sleep(0.5)
        assert len(panels[0].grid.data) == BUCKETS
        # one table, one group, one lease: a small constant, whatever the buckets
        counts = [panel.watched for panel in panels]
        assert all(0 < n <= 12 for n in counts), counts
    finally:
        for panel in panels:
            panel.close()
    assert [panel.watched for panel in panels] == [0, 0, 0]


def test_every_change_of_a_group_reaches_an_open_consumer_panel(conn, other, spark):
    orders = other.create_table("orders", "id BIGINT, status STRING", "id", buckets=4)
    orders.append([{"id": i, "status": "new"} for i in range(40)])
    other.reset_offsets("g", to="earliest", tables=["orders"], dry_run=False)  # a reset
    panel = ConsumerPanel(conn, "g")
    panel.refresh()
    try:

        def lag():
            return panel.grid.data["lag"].sum()

        assert lag() == 40
        orders.append([{"id": i, "status": "more"} for i in range(40, 48)])  # an append
        wait_until("the append", lambda: lag() == 48)
        orders.delete([{"id": i} for i in range(4)])  # deletes are records too
        wait_until("the deletes", lambda: lag() == 52)
        other.reset_offsets("g", to="latest", dry_run=False)  # a reset to the end
        wait_until("the reset", lambda: lag() == 0)
        orders.append([{"id": i, "status": "x"} for i in range(100, 110)])
        wait_until("the second append", lambda: lag() == 10)
        consumer = other.consumer("orders", group_id="g", enable_auto_commit=False)
        try:  # membership and ownership: the member joins and claims every bucket
            wait_until("the member's buckets", lambda: _polled(consumer, 4))
            wait_until("the member", lambda: "1 live member" in panel.summary.value)
            while any(consumer.position(tb) < e for tb, e in orders.end_offsets().items()):
                consumer.poll("0.5s")
            consumer.commit()  # a member's commit
            wait_until("the commit", lambda: lag() == 0)
        finally:
            consumer.close()
        wait_until("the member to leave", lambda: "0 live members" in panel.summary.value)
        other.drop_table("orders")  # a drop
        wait_until("the drop", lambda: len(panel.grid.data) == 0 or panel.last_error != "")
        assert 0 < panel.watched <= 12  # after all those changes: still per table and group
    finally:
        panel.close()


def test_every_change_of_a_table_reaches_an_open_retention_panel(conn, other, spark):
    props = {"kv.snapshot.num-retained": "1", "log.retention": "0s"}
    orders = other.create_table("orders", "id BIGINT, v STRING", "id", buckets=2, properties=props)
    orders.append([{"id": i, "v": "a"} for i in range(20)])
    orders.snapshot(spark)
    panel = RetentionPanel(conn, "orders")
    panel.refresh()
    try:

        def kinds(kind, action=None):
            plan = panel.grid.data
            rows = plan[plan["kind"] == kind]
            return len(rows if action is None else rows[rows["action"] == action])

        assert kinds("snapshot") == 2 and kinds("snapshot", "delete") == 0
        orders.append([{"id": i, "v": "b"} for i in range(20, 40)])
        orders.snapshot(spark)  # a registration: the first snapshots and segments may go
        wait_until("the snapshots", lambda: kinds("snapshot") == 4, seconds=15)
        assert kinds("snapshot", "delete") == 2 and kinds("segment", "delete") >= 2
        other.acquire_kv_snapshot_lease("hold", {TB("orders", 0): 1}, "1h")  # a pin
        wait_until("the pin", lambda: kinds("snapshot", "delete") == 1)
        other.release_kv_snapshot_lease("hold", [TB("orders", 0)])  # an unpin
        wait_until("the release", lambda: kinds("snapshot", "delete") == 2)
        other.run_retention()  # snapshot and segment deletion by retention
        wait_until(
            "the deletions",
            lambda: kinds("snapshot") == 2 and kinds("segment", "delete") == 0,
        )
    finally:
        panel.close()


def _polled(consumer, buckets):
    consumer.poll("0.2s")
    return len(consumer.assignment()) == buckets


def test_what_a_read_touched_maps_to_few_markers():
    # the layout behind the watches: ids that spell parts of the layout change nothing
    from leasekit.zk.changes import watch_targets
    from leasekit.zk.paths import Paths

    paths = Paths("log")
    read = [
        paths.bucket("log", 3),
        paths.segment("log", 3, 40),
        paths.snapshot("log", 1, 2),
        paths.table_data("log"),  # the drop fence: itself
        paths.offset("owners", "log", 3),
        paths.owner("owners", "log", 3),
        paths.member("owners", "m-1"),
        paths.group_assignment("owners"),
        paths.lease_chunk("pins", "log", 0),
        paths.lease("pins"),
        paths.table("log"),
    ]
    listed = [paths.tables, paths.groups, paths.log("log", 3), paths.group_members("owners")]
    data, children = watch_targets(paths, read, listed)
    assert data == {
        paths.table_changes("log"),
        paths.table_data("log"),
        paths.group_changes("owners"),
        paths.group_assignment("owners"),
        paths.leases,
        paths.lease("pins"),
        paths.table("log"),
    }
    assert children == {paths.tables, paths.groups, paths.group_members("owners")}


def test_data_older_than_markers_keeps_working(conn):
    # a table without its marker (written before markers existed): its first change creates it
    from leasekit.zk import Delete

    table = conn.create_table("old", "id BIGINT, v STRING", "id", buckets=2)
    ctx = context(conn)
    marker = ctx.paths.table_changes(table.table_id)
    ctx.store.commit([Delete(marker)])
    assert ctx.store.exists(marker) is None
    table.append([{"id": i, "v": "x"} for i in range(10)])
    assert sum(table.end_offsets().values()) == 10 and ctx.store.exists(marker) is not None
