"""``leasekit settings show|set|reset`` (docs/cli.md; docs/security.md: the repair of corrupt
settings) and the checks read-only commands make before connecting (docs/cli.md): run
in-process against the real ZooKeeper fixture."""

from __future__ import annotations

import logging
import os
import re
import shlex
from datetime import timedelta

import pytest
from helpers import grow
from helpers import run_cli as run
from helpers import run_cli_json as run_json

import leasekit as lk
from leasekit import embedded, testing
from tests.connection.test_connection import GARBAGE, settings_warnings, write_raw


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("LEASEKIT_ZOOKEEPER", raising=False)
    monkeypatch.delenv("LEASEKIT_WAREHOUSE", raising=False)


# -- settings --------------------------------------------------------------------------------


def test_settings_show_set_and_reset(capsys, target, conn) -> None:
    # docs/cli.md, docs/configuration.md
    ctx = testing.context(conn)
    code, out, err = run(capsys, *target, "settings", "show")
    assert code == 0, err
    assert [line.split() for line in out.splitlines()] == [
        ["SETTING", "VALUE", "SOURCE"],
        ["lease.max-duration", "7d", "default"],
        ["lease.expiry-grace", "30s", "default"],
        ["orphan.min-age", "1h", "default"],
        ["monitor.interval", "30s", "default"],
        ["monitor.retention", "7d", "default"],
        ["monitor.rate-window", "5m", "default"],
        ["monitor.risk-threshold", "1h", "default"],
    ]

    code, out, err = run(
        capsys, *target, "settings", "set", "lease.max-duration=2d", "orphan.min-age=90"
    )
    assert code == 0, err
    assert out.startswith(f"updated the settings of namespace {conn.namespace}")
    assert conn.settings()["lease.max-duration"] == timedelta(days=2)
    data = run_json(capsys, *target, "settings", "show")
    assert data["corrupt"] is None and data["path"] == ctx.paths.settings
    assert data["settings"] == [
        # JSON: durations in seconds
        {"setting": "lease.max-duration", "value": 2 * 86400, "source": "set"},
        {"setting": "lease.expiry-grace", "value": 30, "source": "default"},
        {"setting": "orphan.min-age", "value": 90, "source": "set"},
        {"setting": "monitor.interval", "value": 30, "source": "default"},
        {"setting": "monitor.retention", "value": 7 * 86400, "source": "default"},
        {"setting": "monitor.rate-window", "value": 300, "source": "default"},
        {"setting": "monitor.risk-threshold", "value": 3600, "source": "default"},
    ]

    data = run_json(capsys, *target, "settings", "set", "--replace", "lease.expiry-grace=5s")
    sources = [r["source"] for r in data["settings"]]
    assert sources == ["default", "set", "default"] + ["default"] * 4
    assert conn.settings()["lease.expiry-grace"] == timedelta(seconds=5)
    assert conn.settings()["lease.max-duration"] == timedelta(days=7)

    code, out, err = run(capsys, *target, "settings", "reset")
    assert code == 0, err
    assert out.startswith(
        f"reset the settings of namespace {conn.namespace}: every setting has its default"
    )
    assert ctx.stored_settings()[0] == {}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope=1"], "unknown setting 'nope'"),
        (["lease.max-duration=0"], "lease.max-duration must be greater than 0"),
        (["lease.max-duration=999999999999d"], "out of range"),
        (["orphan.min-age=1h", "orphan.min-age=2h"], "setting 'orphan.min-age' is given twice"),
    ],
)
def test_settings_set_refuses_bad_values(capsys, target, conn, argv, message) -> None:
    # unknown keys or bad values -> one error line, nothing written
    ctx = testing.context(conn)
    before = ctx.store.get(ctx.paths.settings)
    code, out, err = run(capsys, *target, "settings", "set", *argv)
    assert (code, out) == (2, "")
    assert err.startswith("leasekit: error: ") and message in err and len(err.splitlines()) == 1
    assert ctx.store.get(ctx.paths.settings) == before


