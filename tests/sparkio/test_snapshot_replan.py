"""A snapshot job whose log files a merge replaced and retention deleted meanwhile plans again on
the merged file (R8, S1)."""

from __future__ import annotations

import pytest

from leasekit.errors import IllegalStateError
from leasekit.sparkio import compact


def _table(conn):
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    for i in range(8):
        table.append([{"id": i * 10 + j, "v": f"v{i}"} for j in range(10)])
    table.delete([{"id": 3}])
    return table


def _merge_and_reclaim(conn, table) -> None:
    """What a janitor does between a job's plan and its reads, with orphan.min-age 0s."""
    assert table.compact_log().written == 1
    conn.run_retention()


def test_snapshot_plans_again_when_its_log_files_were_replaced_and_deleted(
    conn, spark, monkeypatch
):
    # R8, S1: the first job planned on the appended files; a merge replaced them and retention
    # deleted them before the job read them; the snapshot plans again on the merged file
    conn.update_settings({"orphan.min-age": "0s"})
    table = _table(conn)
    real = compact.kv_state
    calls = []

    def merged_before_reading(*args, **kwargs):  # after the job listed its files
        calls.append(1)
        if len(calls) == 1:
            _merge_and_reclaim(conn, table)
        return real(*args, **kwargs)

    monkeypatch.setattr(compact, "kv_state", merged_before_reading)
    taken = table.snapshot(spark)
    assert len(calls) == 2
    [snap] = taken.values()
    assert snap.log_offset == 81 and snap.row_count == 79
    rows = spark.read.parquet(*snap.files).orderBy("id").collect()
    assert [r.id for r in rows] == [i for i in range(80) if i != 3]


def test_snapshot_gives_up_naming_the_file_after_its_attempts(conn, spark, monkeypatch):
    # R8: each attempt finds its files gone: the error names one and the remedy
    conn.update_settings({"orphan.min-age": "0s"})
    table = _table(conn)
    real = compact.kv_state

    def always_replaced(*args, **kwargs):
        for i in range(4):  # new small segments, then a merge of them all
            table.append([{"id": 2000 + i, "v": "y"}])
        table.compact_log()
        conn.run_retention()
        return real(*args, **kwargs)

    monkeypatch.setattr(compact, "kv_state", always_replaced)
    with pytest.raises(IllegalStateError, match=r"was deleted while the job read it, in each of 3"):
        table.snapshot(spark)
    assert table.snapshots() == []
