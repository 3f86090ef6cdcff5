"""Connecting, the ZooKeeper clock, namespace settings, ACLs and corrupt metadata."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import msgpack
import pytest

import leasekit as lk
from leasekit import testing
from leasekit.zk import SetData


def test_server_time_is_zookeeper_clock(conn):
    t = conn.server_time()
    assert t.tzinfo is not None
    assert abs(t - datetime.now(timezone.utc)) < timedelta(seconds=5)
    assert conn.server_time() >= t


def test_settings_defaults_and_updates_are_shared(conn, zookeeper, warehouse, namespace):
    assert conn.settings() == {
        "lease.max-duration": timedelta(days=7),
        "lease.expiry-grace": timedelta(seconds=30),
        "orphan.min-age": timedelta(hours=1),
        "monitor.interval": timedelta(seconds=30),
        "monitor.retention": timedelta(days=7),
        "monitor.rate-window": timedelta(minutes=5),
        "monitor.risk-threshold": timedelta(hours=1),
    }
    conn.update_settings({"lease.max-duration": "2h", "orphan.min-age": 60})
    with lk.connect(zookeeper, warehouse, namespace=namespace) as other:
        assert other.settings()["lease.max-duration"] == timedelta(hours=2)
        assert other.settings()["orphan.min-age"] == timedelta(minutes=1)


@pytest.mark.parametrize(
    "mapping",
    [
        {"nope": 1},
        {"lease.max-duration": 0},
        {"lease.max-duration": "forever"},
        {"lease.expiry-grace": -1},
        "lease.max-duration=1h",
    ],
)
def test_bad_settings(conn, mapping):
    before = conn.settings()
    with pytest.raises(lk.InvalidArgumentError):
        conn.update_settings(mapping)
    assert conn.settings() == before


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(namespace="a/b"),
        dict(namespace=""),
        dict(timeout="soon"),
        dict(timeout=0),
        dict(auth=("user",)),
        dict(auth="user:pw"),
        dict(zookeeper=""),
    ],
)
def test_bad_connect_arguments(warehouse, kwargs):
    with pytest.raises(lk.InvalidArgumentError):
        lk.connect(warehouse=warehouse, **kwargs)


def test_unreachable_zookeeper_is_a_clear_retriable_error(warehouse):
    started = time.monotonic()
    with pytest.raises(lk.ZooKeeperUnavailableError) as info:
        lk.connect("127.0.0.1:1", warehouse, timeout="2s")
    assert info.value.retriable
    assert time.monotonic() - started < 15


def test_connect_without_address_starts_and_reuses_embedded_server(tmp_path):
    wh = tmp_path / "wh"
    script = (
        f"import leasekit as lk; c = lk.connect(warehouse={str(wh)!r}); "
        "print(c.zookeeper); c.close()"
    )
    try:
        first = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout
        second = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout
        assert first.strip() == second.strip()
        assert first.startswith("127.0.0.1:")
        assert (wh / "_zookeeper").is_dir()
    finally:
        from leasekit import embedded

        embedded.stop(wh / "_zookeeper")


def test_corrupt_table_metadata_names_the_path(conn):
    ctx = testing.context(conn)
    table = conn.create_table("t", "id BIGINT", "id")
    path = ctx.paths.table("t")
    ctx.store.commit([SetData(path, b"\xc1garbage")])
    with pytest.raises(lk.CorruptMetadataError) as info:
        conn.table("t")
    assert info.value.path == path
    assert path in str(info.value)
    ctx.store.commit([SetData(path, b"\x81\xa1v\x63")])  # {"v": 99}: an unknown format version
    with pytest.raises(lk.CorruptMetadataError):
        conn.table("t")
    del table


def test_acl_protects_writes(zookeeper, warehouse, namespace):
    with lk.connect(zookeeper, warehouse, namespace=namespace, auth=("analyst", "s3cret")) as owner:
        owner.create_table("t", "id BIGINT", "id")
        with lk.connect(
            zookeeper, warehouse, namespace=namespace, auth=("analyst", "s3cret")
        ) as same:
            same.table("t").append([{"id": 1}])
        with lk.connect(
            zookeeper, warehouse, namespace=namespace
        ) as stranger:  # docs/security.md: connecting works
            assert stranger.tables() == ["t"]
            with pytest.raises(lk.PermissionDeniedError):  # ... the write is refused
                stranger.create_table("u", "id BIGINT", "id")
            with pytest.raises(lk.PermissionDeniedError):
                stranger.table("t").append([{"id": 2}])
        assert owner.tables() == ["t"]
        assert sum(owner.table("t").end_offsets().values()) == 1


def test_closed_connection_raises_typed_error(zookeeper, warehouse, namespace):
    conn = lk.connect(zookeeper, warehouse, namespace=namespace)
    conn.close()
    with pytest.raises(lk.LeasekitError):
        conn.tables()


def test_import_is_light():
    code = (
        "import sys, time; t = time.perf_counter(); import leasekit; d = time.perf_counter() - t; "
        "print(d, *[m in sys.modules for m in ('pyspark', 'kazoo', 'ipywidgets', 'pandas')])"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        for _ in range(3)
    ]
    assert sorted(float(r[0]) for r in runs)[1] < 0.5
    assert all(r[1:4] == ["False", "False", "False"] for r in runs)


def test_unreadable_settings_raise_permission_denied(zookeeper, warehouse, namespace):
    # docs/concepts.md: connect() and the settings watch
    # it sets up translate ZooKeeper's NoAuthError
    from kazoo.security import make_digest_acl

    with lk.connect(zookeeper, warehouse, namespace=namespace) as conn:
        ctx = testing.context(conn)
        ctx.store.client.set_acls(
            ctx.paths.settings, [make_digest_acl("analyst", "s3cret", all=True)]
        )
        with pytest.raises(lk.PermissionDeniedError, match="settings"):
            ctx.watch_settings()  # the watch's first read, as connect() makes it
        with pytest.raises(lk.PermissionDeniedError, match="settings"):
            lk.connect(zookeeper, warehouse, namespace=namespace)
        with lk.connect(
            zookeeper, warehouse, namespace=namespace, auth=("analyst", "s3cret")
        ) as allowed:
            assert testing.context(allowed).cached_settings() == allowed.settings()


def test_clock_of_a_namespace_from_before_is_opened_to_readers_by_a_writer_with_auth(
    zookeeper, warehouse, namespace
):
    # docs/security.md: readers read the clock by writing its scratch znode; a connection with
    # auth makes that znode world READ|WRITE (only) on a namespace made by an older leasekit
    from kazoo.exceptions import NoAuthError
    from kazoo.security import Permissions, make_acl, make_digest_acl

    auth = ("analyst", "s3cret")
    with lk.connect(zookeeper, warehouse, namespace=namespace, auth=auth) as writer:
        ctx = testing.context(writer)
        clock = ctx.paths.clock
        ctx.store.client.set_acls(
            clock, [make_digest_acl(*auth, all=True), make_acl("world", "anyone", read=True)]
        )
        marker = f"{ctx.paths.root}/access"  # no namespace-closed marker back then
        if ctx.store.client.exists(marker):
            ctx.store.client.delete(marker)
    with lk.connect(zookeeper, warehouse, namespace=namespace) as reader:
        ctx = testing.context(reader)
        with pytest.raises(lk.PermissionDeniedError):
            reader.server_time()
        lk.connect(zookeeper, warehouse, namespace=namespace, auth=auth).close()
        assert abs(reader.server_time() - datetime.now(timezone.utc)) < timedelta(seconds=5)
        acls, _ = ctx.store.client.get_acls(clock)
        world = [a.perms for a in acls if a.id.scheme == "world"]
        assert world == [Permissions.READ | Permissions.WRITE]
        with pytest.raises(NoAuthError):  # the clock takes no children and stays
            ctx.store.client.create(f"{clock}/x")
        with pytest.raises(NoAuthError):
            ctx.store.client.delete(clock)


# -- corrupt settings: connect works, retention refuses, repair (docs/security.md) ---------------

GARBAGE = b"\xc1garbage"


def write_raw(zookeeper, path, data):
    """Write ``data`` at ``path`` with a plain kazoo client, as a broken tool would."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper)
    client.start(timeout=10)
    try:
        client.set(path, data)
    finally:
        client.stop()
        client.close()


