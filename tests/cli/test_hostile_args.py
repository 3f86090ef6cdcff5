"""Command-line strings that reach sockets and paths — addresses, ports, connect strings,
warehouses — holding a right-to-left override, a lone surrogate (bytes not in UTF-8, as the
shell passes them) or a control character: one readable error line and exit 2, never a
traceback (docs/cli.md, docs/security.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from helpers import run_cli as run

import leasekit as lk
from leasekit import testing
from leasekit.monitor.exporter.serve import MetricsServer

HOSTILE = ["\u202e", "\udcff", "a\udcffb", "\u202eevil.example", "a\x01b"]


def _run(*argv: str, timeout: float = 60) -> tuple[int, str]:
    """Run ``leasekit`` as a process with ``argv`` passed as the shell would (surrogates as the
    bytes they stand for); (exit code, stderr)."""
    command = [os.fsencode(a) for a in (sys.executable, "-m", "leasekit.cli", *argv)]
    done = subprocess.run(command, capture_output=True, timeout=timeout)
    return done.returncode, done.stderr.decode("utf-8", "backslashreplace")


def _one_error_line(code: int, err: str, *expected: str) -> str:
    assert "Traceback" not in err, err
    assert code == 2, err
    lines = err.strip().splitlines()
    line = lines[-1]
    assert line.startswith("leasekit") and "error:" in line, err
    assert line.isprintable(), line  # no control or direction characters reach the terminal
    for text in expected:
        assert text in line, line
    return line


@pytest.mark.parametrize("bad", HOSTILE, ids=ascii)
def test_exporter_and_janitor_refuse_an_unusable_address(conn, target, bad):
    # --address / --metrics-address that no socket can use: exit 2, one line
    started = time.monotonic()
    code, err = _run(*target, "exporter", "--port", "0", "--address", bad)
    _one_error_line(code, err, "address", ascii(bad)[1:-1])
    code, err = _run(*target, "janitor", "--metrics-port", "0", "--metrics-address", bad)
    _one_error_line(code, err, "address")
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("bad", HOSTILE[:3], ids=ascii)
def test_port_zookeeper_and_warehouse_with_hostile_characters(conn, target, warehouse, bad):
    # a port, a connect string and a warehouse path with such characters: exit 2
    # with one printable line (the connect string is refused at once, not after the timeout)
    code, err = _run(*target, "exporter", "--port", bad)
    _one_error_line(code, err, "port")
    started = time.monotonic()
    code, err = _run("--zookeeper", f"{bad}:2181", *target[2:], "table", "list")
    _one_error_line(code, err, "ZooKeeper connect string")
    assert time.monotonic() - started < 8  # less than the 10 s connect timeout
    missing = os.path.join(warehouse, f"x{bad}")
    code, err = _run("--zookeeper", target[1], "--warehouse", missing, "table", "list")
    _one_error_line(code, err, "no warehouse at")


@pytest.mark.parametrize("bad", [*HOSTILE, "a\x00b", 7], ids=ascii)
def test_metrics_server_refuses_an_unusable_address(conn, bad):
    # the library refuses it as bad input, before anything is served
    error = lk.InvalidTypeError if not isinstance(bad, str) else lk.InvalidArgumentError
    with pytest.raises(error):
        MetricsServer(testing.context(conn), port=0, address=bad)


def test_metrics_url_of_an_ipv6_address(conn):
    # the URL the exporter prints can be opened (an IPv6 address in brackets)
    server = MetricsServer(testing.context(conn), port=9999, address="::1")
    assert server.url == "http://[::1]:9999/metrics"
    assert MetricsServer(testing.context(conn), port=1, address="::").url == (
        "http://127.0.0.1:1/metrics"
    )


def test_a_read_of_a_namespace_that_does_not_exist_names_those_that_do(capsys, target, conn):
    # a mistyped --namespace on a command that only reads creates nothing and says which
    # namespaces the warehouse holds
    import os

    warehouse = target[3]
    code, out, err = run(capsys, *target[:4], "--namespace", "nope", "table", "list")
    assert (code, out) == (2, "")
    assert f"no namespace 'nope' in the warehouse {warehouse}" in err and target[5] in err
    assert not os.path.exists(os.path.join(warehouse, "nope"))
    assert run(capsys, *target, "table", "list")[0] == 0


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["tabel", "list"], "did you mean 'table'?"),
        (["table", "lsit"], "did you mean 'list'?"),
        (["consumer", "overveiw"], "did you mean 'overview'?"),
        (["table", "list", "--jsn"], "did you mean '--json'?"),
        (["lease", "list", "--namespce", "x"], "did you mean '--namespace'?"),
    ],
)
def test_a_typo_gets_the_closest_command_or_option(capsys, argv, hint) -> None:
    # a mistyped command or option: exit 2 before anything runs, naming the closest one
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.rstrip().endswith(hint), err


def test_nothing_close_gets_no_guess(capsys) -> None:
    code, _, err = run(capsys, "frobnicate")
    assert code == 2 and "did you mean" not in err
