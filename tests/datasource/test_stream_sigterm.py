"""A stream's member leaves its group at once however Spark ends the reader's process (D3):
SIGTERM and the socket's close in either order, SIGTERM alone, SIGTERM mid-call. The reader
runs in a process of its own, driven as PySpark's streaming source runner drives it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import wait_for

from leasekit.embedded.process import pid_alive

RUNNER = Path(__file__).resolve().parents[1] / "stream_runner.py"
LEFT_WITHIN = 3.0
"""Seconds a stopped reader's member may take to leave: far below its 10 s session."""


@pytest.fixture
def orders(conn):
    return conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)


def joined_reader(zookeeper, warehouse, namespace, *flags: str) -> subprocess.Popen:
    args = [sys.executable, str(RUNNER), zookeeper, warehouse, namespace, "orders", "etl"]
    proc = subprocess.Popen([*args, *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.stdin.write(b"j")
    proc.stdin.flush()
    assert proc.stdout.readline() == b"joined\n"
    return proc


def seconds_to_leave(conn, proc: subprocess.Popen) -> float:
    began = time.monotonic()
    try:
        wait_for(lambda: not conn.group_members("etl"), timeout=30, what="the member to leave")
        return time.monotonic() - began
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_between_the_closed_socket_and_stop_still_leaves(
    conn, orders, zookeeper, warehouse, namespace
):
    # D3: Spark closes the runner's socket and sends SIGTERM at once; a signal landing after
    # the runner saw the end of its input but before it called stop must not cut the leave
    for _ in range(3):
        proc = joined_reader(zookeeper, warehouse, namespace, "--kill-before-stop")
        proc.stdin.close()
        assert seconds_to_leave(conn, proc) < LEFT_WITHIN


def test_sigterm_without_a_closed_socket_leaves_and_ends_the_process(
    conn, orders, zookeeper, warehouse, namespace
):
    # D3: a session that stops signals its readers without closing their sockets: the member
    # still leaves at once, and the process ends although its input stays open
    proc = joined_reader(zookeeper, warehouse, namespace)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=15)  # ended: no TimeoutExpired
    assert seconds_to_leave(conn, proc) < LEFT_WITHIN
    proc.stdin.close()


def test_sigterm_during_calls_leaves_at_once(conn, orders, zookeeper, warehouse, namespace):
    # D3: stopped while it answers a queue of latestOffset calls (each a commit and a poll)
    for delay in (0.0, 0.05, 0.2):
        proc = joined_reader(zookeeper, warehouse, namespace)
        proc.stdin.write(b"x" * 100)
        proc.stdin.flush()
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        proc.stdin.close()
        assert seconds_to_leave(conn, proc) < LEFT_WITHIN


def test_sigterm_ends_the_process_even_when_leaving_hangs(
    conn, orders, zookeeper, warehouse, namespace
):
    # D3: a stop that cannot finish (its ZooKeeper gone, say) does not keep the reader's
    # process alive: it ends within Termination.WAIT + GRACE (11 s) of the signal
    proc = joined_reader(zookeeper, warehouse, namespace, "--hang-on-leave")
    began = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.stdin.close()
    assert time.monotonic() - began < 20


def test_a_closed_input_ends_the_process_even_when_leaving_hangs(
    conn, orders, zookeeper, warehouse, namespace
):
    # D3: the end of input without a signal (Spark's JVM gone) while ZooKeeper is unreachable:
    # the leave waits for ZooKeeper without end, the process still ends within
    # Termination.WAIT + GRACE (11 s) of its stop
    proc = joined_reader(zookeeper, warehouse, namespace, "--hang-on-leave")
    began = time.monotonic()
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert time.monotonic() - began < 20


_LAUNCHER = (
    "import subprocess, sys, time\n"
    "reader = subprocess.Popen(sys.argv[1:])\n"
    "print(reader.pid, flush=True)\n"
    "time.sleep(3600)\n"
)


@pytest.mark.parametrize("flags", [(), ("--hang-on-leave",)], ids=["leaves", "leave-hangs"])
def test_a_reader_whose_parent_died_leaves_and_ends(
    conn, orders, zookeeper, warehouse, namespace, flags
):
    # D3: Spark's JVM killed outright sends no SIGTERM, and the reader's input may stay open
    # (here the test holds it): once its parent is gone the member leaves at once and the
    # process ends, within Termination.WAIT + GRACE (11 s) even when the leave hangs
    args = [sys.executable, str(RUNNER), zookeeper, warehouse, namespace, "orders", "etl"]
    launcher = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, *args, *flags],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    pid = int(launcher.stdout.readline())
    try:
        launcher.stdin.write(b"j")
        launcher.stdin.flush()
        assert launcher.stdout.readline() == b"joined\n"
        launcher.kill()  # the reader's parent gone, as a JVM killed with SIGKILL
        launcher.wait()
        began = time.monotonic()
        if not flags:
            wait_for(lambda: not conn.group_members("etl"), timeout=30, what="the leave")
            assert time.monotonic() - began < LEFT_WITHIN
        wait_for(lambda: not pid_alive(pid), timeout=30, what="the reader's process to end")
        assert time.monotonic() - began < 20
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        launcher.stdin.close()


def test_a_burst_of_sigterms_still_leaves_and_ends_the_process(
    conn, orders, zookeeper, warehouse, namespace
):
    # D3: Spark, the kernel's process group and the JVM's exit may each signal the reader; a
    # signal landing while the handler of the one before runs must not deadlock the process
    # (a handler that takes a lock can land inside that same lock's holder), or end it
    # without leaving
    for _ in range(3):
        proc = joined_reader(zookeeper, warehouse, namespace)
        began = time.monotonic()
        while proc.poll() is None and time.monotonic() - began < 2:
            for _ in range(50):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            proc.kill()
            proc.stdin.close()
        assert time.monotonic() - began < 15  # ended (by the watchdog, not the signal)
        assert proc.returncode == 128 + signal.SIGTERM
        assert seconds_to_leave(conn, proc) < LEFT_WITHIN  # left: not at its session's end
