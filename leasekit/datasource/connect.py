"""Connections of the data source's steps: each process Spark runs a step in (planning on the
driver, reading on executors) opens its own, from the options, as ``connect()`` would; the
first step refuses a namespace or table that does not exist, naming those that do."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..connection import connect
from ..errors import TableNotFoundError

if TYPE_CHECKING:
    from ..connection import Connection, Table
    from .options import SourceOptions

__all__ = ["connection", "check_namespace", "table_of", "table_ddl_of", "SHOWN"]

SHOWN = 20
"""Names an error lists at most (namespaces, tables)."""


@contextlib.contextmanager
def connection(opts: SourceOptions) -> Iterator[Connection]:
    """A connection for one step, closed after it."""
    conn = connect(opts.zookeeper, opts.warehouse, namespace=opts.namespace)
    try:
        yield conn
    finally:
        conn.close()


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


_SEEN: set[tuple[str | None, str | None, str]] = set()
"""(zookeeper, warehouse, namespace) of the namespaces this process has seen exist."""


def check_namespace(opts: SourceOptions) -> None:
    """Refuse a namespace the warehouse holds nothing of before a connection would create it
    (a mistyped ``namespace`` option must not make a namespace), naming those it holds.

    Raises:
        TableNotFoundError: the namespace does not exist, so neither does the table.
        ZooKeeperUnavailableError: ZooKeeper did not answer.
    """
    from ..connection.namespaces import namespaces
    from ..connection.open import DEFAULT_WAREHOUSE

    key = (opts.zookeeper, opts.warehouse, opts.namespace)
    if key in _SEEN:
        return  # a sink plans every micro-batch: one look per process is enough
    there = namespaces(opts.zookeeper, opts.warehouse)
    if opts.namespace in there:
        _SEEN.add(key)
        return
    where = opts.warehouse or os.environ.get("LEASEKIT_WAREHOUSE") or DEFAULT_WAREHOUSE
    held = f"its namespaces: {_listed(there)}" if there else "it holds no namespace yet"
    raise TableNotFoundError(
        f"table {opts.table!r} does not exist in namespace {opts.namespace!r}: the namespace "
        f"does not exist in the warehouse {where} ({held})"
    )


def table_of(conn: Connection, opts: SourceOptions) -> Table:
    """The table ``opts`` name.

    Raises:
        TableNotFoundError: no such table (the message names the namespace's tables).
    """
    try:
        return conn.table(opts.table)
    except TableNotFoundError:
        tables = conn.tables()
        held = f"its tables: {_listed(tables)}" if tables else "it has no table yet"
        raise TableNotFoundError(
            f"table {opts.table!r} does not exist in namespace {opts.namespace!r} ({held})"
        ) from None


def table_ddl_of(opts: SourceOptions) -> str:
    """The Spark DDL of the table's columns, after refusing a namespace that does not exist.

    Raises:
        TableNotFoundError: no such namespace or table.
    """
    from ..sparkio.frames import table_ddl

    check_namespace(opts)
    with connection(opts) as conn:
        return table_ddl(table_of(conn, opts))
