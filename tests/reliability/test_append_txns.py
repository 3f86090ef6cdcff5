"""Race (docs/security.md): an append that spans more ZooKeeper transactions than one is
all-or-nothing, or, when interrupted, says exactly which buckets committed, and a retry
never duplicates a record (W1, W2, W3)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pyarrow as pa
import pytest
from helpers import read_log

import leasekit as lk
from leasekit import testing
from leasekit.log import append as lklog
from leasekit.tables.bucketing import bucket_ids
from leasekit.zk import Delete, TxnConflict

TB = lk.TableBucket
SECONDS = 8.0
"""How long the race runs at least; it goes on, up to MAX_SECONDS, until the window was hit."""
MAX_SECONDS = 45.0


def _check_log(table, keys: Counter) -> None:
    """Every record once, dense offsets from 0 (W1), non-decreasing timestamps (W3)."""
    records = read_log(table)
    seen = Counter(r["id"] for recs in records.values() for r in recs)
    assert seen == keys, (
        f"duplicated: {sorted(k for k, n in seen.items() if n > 1)[:10]}, "
        f"missing: {sorted(set(keys) - set(seen))[:10]}"
    )
    for recs in records.values():
        assert [r["_offset"] for r in recs] == list(range(len(recs)))
        stamps = [r["_timestamp_ms"] for r in recs]
        assert stamps == sorted(stamps)


def _keys_by_bucket(table, count: int) -> dict[int, list[int]]:
    ids = bucket_ids(
        pa.table({"id": pa.array(range(count), pa.int64())}), ["id"], table.num_buckets
    )
    out: dict[int, list[int]] = {}
    for key, bucket in enumerate(ids.tolist()):
        out.setdefault(bucket, []).append(key)
    return out


@pytest.mark.parametrize("operation", ["upsert", "delete"])
def test_partial_append_names_what_committed_and_retry_completes(conn, monkeypatch, operation):
    # append spanning several transactions (docs/security.md): one bucket per transaction, and the
    # last bucket's transaction too large for ZooKeeper (many one-row segments): the first two
    # buckets commit, the third cannot.
    table = conn.create_table(
        "t", "id BIGINT, v STRING", "id", buckets=4, properties={"log.segment.max-rows": 1}
    )
    by_bucket = _keys_by_bucket(table, 200)
    keys = by_bucket[0][:1] + by_bucket[1][:1] + by_bucket[3][:12]
    rows = [{"id": k, "v": f"v{k}"} for k in keys]
    monkeypatch.setattr(lklog, "APPEND_TXN_BYTES", 1)  # every bucket its own transaction
    monkeypatch.setattr("leasekit.zk.store.MAX_REQUEST_BYTES", 2000)  # 12 segment creates exceed it
    with pytest.raises(lk.PartialAppendError) as info:
        table.append(rows) if operation == "upsert" else table.delete([{"id": k} for k in keys])
    exc = info.value
    assert isinstance(exc, lk.IllegalStateError)
    assert exc.committed == {TB("t", 0): lk.OffsetRange(0, 1), TB("t", 1): lk.OffsetRange(0, 1)}
    assert exc.uncommitted == [TB("t", 3)] and exc.unknown == []
    assert exc.operation == operation
    assert "0 [0, 1), 1 [0, 1)" in str(exc)
    assert f"table.{'append' if operation == 'upsert' else 'delete'}(exc.remaining)" in str(exc)
    assert "nothing was committed" not in str(exc)
    ends = table.end_offsets()
    assert ends == {
        TB("t", 0): 1,
        TB("t", 1): 1,
        TB("t", 2): 0,
        TB("t", 3): 0,
    }  # exactly exc.committed
    visible = read_log(table)
    assert [r["id"] for b in (0, 1) for r in visible[b]] == keys[:2] and visible[3] == []
    expected_names = ["id", "v"] if operation == "upsert" else ["id"]
    assert isinstance(exc.remaining, pa.Table) and exc.remaining.column_names == expected_names
    assert sorted(exc.remaining.column("id").to_pylist()) == sorted(keys[2:])
    monkeypatch.undo()
    (table.append if operation == "upsert" else table.delete)(exc.remaining)
    _check_log(table, Counter(keys))
    assert {r["_op"] for recs in read_log(table).values() for r in recs} == {operation}


def test_wide_append_fits_one_transaction(conn):
    # Byte-sized groups: 300 buckets (more than the old fixed 200 per transaction) in one.
    ctx = testing.context(conn)
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=300)
    by_bucket = _keys_by_bucket(table, 5000)
    before = ctx.store.round_trips
    ranges = table.append([{"id": keys[0], "v": "x"} for keys in by_bucket.values()])
    assert len(ranges) == 300
    commits = ctx.store.round_trips - before
    assert commits <= 4, commits  # marker create, one read of the states, one commit, marker delete


def test_interrupted_wide_appends_never_duplicate(
    conn, zookeeper, warehouse, namespace, monkeypatch
):
    # race (docs/security.md): appends over 256 buckets in several transactions while another
    # connection deletes the write markers (a lost session) at random moments.
    # W1, W2: success -> every row once; plain failure -> nothing visible; PartialAppendError
    # -> exactly exc.committed visible, and retrying exc.remaining completes without duplicates.
    monkeypatch.setattr(
        lklog, "APPEND_TXN_BYTES", 60_000, raising=False
    )  # ~4 transactions per append
    table = conn.create_table(
        "wide_table_with_a_rather_long_name_" + "x" * 60, "id BIGINT, v STRING", "id", buckets=256
    )
    stop = threading.Event()
    killed = Counter()
    rng = random.Random(7)

    with lk.connect(zookeeper, warehouse, namespace=namespace) as other:
        ctx = testing.context(other)

        def kill_markers() -> None:
            while not stop.is_set():
                time.sleep(rng.uniform(0.05, 0.8))
                for name in ctx.store.children(ctx.paths.writes) or []:
                    try:
                        ctx.store.commit([Delete(ctx.paths.write(name))])
                        killed["markers"] += 1
                    except TxnConflict:
                        pass  # the write ended first

        killer = threading.Thread(target=kill_markers)
        outcomes = Counter()
        written = Counter()
        table.append([{"id": -1, "v": "warm-up"}])  # lazy imports before the thread starts
        written[-1] += 1
        killer.start()
        try:
            start = time.monotonic()
            round_no = 0

            def hit() -> bool:
                return outcomes["partial"] + outcomes["partial on retry"] > 0

            while time.monotonic() - start < (SECONDS if hit() else MAX_SECONDS):
                keys = list(range(round_no * 1000, round_no * 1000 + 768))
                round_no += 1
                rows = pa.table(
                    {"id": pa.array(keys, pa.int64()), "v": [f"value-{k:08d}" * 4 for k in keys]}
                )
                before = table.end_offsets()
                try:
                    ranges = table.append(rows)
                except lk.PartialAppendError as exc:
                    outcomes["partial"] += 1
                    after = table.end_offsets()
                    assert exc.committed and exc.uncommitted and not exc.unknown
                    assert {
                        tb: after[tb] - before[tb] for tb in after if after[tb] != before[tb]
                    } == {tb: len(r) for tb, r in exc.committed.items()}
                    assert all(r.start == before[tb] for tb, r in exc.committed.items())
                    new = read_log(table, since={tb.bucket: o for tb, o in before.items()})
                    committed_keys = sorted(r["id"] for recs in new.values() for r in recs)
                    remaining = exc.remaining.column("id").to_pylist()
                    assert sorted(committed_keys + remaining) == keys  # nothing lost, nothing twice
                    _retry(table, exc.remaining, outcomes)
                except lk.IllegalStateError as exc:
                    assert "nothing was committed" in str(exc)
                    outcomes["failed"] += 1
                    assert table.end_offsets() == before  # nothing visible
                    _retry(table, rows, outcomes)
                else:
                    outcomes["ok"] += 1
                    assert sum(len(r) for r in ranges.values()) == len(keys)
                written.update(keys)
        finally:
            stop.set()
            killer.join(timeout=30)
    print(f"\nappend race: {dict(outcomes)}, {dict(killed)}")
    _check_log(table, written)
    assert outcomes["partial"] + outcomes["partial on retry"] > 0, outcomes  # the window was hit


def _retry(table, rows, outcomes: Counter) -> None:
    """Retry until everything is committed, with the rows each failure says remain."""
    for _ in range(100):
        try:
            table.append(rows)
            return
        except lk.PartialAppendError as exc:
            outcomes["partial on retry"] += 1
            rows = exc.remaining
        except lk.IllegalStateError:
            outcomes["failed on retry"] += 1
    raise AssertionError("retries never got through")
