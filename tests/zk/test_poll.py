"""The polling kazoo handler keeps kazoo's ``select`` contract (readable, writable, an empty
third list; hung-up sockets ready; bad input refused as kazoo refuses it), and every
connection's client uses it."""

from __future__ import annotations

import socket
import time

import pytest
from kazoo.handlers.utils import selector_select

from leasekit import testing
from leasekit.zk.poll import PollingHandler

select_poll = PollingHandler().select


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("select", [select_poll, selector_select], ids=["poll", "kazoo"])
def test_readiness_is_what_kazoos_own_select_reports(pair, select):
    a, b = pair
    started = time.monotonic()
    assert select([a, b], [], [], 0.05) == ([], [], [])  # nothing to read: the timeout
    assert time.monotonic() - started >= 0.04
    b.sendall(b"x")
    assert select([a, b], [], [], 1) == ([a], [], [])
    assert select([], [a, b], [], 1) == ([], [a, b], [])  # both have buffer room
    a.recv(1)
    assert select([a], [], [], 0) == ([], [], [])


def test_a_hung_up_peer_is_readable_so_the_read_meets_it(pair):
    a, b = pair
    b.close()
    assert select_poll([a], [], [], 1) == ([a], [], [])
    assert a.recv(1) == b""  # what kazoo's read turns into a dropped connection


def test_the_same_socket_twice_is_reported_twice_as_kazoo_does(pair):
    a, b = pair
    b.sendall(b"x")
    assert select_poll([a, a], [], [], 1) == selector_select([a, a], [], [], 1) == ([a, a], [], [])


def test_no_timeout_waits_until_ready(pair):
    a, b = pair
    b.sendall(b"x")
    assert select_poll([a], [], [], None) == ([a], [], [])


@pytest.mark.parametrize("select", [select_poll, selector_select], ids=["poll", "kazoo"])
def test_bad_input_is_refused_as_kazoo_refuses_it(pair, select):
    a, _ = pair
    with pytest.raises(ValueError):
        select([a], [], [], -1)
    with pytest.raises(TypeError):
        select([a], [], [], "1")
    with pytest.raises(TypeError):
        select([object()], [], [], 0)
    closed = socket.socket()
    closed.close()
    with pytest.raises((TypeError, ValueError)):  # fileno -1
        select([closed], [], [], 0)


def test_a_descriptor_closed_under_the_select_is_invalid(pair):
    import os

    a, b = pair
    fd = os.dup(a.fileno())
    os.close(fd)
    with pytest.raises(ValueError, match="Invalid event mask or fd"):
        select_poll([fd], [], [], 0)


def test_a_timeout_beyond_what_poll_takes_is_cut_to_it(pair):
    a, b = pair
    b.sendall(b"x")
    assert select_poll([a], [], [], 10.0**12) == ([a], [], [])


def test_every_connection_polls(conn):
    client = testing.context(conn).store.client
    assert isinstance(client.handler, PollingHandler)
    assert conn.create_table("t", "id BIGINT", "id", buckets=2).num_buckets == 2
