"""``leasekit demo``: the end-to-end demo. It writes a changing orders table, snapshots it with
Spark, pins the snapshots with a lease, reads through it and checks against what was written;
meanwhile a group of three consumers splits the table's buckets and reads its log at half the
rate it is written; one of them leaves halfway and the others take its buckets over from the
committed offsets. Then the hottest bucket is split: the group reads it to its seal before its
two children are assigned (parent first), and the lease still reads what it pinned. The group's
describe table shows lag, time lag and health, and retention keeps the log it has not read.
The workload, the scenario and the report have a module each.

Progress goes to stdout, or to stderr with ``--json`` so stdout holds only the result.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import IllegalStateError, InvalidArgumentError
from ..validate import check_int
from .common import add_command, connect, embedded_server, spark, zookeeper_command
from .output import to_json

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..connection import Connection

__all__ = ["register", "run"]


def run(
    conn: Connection,
    spark: SparkSession | None,
    *,
    table: str = "demo_orders",
    rows: int = 100_000,
    batches: int = 5,
    out: Callable[[str], Any] = print,
    seed: int = 42,
) -> dict[str, Any]:
    """Write ``rows`` order upserts in ``batches`` (status changes, then deletes), snapshot
    them with Spark, split the hottest bucket halfway, read the latest snapshots back and
    check them; return the figures.

    The table is dropped first if it exists, so every run starts from scratch.

    Arguments:
        conn: the connection to run on.
        spark: the SparkSession; ``None`` uses the active one.
        table: the demo table's name; its group is ``<table>-audit``, its lease
            ``<table>-report``.
        rows: order upserts to write.
        batches: batches to write them in (at most ``rows``).
        out: where the progress line and the final summary go.
        seed: the seed of the generated orders.

    Returns:
        The figures (what ``leasekit demo --json`` prints).

    Raises:
        InvalidArgumentError: ``rows`` or ``batches`` below 1, or more batches than rows.
        IllegalStateError: a check failed (the message names them), or the group did not
            settle.
    """
    from ..sparkio.session import session
    from . import demo_report, demo_scenario

    check_int(rows, "rows", minimum=1)
    check_int(batches, "batches", minimum=1)
    if batches > rows:
        raise InvalidArgumentError(f"batches ({batches}) must not exceed rows ({rows})")
    spark = session(spark, conn.warehouse)
    started = time.perf_counter()
    out(demo_report.opening(table, rows, batches))
    outcome = demo_scenario.play(
        conn, spark, table=table, rows=rows, batches=batches, out=out, seed=seed
    )
    checks = demo_scenario.checks(outcome)
    if not all(checks.values()):
        out(demo_report.check_list(checks))
        raise IllegalStateError(demo_scenario.failure(outcome, checks))
    elapsed = time.perf_counter() - started
    warehouse = conn.warehouse
    figures = demo_report.result(conn, outcome, elapsed, warehouse)
    out(demo_report.render(conn, outcome, figures, checks, elapsed))
    return figures


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _demo(args: argparse.Namespace) -> int:
    def out(text: str) -> None:
        print(text, file=sys.stderr if args.json else sys.stdout, flush=True)

    with connect(args) as conn, spark() as session:
        result = run(conn, session, table=args.table, rows=args.rows, batches=args.batches, out=out)
        out("")
        out(_closing(args, conn))
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    return 0


def _closing(args: argparse.Namespace, conn: Connection) -> str:
    """The demo's last line: which ZooKeeper stays up, and how to stop it."""
    if not embedded_server(args):
        return (
            f"ZooKeeper {conn.zookeeper} was given (--zookeeper or $LEASEKIT_ZOOKEEPER): "
            "the demo started no server"
        )
    return (
        f"The embedded ZooKeeper at {conn.zookeeper} stays running for the warehouse "
        f"{conn.warehouse}; `{zookeeper_command(args, 'stop')}` stops it."
    )


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
