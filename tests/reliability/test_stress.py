"""Stress (docs/security.md): 8 workers do random acquire / renew / release / drop, appends, Spark
snapshots, retention passes, lease expiry, splits and merges of buckets (K1-K8) and merges of
small log segments (R8) on 2 tables while a checker verifies R2, that every bucket's segments
follow each other and that every listed segment has its file without pause, another
thread compares the rows of the latest snapshots with ``read_at`` at their offsets every few
seconds, and ZooKeeper is killed with SIGKILL and restarted in the middle. Afterwards every
acknowledged write is still there and, after a janitor pass, no orphan pin (sealed buckets'
included), lease or snapshot metadata is left.

Run the full target with ``pytest tests/reliability --stress-seconds 60``.
"""

from __future__ import annotations

import threading
import time

from stress_checks import check_latest, metadata_consistency, verify_acknowledged
from stress_plan import BUCKETS, GRACE, ORPHAN_MIN_AGE, RESCALED, TABLE_PROPERTIES, TABLES, WORKERS
from stress_workload import Stress

from leasekit import janitor, testing


def test_stress_with_zookeeper_kill(connect, spark, own_zk, stress_seconds, capsys):
    # R2, L3-L11, W1, W2, S2, R1, R4, R5, R8: concurrent everything, a kill -9 mid-run
    seconds = stress_seconds
    conn = connect()
    conn.update_settings({"lease.expiry-grace": GRACE, "orphan.min-age": ORPHAN_MIN_AGE})
    for name in TABLES:
        table = conn.create_table(
            name, "id BIGINT, v STRING", "id", buckets=BUCKETS, properties=TABLE_PROPERTIES
        )
        table.append([{"id": i, "v": "seed"} for i in range(200)])
        table.snapshot(spark)
    stress = Stress(connect, spark, seconds)
    # L13: a keepalive lease held through the whole run, restarts included; 90 s outlasts a
    # client stuck 30 s in its reconnect (see OwnZooKeeper.restart)
    keeper = connect().lease("keepalive", "90s", keepalive=True, drop_on_exit=False)
    keeper_pins = keeper.acquire_latest(TABLES).acquired

    threads = [
        threading.Thread(target=stress.worker, args=(i,), daemon=True) for i in range(WORKERS)
    ]
    threads.append(threading.Thread(target=stress.checker, daemon=True))
    threads.append(threading.Thread(target=stress.latest_checker, daemon=True))
    start = time.monotonic()
    kills = [0.4] if seconds < 30 else [0.3, 0.65]
    downtimes = []
    with keeper:
        for thread in threads:
            thread.start()
        for at in kills:
            time.sleep(max(0.0, start + at * seconds - time.monotonic()))
            own_zk.kill()
            down = time.monotonic()
            time.sleep(2.0)  # workers hit the outage and ride it out
            own_zk.restart(wait_for=[conn])
            downtimes.append(time.monotonic() - down)
            time.sleep(1.0)
            stress.pause_workers()  # W1, S2, L7: what was acknowledged before the kill is there
            problems = verify_acknowledged(conn, stress)
            stress.violations += [f"after restart: {p}" for p in problems]
            stress.resume_workers()
            # L4: the keepalive lease moves its "orders" pins to the newest snapshots, so the
            # log below its old ones can go (R3) while "events" stays pinned at snapshot 1
            moved = keeper.acquire_latest("orders")
            assert not moved.unavailable  # K4: a new bucket's ancestors' snapshots instead
            keeper_pins.update(moved.acquired)  # L4: pins of buckets not acquired again stay
        time.sleep(max(0.0, start + seconds - time.monotonic()))
        stress.stop.set()
        stress.resume.set()
        for thread in threads:
            thread.join(timeout=300)
        assert not any(t.is_alive() for t in threads), "a worker hung"
        assert keeper.alive, (
            f"the keepalive lease did not ride out the restart: {keeper._failure!r}"
        )  # L13
        assert keeper.info().pins == keeper_pins

    assert not stress.failures, "\n".join(stress.failures[:5])
    stress.violations += verify_acknowledged(conn, stress)
    stress.violations += metadata_consistency(conn)
    ended = time.monotonic()
    problems = check_latest(conn, spark, RESCALED, "latest-check-end")  # K3, S1: quiet
    assert problems is not None, "a latest snapshot went with retention stopped"
    stress.violations += problems
    stress.counts.add("latest checks")
    # R5, L10, L11: after a janitor pass no pin is left without its lease, on a sealed bucket's
    # snapshot neither, and no committed segment of any bucket ever lacks its file
    janitor.run_once(conn)
    stress.violations += [f"after a janitor pass: {p}" for p in metadata_consistency(conn)]
    stress.counts.add("end check ms", round(1000 * (time.monotonic() - ended)))

    # the end: drop every remaining lease, one more retention pass
    ctx = testing.context(conn)
    for lease_id in ctx.store.children(ctx.paths.leases) or []:
        conn.drop_kv_snapshot_lease(lease_id)
    for name in TABLES:  # K3: every active bucket, a new one included, gets its own snapshot
        conn.table(name).snapshot(spark)
    report = conn.run_retention()
    assert not report.errors, report.errors
    final = metadata_consistency(conn)  # R5, L10: no pin outlives its lease, sealed or not
    assert not ctx.store.children(ctx.paths.leases)
    for name in TABLES:  # R1, K7: with no pins left, only an active bucket's newest snapshot stays
        table = conn.table(name)
        snapshots = table.snapshots()
        active = [tb.bucket for tb in table.buckets]
        kept = sorted(s.table_bucket.bucket for s in snapshots)
        if kept != active:
            reasons = [
                f"{i.table_bucket.bucket}/{i.item_id} {i.action}: {i.reason}"
                for i in conn.retention_plan(name).items
                if i.kind == "snapshot" and i.table_bucket.bucket not in active
            ]
            final.append(
                f"R1, K7: {name}: snapshots of buckets {kept} kept, active {active}; the plan "
                f"now: {reasons}"
            )
        for snap in snapshots:
            pins = ctx.store.children(
                ctx.paths.snapshot(table.table_id, snap.table_bucket.bucket, snap.snapshot_id)
            )
            if pins:
                final.append(f"{name}: {snap.table_bucket} snapshot {snap.snapshot_id} pins {pins}")

    c = stress.counts
    summary = (
        f"STRESS SUMMARY {seconds:g}s x {WORKERS} workers: acquires={c['acquires']} "
        f"renews={c['renews']} "
        f"releases={c['releases']} drops={c['drops']} appends={c['appends']} (rows={c['rows']}) "
        f"snapshots={c['snapshots']} (calls={c['snapshot calls']}) retention "
        f"passes={c['retention passes']} "
        f"deleted items={c['deleted items']} (snapshots={c['deleted snapshots']} "
        f"segments={c['deleted segments']} "
        f"orphans={c['deleted orphans']} leases={c['deleted leases']}) expired "
        f"leases={c['expired leases']} splits={c['splits']} merges={c['merges']} "
        f"compactions={c['compactions']} (merged {c['merged segments']} segments into "
        f"{c['merged into']}, lost={c['merges lost']}) "
        f"invariant checks={c['invariant checks']} (pins={c['pins checked']}) "
        f"latest checks={c['latest checks']} (skipped={c['latest checks skipped']}, "
        f"{c['latest check ms'] / 1000:.1f}s; at the end {c['end check ms'] / 1000:.1f}s) "
        f"violations={len(stress.violations) + len(final)} zookeeper kills={len(downtimes)} "
        f"(down {', '.join(f'{d:.1f}s' for d in downtimes)}) zookeeper errors ridden out="
        f"{c['zookeeper errors ridden out']}"
    )
    with capsys.disabled():
        print("\n" + summary)
    assert not stress.violations, "\n".join(stress.violations[:20])
    assert not final, "\n".join(final[:20])
