"""Race (docs/security.md): orphan cleanup with ``orphan.min-age`` 0 while writers append and
snapshot continuously never deletes a file that committed metadata names (R2, R4, W2)."""

from __future__ import annotations

import os
import random
import threading
import traceback

import pyarrow as pa
from helpers import grow

from leasekit import testing
from leasekit.log.segments import list_segments

TABLES = 6
BUCKETS = 4
WRITERS = 3
SECONDS = 8.0


def _named_files(table) -> set[str]:
    """Every file the table's committed metadata names: log segments and snapshots."""
    files = {
        s.file for segs in list_segments(table, range(table.num_buckets)).values() for s in segs
    }
    return files | {f for snap in table.snapshots() for f in snap.files}


def test_orphan_cleanup_never_deletes_committed_files(conn):
    # R4 with orphan.min-age 0: every unreferenced file without a live write marker goes at
    # once, so a write committing while retention gathers must not look like an orphan.
    # W2 / R2: a reader that sees metadata always finds every file it names.
    conn.update_settings({"orphan.min-age": 0})
    tables = [
        conn.create_table(f"t{i}", "id BIGINT, v STRING", "id", buckets=BUCKETS)
        for i in range(TABLES)
    ]
    stop = threading.Event()
    violations: list[str] = []
    failures: list[str] = []
    counts = {
        "appends": 0,
        "snapshots": 0,
        "dead writes": 0,
        "passes": 0,
        "orphans deleted": 0,
        "checks": 0,
    }

    def guarded(body):
        def run() -> None:
            try:
                while not stop.is_set():
                    body()
            except Exception:
                failures.append(traceback.format_exc())
                stop.set()

        return run

    def writer(seed: int):
        rng = random.Random(seed)

        def step() -> None:
            table = rng.choice(tables)
            dice = rng.random()
            if dice < 0.05:  # a writer that died before its commit: a true orphan (R4)
                testing.context(conn).warehouse.write_parquet(
                    f"{table.data_dir}/log/0/dead-{rng.getrandbits(64):x}.parquet",
                    pa.table({"id": [1]}),
                )
                counts["dead writes"] += 1
            elif dice < 0.2:
                grow(table, 1, rows=BUCKETS * 4)  # an append, then a snapshot of every bucket
                counts["snapshots"] += 1
            else:
                table.append(
                    [{"id": rng.randrange(1000), "v": f"{rng.random():.6f}"} for _ in range(8)]
                )
            counts["appends"] += 1

        return step

    def retention() -> None:
        report = conn.run_retention()
        counts["passes"] += 1
        counts["orphans deleted"] += sum(1 for i in report.deleted if i.kind == "orphan")

    def checker() -> None:
        for table in tables:
            missing = {f for f in _named_files(table) if not os.path.exists(f)}
            if missing:
                # retention deletes metadata first and files after: only a file that committed
                # metadata still names after it was found missing is a lost file
                lost = missing & _named_files(table)
                violations.extend(
                    f"{table.name}: {f} is named by committed metadata but gone" for f in lost
                )
                if lost:
                    stop.set()
        counts["checks"] += 1

    grow(tables[0], 1)  # warm up (lazy imports are not thread-safe) before the threads start
    conn.run_retention()
    threads = [threading.Thread(target=guarded(writer(s))) for s in range(WRITERS)]
    threads += [
        threading.Thread(target=guarded(retention)),
        threading.Thread(target=guarded(checker)),
    ]
    for t in threads:
        t.start()
    stop.wait(SECONDS)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not failures, failures[0]
    checker()
    print(f"\norphan race: {counts}")
    assert not violations, f"{len(violations)} lost file(s), e.g. {violations[:3]}; {counts}"
    assert counts["appends"] > 20 and counts["passes"] > 5 and counts["snapshots"] > 0, counts
    assert counts["orphans deleted"] > 0, f"true orphans must still go: {counts}"  # R4
