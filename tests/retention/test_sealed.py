"""Retention of sealed buckets (K7): a split or merged bucket's snapshots and log stay while a
bucket built from it has no snapshot of its own, while a lease pins them, and (respect-consumers)
while a group has not consumed it to its seal; then they go, the newest snapshot too."""

from __future__ import annotations

import os

import pyarrow as pa

import leasekit as lk
from leasekit import janitor, testing
from leasekit import spark as lks
from leasekit.snapshots.catalog import read_latest

TB = lk.TableBucket

PROPS = {"log.retention": "0s", "kv.snapshot.num-retained": 1}


def _items(plan, bucket, kind):
    """{item_id: (action, reason)} of one bucket's items of ``kind``."""
    return {
        i.item_id: (i.action, i.reason)
        for i in plan.items
        if i.kind == kind and i.table_bucket and i.table_bucket.bucket == bucket
    }


def _sealed_table(conn, spark, props=PROPS):
    """Table t of 2 buckets; bucket 1 with snapshots at 2 points and a log tail past the newest,
    then split into 2 and 3. Returns the table and bucket 1's snapshots (oldest first)."""
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2, properties=props)
    for r in range(2):
        table.append([{"id": k, "v": f"r{r}"} for k in range(40)])
        table.snapshot(spark)
    table.append([{"id": k, "v": "tail"} for k in range(40)])  # past the newest snapshot
    snaps = table.snapshots(1)
    assert table.split_bucket(1) == (TB("t", 2), TB("t", 3))
    return table, snaps


def _children_snapshots(table, spark):
    """Give every active bucket a snapshot of its own: append keys to all of them, then
    ``snapshot()``; an active bucket it left without one (compaction reaching only some ids)
    gets one registered directly, with a placeholder file (retention reads only metadata and
    file names)."""
    from leasekit.log.markers import in_flight
    from leasekit.log.state import read_states
    from leasekit.snapshots.register import Written, register

    table.append([{"id": k, "v": "child"} for k in range(40)])
    table.snapshot(spark)
    have = {s.table_bucket.bucket for s in table.snapshots()}
    missing = [b for b in table.refresh().active if b not in have]
    if not missing:
        return
    ctx = table.context
    with in_flight(ctx) as token:
        written = {}
        for b, state in zip(missing, read_states(table, missing)):
            path = f"{table.data_dir}/snapshots/{token}/_bucket={b}/part-00000.parquet"
            size = ctx.warehouse.write_parquet(path, pa.table({"id": [b]}))
            written[b] = Written(state.end if state else 0, [path], 1, size)
        register(table, written, token)
    assert all(table.snapshots(b) for b in table.active)


def test_sealed_bucket_keeps_newest_snapshot_and_log_tail_for_its_children(conn, spark):
    # K7 (b): children without a snapshot of their own are built from the parent's newest
    # snapshot and its log from there to the seal: both stay, whatever log.retention says
    table, snaps = _sealed_table(conn, spark)
    newest, older = snaps[-1], snaps[0]
    held = "sealed bucket 1: children 2, 3 have no snapshot of their own yet"
    plan = conn.retention_plan("t")
    assert _items(plan, 1, "snapshot")[newest.snapshot_id] == ("keep", held)
    assert _items(plan, 1, "snapshot")[older.snapshot_id][0] == "delete"  # R1 as before
    segments = _items(plan, 1, "segment")
    tail = {b for b, (action, reason) in segments.items() if reason == held}
    assert tail and all(segments[b][0] == "keep" for b in tail)
    assert min(tail) < newest.log_offset + 1 and max(tail) >= newest.log_offset
    assert all(action == "delete" for b, (action, _) in segments.items() if b not in tail)
    conn.run_retention("t")
    assert [s.snapshot_id for s in table.snapshots(1)] == [newest.snapshot_id]
    assert all(os.path.exists(f) for f in newest.files)
    sealed_at = next(x.sealed_at for x in table.lineage() if x.table_bucket.bucket == 1)
    assert table.end_offsets()[TB("t", 1)] == sealed_at
    assert table.beginning_offsets()[TB("t", 1)] <= newest.log_offset
    # a child split again before its first snapshot: its children need the grandparent still
    table.split_bucket(2)
    plan = conn.retention_plan("t")
    reason = "sealed bucket 1: children 3, 4, 5 have no snapshot of their own yet"
    assert _items(plan, 1, "snapshot")[newest.snapshot_id] == ("keep", reason)


