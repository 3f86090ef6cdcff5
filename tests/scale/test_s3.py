"""An object-store warehouse (docs/scale.md): leasekit on a real S3 server on loopback.

SeaweedFS (the ``s3`` fixture of tests/scale/conftest.py, ``peers.seaweedfs``) serves S3;
leasekit reaches it through ``pyarrow.fs`` with the standard AWS environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``) or with the endpoint
in the warehouse URI's query string. Appends write their segments to S3, a consumer reads
them back, snapshots (registered here without Spark: Parquet files written through the
warehouse) are pinned by leases, and retention deletes snapshots, segments and orphans on S3.
Every check of what is stored goes to the bucket through a separate S3 client
(``peers.seaweedfs.client``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import leasekit as lk
from leasekit import testing
from leasekit.log.markers import in_flight
from leasekit.snapshots.register import Written, register
from peers.seaweedfs import BUCKET, client

TB = lk.TableBucket


@pytest.fixture
def bucket(s3):
    """A separate S3 client on the bucket: what is stored, seen from outside leasekit."""
    return client(s3)


@pytest.fixture
def conn(s3, zookeeper, namespace):
    # one warehouse prefix per namespace: retention counts every file of a warehouse it does
    # not reference as an orphan
    with lk.connect(
        zookeeper, warehouse=f"s3://{BUCKET}/{namespace}", namespace=namespace
    ) as connection:
        yield connection


def _objects(fs: pafs.FileSystem, prefix: str) -> set[str]:
    infos = fs.get_file_info(
        pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True, allow_not_found=True)
    )
    return {i.path[len(BUCKET) + 1 :] for i in infos if i.type == pafs.FileType.File}


def _read_all(conn, table) -> dict[int, pa.Table]:
    """Every record of ``table`` by bucket, read by a consumer from the segment files."""
    ends = {tb.bucket: end for tb, end in table.end_offsets().items()}
    parts: dict[int, list[pa.Table]] = {b: [] for b in ends}
    with conn.consumer(
        table.name, auto_offset_reset="earliest", enable_auto_commit=False
    ) as consumer:
        deadline = time.monotonic() + 30
        while any(consumer.position(TB(table.name, b)) < end for b, end in ends.items()):
            assert time.monotonic() < deadline, "the consumer did not reach the end offsets"
            for tb, data in consumer.poll(timeout="1s").items():
                parts[tb.bucket].append(data)
    return {b: pa.concat_tables(p) if p else None for b, p in parts.items()}


def _snapshot(conn, table) -> dict[TB, lk.Snapshot]:
    """Take a snapshot of every bucket without Spark: last write wins per key over the log,
    one Parquet file per bucket written through the warehouse, registered like Spark's."""
    ctx = testing.context(conn)
    wh = ctx.warehouse
    written: dict[int, Written] = {}
    with in_flight(ctx) as token:
        for bucket, records in _read_all(conn, table).items():
            if records is None:
                continue
            state: dict[int, str] = {}
            for op, key, value in zip(*(records.column(c).to_pylist() for c in ("_op", "id", "v"))):
                if op == "delete":
                    state.pop(key, None)
                else:
                    state[key] = value
            rel = f"{table.data_dir}/snapshots/{token}/_bucket={bucket}/part-0.parquet"
            rows = pa.table(
                {
                    "id": pa.array(list(state), pa.int64()),
                    "v": pa.array(list(state.values()), pa.string()),
                }
            )
            size = wh.write_parquet(rel, rows)
            written[bucket] = Written(
                table.end_offsets()[TB(table.name, bucket)], [rel], rows.num_rows, size
            )
        return register(table, written, token)


def _rel(conn, uri: str) -> str:
    return f"{conn.namespace}/{testing.context(conn).warehouse.relative(uri)}"


