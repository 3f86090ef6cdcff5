"""A failover stress on a 3-server ZooKeeper ensemble (docs/scale.md): the leader is
killed with SIGKILL mid-run and later restarted: no acknowledged write is lost, no pin of a
live lease names deleted files, and every client carries on in its own session.

Run the long form with ``pytest tests/scale/test_ensemble_failover.py --ensemble-seconds 60``.
"""

from __future__ import annotations

import threading
import time

import pytest
from ensemble_stress import (
    BUCKETS,
    SETTINGS,
    TABLE_PROPERTIES,
    TABLES,
    WORKERS,
    FailoverStress,
    snapshot_without_spark,
)

pytestmark = pytest.mark.slow


def test_leader_kill_during_stress(ensemble, ensemble_connect, ensemble_seconds, capsys):
    seconds = ensemble_seconds
    conn = ensemble_connect()
    conn.update_settings(SETTINGS)
    for name in TABLES:
        table = conn.create_table(
            name, "id BIGINT, v STRING", "id", buckets=BUCKETS, properties=TABLE_PROPERTIES
        )
        table.append([{"id": i, "v": "seed"} for i in range(100)])
        assert len(snapshot_without_spark(table)) == BUCKETS
    stress = FailoverStress(ensemble_connect, seconds)
    threads = [
        threading.Thread(target=stress.worker, args=(i,), daemon=True) for i in range(WORKERS)
    ]
    threads.append(threading.Thread(target=stress.checker, daemon=True))
    start = time.monotonic()
    for thread in threads:
        thread.start()
    killed = None
    try:
        time.sleep(max(0.0, start + 0.35 * seconds - time.monotonic()))
        killed = ensemble.wait_leader()
        ensemble.kill(killed)
        stress.killed_at = kill_time = time.monotonic()
        new_leader = ensemble.wait_leader(timeout=30)
        election = time.monotonic() - kill_time
        assert new_leader != killed
        # the two left serve on their own for a while, then the killed one comes back
        time.sleep(max(2.0, start + 0.6 * seconds - time.monotonic()))
        ensemble.restart(killed)
        killed = None
        rejoined = time.monotonic() - kill_time
        assert sorted(ensemble.mode(i) for i in range(3)) == ["follower", "follower", "leader"]
        time.sleep(max(0.0, start + seconds - time.monotonic()))
    finally:
        stress.stop.set()
        for thread in threads:
            thread.join(timeout=120)
        if killed is not None:
            ensemble.restart(killed)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not stress.failures, "\n".join(stress.failures[:5])
    lost = stress.lost_writes(conn)

    c = stress.counts
    acknowledged = (
        c["appends"]
        + c["commits"]
        + c['snapshots']
        + sum(c[f"lease {k}s"] for k in ("acquire", "renew", "release", "drop"))
    )
    failover = max((t for t in stress.first_after_kill if t is not None), default=float("nan"))
    summary = (
        f"ENSEMBLE STRESS SUMMARY {seconds:g}s x {WORKERS} workers on 3 servers: writes "
        "acknowledged="
        f"{acknowledged} (appends={c['appends']} commits={c['commits']} bucket "
        f"snapshots={c['snapshots']} "
        f"lease acquires={c['lease acquires']} renews={c['lease renews']} "
        f"releases={c['lease releases']} "
        f"drops={c['lease drops']}) lost={len(lost)} (checked append ranges={c['appends checked']} "
        f"leases={c['leases checked']} offsets={c['offsets checked']}) retention "
        f"passes={c['retention passes']} "
        f"(deleted snapshots={c['deleted snapshots']} segments={c['deleted segments']}) "
        f"pins checked={c['pins checked']} pins on deleted files={c['pins on deleted files']} "
        f"errors ridden out={c['errors ridden out']} failover: election {election:.2f}s, every "
        "worker writing "
        f"again after {failover:.2f}s, killed server rejoined after {rejoined:.1f}s; ops after the "
        "kill per "
        f"worker={stress.after_kill} sessions "
        f"kept={sum(a == b for a, b in stress.sessions)}/{len(stress.sessions)}"
    )
    with capsys.disabled():
        print("\n" + summary)
    assert not lost, "\n".join(lost[:20])
    assert not stress.violations, "\n".join(stress.violations[:20])
    assert all(n > 0 for n in stress.after_kill), (
        f"a worker did no work after the kill: {stress.after_kill}"
    )
    # sessions moved to another server within their timeout: the same session, ephemerals kept
    assert len(stress.sessions) == WORKERS and all(a == b for a, b in stress.sessions), (
        stress.sessions
    )
    assert c["pins checked"] > 0 and c["retention passes"] > 0 and c["deleted snapshots"] > 0