def test_settings_reset_repairs_corrupt_settings(capsys, target, conn, zookeeper, caplog) -> None:
    # show says the stored value is corrupt; reset repairs it; connect is clean after
    ctx = testing.context(conn)
    conn.update_settings({"orphan.min-age": "2h"})
    write_raw(zookeeper, ctx.paths.settings, GARBAGE)
    code, out, err = run(capsys, *target, "settings", "show")
    assert code == 2 and "Traceback" not in out + err
    assert f"namespace settings at {ctx.paths.settings} are corrupt" in out
    assert "leasekit settings reset" in out
    assert ["orphan.min-age", "1h", "default"] in [line.split() for line in out.splitlines()]
    data = json_of(capsys, *target, "settings", "show")
    assert ctx.paths.settings in data["corrupt"]

    code, out, err = run(capsys, *target, "retention", "plan")
    assert code == 2 and "corrupt" in err and ctx.paths.settings in err

    code, out, err = run(capsys, *target, "settings", "reset")
    assert code == 0, err
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="leasekit"):
        with lk.connect(*target[1:4:2], namespace=conn.namespace) as again:
            assert again.settings()["orphan.min-age"] == timedelta(hours=1)
    assert settings_warnings(caplog, ctx.paths.settings) == []
    assert run(capsys, *target, "retention", "plan")[0] == 0


def test_settings_set_replace_repairs_corrupt_settings(capsys, target, conn, zookeeper) -> None:
    # set without --replace reads the old value and refuses; --replace repairs
    write_raw(zookeeper, testing.context(conn).paths.settings, GARBAGE)
    code, _, err = run(capsys, *target, "settings", "set", "orphan.min-age=2h")
    assert code == 2 and "settings reset" in err
    code, _, err = run(capsys, *target, "settings", "set", "--replace", "orphan.min-age=2h")
    assert code == 0, err
    assert conn.settings()["orphan.min-age"] == timedelta(hours=2)


def json_of(capsys, *argv):
    import json

    code, out, err = run(capsys, *argv, "--json")
    assert "Traceback" not in err
    return json.loads(out)


# -- read-only commands and a warehouse that does not exist ------------------------------------

READ_ONLY = [
    ["table", "list"],
    ["table", "describe", "t"],
    ["lease", "list"],
    ["consumer", "list"],
    ["consumer", "describe", "g"],
    ["consumer", "describe", "g", "--members"],
    ["consumer", "reset-offsets", "g", "--to-earliest"],
    ["retention", "plan"],
    ["retention", "run", "--dry-run"],
    ["settings", "show"],
]


@pytest.mark.parametrize("argv", READ_ONLY, ids=" ".join)
def test_read_only_commands_refuse_a_missing_warehouse(
    capsys, zookeeper, tmp_path, no_env, argv
) -> None:
    # a command that only reads never creates a warehouse: it says so (with a ZooKeeper
    # address given, so nothing would be started either way)
    missing = tmp_path / "nonexistent" / "dir"
    code, out, err = run(capsys, "--zookeeper", zookeeper, "--warehouse", str(missing), *argv)
    assert (code, out) == (2, "")
    assert err == (
        f"leasekit: error: no warehouse at {missing}: nothing to read there (check "
        "--warehouse or $LEASEKIT_WAREHOUSE; `leasekit table create` makes a new one)\n"
    )
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("argv", [["table", "list"], ["zookeeper", "status"]], ids=" ".join)
def test_a_typo_in_the_warehouse_starts_no_server(capsys, tmp_path, no_env, argv) -> None:
    # without --zookeeper the embedded server would be started: it is not
    missing = tmp_path / "typo"
    try:
        code, out, err = run(capsys, "--warehouse", str(missing), *argv)
        assert code != 0 and "Traceback" not in err
        assert f"no warehouse at {missing}" in out + err
        assert not missing.exists()
    finally:
        if missing.exists():
            embedded.stop(missing / "_zookeeper")