def test_appends_write_segments_to_s3_and_a_consumer_reads_them_back(conn, bucket):
    assert conn.warehouse == f"s3://{BUCKET}/{conn.namespace}"
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    first = table.append([{"id": i, "v": f"a{i}"} for i in range(40)])
    written = [
        first,
        table.delete([{"id": 3}, {"id": 7}]),
        table.append([{"id": i, "v": f"b{i}"} for i in range(30, 50)]),
    ]
    segments = _objects(bucket, f"{conn.namespace}/{table.data_dir}/log")
    assert len(segments) == sum(
        r.end > r.start for ranges in written for r in ranges.values()
    )  # one per bucket touched
    assert {e.path for e in testing.context(conn).warehouse.list(table.data_dir)} == {
        s.split("/", 1)[1] for s in segments
    }
    got = _read_all(conn, table)
    appended = (
        [("upsert", i, f"a{i}") for i in range(40)]
        + [("delete", 3, None), ("delete", 7, None)]
        + [("upsert", i, f"b{i}") for i in range(30, 50)]
    )
    read = [
        row
        for data in got.values()
        for row in zip(*(data.column(c).to_pylist() for c in ("_op", "id", "v")))
    ]
    assert sorted(read, key=repr) == sorted(appended, key=repr)
    for b, data in got.items():  # each bucket in append order, at offsets 0, 1, 2, ...
        assert data.column("_offset").to_pylist() == list(
            range(table.end_offsets()[TB("orders", b)])
        )
        rows = list(zip(*(data.column(c).to_pylist() for c in ("_op", "id", "v"))))
        assert rows == [r for r in appended if r in set(rows)]


def test_snapshots_leases_and_retention_on_s3(conn, bucket):
    ctx = testing.context(conn)
    table = conn.create_table(
        "t",
        "id BIGINT, v STRING",
        "id",
        buckets=2,
        properties={"kv.snapshot.num-retained": 1, "log.retention": "0s"},
    )
    snaps = []
    for i in range(3):
        table.append([{"id": k, "v": f"r{i}-{k}"} for k in range(20)])
        snaps.append(_snapshot(conn, table))
        if i == 0:
            lease = conn.lease("audit", "1h")
            assert lease.acquire_latest("t").acquired == {TB("t", 0): 1, TB("t", 1): 1}
    assert (
        all(s.row_count for s in snaps[-1].values())
        and sum(s.row_count for s in snaps[-1].values()) == 20
    )
    assert [s.snapshot_id for s in table.snapshots(0)] == [1, 2, 3]
    files = {
        sid: {_rel(conn, f) for s in table.snapshots() if s.snapshot_id == sid for f in s.files}
        for sid in (1, 2, 3)
    }
    assert files[1] | files[2] | files[3] <= _objects(bucket, conn.namespace)

    # an orphan: a file no metadata names, put on S3 directly
    orphan = f"{table.data_dir}/log/0/dead-writer.parquet"
    with bucket.open_output_stream(f"{BUCKET}/{conn.namespace}/{orphan}") as out:
        out.write(b"not committed")
    plan = conn.retention_plan()
    orphans = [i for i in plan.items if i.kind == "orphan"]
    assert [(i.item_id, i.action, i.size_bytes) for i in orphans] == [
        (ctx.warehouse.uri(orphan), "keep", 13)
    ]
    assert "orphan.min-age 1h" in orphans[0].reason
    snapshot_actions = {
        (i.table_bucket.bucket, i.item_id): i.action for i in plan.items if i.kind == "snapshot"
    }
    assert snapshot_actions == {
        (0, 1): "keep",
        (1, 1): "keep",
        (0, 2): "delete",
        (1, 2): "delete",
        (0, 3): "keep",
        (1, 3): "keep",
    }
    segments_before = _objects(bucket, f"{conn.namespace}/{table.data_dir}/log")

    conn.update_settings({"orphan.min-age": "0s"})
    report = conn.run_retention()
    assert not report.errors
    deleted = {
        (i.kind, i.table_bucket.bucket if i.kind != "orphan" else None) for i in report.deleted
    }
    assert {
        ("snapshot", 0),
        ("snapshot", 1),
        ("orphan", None),
        ("segment", 0),
        ("segment", 1),
    } <= deleted
    stored = _objects(bucket, conn.namespace)
    assert f"{conn.namespace}/{orphan}" not in stored
    assert files[1] | files[3] <= stored and not files[2] & stored  # pinned and newest kept
    segments_after = _objects(bucket, f"{conn.namespace}/{table.data_dir}/log")
    assert segments_after < segments_before
    # ownership (docs/security.md): the owner marker lies beside tables/, and retention keeps it
    marker = f"{conn.namespace}/{conn.namespace}/_leasekit_owner.json"  # warehouse s3://bucket/<ns>
    assert marker in stored
    assert {e.path for e in ctx.warehouse.list(ctx.tables_dir)} == {
        s.split("/", 1)[1] for s in stored - {marker}
    }

    lease.release([TB("t", 0)])
    assert lease.info().pins == {TB("t", 1): 1}
    conn.run_retention()
    assert [s.snapshot_id for s in table.snapshots(0)] == [3] and [
        s.snapshot_id for s in table.snapshots(1)
    ] == [1, 3]
    assert lease.drop()
    conn.run_retention()
    assert [s.snapshot_id for s in table.snapshots()] == [3, 3]
    assert _objects(bucket, f"{conn.namespace}/{table.data_dir}/snapshots") == files[3]
    assert conn.run_retention().deleted == []

    conn.drop_table("t")
    assert _objects(bucket, conn.namespace) == {marker}  # the namespace still owns its directory


