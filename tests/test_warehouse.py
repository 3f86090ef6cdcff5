"""The warehouse's listings (R4): every file below a directory, hidden side files included,
with sizes and times read only for the files asked about."""

from __future__ import annotations

import os

import pytest

from leasekit.warehouse import Warehouse


@pytest.fixture
def wh(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    warehouse.open()
    root = tmp_path / "wh" / "tables" / "t"
    for rel, data in {"a.parquet": b"1", "log/0/00.parquet": b"22", "log/0/.00.parquet.crc": b"333",
                      "snap/7/part-0.parquet": b"4444", "snap/7/_SUCCESS": b""}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "empty-dir").mkdir()
    return warehouse


def test_scan_lists_every_file_below_a_directory_and_no_directory(wh):
    # R4: orphan planning sees every file, the side files Spark writes included
    listing = wh.scan("tables")
    assert sorted(listing.paths) == [
        "tables/t/a.parquet", "tables/t/log/0/.00.parquet.crc", "tables/t/log/0/00.parquet",
        "tables/t/snap/7/_SUCCESS", "tables/t/snap/7/part-0.parquet"]
    assert sorted(listing.paths) == sorted(e.path for e in wh.list("tables"))
    assert wh.scan("tables/nothing-here").paths == []


def test_listing_entries_read_sizes_and_times_of_the_files_asked_for(wh):
    listing = wh.scan("tables/t")
    entries = listing.entries(["tables/t/log/0/00.parquet", "tables/t/snap/7/part-0.parquet"])
    assert [(e.path, e.size) for e in entries] == [("tables/t/log/0/00.parquet", 2), ("tables/t/snap/7/part-0.parquet", 4)]
    mtime = os.stat(os.path.join(wh.location, "tables/t/log/0/00.parquet")).st_mtime_ns // 1_000_000
    assert entries[0].mtime_ms == mtime
    assert entries == [e for e in wh.list("tables/t") if e.path in {x.path for x in entries}]


def test_files_deleted_after_the_scan_are_left_out(wh):
    listing = wh.scan("tables")
    wh.delete_files(["tables/t/a.parquet"])
    assert listing.entries(["tables/t/a.parquet"]) == []
    assert [e.path for e in listing.entries(listing.paths)] == sorted(set(listing.paths) - {"tables/t/a.parquet"},
                                                                      key=listing.paths.index)

