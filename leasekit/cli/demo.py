"""``leasekit demo``: the command-line side of the end-to-end demo in ``leasekit.demo``.

Progress goes to stdout, or to stderr with ``--json`` so stdout holds only the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import add_command, connect, spark
from .output import to_json

__all__ = ["register"]


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _demo(args: argparse.Namespace) -> int:
    from .. import demo

    def out(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    with connect(args) as conn, spark() as session:
        result = demo.run(
            conn, session, table=args.table, rows=args.rows, batches=args.batches, out=out
        )
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    return 0


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``demo`` to the top-level subcommands."""
    demo = add_command(
        commands, "demo", "run the end-to-end demo on embedded defaults", common, _demo
    )
    demo.add_argument(
        "--table", default="demo_orders", help="demo table name (default: demo_orders)"
    )
    demo.add_argument(
        "--rows",
        type=_positive_int,
        default=100_000,
        metavar="N",
        help="upsert rows to write (default: 100000)",
    )
    demo.add_argument(
        "--batches", type=_positive_int, default=5, metavar="N", help="append batches (default: 5)"
    )
