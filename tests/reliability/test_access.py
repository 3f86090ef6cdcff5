"""Access with ``auth`` (docs/security.md): a client without the credentials reads everything —
tables, leases, groups, lag, the retention plan, the panels — and every write it tries is
refused with ``PermissionDeniedError``, changing nothing; the same on a namespace first opened
without ``auth``, once a writer with ``auth`` has opened it; a namespace closed by other
credentials refuses this writer's writes and still serves its reads."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
from helpers import namespace_tree, seed_empty_snapshots

import leasekit as lk
from leasekit import testing

TB = lk.TableBucket
WRITER = ("writer", "s3cret")


def stock(writer: lk.Connection) -> None:
    """A table with records and snapshots, a lease pinning it, a group with offsets, an old
    orphan file, and orphan.min-age 0: what a stray retention pass would delete."""
    ctx = testing.context(writer)
    table = writer.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    seed_empty_snapshots(ctx, table)
    table.append([{"id": i, "v": "x"} for i in range(10)])
    writer.lease("w1", "1h").acquire_latest("t")
    with writer.consumer(group_id="g", enable_auto_commit=False) as consumer:
        consumer.assign([TB("t", 0), TB("t", 1)])
        consumer.commit({TB("t", 0): 1, TB("t", 1): 1})
    writer.update_settings({"orphan.min-age": 0})
    orphan = os.path.join(writer.warehouse, ctx.tables_dir, "t", "stray.parquet")
    with open(orphan, "wb") as f:
        f.write(b"x")
    os.utime(orphan, (time.time() - 7200, time.time() - 7200))


def files_of(conn: lk.Connection) -> set[str]:
    return {e.path for e in testing.context(conn).warehouse.list(conn.namespace)}


def check_reader(writer: lk.Connection, reader: lk.Connection) -> None:
    """The reader reads what the writer sees, and every write it tries is refused unchanged."""
    from leasekit.widgets import ConsumerPanel, Dashboard, LeasePanel, RetentionPanel

    assert reader.tables() == ["t"]
    assert reader.table("t").end_offsets() == writer.table("t").end_offsets()
    assert [x.lease_id for x in reader.leases()] == ["w1"]
    assert reader.consumer_groups() == ["g"]
    assert len(reader.describe_group("g")) == 2
    assert set(reader.group_status("g").buckets) == {TB("t", 0), TB("t", 1)}
    plan = reader.retention_plan()
    assert any(i.kind == "orphan" and i.action == "delete" for i in plan.items)
    assert reader.server_time() is not None
    assert reader.run_retention(dry_run=True).deleted
    dashboard = Dashboard(reader, auto_refresh=False)
    panels = [
        LeasePanel(reader, auto_refresh=False),
        ConsumerPanel(reader, group_id="g", auto_refresh=False),
        RetentionPanel(reader, auto_refresh=False),
        *dashboard.panels,
    ]
    try:
        dashboard.refresh()
        for panel in panels:
            panel.refresh()
            assert panel.refreshes >= 1 and "error" not in panel.message.value, panel.message.value
    finally:
        dashboard.close()
        for panel in panels[:3]:
            panel.close()

    tree, files = namespace_tree(writer), files_of(writer)
    writes = {
        "create_table": lambda: reader.create_table("u", "id BIGINT", "id"),
        "drop_table": lambda: reader.drop_table("t", force=True),
        "append": lambda: reader.table("t").append([{"id": 99, "v": "y"}]),
        "acquire": lambda: reader.lease("r1", "1h").acquire_latest("t"),
        "drop lease": lambda: reader.drop_kv_snapshot_lease("w1"),
        "commit": lambda: commit_as(reader),
        "update_settings": lambda: reader.update_settings({"orphan.min-age": "2h"}),
        "run_retention": lambda: reader.run_retention(),
        "delete_group": lambda: reader.delete_group("g"),
        "reset_offsets": lambda: reader.reset_offsets("g", to="earliest", dry_run=False),
    }
    for name, write in writes.items():
        with pytest.raises(lk.PermissionDeniedError):
            write()
        assert namespace_tree(writer) == tree, f"{name} changed the namespace"
        assert files_of(writer) == files, f"{name} changed the warehouse"


def open_znodes(conn: lk.Connection) -> list[str]:
    """Znodes of the namespace that a client without credentials may change: world may do more
    than READ (READ|WRITE on the clock)."""
    ctx = testing.context(conn)
    from kazoo.security import Permissions

    found = []
    for path in ctx.store.descendants(ctx.paths.root):
        acls, _ = ctx.store.client.get_acls(path)
        allowed = Permissions.READ | (Permissions.WRITE if path == ctx.paths.clock else 0)
        world = [a.perms for a in acls if (a.id.scheme, a.id.id) == ("world", "anyone")]
        if any(perms & ~allowed for perms in world):
            found.append(path)
    return found


def commit_as(reader: lk.Connection) -> None:
    with reader.consumer(group_id="g", enable_auto_commit=False) as consumer:
        consumer.assign([TB("t", 0)])
        consumer.commit({TB("t", 0): 5})


def test_reader_without_credentials_reads_everything_and_changes_nothing(
    zookeeper, warehouse, namespace
):
    # docs/security.md: namespace created with auth; reads work (the clock included), writes refused
    with lk.connect(zookeeper, warehouse, namespace=namespace, auth=WRITER) as writer:
        stock(writer)
        with lk.connect(zookeeper, warehouse, namespace=namespace) as reader:
            check_reader(writer, reader)


def test_namespace_first_opened_without_auth_is_closed_by_a_writer_with_auth(
    zookeeper, warehouse, namespace
):
    # docs/security.md: a namespace created open is closed as a whole by the first writer with auth
    with lk.connect(zookeeper, warehouse, namespace=namespace) as analyst:
        ctx = testing.context(analyst)
        analyst.create_table("early", "id BIGINT", "id").append([{"id": 1}])
        with lk.connect(zookeeper, warehouse, namespace=namespace, auth=WRITER) as writer:
            writer.drop_table("early")
            stock(writer)
            # the analyst's connection, opened before the namespace was closed, is refused too
            with pytest.raises(lk.PermissionDeniedError):
                ctx.store.delete_tree(ctx.paths.table("t"))
            with pytest.raises(lk.PermissionDeniedError):
                analyst.update_settings({"orphan.min-age": "3h"})
            check_reader(writer, analyst)
            with lk.connect(zookeeper, warehouse, namespace=namespace) as reader:
                check_reader(writer, reader)


@pytest.mark.parametrize("round_", range(5))
def test_closing_leaves_nothing_open_while_a_stranger_keeps_creating(
    zookeeper, warehouse, namespace, round_
):
    # docs/security.md: closing is complete even while an unauthenticated
    # client keeps creating znodes (a create racing an ACL change can
    # land after it: rounds give that window chances to open)
    with lk.connect(zookeeper, warehouse, namespace=namespace) as stranger:
        ctx = testing.context(stranger)
        stranger.create_table("t", "id BIGINT", "id", buckets=3).append(
            [{"id": i} for i in range(30)]
        )
        stop = threading.Event()
        created: list[str] = []

        def keep_creating() -> None:
            from leasekit.zk import Create

            parents = [
                ctx.paths.root,
                ctx.paths.tables,
                ctx.paths.leases,
                ctx.paths.groups,
            ]
            while not stop.is_set():
                for parent in parents:
                    path = f"{parent}/x{uuid.uuid4().hex[:8]}"
                    try:
                        ctx.store.commit([Create(path, b"")])
                        created.append(path)
                    except lk.PermissionDeniedError:
                        pass

        thread = threading.Thread(target=keep_creating)
        thread.start()
        try:
            time.sleep(0.2)
            with lk.connect(zookeeper, warehouse, namespace=namespace, auth=WRITER) as writer:
                time.sleep(0.2)
                stop.set()
                thread.join()
                assert created
                assert open_znodes(writer) == []
        finally:
            stop.set()
            thread.join()


def test_namespace_closed_by_other_credentials_reads_but_refuses_writes(
    zookeeper, warehouse, namespace
):
    # docs/security.md: a writer with other credentials
    # reads, and each write is refused with nothing changed
    with lk.connect(zookeeper, warehouse, namespace=namespace, auth=WRITER) as writer:
        stock(writer)
        with lk.connect(zookeeper, warehouse, namespace=namespace, auth=("other", "pw")) as other:
            check_reader(writer, other)