def test_sealed_bucket_files_go_once_its_children_have_snapshots(conn, spark):
    # K7, R2: every snapshot of the sealed bucket, the newest too, and its whole log go; a
    # snapshot a lease pins stays with its log tail until the lease goes
    table, snaps = _sealed_table(conn, spark, {**PROPS, "kv.snapshot.num-retained": 2})
    lease = conn.lease("q3-report", "1h")
    lease.acquire({TB("t", 1): snaps[0].snapshot_id})
    _children_snapshots(table, spark)
    stored = table.snapshots(1)
    free = "sealed bucket 1: its children have snapshots of their own"
    plan = conn.retention_plan("t")
    snapshots = _items(plan, 1, "snapshot")
    assert snapshots[snaps[0].snapshot_id][0] == "keep"
    assert snapshots[snaps[0].snapshot_id][1].startswith("pinned by lease q3-report until 20")
    assert {s.snapshot_id for s in stored[1:]} == set(snapshots) - {snaps[0].snapshot_id}
    assert all(snapshots[s.snapshot_id] == ("delete", free) for s in stored[1:])
    segments = _items(plan, 1, "segment")
    tail = f"needed: log tail of pinned snapshot {snaps[0].snapshot_id}"
    assert {r if r == tail else r.split("; older than")[0] for _, r in segments.values()} == {
        free,
        tail,
    }  # R3: past log.retention (0s here)
    pinned_rows = lks.read_snapshots(spark, table, {1: snaps[0].snapshot_id}).count()
    report = conn.run_retention("t")
    assert {i.item_id for i in report.deleted if i.table_bucket == TB("t", 1)} >= {
        s.snapshot_id for s in stored[1:]
    }
    assert [s.snapshot_id for s in table.snapshots(1)] == [snaps[0].snapshot_id]
    assert all(os.path.exists(f) for f in snaps[0].files)  # R2
    assert not any(os.path.exists(f) for s in stored[1:] for f in s.files)
    assert table.beginning_offsets()[TB("t", 1)] == snaps[0].log_offset
    assert lks.read_snapshots(spark, table, {1: snaps[0].snapshot_id}).count() == pinned_rows
    assert 1 not in read_latest(table.refresh())  # the latest-snapshot array forgot it
    lease.drop()
    assert janitor.run_once(conn).errors == []  # a janitor's pass finishes the work
    assert table.snapshots(1) == []
    assert not any(os.path.exists(f) for f in snaps[0].files)
    sealed_at = next(x.sealed_at for x in table.lineage() if x.table_bucket.bucket == 1)
    assert table.beginning_offsets()[TB("t", 1)] == table.end_offsets()[TB("t", 1)] == sealed_at
    assert [x.state for x in table.lineage()] == ["active", "sealed", "active", "active"]
    assert all(table.snapshots(b) for b in table.active)  # the children keep theirs
    plan = conn.retention_plan("t")
    assert _items(plan, 1, "snapshot") == {} and _items(plan, 1, "segment") == {}


def test_respect_consumers_holds_a_sealed_bucket_until_groups_reach_its_seal(conn, spark):
    # K7 (c): with log.retention.respect-consumers, a group that has not committed the sealed
    # bucket up to its seal holds the log it has not consumed
    props = {**PROPS, "log.retention.respect-consumers": True}
    table, _ = _sealed_table(conn, spark, props)
    sealed_at = next(x.sealed_at for x in table.lineage() if x.table_bucket.bucket == 1)
    with conn.consumer(group_id="g", enable_auto_commit=False) as c:
        c.assign([TB("t", 0), TB("t", 1)])
        c.commit({TB("t", 0): table.end_offsets()[TB("t", 0)], TB("t", 1): 10})
    _children_snapshots(table, spark)
    held = f"sealed bucket 1: group g has not consumed it to its seal at {sealed_at}"
    plan = conn.retention_plan("t")
    segments = _items(plan, 1, "segment")
    assert segments and {r for a, r in segments.values() if a == "keep"} == {held}
    report = conn.run_retention("t")
    assert table.beginning_offsets()[TB("t", 1)] <= 10
    assert table.snapshots(1)  # held with the log (the rules of an active bucket)
    assert not any(
        i.kind == "segment" and i.table_bucket == TB("t", 1) and i.item_id >= 10
        for i in report.deleted
    )
    with conn.consumer(group_id="g", enable_auto_commit=False) as c:
        c.assign([TB("t", 1)])
        c.commit({TB("t", 1): sealed_at})
    plan = conn.retention_plan("t")
    free = (
        "sealed bucket 1: its children have snapshots of their own; "
        "every group has consumed it to its seal"
    )
    assert {r.split("; older than")[0] for _, r in _items(plan, 1, "segment").values()} == {free}
    conn.run_retention("t")
    assert table.snapshots(1) == []
    assert table.beginning_offsets()[TB("t", 1)] == sealed_at


