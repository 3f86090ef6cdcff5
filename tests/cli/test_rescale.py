"""``leasekit table split|merge`` and the lineage in ``table describe`` (K8), run in-process
against the real ZooKeeper fixture."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from helpers import run_cli as run
from helpers import run_cli_json as run_json

import leasekit as lk


def test_split_and_merge_print_the_new_buckets(capsys, target, conn) -> None:
    # K8
    conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    code, out, err = run(capsys, *target, "table", "split", "t", "--bucket", "1")
    assert code == 0, err
    assert out.startswith("split bucket 1 of t into buckets 2, 3")
    assert conn.table("t").buckets == [lk.TableBucket("t", b) for b in (0, 2, 3)]
    rows = run_json(capsys, *target, "table", "split", "t", "--bucket", "0")
    assert rows == [
        {"table": "t", "bucket": 4, "parents": [0], "parents_sealed_at": [0]},
        {"table": "t", "bucket": 5, "parents": [0], "parents_sealed_at": [0]},
    ]
    code, out, err = run(capsys, *target, "table", "merge", "t", "--buckets", "3,2")
    assert code == 0, err
    assert out.startswith("merged buckets 3, 2 of t into bucket 6")
    assert run_json(capsys, *target, "table", "merge", "t", "--buckets", " 4 , 5") == [
        {"table": "t", "bucket": 7, "parents": [4, 5], "parents_sealed_at": [0, 0]}
    ]
    assert conn.table("t").buckets == [lk.TableBucket("t", b) for b in (6, 7)]


def test_split_and_merge_say_where_the_parents_were_sealed(capsys, target, conn) -> None:
    # K1: the parents are sealed at their end offsets, the new buckets open at offset 0;
    # K5: consumers read the parents to their seals first
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    table.append([{"id": k, "v": "x"} for k in range(3_000)])
    end = table.end_offsets()[lk.TableBucket("t", 1)]
    assert end > 1_000  # printed with a thousands separator
    code, out, err = run(capsys, *target, "table", "split", "t", "--bucket", "1")
    assert code == 0, err
    assert out.splitlines() == [
        "split bucket 1 of t into buckets 2, 3",
        f"bucket 1 sealed at offset {end:,}; children 2, 3 open at offset 0",
        "consumers read bucket 1 to its seal before 2, 3 (parent first)",
    ]
    table.append([{"id": k, "v": "y"} for k in range(3_000)])
    ends = table.end_offsets()
    e2, e3 = ends[lk.TableBucket("t", 2)], ends[lk.TableBucket("t", 3)]
    code, out, err = run(capsys, *target, "table", "merge", "t", "--buckets", "2,3")
    assert code == 0, err
    assert out.splitlines() == [
        "merged buckets 2, 3 of t into bucket 4",
        f"bucket 2 sealed at offset {e2:,}, bucket 3 at offset {e3:,}; child 4 opens at offset 0",
        "consumers read buckets 2, 3 to their seals before 4 (parent first)",
    ]


def test_describe_shows_the_lineage(capsys, target, conn) -> None:
    # K8: every bucket the table ever had, with its state, parents, children and seal: the
    # offset it was sealed at, said as an offset, and when
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    table.append([{"id": k, "v": "x"} for k in range(50)])
    sealed_at = table.end_offsets()[lk.TableBucket("t", 1)]
    before = conn.server_time()
    table.split_bucket(1)
    after = conn.server_time()
    info = run_json(capsys, *target, "table", "describe", "t")
    assert info["buckets"] == 3
    sealed_time = info["lineage"][1].pop("sealed_time")
    assert before - timedelta(seconds=5) <= datetime.fromisoformat(sealed_time) <= after
    assert info["lineage"] == [
        {"bucket": 0, "state": "active", "parents": [], "children": [], "sealed_at": None,
         "sealed_time": None},
        {"bucket": 1, "state": "sealed", "parents": [], "children": [2, 3],
         "sealed_at": sealed_at},
        {"bucket": 2, "state": "active", "parents": [1], "children": [], "sealed_at": None,
         "sealed_time": None},
        {"bucket": 3, "state": "active", "parents": [1], "children": [], "sealed_at": None,
         "sealed_time": None},
    ]  # fmt: skip
    code, out, err = run(capsys, *target, "table", "describe", "t")
    assert code == 0, err
    assert "SEALED-AT" not in out  # an offset, not to be read as a time
    lineage = out.split("\nlineage\n", 1)[1].strip().splitlines()
    assert lineage[0].split() == ["BUCKET", "STATE", "LINEAGE", "WHEN"]
    assert [re.split(r"\s{2,}", line.strip()) for line in lineage[1:]] == [
        ["1", "sealed", f"sealed at offset {sealed_at} → 2, 3", f"split {sealed_time}"],
        ["2", "active", "from 1", f"split {sealed_time}"],
        ["3", "active", "from 1", f"split {sealed_time}"],
    ]  # the buckets a rescale touched; bucket 0 was not
    conn.create_table("u", "id BIGINT, v STRING", "id", buckets=2)
    code, out, err = run(capsys, *target, "table", "describe", "u")
    assert code == 0 and "lineage" not in out  # never rescaled: the offsets say it all
    assert "STATE" not in out.split("\n\n")[1].splitlines()[0]
    assert run_json(capsys, *target, "table", "describe", "u")["lineage"][1] == {
        "bucket": 1, "state": "active", "parents": [], "children": [], "sealed_at": None,
        "sealed_time": None,
    }  # fmt: skip


def _offset_rows(capsys, target) -> dict[int, dict]:
    info = run_json(capsys, *target, "table", "describe", "t")
    return {r["bucket"]: r for r in info["bucket_offsets"]}


def _notes(capsys, target) -> list[str]:
    code, out, err = run(capsys, *target, "table", "describe", "t")
    assert code == 0, err
    return [line for line in out.splitlines() if line.startswith("sealed bucket")]


def test_describe_shows_a_sealed_bucket_until_drained_and_out_of_use(
    capsys, target, conn, spark
) -> None:
    # K6: the offsets cover a sealed bucket while a group has not read it to its seal; K7: and
    # while retention keeps it (a child without a snapshot of its own, a lease's pin); then it
    # leaves them, and retention may delete it
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    table.append([{"id": k, "v": "x"} for k in range(60)])
    table.snapshot(spark)
    tb1 = lk.TableBucket("t", 1)
    with conn.consumer(group_id="g", enable_auto_commit=False) as c:
        c.assign([tb1])
        c.commit({tb1: 3})
    lease = conn.lease("L", duration="1h")
    lease.acquire_latest("t")
    sealed_at = table.end_offsets()[tb1]
    table.split_bucket(1)
    table.append([{"id": k, "v": "y"} for k in range(60, 90)])

    rows = _offset_rows(capsys, target)
    assert sorted(rows) == [0, 1, 2, 3]
    assert rows[1]["state"] == "sealed" and rows[1]["end_offset"] == sealed_at
    assert rows[1]["latest_snapshot"] == 1 and rows[0]["state"] == "active"
    assert rows[1]["in_use"] == [
        f"group g has not consumed it to its seal (committed 3 of {sealed_at})",
        "children 2, 3 have no snapshot of their own yet",
        "a lease pins snapshot 1",
    ]
    assert rows[0]["in_use"] is None
    code, out, _ = run(capsys, *target, "table", "describe", "t")
    offsets = out.split("\n\n")[1].splitlines()
    assert offsets[0].split()[:3] == ["BUCKET", "STATE", "BEGINNING-OFFSET"]
    assert offsets[2].split()[:4] == ["1", "sealed", "0", str(sealed_at)]
    assert _notes(capsys, target) == [
        "sealed bucket 1 is still in use: " + "; ".join(rows[1]["in_use"])
    ]

    with conn.consumer(group_id="g", enable_auto_commit=False) as c:  # drained
        c.assign([tb1])
        c.commit({tb1: sealed_at})
    table.snapshot(spark)  # the children's own snapshots
    assert _offset_rows(capsys, target)[1]["in_use"] == ["a lease pins snapshot 1"]
    kept = [i for i in conn.retention_plan("t").items if i.table_bucket == tb1]
    assert {(i.kind, i.action) for i in kept if i.kind == "snapshot"} == {("snapshot", "keep")}

    lease.drop()  # nothing holds it any more: out of use
    assert sorted(_offset_rows(capsys, target)) == [0, 2, 3]
    assert _notes(capsys, target) == [
        "sealed bucket 1: drained and out of use (retention may delete it), not shown above"
    ]
    planned = [i for i in conn.retention_plan("t").items if i.table_bucket == tb1]
    assert {i.action for i in planned if i.kind == "snapshot"} == {"delete"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["merge", "t", "--buckets", "1"], "expected two bucket numbers A,B, got '1'"),
        (["merge", "t", "--buckets", "1,2,3"], "expected two bucket numbers A,B, got '1,2,3'"),
        (["merge", "t", "--buckets", "a,b"], "expected two bucket numbers A,B, got 'a,b'"),
        (["merge", "t", "--buckets=-1,2"], "expected two bucket numbers A,B, got '-1,2'"),
        (["split", "t", "--bucket", "x"], "invalid int value: 'x'"),
        (["split", "t"], "the following arguments are required: --bucket"),
        (["merge", "t"], "the following arguments are required: --buckets"),
    ],
)
def test_bad_arguments_exit_2(capsys, target, conn, argv, message) -> None:
    # K8
    conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    code, out, err = run(capsys, *target, "table", *argv)
    assert code == 2 and message in err and out == ""
    assert conn.table("t").buckets == [lk.TableBucket("t", 0), lk.TableBucket("t", 1)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["split", "t", "--bucket", "9"], "bucket"),
        (["split", "t", "--bucket", "1"], "sealed"),
        (["merge", "t", "--buckets", "0,2"], "leasekit: error:"),
        (["split", "nope", "--bucket", "0"], "nope"),
    ],
)
def test_refusals_are_one_error_line(capsys, target, conn, argv, message) -> None:
    # K8: a sealed or unknown bucket, buckets that are not siblings, an unknown table
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    table.split_bucket(1)
    code, out, err = run(capsys, *target, "table", *argv)
    assert code == 2 and out == ""
    assert err.startswith("leasekit: error:") and err.count("\n") == 1 and message in err
    assert conn.table("t").buckets == [lk.TableBucket("t", b) for b in (0, 2, 3)]