def settings_warnings(caplog, path):
    return [r for r in caplog.records if r.levelno == logging.WARNING and path in r.getMessage()]


@pytest.mark.parametrize(
    "data",
    [
        GARBAGE,
        msgpack.packb({"v": 1, "values": {"orphan.min-age": "x"}}),
        msgpack.packb({"v": 1, "values": {"lease.expiry-grace": 2**64 - 1}}),
    ],
    ids=["garbage", "ill-typed", "oversized"],
)
def test_corrupt_settings_connect_with_a_warning_and_retention_refuses(
    zookeeper, warehouse, namespace, caplog, data
):
    # docs/security.md: a corrupt settings znode locks nobody out; retention fails safe meanwhile
    with lk.connect(zookeeper, warehouse, namespace=namespace) as first:
        first.update_settings({"orphan.min-age": "2h"})
        path = testing.context(first).paths.settings
    write_raw(zookeeper, path, data)
    with caplog.at_level(logging.WARNING, logger="leasekit"):
        conn = lk.connect(zookeeper, warehouse, namespace=namespace)
    with conn:
        warned = settings_warnings(caplog, path)
        assert warned and "leasekit settings reset" in warned[0].getMessage()
        assert "replace=True" in warned[0].getMessage()
        for call in (
            conn.settings,
            conn.retention_plan,
            conn.run_retention,
            conn.expire_leases,
            lambda: conn.run_retention(dry_run=True),
            lambda: conn.update_settings({"lease.expiry-grace": "1s"}),
        ):
            with pytest.raises(lk.CorruptMetadataError) as info:
                call()
            assert info.value.path == path and path in str(info.value)
        conn.lease("q3", "1h")  # leases use the defaults meanwhile
        assert testing.context(conn).store.get(path).data == data  # nothing written by the refusals


