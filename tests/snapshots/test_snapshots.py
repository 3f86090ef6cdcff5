"""Snapshots and Spark reads: snapshot = KV state of the log prefix (S1), ids increase and
files are complete before registration (S2), Python and Spark writes bucket alike (W4)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import read_log

import leasekit as lk
from leasekit import spark as lks

DDL = "id BIGINT, name STRING, qty INT, at TIMESTAMP"


def _rows(df) -> list[tuple]:
    """Rows as tuples; Spark returns naive datetimes in the session time zone (UTC here)."""
    return sorted(
        (r.id, r.name, r.qty, r.at.replace(tzinfo=timezone.utc))
        for r in df.select("id", "name", "qty", "at").collect()
    )


def _model_rows(model: dict) -> list[tuple]:
    return sorted((k, *v) for k, v in model.items())


def _random_history(table, rng, batches=6, keys=300, size=200):
    """Random upserts and deletes through the Python path; returns the KV model."""
    model: dict[int, tuple] = {}
    for b in range(batches):
        ids = rng.integers(0, keys, size)
        rows = []
        for i, k in enumerate(ids.tolist()):
            value = (
                f"n{b}-{i}",
                int(rng.integers(0, 1000)),
                datetime(2026, 1, 1, b, tzinfo=timezone.utc),
            )
            rows.append({"id": k, "name": value[0], "qty": value[1], "at": value[2]})
            model[k] = value
        table.append(rows)
        dead = sorted(set(rng.choice(keys, 20, replace=False).tolist()))
        table.delete([{"id": k} for k in dead])
        for k in dead:
            model.pop(k, None)
    return model


def test_snapshot_equals_python_model_of_kv_state(conn, spark):
    # S1
    table = conn.create_table("t", DDL, "id", buckets=4)
    model = _random_history(table, np.random.default_rng(7))
    snaps = table.snapshot(spark)
    assert set(snaps) == set(table.buckets)
    assert sum(s.row_count for s in snaps.values()) == len(model)
    df = lks.read_snapshots(spark, table, {tb: s.snapshot_id for tb, s in snaps.items()})
    assert _rows(df) == _model_rows(model)
    assert df.columns == ["id", "name", "qty", "at"]  # table columns only


def test_read_at_equals_snapshot_at_same_offsets(conn, spark):
    # S1
    table = conn.create_table("t", DDL, "id", buckets=3)
    rng = np.random.default_rng(11)
    model = _random_history(table, rng, batches=3)
    snaps = table.snapshot(spark)
    offsets = {tb: s.log_offset for tb, s in snaps.items()}
    _random_history(table, rng, batches=2)  # the log moves on
    snap_rows = _rows(
        lks.read_snapshots(spark, table, {tb: s.snapshot_id for tb, s in snaps.items()})
    )
    assert _rows(lks.read_at(spark, table, offsets)) == snap_rows == _model_rows(model)


def test_read_at_mid_segment_and_across_snapshots(conn, spark):
    # S1: the state after records [0, o) for any o, from a snapshot plus the log tail
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    tb = lk.TableBucket("t", 0)
    history = [
        ("upsert", 1, "a"),
        ("upsert", 2, "b"),
        ("upsert", 1, "c"),
        ("delete", 2, None),
        ("upsert", 3, "d"),
        ("upsert", 2, "e"),
        ("upsert", 3, "f"),
    ]
    for op, k, v in history[:4]:
        table.append([{"id": k, "v": v}]) if op == "upsert" else table.delete([{"id": k}])
    table.snapshot(spark)  # at offset 4
    table.append([{"id": k, "v": v} for _, k, v in history[4:]])  # one segment, offsets 4..6

    def model(o):
        state = {}
        for op, k, v in history[:o]:
            if op == "upsert":
                state[k] = v
            else:
                state.pop(k, None)
        return sorted(state.items())

    for o in range(len(history) + 1):
        got = sorted(tuple(r) for r in lks.read_at(spark, table, {tb: o}).collect())
        assert got == model(o), f"offset {o}"
    assert sorted(tuple(r) for r in lks.read_at(spark, table).collect()) == model(len(history))


def test_incremental_snapshot_builds_on_previous(conn, spark):
    # S1, S2
    table = conn.create_table("t", DDL, "id", buckets=2)
    rng = np.random.default_rng(3)
    model = _random_history(table, rng, batches=2)
    first = table.snapshot(spark)
    assert table.snapshot(spark) == {}  # nothing advanced: no new snapshot
    model.update(_random_history(table, rng, batches=2))
    # recompute the full model: a second history on the same keys
    second = table.snapshot(spark)
    for tb, snap in second.items():
        assert snap.snapshot_id == first[tb].snapshot_id + 1
        assert snap.log_offset > first[tb].log_offset
    latest = table.latest_snapshots()
    assert latest == {tb: s.snapshot_id for tb, s in second.items()}
    assert _rows(lks.read_snapshots(spark, table, latest)) == _rows(lks.read_at(spark, table))


def test_snapshot_ids_strictly_increase_under_concurrent_snapshotters(conn, spark):
    # S2
    table = conn.create_table("t", "id BIGINT, v INT", "id", buckets=2)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer():
        i = 0
        while not stop.is_set():
            table.append([{"id": i % 50, "v": i}])
            i += 1

    def snapshotter():
        try:
            for _ in range(3):
                table.snapshot(spark)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    w = threading.Thread(target=writer)
    w.start()
    snappers = [threading.Thread(target=snapshotter) for _ in range(2)]
    for t in snappers:
        t.start()
    for t in snappers:
        t.join()
    stop.set()
    w.join()
    assert not errors
    for bucket in range(2):
        snaps = sorted(table.snapshots(bucket), key=lambda s: s.snapshot_id)
        ids = [s.snapshot_id for s in snaps]
        assert ids == list(range(1, len(ids) + 1))
        offsets = [s.log_offset for s in snaps]
        assert offsets == sorted(set(offsets)), "a higher id must cover a longer log prefix"


def test_registered_snapshot_files_are_complete(conn, spark):
    # S2: every snapshot the metadata names has all its files, with the rows it claims
    table = conn.create_table("t", DDL, "id", buckets=4)
    _random_history(table, np.random.default_rng(5), batches=2)
    table.snapshot(spark)
    for snap in table.snapshots():
        assert snap.files or snap.row_count == 0
        assert sum(pq.ParquetFile(f).metadata.num_rows for f in snap.files) == snap.row_count
        assert all(f.startswith(conn.warehouse) for f in snap.files)
        assert snap.created_at.tzinfo is not None


def test_snapshot_of_bucket_with_every_key_deleted(conn, spark):
    # S1: an empty state is a valid snapshot with no rows
    table = conn.create_table("t", "id BIGINT, v INT", "id", buckets=1)
    table.append([{"id": 1, "v": 1}])
    table.delete([{"id": 1}])
    snap = table.snapshot(spark)[lk.TableBucket("t", 0)]
    assert snap.row_count == 0
    assert lks.read_snapshots(spark, table, {0: snap.snapshot_id}).count() == 0


def test_python_and_spark_writes_put_a_key_in_the_same_bucket(conn, spark):
    # W4
    keys = list(range(0, 3000, 7)) + [-1, -(2**40), 2**50]
    py = conn.create_table("py", "id BIGINT, s STRING, v DOUBLE", ["id", "s"], buckets=7)
    sp = conn.create_table("sp", "id BIGINT, s STRING, v DOUBLE", ["id", "s"], buckets=7)
    rows = [{"id": k, "s": f"k{k}é", "v": 1.0} for k in keys]
    py.append(rows)
    lks.write(spark.createDataFrame(rows, "id BIGINT, s STRING, v DOUBLE"), sp)

    def placement(table):
        return {(r["id"], r["s"]): b for b, recs in read_log(table).items() for r in recs}

    assert placement(py) == placement(sp)
    assert len(placement(py)) == len(keys)


def test_spark_write_is_an_upsert_visible_to_reads(conn, spark):
    # W4, S1
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=3)
    table.append([{"id": i, "v": "old"} for i in range(100)])
    ranges = lks.write(
        spark.createDataFrame([(i, "new") for i in range(50, 150)], "id BIGINT, v STRING"), table
    )
    assert sum(len(r) for r in ranges.values()) == 100
    state = dict(lks.read_at(spark, table).collect())
    assert len(state) == 150
    assert all(state[i] == ("old" if i < 50 else "new") for i in range(150))


def test_spark_write_rejects_null_keys_and_unknown_columns(conn, spark):
    # W2: rejected writes commit nothing
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    with pytest.raises(lk.InvalidArgumentError):
        lks.write(spark.createDataFrame([(None, "x")], "id BIGINT, v STRING"), table)
    with pytest.raises(lk.InvalidArgumentError):
        lks.write(spark.createDataFrame([(1, "x", 2)], "id BIGINT, v STRING, extra INT"), table)
    with pytest.raises(lk.InvalidArgumentError):
        lks.write(spark.createDataFrame([("x",)], "v STRING"), table)
    assert sum(table.end_offsets().values()) == 0


def test_read_snapshots_bad_input(conn, spark):
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    table.append(pa.table({"id": pa.array(range(10), pa.int64())}))
    table.snapshot(spark)
    with pytest.raises(lk.SnapshotNotFoundError):
        lks.read_snapshots(spark, table, {0: 99})
    with pytest.raises(lk.InvalidArgumentError):
        lks.read_snapshots(spark, table, {0: -1})
    with pytest.raises(lk.BucketNotFoundError):
        lks.read_snapshots(spark, table, {5: 1})
    with pytest.raises(TypeError):
        lks.read_snapshots(spark, table, [1, 2])
    with pytest.raises(lk.OffsetOutOfRangeError):
        lks.read_at(spark, table, {0: 10_000})


def test_bulk_written_segments_are_told_apart_from_each_other(conn, spark):
    # S1, W4: Spark's bulk write reuses part-file names in every bucket directory; each
    # record must still get its own segment's offsets, or an older value would win.
    table = conn.create_table("t", "id BIGINT, amount DOUBLE", "id", buckets=16)
    lks.write(
        spark.createDataFrame([(i, 1.0) for i in range(1000)], "id BIGINT, amount DOUBLE"), table
    )
    table.append([{"id": i, "amount": 2.0} for i in range(1000)])
    from leasekit.log.segments import list_segments
    from leasekit.sparkio.frames import log_frame

    segments = list_segments(table, range(16))
    names = [s.file.rsplit("/", 1)[1] for segs in segments.values() for s in segs]
    ranges = {b: (0, e) for b, e in enumerate(table.end_offsets().values())}
    assert log_frame(spark, table, segments, ranges).count() == 2000
    assert len(names) > len(set(names)) or len(names) == 32  # the collision this guards against
    state = dict(lks.read_at(spark, table).collect())
    assert len(state) == 1000 and set(state.values()) == {2.0}
    table.snapshot(spark)
    rows = lks.read_snapshots(spark, table, table.latest_snapshots()).collect()
    assert len(rows) == 1000 and {r.amount for r in rows} == {2.0}
