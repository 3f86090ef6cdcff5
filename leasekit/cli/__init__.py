"""The ``leasekit`` command line: the parser, the global options and ``main``.

Each command module registers its subcommands; errors exit 2 as one ``leasekit: error:`` line.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..errors import LeasekitError
from . import consumer, demo, exporter, janitor, lab, lease, retention, settings, table, zookeeper
from .common import EXIT_ERROR, EXIT_INTERRUPTED
from .output import format_fields, format_table, to_json
from .parser import Parser

__all__ = ["main", "build_parser", "format_table", "format_fields", "to_json"]

_GLOBAL_DEFAULTS: dict[str, Any] = {
    "zookeeper": None,
    "warehouse": None,
    "namespace": "leasekit",
    "json": False,
}


def _global_options(*, many_namespaces: bool = False) -> argparse.ArgumentParser:
    """Options accepted before or after any subcommand (defaults filled in after parsing);
    ``many_namespaces``: ``--namespace`` may be repeated (after the subcommand, a list)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("global options")
    suppress = argparse.SUPPRESS
    group.add_argument(
        "--zookeeper",
        metavar="HOSTS",
        default=suppress,
        help="ZooKeeper connect string, like zk1:2181,zk2:2181 (default: "
        "$LEASEKIT_ZOOKEEPER, else the warehouse's embedded server)",
    )
    group.add_argument(
        "--warehouse",
        metavar="LOCATION",
        default=suppress,
        help="warehouse path or URI (default: $LEASEKIT_WAREHOUSE, else ./leasekit-warehouse)",
    )
    group.add_argument(
        "--namespace",
        metavar="NAME",
        default=suppress,
        action="append" if many_namespaces else "store",
        help="metadata namespace, repeatable (default: leasekit)"
        if many_namespaces
        else "metadata namespace (default: leasekit)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=suppress,
        help="print machine-readable JSON instead of text tables",
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    """The ``leasekit`` argument parser."""
    common = _global_options()
    parser = Parser(
        prog="leasekit",
        description="KV snapshot leases, Spark reads and explained retention for a bucketed "
        "table store (metadata in ZooKeeper, data in Parquet).",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"leasekit {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (zookeeper, table, lease, consumer, retention, settings, janitor, demo, lab):
        module.register(commands, common)
    exporter.register(commands, _global_options(many_namespaces=True))
    return parser


def _quiet_library_logs() -> None:
    """Keep kazoo's retry chatter (logged through ``leasekit.zk``) off the terminal.

    Failures still surface as one ``leasekit: error:`` line; an application that configured
    logging itself keeps its handlers.
    """
    lib = logging.getLogger("leasekit")
    if not logging.getLogger().handlers and not lib.handlers:
        lib.addHandler(logging.NullHandler())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and argument errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_ERROR)
    for key, default in _GLOBAL_DEFAULTS.items():
        if not hasattr(args, key):
            setattr(args, key, default)
    _quiet_library_logs()
    try:
        return int(args.func(args))
    except LeasekitError as exc:
        message = str(exc).strip().splitlines()
        print(f"leasekit: error: {message[0] if message else type(exc).__name__}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("leasekit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`leasekit table list | head`): stop quietly.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
