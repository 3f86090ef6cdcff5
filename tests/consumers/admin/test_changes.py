"""``leasekit.spark.read_changes`` (docs/spark.md): a group's change reads with Spark, from its
committed offsets to the end offsets at the call; ``commit()`` moves the group there."""

from __future__ import annotations

import pytest

import leasekit as lk
from leasekit import spark as lks

TB = lk.TableBucket


def test_reads_from_committed_to_end_and_commit_moves_on(conn, spark):
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    table.append([{"id": i, "v": "a"} for i in range(10)])
    batch = lks.read_changes(spark, table, "etl")
    rows = batch.df.collect()
    assert sorted(r["id"] for r in rows) == list(range(10))  # no commit yet: from the beginning
    assert batch.df.columns == ["_bucket", "_offset", "_timestamp", "_op", "id", "v"]
    ends = table.end_offsets()
    assert batch.offsets == {tb: lk.OffsetRange(0, ends[tb]) for tb in ends}
    table.append([{"id": 100, "v": "later"}])  # after the call: not in this batch
    assert len(batch.df.collect()) == 10
    batch.commit()
    with conn.consumer(group_id="etl", enable_auto_commit=False) as c:
        c.assign(list(ends))
        assert {tb: c.committed(tb) for tb in ends} == ends
    again = lks.read_changes(spark, table, "etl")
    assert [(r["id"], r["v"]) for r in again.df.collect()] == [(100, "later")]
    again.commit()
    assert lks.read_changes(spark, table, "etl").df.count() == 0


def test_refused_while_the_group_has_live_members(conn, spark):
    table = conn.create_table("orders", "id BIGINT", "id", buckets=1)
    table.append([{"id": 1}])
    batch = lks.read_changes(spark, table, "etl")
    with conn.consumer("orders", group_id="etl") as member:
        member.poll()
        with pytest.raises(lk.GroupNotEmptyError):
            lks.read_changes(spark, table, "etl")
        with pytest.raises(lk.GroupNotEmptyError):
            batch.commit()
    with pytest.raises(lk.InvalidArgumentError):
        lks.read_changes(spark, table, "bad/group")
    with pytest.raises(TypeError):
        lks.read_changes(spark, "orders", "etl")
