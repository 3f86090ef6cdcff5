"""The warehouse's listings (R4): every file below a directory, hidden side files included,
with sizes and times read only for the files asked about."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import time

import pytest

from leasekit.dirscan import _SETTLED_NS, LocalScan
from leasekit.errors import CorruptMetadataError, IllegalStateError
from leasekit.warehouse import Warehouse, contained


@pytest.fixture
def wh(tmp_path):
    warehouse = Warehouse(tmp_path / "wh")
    warehouse.open()
    root = tmp_path / "wh" / "tables" / "t"
    for rel, data in {
        "a.parquet": b"1",
        "log/0/00.parquet": b"22",
        "log/0/.00.parquet.crc": b"333",
        "snap/7/part-0.parquet": b"4444",
        "snap/7/_SUCCESS": b"",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "empty-dir").mkdir()
    return warehouse


def test_scan_lists_every_file_below_a_directory_and_no_directory(wh):
    # R4: orphan planning sees every file, the side files Spark writes included
    listing = wh.scan("tables")
    assert sorted(listing.paths) == [
        "tables/t/a.parquet",
        "tables/t/log/0/.00.parquet.crc",
        "tables/t/log/0/00.parquet",
        "tables/t/snap/7/_SUCCESS",
        "tables/t/snap/7/part-0.parquet",
    ]
    assert sorted(listing.paths) == sorted(e.path for e in wh.list("tables"))
    assert wh.scan("tables/nothing-here").paths == []


def test_a_scan_sees_every_change_since_the_last_one_in_directories_listed_before(wh):
    # R4: a directory is listed again once anything in it changed, settled or not
    time.sleep(_SETTLED_NS / 1e9 + 0.2)  # the fixture's directories have settled
    root = os.path.join(wh.location, "tables/t")
    before = sorted(wh.scan("tables").paths)
    assert before == sorted(wh.scan("tables").paths)
    with open(os.path.join(root, "log/0/01.parquet"), "wb") as f:
        f.write(b"5")
    os.remove(os.path.join(root, "snap/7/_SUCCESS"))
    shutil.rmtree(os.path.join(root, "empty-dir"))
    os.makedirs(os.path.join(root, "empty-dir/8"))
    with open(os.path.join(root, "empty-dir/8/part-0.parquet"), "wb") as f:
        f.write(b"6")
    after = sorted(wh.scan("tables").paths)
    assert after == sorted(e.path for e in wh.list("tables"))
    assert set(after) ^ set(before) == {
        "tables/t/log/0/01.parquet",
        "tables/t/snap/7/_SUCCESS",
        "tables/t/empty-dir/8/part-0.parquet",
    }
    assert sorted(wh.scan("tables/t/log").paths) == [
        "tables/t/log/0/.00.parquet.crc",
        "tables/t/log/0/00.parquet",
        "tables/t/log/0/01.parquet",
    ]


def test_listing_entries_read_sizes_and_times_of_the_files_asked_for(wh):
    listing = wh.scan("tables/t")
    entries = listing.entries(["tables/t/log/0/00.parquet", "tables/t/snap/7/part-0.parquet"])
    assert [(e.path, e.size) for e in entries] == [
        ("tables/t/log/0/00.parquet", 2),
        ("tables/t/snap/7/part-0.parquet", 4),
    ]
    mtime = os.stat(os.path.join(wh.location, "tables/t/log/0/00.parquet")).st_mtime_ns // 1_000_000
    assert entries[0].mtime_ms == mtime
    assert entries == [e for e in wh.list("tables/t") if e.path in {x.path for x in entries}]


def test_files_deleted_after_the_scan_are_left_out(wh):
    listing = wh.scan("tables")
    wh.delete_files(["tables/t/a.parquet"])
    assert listing.entries(["tables/t/a.parquet"]) == []
    assert [e.path for e in listing.entries(listing.paths)] == sorted(
        set(listing.paths) - {"tables/t/a.parquet"}, key=listing.paths.index
    )


INSIDE = "ns/tables/t/0a1b"


@pytest.mark.parametrize(
    "rel, resolved",
    [
        ("ns/tables/t/0a1b/log/0/w-1.parquet", "ns/tables/t/0a1b/log/0/w-1.parquet"),
        (
            "ns/tables/t/0a1b/snapshots/x/_bucket=3/part-00000-c000.snappy.parquet",
            "ns/tables/t/0a1b/snapshots/x/_bucket=3/part-00000-c000.snappy.parquet",
        ),
        ("ns/tables/t/0a1b/./log//0/../1/w.parquet", "ns/tables/t/0a1b/log/1/w.parquet"),
    ],
)
def test_contained_resolves_a_path_inside_its_directory(rel, resolved):
    # containment (docs/security.md): a path metadata
    # names is resolved, and kept when it lies inside
    assert contained(rel, INSIDE, "/ns/data/x") == resolved


@pytest.mark.parametrize(
    "rel",
    [
        "ns/tables/t/0a1b/../../../../victim/f.parquet",  # climbs out of the warehouse
        "ns/tables/t/0a1b/../other/f.parquet",  # another table's directory
        "ns/tables/t/0a1b",  # the directory itself, not inside it
        "ns/tables/t/0a1b/..",
        "/tmp/victim/f.parquet",  # absolute
        "/ns/tables/t/0a1b/f.parquet",
        "file:///tmp/victim/f.parquet",  # URIs naming another location
        "s3://other-bucket/ns/tables/t/0a1b/f.parquet",
        "hdfs://nn:8020/ns/tables/t/0a1b/f.parquet",
        "ns/tables/t/0a1b/{a,../../../../../victim}/f.parquet",  # a Hadoop glob that escapes
        "ns/tables/t/0a1b/*.parquet",
        "ns/tables/t/0a1b/a\\..\\..\\f.parquet",
        "ns/tables/t/0a1b/f\x00.parquet",
        "",
        "ns/tables/t/0a1b/../0a1b2/f.parquet",  # a sibling whose name starts alike
    ],
)
def test_contained_refuses_a_path_outside_its_directory_naming_the_znode(rel):
    # containment (docs/security.md): anything else is CorruptMetadataError naming the znode
    with pytest.raises(CorruptMetadataError) as exc_info:
        contained(rel, INSIDE, "/ns/data/x/0/log/00000000000000000000")
    assert exc_info.value.path == "/ns/data/x/0/log/00000000000000000000"
    assert "/ns/data/x/0/log/00000000000000000000" in str(exc_info.value)


@pytest.mark.parametrize("rel", [None, 5, b"ns/tables/t/0a1b/f.parquet", ["ns"]])
def test_contained_refuses_a_path_that_is_not_a_string(rel):
    # containment (docs/security.md): an ill-typed path is corrupt metadata too, not a TypeError
    with pytest.raises(CorruptMetadataError):
        contained(rel, INSIDE, "/ns/dropped/x")


def test_local_deletes_never_follow_a_symbolic_link_out_of_the_warehouse(wh, tmp_path):
    # containment (docs/security.md): a link planted inside
    # the warehouse does not carry a delete outside it
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "f.parquet").write_bytes(b"v")
    (victim / "sub" / "g.parquet").write_bytes(b"v")
    os.symlink(victim, tmp_path / "wh" / "tables" / "t" / "link")
    with pytest.raises(IllegalStateError, match="symbolic link"):
        wh.delete_files(["tables/t/link/f.parquet"])
    with pytest.raises(IllegalStateError, match="symbolic link"):
        wh.delete_dir("tables/t/link/sub")
    with pytest.raises(IllegalStateError, match="symbolic link"):
        wh.delete_dir("tables/t/link")
    assert (victim / "f.parquet").is_file() and (victim / "sub" / "g.parquet").is_file()
    wh.delete_files(["tables/t/a.parquet", "tables/t/log/0/00.parquet"])  # the rest as before
    wh.delete_dir("tables/t/snap")
    assert wh.scan("tables").paths == []  # the link is no directory of the warehouse
    assert (victim / "f.parquet").is_file()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_worker_process_makes_the_scans_of_a_large_tree_and_sees_every_change(wh):
    # R4: the worker (a process of its own, once a scan walked more than worker_dirs
    # directories) lists what the scan in this process lists, and every change after
    root = os.path.join(wh.location, "tables/t")
    here = LocalScan(wh.location, worker_dirs=None)
    small = LocalScan(wh.location, worker_dirs=100)
    scan = LocalScan(wh.location, worker_dirs=3)
    try:
        top = os.path.join(wh.location, "tables")
        assert sorted(small.scan(top)) == sorted(here.scan(top))
        assert small.worker_pid is None  # 7 directories: scanned here
        first = sorted(scan.scan(top))  # walked here: more than 3 directories
        pid = scan.worker_pid
        assert pid is not None and pid != os.getpid() and _alive(pid)
        assert sorted(scan.scan(top)) == first == sorted(here.scan(top))
        assert scan.worker_pid == pid  # answered by the worker
        time.sleep(_SETTLED_NS / 1e9 + 0.2)
        assert sorted(scan.scan(top)) == first
        with open(os.path.join(root, "log/0/01.parquet"), "wb") as f:
            f.write(b"5")
        os.remove(os.path.join(root, "snap/7/_SUCCESS"))
        os.makedirs(os.path.join(root, "empty-dir/8"))
        with open(os.path.join(root, "empty-dir/8/part-0.parquet"), "wb") as f:
            f.write(b"6")
        after = sorted(scan.scan(top))
        assert after == sorted(here.scan(top)) == sorted(e.path for e in wh.list("tables"))
        assert set(after) ^ set(first) == {
            "tables/t/log/0/01.parquet",
            "tables/t/snap/7/_SUCCESS",
            "tables/t/empty-dir/8/part-0.parquet",
        }
        assert sorted(scan.scan(os.path.join(root, "log"))) == [
            "tables/t/log/0/.00.parquet.crc",
            "tables/t/log/0/00.parquet",
            "tables/t/log/0/01.parquet",
        ]
        assert scan.scan(os.path.join(root, "nothing-here")) == []
        assert scan.worker_pid == pid
    finally:
        scan.close()
    assert not _alive(pid)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_scan_goes_on_in_this_process_when_its_worker_dies_and_a_dropped_scan_ends_it(wh):
    # R4: a worker killed between scans loses no listing: the scan is made here instead
    top = os.path.join(wh.location, "tables")
    expected = sorted(e.path for e in wh.list("tables"))
    scan = LocalScan(wh.location, worker_dirs=0)
    scan.scan(top)
    pid = scan.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert sorted(scan.scan(top)) == expected
    assert scan.worker_pid is None
    assert sorted(scan.scan(top)) == expected and scan.worker_pid is None  # not started again
    dropped = LocalScan(wh.location, worker_dirs=0)
    dropped.scan(top)
    pid = dropped.worker_pid
    assert pid is not None and _alive(pid)
    del dropped
    gc.collect()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_worker_of_another_version_is_not_used(wh, monkeypatch):
    # R4: a worker started from an upgraded file (another message version) exits at once;
    # the scan is made here and misses nothing
    import leasekit.dirscan as dirscan

    monkeypatch.setattr(dirscan, "_PROTOCOL", "0")
    top = os.path.join(wh.location, "tables")
    scan = LocalScan(wh.location, worker_dirs=0)
    expected = sorted(e.path for e in wh.list("tables"))
    assert sorted(scan.scan(top)) == expected  # made here; starts the worker
    assert sorted(scan.scan(top)) == expected  # the worker had exited: made here again
    assert scan.worker_pid is None


def test_the_worker_lists_names_no_text_encoding_can_spell_as_this_process_does(wh):
    # R4: a file named with bytes outside UTF-8, or with a newline, comes back from the worker
    # as the scan in this process gives it (hostile names are still files to plan)
    root = os.path.join(os.fsencode(wh.location), b"tables", b"t")
    os.makedirs(os.path.join(root, b"a\nb"))
    for name in (b"bad\xff\xfe.parquet", b"a\nb/x.parquet"):
        with open(os.path.join(root, name), "wb") as f:
            f.write(b"1")
    top = os.path.join(wh.location, "tables")
    scan = LocalScan(wh.location, worker_dirs=0)
    try:
        here = sorted(LocalScan(wh.location, worker_dirs=None).scan(top))
        assert sorted(scan.scan(top)) == here  # made here; starts the worker
        assert sorted(scan.scan(top)) == here and scan.worker_pid is not None  # the worker's
        assert {"tables/t/bad\udcff\udcfe.parquet", "tables/t/a\nb/x.parquet"} <= set(here)
    finally:
        scan.close()
