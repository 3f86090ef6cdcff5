"""Reads across rescales: the table's rows are the same before and after a split or merge, by
every read path, and a new bucket's first snapshot materialises its share of its parents (K3);
leases pin, for a bucket with no snapshot yet, what its state is built from (K4)."""

from __future__ import annotations

import pytest
from helpers import warehouse_files

import leasekit as lk
from leasekit import spark as lks

DDL = "k BIGINT, v STRING"


def _rows(df) -> list[tuple]:
    return sorted((r.k, r.v) for r in df.select("k", "v").collect())


def _model(model: dict) -> list[tuple]:
    return sorted(model.items())


def _write(table, model, keys, tag):
    """Upsert ``keys`` with value ``tag``-k, recording them in ``model``."""
    table.append([{"k": k, "v": f"{tag}-{k}"} for k in keys])
    model.update({k: f"{tag}-{k}" for k in keys})


def _delete(table, model, keys):
    table.delete([{"k": k} for k in keys])
    for k in keys:
        model.pop(k, None)


def _history(table) -> dict:
    """Upserts, updates and deletes over 200 keys, with a snapshot in between."""
    model: dict = {}
    _write(table, model, range(200), "a")
    _delete(table, model, range(0, 200, 7))
    table.snapshot()
    _write(table, model, range(0, 200, 3), "b")
    _delete(table, model, range(1, 200, 11))
    return model


def test_split_keeps_every_read_the_same_and_copies_no_file(conn, spark):  # K3
    table = conn.create_table("t", DDL, "k", buckets=2)
    model = _history(table)
    before = table.end_offsets()
    assert _rows(lks.read_at(spark, table)) == _model(model)
    files = warehouse_files(conn)
    c1, c2 = table.split_bucket(0)
    assert warehouse_files(conn) == files  # K3: a rescale copies no data file
    assert _rows(lks.read_at(spark, table)) == _model(model)
    assert _rows(lks.read_at(spark, table, before)) == _model(model)