STOPPED_READS = [
    ["table", "list"],
    ["table", "describe", "t"],
    ["lease", "list"],
    ["lease", "inventory"],
    ["consumer", "list"],
    ["consumer", "describe", "g"],
    ["consumer", "describe", "g", "--members"],
    ["consumer", "reset-offsets", "g", "--to-earliest"],  # a dry run
    ["consumer", "overview"],
    ["consumer", "history", "g"],
    ["retention", "plan"],
    ["retention", "run", "--dry-run"],
    ["settings", "show"],
]


def _servers_of(data_dir) -> list[int]:
    """Ids of the processes whose command line names ``data_dir`` (a ZooKeeper serving it)."""
    needle = os.fsencode(str(data_dir.resolve()))
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _running(data_dir) -> bool:
    status = embedded.status(data_dir)
    return status is not None and status.running


def _table_then_stopped(capsys, wh) -> None:
    """A warehouse holding table ``t`` whose embedded ZooKeeper was then stopped."""
    code, _, err = run(capsys, "--warehouse", str(wh), "table", "create", "t",
                       "--schema", "id BIGINT", "--primary-key", "id")  # fmt: skip
    assert code == 0, err
    assert run(capsys, "--warehouse", str(wh), "zookeeper", "stop")[0] == 0


def test_read_only_commands_start_no_stopped_embedded_server(capsys, tmp_path, no_env) -> None:
    # on a warehouse that exists but whose embedded ZooKeeper is stopped, a command that
    # only reads starts no server: it says the server is stopped and how to start it, exit 2
    wh = tmp_path / "wh"
    data_dir = wh / "_zookeeper"
    try:
        _table_then_stopped(capsys, wh)
        results = {}
        for argv in STOPPED_READS:
            code, out, err = run(capsys, "--warehouse", str(wh), *argv)
            started = _running(data_dir) or bool(_servers_of(data_dir))
            results[" ".join(argv)] = (code, out, err.strip(), started)
            embedded.stop(data_dir)  # a server the command started must not stay for the next
        message = (
            f"leasekit: error: the embedded ZooKeeper of warehouse {wh} is stopped; a command "
            f"that only reads does not start it: start it with `leasekit --warehouse {wh} "
            "zookeeper start`"
        )
        assert results == {k: (2, "", message, False) for k in results}
        code, out, _ = run(capsys, "--warehouse", str(wh), "zookeeper", "status")
        assert code == 3 and "not running" in out
        assert not _running(data_dir) and _servers_of(data_dir) == []
        # a command that writes still starts it, as before
        code, _, err = run(capsys, "--warehouse", str(wh), "lease", "acquire", "L", "--table", "t")
        assert code == 0, err
        assert _running(data_dir)
        assert run(capsys, "--warehouse", str(wh), "table", "list")[0] == 0
    finally:
        embedded.stop(data_dir)
    assert _servers_of(data_dir) == []


def test_the_start_command_a_stopped_server_names_starts_it(
    capsys, tmp_path, no_env, monkeypatch
) -> None:
    # the command the error names, run as written, starts the server of the warehouse the
    # read named (not the one of ./leasekit-warehouse), and the read then works
    monkeypatch.chdir(tmp_path)
    wh = tmp_path / "my warehouse"
    data_dir = wh / "_zookeeper"
    try:
        _table_then_stopped(capsys, wh)
        code, _, err = run(capsys, "--warehouse", str(wh), "table", "list")
        assert code == 2
        command = re.search(r"start it with `(.*)`$", err.strip()).group(1)
        assert command == f"leasekit --warehouse '{wh}' zookeeper start"
        argv = shlex.split(command)
        assert argv[0] == "leasekit"
        assert run(capsys, *argv[1:])[0] == 0
        assert _running(data_dir) and not (tmp_path / "leasekit-warehouse").exists()
        code, out, err = run(capsys, "--warehouse", str(wh), "table", "list")
        assert code == 0 and out.splitlines()[1].split()[0] == "t", err
        # with the warehouse from $LEASEKIT_WAREHOUSE, the plain command does it
        embedded.stop(data_dir)
        monkeypatch.setenv("LEASEKIT_WAREHOUSE", str(wh))
        code, _, err = run(capsys, "table", "list")
        assert code == 2 and err.strip().endswith("start it with `leasekit zookeeper start`")
    finally:
        embedded.stop(data_dir)


