"""Containment (docs/security.md): every file path that metadata names must lie inside its table's
directory of the namespace; a drop marker, snapshot record or segment record naming anything
else is ``CorruptMetadataError`` naming the znode, and nothing is read or deleted there.

The hostile records are written as any local user could: a plain kazoo client on the
unauthenticated server, values packed with leasekit's own codecs around hostile paths.
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import warehouse_files
from kazoo.client import KazooClient

import leasekit as lk
from leasekit import janitor, testing
from leasekit.log.segments import log_schema
from leasekit.testing import seed_history
from leasekit.zk import Create, Delete
from leasekit.zk.formats import DroppedTable, SegmentRecord, SnapshotRecord

SCHEMA = "id BIGINT, v STRING"
VICTIM_ROWS = [{"id": 666, "v": "victim"}]


@pytest.fixture
def hostile(zookeeper):
    """A plain kazoo client on the same server: no leasekit, no credentials."""
    client = KazooClient(hosts=zookeeper, timeout=30)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def victim(tmp_path):
    """A directory outside the warehouse holding a Parquet file with the table's columns."""
    directory = tmp_path / "victim"
    directory.mkdir()
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    pq.write_table(pa.Table.from_pylist(VICTIM_ROWS, schema=schema), directory / "f.parquet")
    return directory


def escaping_file(form: str, table, victim) -> str:
    """A warehouse-relative path, as metadata stores it, that names the victim's file."""
    target = victim / "f.parquet"
    if form == "dotdot":  # <warehouse>/<ns>/tables/<name>/<id>/../../../../../victim/f.parquet
        return f"{table.data_dir}/{'../' * 5}victim/f.parquet"
    if form == "absolute":
        return str(target)
    if form == "uri":
        return target.as_uri()
    if form == "other-bucket":
        return f"s3://other-bucket/{table.data_dir}/f.parquet"
    raise AssertionError(form)


FILE_FORMS = ["dotdot", "absolute", "uri", "other-bucket"]


def assert_victim_intact(victim) -> None:
    assert (victim / "f.parquet").is_file()
    assert pq.read_table(victim / "f.parquet").to_pylist() == VICTIM_ROWS


def names(errors: list[str], path: str) -> bool:
    return any(path in error for error in errors)


# -- drop markers -----------------------------------------------------------------------------


def marker_dir(form: str, conn, keep, victim) -> str:
    ctx = testing.context(conn)
    if form == "dotdot":  # <warehouse>/<ns>/tables/../../../victim
        return f"{ctx.tables_dir}/{'../' * 3}victim"
    if form == "absolute":
        return str(victim)
    if form == "uri":
        return victim.as_uri()
    if form == "tables-dir":  # every table of the namespace
        return ctx.tables_dir
    if form == "another-table":  # a live table's own directory
        return keep.data_dir
    raise AssertionError(form)


@pytest.mark.parametrize("form", ["dotdot", "absolute", "uri", "tables-dir", "another-table"])
def test_a_drop_marker_naming_another_directory_deletes_nothing_there(conn, hostile, victim, form):
    # containment (docs/security.md): a janitor pass refuses
    # the marker, names it, keeps it, and carries on
    ctx = testing.context(conn)
    keep = conn.create_table("keep", SCHEMA, "id", buckets=2)
    keep.append([{"id": i, "v": "k"} for i in range(10)])
    gone = conn.create_table("gone", SCHEMA, "id", buckets=2)
    gone.append([{"id": i, "v": "g"} for i in range(10)])
    kept_files = {f for f in warehouse_files(conn) if f.startswith(keep.data_dir + "/")}
    # An interrupted drop of "gone": its marker committed, its data still there.
    node = ctx.store.get(ctx.paths.table("gone"))
    ctx.store.commit(
        [
            Delete(ctx.paths.table("gone"), node.stat.version),
            Create(
                ctx.paths.dropped_table(gone.table_id),
                DroppedTable("gone", gone.data_dir).encode(),
            ),
        ]
    )
    fake_id = uuid.uuid4().hex
    marker = ctx.paths.dropped_table(fake_id)
    hostile.create(marker, DroppedTable("keep", marker_dir(form, conn, keep, victim)).encode())

    report = janitor.run_once(conn)
    assert_victim_intact(victim)
    assert warehouse_files(conn) == kept_files  # "gone" went, "keep" is whole
    assert names(report.errors, marker)
    assert ctx.store.exists(marker) is not None
    assert ctx.store.exists(ctx.paths.dropped_table(gone.table_id)) is None
    assert conn.tables() == ["keep"]

    from leasekit.table import finish_drop

    with pytest.raises(lk.CorruptMetadataError) as exc_info:
        finish_drop(ctx, fake_id)
    assert exc_info.value.path == marker and marker in str(exc_info.value)
    conn.run_retention()
    assert_victim_intact(victim)
    assert warehouse_files(conn) == kept_files


# -- snapshot records -------------------------------------------------------------------------