class _SlowOffMainThread(logging.Handler):
    """Makes logging from any thread but the main one slow: the window in which a warning is
    decided on but not yet logged grows from microseconds to 0.3 s."""

    def emit(self, record):
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.3)


def test_the_corrupt_settings_warning_is_out_when_connect_returns(
    zookeeper, warehouse, namespace, caplog
):
    # docs/security.md: connect's first read and its settings watch (on the watch thread) both see
    # the corrupt value; whichever logs the warning, it has been logged by the time connect returns
    with lk.connect(zookeeper, warehouse, namespace=namespace) as first:
        first.update_settings({"orphan.min-age": "2h"})
        path = testing.context(first).paths.settings
    slow = _SlowOffMainThread()
    logging.getLogger("leasekit").addHandler(slow)
    try:
        for attempt in range(4):
            write_raw(zookeeper, path, GARBAGE + bytes([attempt]))  # a new version each time
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="leasekit"):
                conn = lk.connect(zookeeper, warehouse, namespace=namespace)
                warned = settings_warnings(caplog, path)
            conn.close()
            assert len(warned) == 1, f"attempt {attempt}: {len(warned)} warnings at return"
    finally:
        logging.getLogger("leasekit").removeHandler(slow)


def test_replace_repairs_corrupt_settings(zookeeper, warehouse, namespace, caplog):
    # docs/security.md: update_settings(mapping, replace=True) does not read the old value
    with lk.connect(zookeeper, warehouse, namespace=namespace) as conn:
        ctx = testing.context(conn)
        conn.update_settings({"lease.expiry-grace": "5s"})
        write_raw(zookeeper, ctx.paths.settings, GARBAGE)
        with pytest.raises(lk.InvalidArgumentError):
            conn.update_settings({"orphan.min-age": "soon"}, replace=True)
        with pytest.raises(lk.InvalidTypeError):
            conn.update_settings({}, replace="yes")
        assert ctx.store.get(ctx.paths.settings).data == GARBAGE
        new = conn.update_settings({"orphan.min-age": "2h"}, replace=True)
        assert new == {
            "lease.max-duration": timedelta(days=7),
            "lease.expiry-grace": timedelta(seconds=30),
            "orphan.min-age": timedelta(hours=2),
            "monitor.interval": timedelta(seconds=30),
            "monitor.retention": timedelta(days=7),
            "monitor.rate-window": timedelta(minutes=5),
            "monitor.risk-threshold": timedelta(hours=1),
        }
        assert conn.settings() == new
        conn.retention_plan()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="leasekit"):
        with lk.connect(zookeeper, warehouse, namespace=namespace) as again:
            assert again.settings() == new
            assert again.update_settings({}, replace=True)["orphan.min-age"] == timedelta(hours=1)
    assert settings_warnings(caplog, f"/{namespace}/settings") == []


def test_janitor_skips_its_passes_while_settings_are_corrupt(conn, zookeeper, caplog):
    # docs/security.md: the janitor logs and skips the pass (it never falls back to defaults)
    ctx = testing.context(conn)
    import threading

    from leasekit import janitor

    write_raw(zookeeper, ctx.paths.settings, GARBAGE)
    stop = threading.Event()
    thread = threading.Thread(target=janitor.run, args=(conn, "0.2s", stop), daemon=True)
    with caplog.at_level(logging.WARNING, logger="leasekit"):
        thread.start()
        deadline = time.monotonic() + 20
        while not any(
            "janitor pass skipped" in r.getMessage()
            for r in settings_warnings(caplog, ctx.paths.settings)
        ):
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.05)
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
