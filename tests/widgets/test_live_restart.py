"""Panels across a ZooKeeper outage (docs/cli.md, docs/panels.md), on an embedded
server of the test's own warehouse, stopped and started with ``leasekit zookeeper stop|start``
as a user would: the panel says within one refresh interval that ZooKeeper is unreachable and
what it shows is stale, an action fails at once with a readable message, the server comes back
on the same port, and the open panel is fresh and live again without any call from the test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from leasekit.widgets import LeasePanel

import leasekit as lk
from leasekit import embedded
from leasekit.live import STALE_AFTER

BACK_WITHIN = 40.0
"""Seconds for the panel to be fresh after the start: kazoo's reconnect back-off (1 s), plus
ZOOKEEPER-5051 (a client connecting while the server starts may wait a session timeout)."""


def wait_until(what, condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def zookeeper_cli(command, warehouse):
    done = subprocess.run(
        [sys.executable, "-m", "leasekit.cli", "zookeeper", command, "--warehouse", warehouse],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "LEASEKIT_ZOOKEEPER"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def own_warehouse(tmp_path, monkeypatch):
    """A warehouse whose embedded ZooKeeper only this test uses (never the session's)."""
    monkeypatch.delenv("LEASEKIT_ZOOKEEPER", raising=False)
    path = str(tmp_path / "warehouse")
    os.mkdir(path)
    yield path
    embedded.stop(os.path.join(path, "_zookeeper"))


def test_panel_shows_an_outage_fails_actions_fast_and_recovers_on_the_same_port(own_warehouse):
    conn = lk.connect(warehouse=own_warehouse, namespace="outage")
    panel = LeasePanel(conn)
    try:
        conn.acquire_kv_snapshot_lease("before", {}, "1h")
        panel.refresh()
        assert panel.lease.options == ("before",) and panel.connected and not panel.stale
        address = conn.zookeeper

        zookeeper_cli("stop", own_warehouse)
        # within one refresh interval (the panel hears the session go at once)
        wait_until("the panel to say so", lambda: not panel.connected and panel.stale, STALE_AFTER)
        assert "ZooKeeper unreachable" in panel.status.value and "stale" in panel.status.value
        shown_at = panel.refreshed_at
        panel.new_id.value = "during"
        started = time.monotonic()
        panel.create.click()  # fails at once, readably, and changes nothing
        assert time.monotonic() - started < 1.0
        assert "unreachable" in panel.message.value and "create failed" in panel.message.value
        assert not panel.create.disabled  # not left busy
        said = panel.status.value
        time.sleep(3)  # the panel keeps trying on its own, and keeps saying it is stale
        assert panel.stale and panel.refreshed_at == shown_at and "unreachable" in panel.last_error
        assert panel.status.value != said  # the age of what is shown moved on

        zookeeper_cli("start", own_warehouse)
        assert embedded.status(os.path.join(own_warehouse, "_zookeeper")).address == address
        wait_until(
            "the panel to be fresh again",
            lambda: panel.connected and not panel.stale and panel.refreshed_at > shown_at,
            BACK_WITHIN,
        )
        assert "ZooKeeper connected" in panel.status.value and panel.last_error == ""
        conn.acquire_kv_snapshot_lease("after", {}, "1h")  # the connection carries on
        wait_until("the panel to follow changes again", lambda: "after" in panel.lease.options)
        assert panel.refreshed_at <= datetime.now(timezone.utc)
    finally:
        panel.close()
        conn.close()


def test_embedded_server_keeps_its_port_across_a_stop_unless_it_is_taken(tmp_path):
    root = tmp_path / "zk"
    address = embedded.ensure_running(root)
    try:
        assert embedded.stop(root)
        assert embedded.ensure_running(root) == address  # docs/cli.md: clients reconnect
        assert embedded.stop(root)
        port = int(address.rsplit(":", 1)[1])
        with socket.socket() as taken:  # someone else took it meanwhile: another port
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
            taken.bind(("127.0.0.1", port))
            taken.listen()
            assert embedded.ensure_running(root) != address
    finally:
        embedded.stop(root)


def test_an_action_disables_the_buttons_and_says_it_runs(conn):
    # an action shows a busy sign and takes no second click while it runs, then gives them back
    panel = LeasePanel(conn, auto_refresh=False)
    panel.refresh()
    seen = {}

    def action():
        seen["create"], seen["message"] = panel.create.disabled, panel.message.value
        return "ok"

    assert not panel.create.disabled and panel.release.disabled
    assert panel.act("probe", action) == "ok"
    assert seen["create"] and "probe: running" in seen["message"]
    assert not panel.create.disabled and panel.release.disabled  # each as it was
    assert "probe: done" in panel.message.value
    panel.close()