@pytest.mark.parametrize("form", FILE_FORMS)
def test_retention_never_deletes_a_snapshot_file_outside_its_table(conn, hostile, victim, form):
    # containment, R1: the snapshot named is skipped with its znode named; the others go
    ctx = testing.context(conn)
    table = conn.create_table("t", SCHEMA, "id", buckets=2)
    seed_history(ctx, table, snapshots=3, segments=3, rows_per_segment=10, file_bytes=8)
    path = ctx.paths.snapshot(table.table_id, 0, 1)
    hostile.set(path, SnapshotRecord(10, 10, 8, (escaping_file(form, table, victim),)).encode())

    report = janitor.run_once(conn)
    assert_victim_intact(victim)
    assert names(report.errors, path)
    assert ctx.store.exists(path) is not None
    assert ctx.store.exists(ctx.paths.snapshot(table.table_id, 1, 1)) is None  # carried on
    report = conn.run_retention()
    assert_victim_intact(victim)
    assert names(report.errors, path)
    with pytest.raises(lk.CorruptMetadataError) as exc_info:
        table.snapshots()
    assert exc_info.value.path == path


# -- segment records --------------------------------------------------------------------------


@pytest.mark.parametrize("form", FILE_FORMS)
def test_retention_never_deletes_a_segment_file_outside_its_table(conn, hostile, victim, form):
    # containment, R3: the segment is skipped with its znode named, and so is the log after
    # it (the log stays contiguous); other buckets' segments go
    ctx = testing.context(conn)
    table = conn.create_table("t", SCHEMA, "id", buckets=2, properties={"log.retention.bytes": 1})
    seed_history(ctx, table, snapshots=3, segments=3, rows_per_segment=10, file_bytes=8)
    path = ctx.paths.segment(table.table_id, 0, 0)
    hostile.set(path, SegmentRecord(escaping_file(form, table, victim), 10, 8, 0).encode())

    report = janitor.run_once(conn)
    assert_victim_intact(victim)
    assert names(report.errors, path)
    tid = table.table_id
    assert ctx.store.exists(path) is not None
    assert ctx.store.exists(ctx.paths.segment(tid, 0, 10)) is not None
    assert ctx.store.exists(ctx.paths.segment(tid, 1, 0)) is None  # carried on
    assert ctx.store.exists(ctx.paths.segment(tid, 1, 10)) is None
    report = conn.run_retention()
    assert_victim_intact(victim)
    assert names(report.errors, path)


def hostile_segment(conn, hostile, table, victim, form: str) -> str:
    """Point the table's first segment of bucket 0 at the victim (a Parquet file with the
    log's columns and as many rows); returns the segment's znode."""
    ctx = testing.context(conn)
    schema = log_schema(table)
    rows = [{**row, "_op": "upsert"} for row in VICTIM_ROWS]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), victim / "f.parquet")
    path = ctx.paths.segment(table.table_id, 0, 0)
    record = SegmentRecord.decode(ctx.store.get(path).data, path)
    hostile.set(
        path,
        SegmentRecord(escaping_file(form, table, victim), 1, record.size, record.ts_floor).encode(),
    )
    return path


@pytest.mark.parametrize("form", FILE_FORMS)
def test_a_consumer_never_reads_a_segment_file_outside_its_table(conn, hostile, victim, form):
    # containment, C1: the consumer's read raises, naming the znode, and returns no victim row
    table = conn.create_table("t", SCHEMA, "id", buckets=1)
    table.append([{"id": 1, "v": "mine"}])
    path = hostile_segment(conn, hostile, table, victim, form)
    with conn.consumer("t", auto_offset_reset="earliest") as consumer:
        with pytest.raises(lk.CorruptMetadataError) as exc_info:
            for _ in range(20):
                assert all(
                    666 not in batch.column("id").to_pylist()
                    for batch in consumer.poll("100ms").values()
                )
    assert exc_info.value.path == path


# -- Spark reads ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["dotdot", "absolute"])
def test_spark_reads_never_read_files_outside_their_table(conn, hostile, victim, spark, form):
    # containment, L12, S1: lease.read, read_snapshots and read_at raise naming the znode
    ctx = testing.context(conn)
    from leasekit.spark import read_at, read_snapshots

    table = conn.create_table("t", SCHEMA, "id", buckets=1)
    table.append([{"id": 1, "v": "mine"}])
    table.snapshot(spark)
    snap = ctx.paths.snapshot(table.table_id, 0, 1)
    record = SnapshotRecord.decode(ctx.store.get(snap).data, snap)
    hostile.set(snap, record._replace(files=(escaping_file(form, table, victim),)).encode())
    lease = conn.lease("q3", "1h")
    lease.acquire_latest("t")
    reads = (
        lambda: lease.read(spark, "t"),
        lambda: read_snapshots(spark, table, {0: 1}),
        lambda: read_at(spark, table),
    )
    for read in reads:
        with pytest.raises(lk.CorruptMetadataError) as exc_info:
            read().collect()
        assert exc_info.value.path == snap
    hostile.set(snap, record.encode())  # the snapshot is sane again; now the log tail
    table.append([{"id": 2, "v": "mine"}])
    seg = ctx.paths.segment(table.table_id, 0, 1)
    victim_rows = [{**row, "_op": "upsert"} for row in VICTIM_ROWS]
    victim_log = pa.Table.from_pylist(victim_rows, schema=log_schema(table))
    pq.write_table(victim_log, victim / "f.parquet")
    seg_record = SegmentRecord.decode(ctx.store.get(seg).data, seg)
    hostile.set(seg, seg_record._replace(file=escaping_file(form, table, victim)).encode())
    with pytest.raises(lk.CorruptMetadataError) as exc_info:
        read_at(spark, table).collect()
    assert exc_info.value.path == seg