def test_endpoint_in_the_uri_query_string(s3, zookeeper, namespace, bucket, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    uri = f"s3://{BUCKET}/{namespace}?endpoint_override={s3}&scheme=http"
    with lk.connect(zookeeper, warehouse=uri, namespace=namespace) as conn:
        assert conn.warehouse == f"s3://{BUCKET}/{namespace}" and s3 not in repr(conn)
        table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
        table.append([{"id": i, "v": str(i)} for i in range(5)])
        assert _read_all(conn, table)[0].column("v").to_pylist() == [str(i) for i in range(5)]
        (snap,) = _snapshot(conn, table).values()
        assert snap.files[0].startswith(f"s3://{BUCKET}/{namespace}/{table.data_dir}/snapshots/")
        assert (
            testing.context(conn)
            .warehouse.to_spark(snap.files[0])
            .startswith(f"s3a://{BUCKET}/{namespace}/{namespace}/tables/")
        )
        assert _rel(conn, snap.files[0]) in _objects(bucket, namespace)


def _pipeline_source(conn) -> str:
    """Table ``src`` with a snapshot (taken without Spark), a log tail of upserts and deletes
    past it, a lease on its latest snapshots, and an empty ``copy``; the lease's id."""
    src = conn.create_table("src", "id BIGINT, v STRING", "id", buckets=2)
    conn.create_table("copy", "id BIGINT, v STRING", "id", buckets=2)
    src.append([{"id": i, "v": f"a{i}"} for i in range(60)])
    src.delete([{"id": i} for i in range(0, 60, 7)])
    _snapshot(conn, src)
    src.append([{"id": i, "v": f"b{i}"} for i in range(40, 90)])
    src.delete([{"id": 3}, {"id": 88}])
    lease = conn.lease(drop_on_exit=False)
    lease.acquire_latest("src")
    return lease.lease_id


def test_spark_data_source_on_s3_equals_a_local_warehouse(conn, zookeeper, tmp_path):
    # format("leasekit") reads and writes the files through pyarrow in Spark's Python workers
    # (D1-D4), so the tests' shared session needs no s3a; Spark's own s3a reader on this
    # warehouse is test_s3_spark.py's
    from spark_servers import spark_env, start, stop

    local = lk.connect(zookeeper, warehouse=str(tmp_path / "wh"), namespace=f"{conn.namespace}l")
    with local:
        targets = {
            name: {
                "zookeeper": zookeeper,
                "warehouse": c.warehouse,
                "namespace": c.namespace,
                "lease_id": _pipeline_source(c),
            }
            for name, c in (("s3", conn), ("local", local))
        }
    spec = tmp_path / "spec.json"
    out = tmp_path / "out.json"
    spec.write_text(
        json.dumps(
            {"targets": targets, "out": str(out), "checkpoints": str(tmp_path / "checkpoints")}
        )
    )
    log = tmp_path / "job.log"
    job = Path(__file__).resolve().parent / "datasource_job.py"
    proc = start([sys.executable, str(job), str(spec)], log, spark_env())
    try:
        proc.wait(300)
    finally:
        stop([proc])
    assert proc.returncode == 0, log.read_text()[-4000:]
    got = json.loads(out.read_text())
    assert got["s3"] == got["local"]
    rows = got["s3"]
    live = set(range(90)) - set(range(0, 40, 7)) - {3, 88}
    assert sorted(int(r[0]) for r in rows["ds_read"]) == sorted(live)
    assert rows["ds_lease"] == rows["ds_snapshots"]  # the lease pins the latest snapshots
    assert rows["ds_sink"] == rows["ds_read"]  # the stream's copy through the sink
    assert len(rows["ds_stream"]) == 60 + 9 + 50 + 2  # every record of the log, once
