"""Connections of the data source's steps: each process Spark runs a step in (planning on the
driver, reading on executors) opens its own, from the options, as ``connect()`` would."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..connection import connect

if TYPE_CHECKING:
    from ..connection import Connection
    from .options import SourceOptions

__all__ = ["connection", "table_ddl_of"]


@contextlib.contextmanager
def connection(opts: SourceOptions) -> Iterator[Connection]:
    """A connection for one step, closed after it."""
    conn = connect(opts.zookeeper, opts.warehouse, namespace=opts.namespace)
    try:
        yield conn
    finally:
        conn.close()


def table_ddl_of(opts: SourceOptions) -> str:
    """The Spark DDL of the table's columns.

    Raises:
        TableNotFoundError: no such table.
    """
    from ..sparkio.frames import table_ddl

    with connection(opts) as conn:
        return table_ddl(conn.table(opts.table))
