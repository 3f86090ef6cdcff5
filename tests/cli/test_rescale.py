"""``leasekit table split|merge`` and the lineage in ``table describe`` (K8), run in-process
against the real ZooKeeper fixture."""

from __future__ import annotations

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
        {"table": "t", "bucket": 4, "parents": [0]},
        {"table": "t", "bucket": 5, "parents": [0]},
    ]
    code, out, err = run(capsys, *target, "table", "merge", "t", "--buckets", "3,2")
    assert code == 0, err
    assert out.startswith("merged buckets 3, 2 of t into bucket 6")
    assert run_json(capsys, *target, "table", "merge", "t", "--buckets", " 4 , 5") == [
        {"table": "t", "bucket": 7, "parents": [4, 5]}
    ]
    assert conn.table("t").buckets == [lk.TableBucket("t", b) for b in (6, 7)]


def test_describe_shows_the_lineage(capsys, target, conn) -> None:
    # K8: every bucket the table ever had, with its state, parents, children and seal
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    table.append([{"id": k, "v": "x"} for k in range(50)])
    sealed_at = table.end_offsets()[lk.TableBucket("t", 1)]
    table.split_bucket(1)
    info = run_json(capsys, *target, "table", "describe", "t")
    assert info["buckets"] == 3
    assert [r["bucket"] for r in info["bucket_offsets"]] == [0, 2, 3]
    assert info["lineage"] == [
        {"bucket": 0, "state": "active", "parents": [], "children": [], "sealed_at": None},
        {"bucket": 1, "state": "sealed", "parents": [], "children": [2, 3],
         "sealed_at": sealed_at},
        {"bucket": 2, "state": "active", "parents": [1], "children": [], "sealed_at": None},
        {"bucket": 3, "state": "active", "parents": [1], "children": [], "sealed_at": None},
    ]  # fmt: skip
    code, out, err = run(capsys, *target, "table", "describe", "t")
    assert code == 0, err
    lineage = out.split("\nlineage\n", 1)[1].split("\n")
    rows = [line.split() for line in lineage if line.strip()]
    assert rows[0] == ["BUCKET", "STATE", "PARENTS", "CHILDREN", "SEALED-AT"]
    assert rows[2] == ["1", "sealed", "2,", "3", str(sealed_at)]
    conn.create_table("u", "id BIGINT, v STRING", "id", buckets=2)
    code, out, err = run(capsys, *target, "table", "describe", "u")
    assert code == 0 and "lineage" not in out  # never rescaled: the offsets say it all
    assert run_json(capsys, *target, "table", "describe", "u")["lineage"][1] == {
        "bucket": 1, "state": "active", "parents": [], "children": [], "sealed_at": None
    }  # fmt: skip


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