@pytest.mark.parametrize(
    "argv",
    [
        ["lease", "acquire", "x", "--table", "t", "--duration", "999999999999d"],
        ["lease", "renew", "x", "--duration", "1e300"],
        ["janitor", "--interval", "999999999999d"],
    ],
    ids=" ".join,
)
def test_a_bad_duration_is_refused_before_a_writer_connects(capsys, tmp_path, no_env, argv) -> None:
    # argument errors come first: no warehouse created, no server started for them
    missing = tmp_path / "typo"
    try:
        code, out, err = run(capsys, "--warehouse", str(missing), *argv)
        assert (code, out) == (2, "") and "out of range" in err and "Traceback" not in err
        assert not missing.exists()
    finally:
        if missing.exists():
            embedded.stop(missing / "_zookeeper")


def test_the_default_warehouse_is_checked_too(capsys, tmp_path, no_env, monkeypatch) -> None:
    # with no --warehouse: ./leasekit-warehouse
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "--zookeeper", "127.0.0.1:1", "lease", "list")
    assert code == 2 and f"no warehouse at {tmp_path / 'leasekit-warehouse'}" in err
    assert os.listdir(tmp_path) == []


def test_write_commands_still_create_the_warehouse(
    capsys, zookeeper, tmp_path, namespace, no_env
) -> None:
    # table create makes a new warehouse
    fresh = tmp_path / "fresh"
    code, _, err = run(
        capsys,
        "--zookeeper",
        zookeeper,
        "--warehouse",
        str(fresh),
        "--namespace",
        namespace,
        "table",
        "create",
        "t",
        "--schema",
        "id BIGINT",
        "--primary-key",
        "id",
    )
    assert code == 0, err
    assert fresh.is_dir()
    assert (
        run(
            capsys,
            "--zookeeper",
            zookeeper,
            "--warehouse",
            str(fresh),
            "--namespace",
            namespace,
            "table",
            "list",
        )[0]
        == 0
    )


# -- describe of an unknown group, release of buckets not pinned -------------------------------


def test_describe_of_an_unknown_group_says_so(capsys, target, conn) -> None:
    # a group with neither offsets nor members does not exist
    for extra in ([], ["--members"]):
        code, out, err = run(capsys, *target, "consumer", "describe", "nosuch", *extra)
        assert (code, out) == (2, "")
        assert err.startswith("leasekit: error: consumer group 'nosuch' does not exist")
    code, _, err = run(capsys, *target, "consumer", "describe", "a/b")
    assert code == 2 and "invalid group id" in err


def test_release_names_the_buckets_that_were_not_pinned(capsys, target, conn) -> None:
    # L9: release stays idempotent, and says which buckets the lease did not pin
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=4)
    grow(table, 1)
    run_json(capsys, *target, "lease", "acquire", "rel", "--table", "t")
    code, out, err = run(
        capsys,
        *target,
        "lease",
        "release",
        "rel",
        "--table",
        "t",
        "--bucket",
        "1",
        "--bucket",
        "99",
    )
    assert code == 0, err
    assert out.splitlines()[0] == (
        "released bucket(s) 1 of t from lease rel; bucket(s) 99 of t "
        "were not pinned by lease rel; it still pins 3 bucket(s):"
    )
    data = run_json(capsys, *target, "lease", "release", "rel", "--table", "t", "--bucket", "1")
    assert data["released"] == [] and data["not_pinned"] == [{"table": "t", "bucket": 1}]
    assert len(data["pins"]) == 3
