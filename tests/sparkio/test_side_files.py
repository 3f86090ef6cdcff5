"""Spark's writes leave no side files: compaction (``table.snapshot``) and ``leasekit.spark.write``
delete Hadoop's ``_SUCCESS`` job markers and ``.crc`` checksums before they register what they
wrote, so retention never lists them as orphans (R5); such files left by older versions still go
as orphans by the normal rule."""

from __future__ import annotations

import os

import pandas as pd

import leasekit as lk
from leasekit import spark as lks


def _side_files(root: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, f), root)
        for d, _, files in os.walk(root)
        for f in files
        if f == "_SUCCESS" or f.endswith(".crc")
    )


def test_snapshots_and_spark_writes_leave_no_orphans(conn, spark):
    # R5: nothing unreferenced is left behind, also once retention deleted old snapshots
    conn.update_settings({"orphan.min-age": "0s"})
    orders = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    for i in range(3):
        orders.append([{"id": k, "v": f"r{i}"} for k in range(30)])
        orders.snapshot(spark)
    lks.write(spark.createDataFrame(pd.DataFrame({"id": range(40), "v": "bulk"})), orders)
    orders.snapshot(spark)

    assert _side_files(conn.warehouse) == []
    plan = conn.retention_plan()
    assert [i for i in plan.items if i.kind == "orphan"] == []
    report = conn.run_retention()
    assert report.errors == [] and len(report.deleted) == 4  # snapshots 1 and 2 of each bucket
    assert [i for i in conn.retention_plan().items if i.kind == "orphan"] == []
    assert lks.read_at(spark, orders).count() == 40


def test_side_files_left_by_older_versions_go_as_orphans(conn, spark):
    # R5: a _SUCCESS or .crc that no data file explains is an orphan like any other file
    conn.update_settings({"orphan.min-age": "0s"})
    orders = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    orders.append([{"id": k, "v": "a"} for k in range(10)])
    orders.snapshot(spark)
    (snapshot,) = orders.snapshots(0)
    old = os.path.join(os.path.dirname(os.path.dirname(snapshot.files[0])), "old-token")
    os.makedirs(old)
    for name in ("_SUCCESS", "._SUCCESS.crc", ".part-0.parquet.crc"):
        open(os.path.join(old, name), "wb").close()

    orphans = sorted(
        os.path.basename(i.item_id)
        for i in conn.retention_plan().items
        if i.kind == "orphan" and i.action == "delete"
    )
    assert orphans == ["._SUCCESS.crc", ".part-0.parquet.crc", "_SUCCESS"]
    conn.run_retention()
    assert _side_files(conn.warehouse) == []
    assert lk.TableBucket("orders", 0) in orders.latest_snapshots()
