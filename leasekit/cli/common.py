"""What every command module shares: exit codes, subcommand registration, and the
connection and Spark session a command runs with.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError
from .output import note

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..connection import Connection

__all__ = [
    "EXIT_ERROR",
    "EXIT_NOT_RUNNING",
    "EXIT_INTERRUPTED",
    "add_command",
    "connect",
    "spark",
    "warehouse_location",
    "missing_warehouse",
    "refuse_missing_warehouse",
    "zookeeper_command",
    "embedded_server",
]

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


def warehouse_location(args: argparse.Namespace) -> str:
    """The warehouse the global options name: --warehouse, $LEASEKIT_WAREHOUSE or the default."""
    from ..connection import DEFAULT_WAREHOUSE

    return args.warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE


def missing_warehouse(args: argparse.Namespace) -> str | None:
    """The local warehouse directory the global options name, if it does not exist (None
    when it exists or is remote)."""
    from ..warehouse import Warehouse

    warehouse = Warehouse(warehouse_location(args))
    if warehouse.is_local and not os.path.isdir(warehouse.location):
        return warehouse.location
    return None


@contextlib.contextmanager
def connect(
    args: argparse.Namespace, *, read_only: bool = False, start_server: bool | None = None
) -> Iterator[Connection]:
    """A connection to the ZooKeeper, warehouse and namespace the global options name.

    Arguments:
        args: the parsed global options.
        read_only: the command only reads: a local warehouse that does not exist is an error
            (a typo must not create a warehouse or start a ZooKeeper for it; docs/cli.md).
        start_server: whether the warehouse's embedded ZooKeeper may be started when it is
            stopped (no --zookeeper nor $LEASEKIT_ZOOKEEPER); default: unless ``read_only``.

    Raises:
        InvalidArgumentError: ``read_only`` and the local warehouse, or the namespace in it,
            does not exist.
        ZooKeeperUnavailableError: the embedded server is stopped and may not be started.
    """
    from ..connection import connect as open_connection

    if read_only:
        refuse_missing_warehouse(args)
        refuse_missing_namespace(args)
    zookeeper = args.zookeeper
    if not (not read_only if start_server is None else start_server):
        zookeeper = _running_server(args)
    with open_connection(zookeeper, args.warehouse, namespace=args.namespace) as conn:
        yield conn


def refuse_missing_warehouse(args: argparse.Namespace) -> None:
    """Refuse a local warehouse that does not exist, for a command that only reads it.

    Raises:
        InvalidArgumentError: the local warehouse the global options name does not exist.
    """
    missing = missing_warehouse(args)
    if missing is not None:
        shown = missing if missing.isprintable() else repr(missing)
        raise InvalidArgumentError(
            f"no warehouse at {shown}: nothing to read there (check --warehouse or "
            "$LEASEKIT_WAREHOUSE; `leasekit table create` makes a new one)"
        )


def refuse_missing_namespace(args: argparse.Namespace) -> None:
    """Refuse a namespace a local warehouse holds nothing of, for a command that only reads it
    (a mistyped --namespace must not create it), naming the namespaces it holds.

    Raises:
        InvalidArgumentError: the warehouse is local and has no directory for the namespace.
    """
    from ..validate import check_namespace, is_namespace
    from ..warehouse import Warehouse

    warehouse = Warehouse(warehouse_location(args))
    namespace = check_namespace(args.namespace)
    if not warehouse.is_local or os.path.isdir(os.path.join(warehouse.location, namespace)):
        return
    there = sorted(
        name
        for name in os.listdir(warehouse.location)
        if not name.startswith(("_", ".")) and is_namespace(name)
        and os.path.isdir(os.path.join(warehouse.location, name))
    )  # fmt: skip
    raise InvalidArgumentError(
        f"no namespace {namespace!r} in the warehouse {warehouse.location}: nothing to read "
        + (f"(its namespaces: {', '.join(there)})" if there else "(it holds no namespace yet)")
    )


def _running_server(args: argparse.Namespace) -> str | None:
    """The ZooKeeper the global options name; for the embedded default, the address of the
    warehouse's server if it runs (``ZooKeeperUnavailableError`` saying how to start it if
    not), so that opening the connection starts nothing (docs/cli.md)."""
    from .. import embedded
    from ..errors import ZooKeeperUnavailableError
    from ..warehouse import Warehouse

    if not embedded_server(args):
        return args.zookeeper  # an external server: nothing is started for it
    warehouse = Warehouse(warehouse_location(args))
    if not warehouse.is_local:
        return args.zookeeper  # connect() refuses the embedded server for it
    status = embedded.status(os.path.join(warehouse.location, "_zookeeper"))
    if status is None or not status.running:
        shown = warehouse.location
        raise ZooKeeperUnavailableError(
            f"the embedded ZooKeeper of warehouse {shown if shown.isprintable() else repr(shown)}"
            " is stopped; a command that only reads does not start it: start it with "
            f"`{zookeeper_command(args, 'start')}`"
        )
    return status.address


def zookeeper_command(args: argparse.Namespace, action: str) -> str:
    """``leasekit zookeeper ACTION`` for the warehouse ``args`` name: with ``--warehouse`` when
    it was given (without it, the command would act on another warehouse's server)."""
    import shlex

    where = args.warehouse
    if not where:
        return f"leasekit zookeeper {action}"
    shown = shlex.quote(where) if where.isprintable() else repr(where)
    return f"leasekit --warehouse {shown} zookeeper {action}"


def embedded_server(args: argparse.Namespace) -> bool:
    """Whether the global options leave ZooKeeper to the warehouse's embedded server (no
    --zookeeper nor $LEASEKIT_ZOOKEEPER)."""
    return not (args.zookeeper or os.environ.get("LEASEKIT_ZOOKEEPER"))


@contextlib.contextmanager
def spark() -> Iterator[SparkSession]:
    """The active SparkSession, or a new one that is stopped at the end."""
    from pyspark.sql import SparkSession

    from ..datasource import spark_session

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


_INT64_MAX = 2**63 - 1


def _whole(text: str, what: str, minimum: int, maximum: int) -> int:
    """``text`` as a whole number in ``[minimum, maximum]``, or argparse's error naming
    ``what``."""
    from ..errors import InvalidArgumentError
    from ..validate import check_int

    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{what} must be a whole number, got {text[:40]!r}"
        ) from None
    try:
        return check_int(value, what, minimum=minimum, maximum=maximum)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def offset_arg(text: str) -> int:
    """A log offset: a whole number in [0, 2**63)."""
    return _whole(text, "offset", 0, _INT64_MAX)


def shift_arg(text: str) -> int:
    """An offset shift: a whole number in (-2**63, 2**63)."""
    return _whole(text, "shift", -_INT64_MAX, _INT64_MAX)


def bucket_arg(text: str) -> int:
    """A bucket number: a whole number in [0, 2**63)."""
    return _whole(text, "bucket", 0, _INT64_MAX)