def test_a_pin_taken_after_the_plan_keeps_the_sealed_snapshot_and_its_log(conn, spark):
    # R2, K7: a lease pins a sealed bucket's snapshot between the plan and the deletion: that
    # snapshot stays, and so does its log from there to the seal
    import leasekit.retention.apply as reclaim

    table, snaps = _sealed_table(conn, spark)
    _children_snapshots(table, spark)
    newest = table.snapshots(1)[-1]
    real_plan = reclaim.plan

    def plan_then_pin(meta):
        result = real_plan(meta)
        conn.acquire_kv_snapshot_lease("late", {TB("t", 1): newest.snapshot_id}, "1h")
        return result

    reclaim.plan = plan_then_pin
    try:
        report = reclaim.run_retention(testing.context(conn), "t")
    finally:
        reclaim.plan = real_plan
    assert any(f"snapshot {newest.snapshot_id}" in e and "late" in e for e in report.errors)
    assert [s.snapshot_id for s in table.snapshots(1)] == [newest.snapshot_id]
    assert all(os.path.exists(f) for f in newest.files)
    assert table.beginning_offsets()[TB("t", 1)] <= newest.log_offset
    assert read_latest(table.refresh())[1] == newest.snapshot_id  # still its newest


def test_a_split_does_not_cut_the_log_retention_of_a_lagging_group(conn, spark, clock):
    # R3, K7: a sealed bucket's segments go only once older than log.retention, like any
    # bucket's; a rescale adds holds, never removes them (default log.retention 7d)
    tables = {}
    for name in ("control", "split"):
        table = conn.create_table(name, "id BIGINT, v STRING", "id", buckets=1)
        for r in range(2):
            table.append([{"id": k, "v": f"r{r}"} for k in range(100)])
            table.snapshot(spark)
        tables[name] = table
    with conn.consumer(group_id="lagging", enable_auto_commit=False) as c:
        c.assign([TB(n, 0) for n in tables])
        c.commit({TB(n, 0): 0 for n in tables})
    tables["split"].split_bucket(0)
    _children_snapshots(tables["split"], spark)
    plan = conn.retention_plan()
    for name in tables:
        segments = {
            i.item_id: (i.action, i.reason)
            for i in plan.items
            if i.kind == "segment" and i.table_bucket == TB(name, 0)
        }
        assert segments and all(a == "keep" for a, _ in segments.values()), (name, segments)
        assert "within log.retention 7d" in segments[0][1]
    conn.run_retention()
    with conn.consumer("split", group_id="lagging", enable_auto_commit=False) as c:
        got = _drain(c, 200)
    assert sorted(got) == list(range(200))  # the group still gets the parent's 200 records
    # once past log.retention they go, with the reason saying both rules
    clock.advance(8 * 24 * 3600)
    segments = [
        i for i in conn.retention_plan("split").items
        if i.kind == "segment" and i.table_bucket == TB("split", 0)
    ]  # fmt: skip
    assert segments and all(i.action == "delete" for i in segments)
    assert all(
        i.reason.startswith("sealed bucket 0: its children have snapshots of their own; ")
        and "older than log.retention 7d" in i.reason
        for i in segments
    )


def _drain(consumer, want, timeout=30.0):
    """Offsets of bucket 0's records polled until ``want`` arrived (or ``timeout``)."""
    import time

    got, deadline = [], time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for tb, batch in consumer.poll("1s").items():
            if tb.bucket == 0:
                got += batch.column("_offset").to_pylist()
    return got


def test_a_dropped_lease_leaves_no_pin_on_a_sealed_snapshot(conn, spark):
    # L5, K7: a sealed bucket's snapshot pinned by two leases goes once both are dropped, even
    # when a plan (a janitor's, the panel's) read it while they pinned it
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    table.append([{"id": k, "v": "a"} for k in range(10)])
    table.snapshot(spark)
    first = conn.lease("A")
    first.acquire_latest("t")
    table.split_bucket(0)
    second = conn.lease("B")
    assert second.acquire_latest("t").acquired == {TB("t", 0): 1}  # K4: the parent's, for both
    kept = _items(conn.retention_plan("t"), 0, "snapshot")[1]
    assert kept[0] == "keep"
    second.drop()
    first.drop()
    _children_snapshots(table, spark)
    assert _items(conn.retention_plan("t"), 0, "snapshot")[1] == (
        "delete",
        "sealed bucket 0: its children have snapshots of their own",
    )
    assert janitor.run_once(conn).errors == []
    assert table.snapshots(0) == []


