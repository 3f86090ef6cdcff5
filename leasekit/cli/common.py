"""What every command module shares: exit codes, subcommand registration, and the
connection and Spark session a command runs with.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .output import note

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..connection import Connection

__all__ = ["EXIT_ERROR", "EXIT_NOT_RUNNING", "EXIT_INTERRUPTED", "add_command", "connect", "spark"]

EXIT_ERROR = 2
EXIT_NOT_RUNNING = 3  # like `service ... status`
EXIT_INTERRUPTED = 130

# Spark's own console progress bar would fight with tqdm's on stderr.
_SPARK_SUBMIT_ARGS = "--conf spark.ui.showConsoleProgress=false pyspark-shell"


def add_command(
    group: Any,
    name: str,
    summary: str,
    common: argparse.ArgumentParser,
    func: Callable[[argparse.Namespace], int] | None = None,
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand of ``group`` that accepts the global options; runs ``func`` when given."""
    sub = group.add_parser(name, help=summary, description=summary, epilog=epilog,
                           parents=[common])  # fmt: skip
    if func is not None:
        sub.set_defaults(func=func)
    return sub


@contextlib.contextmanager
def connect(args: argparse.Namespace) -> Iterator[Connection]:
    """A connection to the ZooKeeper, warehouse and namespace the global options name."""
    from ..connection import connect as open_connection

    with open_connection(args.zookeeper, args.warehouse, namespace=args.namespace) as conn:
        yield conn


@contextlib.contextmanager
def spark() -> Iterator[SparkSession]:
    """The active SparkSession, or a new one that is stopped at the end."""
    from pyspark.sql import SparkSession

    from ..spark import spark_session

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", _SPARK_SUBMIT_ARGS)
    note("starting Spark ...")
    session = spark_session("leasekit-cli")
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def duration_arg(text: str) -> Any:
    """A bare number means seconds, as in the Python API; the library parses the rest."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
