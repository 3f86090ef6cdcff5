"""Leases at scale and under races: 100,000 pins (L14), a client killed mid-acquire (L14),
and acquire_latest racing appends, snapshots and snapshot deletion (L3, L6, R2)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

from helpers import pin_znodes, seed_empty_snapshots

import leasekit as lk
from leasekit import testing
from leasekit.errors import IllegalStateError, SnapshotNotFoundError
from leasekit.leases.pins import pins_of
from leasekit.snapshots.catalog import delete_snapshot, get_snapshots
from leasekit.zk import MAX_VALUE_BYTES


def test_lease_with_100000_pins_and_a_client_killed_mid_acquire(
    conn, zookeeper, warehouse, namespace
):
    # L14
    ctx = testing.context(conn)
    table = conn.create_table("wide", "id BIGINT", "id", buckets=100_000)
    seed_empty_snapshots(ctx, table)

    # A client dies once its third acquire transaction committed (the fourth may be planned):
    # pins and lease arrays still agree.
    script = textwrap.dedent(f"""
        import os, leasekit as lk
        from leasekit.zk.txn import Pending
        conn = lk.connect({zookeeper!r}, {warehouse!r}, namespace={namespace!r})
        real, done = Pending.result, []
        def result(self):
            out = real(self)
            done.append(1)
            if len(done) == 3:
                os._exit(9)
            return out
        Pending.result = result
        conn.lease("crashed", "1h").acquire_latest("wide")
    """)
    assert subprocess.run([sys.executable, "-c", script]).returncode == 9
    recorded = {tb.bucket: sid for tb, sid in pins_of(ctx, "crashed").items()}
    assert 0 < len(recorded) < 100_000
    every = {b: 1 for b in range(100_000)}
    assert pin_znodes(conn, table, "crashed", every) == recorded

    # A full lease of 100,000 pins works end to end.
    lease = conn.lease("big", "1h")
    started = time.perf_counter()
    result = lease.acquire_latest("wide")
    elapsed = time.perf_counter() - started
    assert len(result.acquired) == 100_000 and result.unavailable == {}
    assert len(lease.info().pins) == 100_000
    assert pin_znodes(conn, table, "big", every) == every
    sizes = [
        len(n.data)
        for n in ctx.store.get_many(
            [
                f"{ctx.paths.lease_pins('big')}/{name}"
                for name in ctx.store.children(ctx.paths.lease_pins("big"))
            ]
        )
    ]
    assert max(sizes) < MAX_VALUE_BYTES // 100  # far from ZooKeeper's 1 MB
    assert elapsed < 120

    lease.release([lk.TableBucket("wide", b) for b in range(0, 100_000, 2)])
    assert len(lease.info().pins) == 50_000
    sample = {b: 1 for b in range(0, 100_000, 97)}
    assert pin_znodes(conn, table, "big", sample) == {b: 1 for b in sample if b % 2}
    assert lease.drop() is True
    assert conn.drop_kv_snapshot_lease("crashed") is True
    assert (
        pin_znodes(conn, table, "big", sample) == {}
        and pin_znodes(conn, table, "crashed", sample) == {}
    )
    assert conn.leases() == []


def test_acquire_latest_races_snapshots_and_deletion(conn, spark):
    # L3, L6, R2: a reader keeps pinning the latest snapshots and reading them while a
    # writer appends, snapshots and deletes every old snapshot it is allowed to.
    keys = 50
    table = conn.create_table("hot", "id BIGINT, v BIGINT", "id", buckets=4)
    table.append([{"id": k, "v": 0} for k in range(keys)])
    table.snapshot(spark)
    stop = threading.Event()
    errors: list[BaseException] = []
    counts = {"deleted": 0, "refused": 0, "acquires": 0}

    def churn() -> None:
        i = 0
        try:
            while not stop.is_set():
                i += 1
                table.append([{"id": k, "v": i} for k in range(keys)])
                table.snapshot(spark)
                latest = table.latest_snapshots()
                for snap in table.snapshots():
                    if snap.snapshot_id == latest[snap.table_bucket]:
                        continue
                    try:
                        delete_snapshot(table, snap.table_bucket.bucket, snap.snapshot_id)
                        counts["deleted"] += 1
                    except IllegalStateError:
                        counts["refused"] += 1  # pinned right now
                    except SnapshotNotFoundError:
                        pass
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def reader() -> None:
        lease = conn.lease("racer", "1m")
        try:
            while not stop.is_set():
                result = lease.acquire_latest("hot")
                assert len(result.acquired) == 4
                pinned = get_snapshots(
                    table, {tb.bucket: sid for tb, sid in result.acquired.items()}
                )
                assert all(os.path.exists(f) for snap in pinned for f in snap.files)
                assert lease.read(spark, "hot").count() == keys
                counts["acquires"] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            lease.drop()

    threads = [threading.Thread(target=churn), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    time.sleep(12)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert counts["acquires"] > 3
    assert counts["deleted"] > 0, counts


def test_100000_pin_leases_acquired_and_dropped_again_and_again(conn):
    # L14: every acquire of 100,000 pins sends ~1 MB transactions that ZooKeeper keeps on its
    # heap (its last 500 transactions); the embedded server must hold them, cycle after cycle.
    table = conn.create_table("wide", "id BIGINT", "id", buckets=100_000)
    seed_empty_snapshots(testing.context(conn), table)
    for cycle in range(6):
        lease = conn.lease(f"cycle-{cycle}", "1h")
        assert len(lease.acquire_latest("wide").acquired) == 100_000
        assert lease.drop()
    assert conn.leases() == []