def _stray_pin(conn, table, bucket, snapshot_id, lease_id):
    """A pin znode of ``lease_id`` on a snapshot with no lease of that id (as a fault or an
    older release may leave one), written directly."""
    from leasekit.zk import Create

    ctx = testing.context(conn)
    ctx.store.commit([Create(ctx.paths.pin(table.table_id, bucket, snapshot_id, lease_id))])


def test_the_janitor_reclaims_a_pin_whose_lease_is_gone(conn, spark):
    # L5, R5: a pin whose lease does not exist protects nothing: a pass removes it, and the
    # snapshot it held goes in the same pass; a pin of a live lease stays
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1, properties=PROPS)
    for r in range(3):
        table.append([{"id": k, "v": f"r{r}"} for k in range(10)])
        table.snapshot(spark)
    first, second, newest = table.snapshots(0)
    _stray_pin(conn, table, 0, first.snapshot_id, "ghost")
    conn.lease("live").acquire({TB("t", 0): second.snapshot_id})
    plan = conn.retention_plan("t")
    leases = {i.item_id: (i.action, i.reason) for i in plan.items if i.kind == "lease"}
    assert leases["ghost"][0] == "delete"
    assert "no longer exists" in leases["ghost"][1] and "t/0 snapshot 1" in leases["ghost"][1]
    assert leases["live"][0] == "keep"
    assert _items(plan, 0, "snapshot")[first.snapshot_id][0] == "delete"
    report = janitor.run_once(conn)
    assert report.errors == []
    assert [s.snapshot_id for s in table.snapshots(0)] == [second.snapshot_id, newest.snapshot_id]
    assert not any(os.path.exists(f) for f in first.files)
    assert conn.lease("live").info().pins == {TB("t", 0): second.snapshot_id}


def test_a_stray_pin_whose_lease_comes_back_before_the_delete_stays(conn, spark):
    # L5, fencing: the pin goes only while no lease of its id exists, checked inside the
    # deleting transaction; a lease acquired under that id between plan and delete keeps it
    import leasekit.retention.apply as reclaim

    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1, properties=PROPS)
    for r in range(2):
        table.append([{"id": k, "v": f"r{r}"} for k in range(10)])
        table.snapshot(spark)
    old = table.snapshots(0)[0]
    _stray_pin(conn, table, 0, old.snapshot_id, "back")
    real_plan = reclaim.plan

    def plan_then_acquire(meta):
        result = real_plan(meta)
        conn.lease("back").acquire({TB("t", 1 - 1): table.snapshots(0)[-1].snapshot_id})
        return result

    reclaim.plan = plan_then_acquire
    try:
        report = reclaim.run_retention(testing.context(conn), "t")
    finally:
        reclaim.plan = real_plan
    assert any("back" in e for e in report.errors)
    assert [s.snapshot_id for s in table.snapshots(0)][0] == old.snapshot_id
    assert all(os.path.exists(f) for f in old.files)


def test_a_sealed_snapshot_goes_once_the_lease_that_pinned_it_is_dropped(conn, spark):
    # K7, R1: a sealed bucket's newest snapshot is not "kept whatever pins it" like an active
    # bucket's: once the only lease pinning it is dropped, the next pass deletes it, even when
    # the bucket's snapshot directory is unchanged since a plan that counted that pin
    table, _ = _sealed_table(conn, spark)
    _children_snapshots(table, spark)
    newest = table.snapshots(1)[-1]
    lease = conn.lease("reader", "1h")
    lease.acquire({TB("t", 1): newest.snapshot_id})
    conn.run_retention("t")  # the older snapshot goes; the pinned one stays (R2)
    plan = conn.retention_plan("t")
    assert _items(plan, 1, "snapshot")[newest.snapshot_id][1].startswith("pinned by lease reader")
    lease.drop()
    free = "sealed bucket 1: its children have snapshots of their own"
    plan = conn.retention_plan("t")
    assert _items(plan, 1, "snapshot") == {newest.snapshot_id: ("delete", free)}
    conn.run_retention("t")
    assert table.snapshots(1) == []
