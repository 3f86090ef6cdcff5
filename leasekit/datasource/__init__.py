"""``format("leasekit")``: Spark's Python Data Source for leasekit tables (D1–D5). Batch
reads (``batch``), the change-log stream (``stream``) and the stream sink (``sink``); no JVM jar,
so it runs on Spark Connect and on any warehouse pyarrow reaches. Options are checked when the
read is loaded, before Spark plans anything. ``spark_session`` gives a session with the format
registered."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource

from ..errors import LeasekitError
from .options import SourceOptions, parse_options
from .report import reported

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["LeasekitDataSource", "register", "spark_session", "STREAM_COLUMNS"]

STREAM_COLUMNS = "_bucket INT, _offset BIGINT, _timestamp TIMESTAMP, _op STRING"
"""The columns a stream has before the table's (D2)."""


class LeasekitDataSource(DataSource):
    """``spark.read.format("leasekit")``, ``readStream`` and ``writeStream`` of a table.

    Spark builds one per read or write from its options, on the driver (or the Spark Connect
    server), and pickles it to the processes that plan and read: it holds the options only,
    and each step opens its own connection.
    """

    @classmethod
    def name(cls) -> str:
        return "leasekit"

    @property
    def parsed(self) -> SourceOptions:
        return parse_options(self.options)

    @reported
    def schema(self) -> str:
        """The rows' columns, after every check that needs no planning (Spark calls this when
        the read is loaded: a bad option, namespace, table or lease fails ``load()`` itself).

        Raises:
            InvalidArgumentError: bad options.
            TableNotFoundError: no such namespace or table.
            LeaseNotFoundError, LeaseExpiredError, NotPinnedError: a lease read's lease.
        """
        opts = self.parsed
        if opts.streaming:
            from .connect import table_ddl_of
            from .options import check_stream

            check_stream(opts)
            return f"{STREAM_COLUMNS}, {table_ddl_of(opts)}"
        from .batch import batch_schema

        return batch_schema(opts)

    @reported
    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch import batch_reader

        return batch_reader(self.parsed, schema)

    @reported
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import batch_writer

        return batch_writer(self.parsed, schema, overwrite)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The stream reader; one that refuses at its first call when the options are bad
        (a stream with no option but the table is told here that it needs a group). It never
        raises: PySpark's runner then stops a reader it never made, and reports that
        ``UnboundLocalError`` over this error."""
        from .stream import refused_reader, stream_reader

        try:
            return stream_reader(self.parsed, schema)
        except LeasekitError as exc:
            return refused_reader(exc)

    @reported
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import stream_writer

        return stream_writer(self.parsed, schema, overwrite)


PUSHDOWN = "spark.sql.python.filterPushdown.enabled"
"""Spark's switch for ``pushFilters`` of Python data sources: batch reads push filters, and
Spark refuses a reader that can while it is off, so ``register`` turns it on (a source that
pushes nothing is not affected)."""


def register(spark: SparkSession | Any) -> None:
    """Register ``format("leasekit")`` with ``spark`` (classic or Spark Connect) and turn on
    filter pushdown for Python data sources (``PUSHDOWN``); again is a no-op."""
    spark.dataSource.register(LeasekitDataSource)
    spark.conf.set(PUSHDOWN, "true")


def spark_session(
    app_name: str = "leasekit", *, warehouse: Any = None, s3a: bool | None = None
) -> SparkSession:
    """The active SparkSession, or a new one (``local[*]`` unless spark-submit says otherwise),
    with ``format("leasekit")`` registered. A new one for an S3 warehouse reads it with Spark's
    ``s3a`` file system (docs/scale.md).

    Arguments:
        app_name: the application name of a new session.
        warehouse: the ``Connection`` (or warehouse path or URI) the session reads; None: the
            warehouse ``LEASEKIT_WAREHOUSE`` names, if any.
        s3a: True: put ``s3a``'s jars and settings in a new session whatever the warehouse;
            False: never; None: when the warehouse is ``s3://``.

    Returns:
        The SparkSession.

    Raises:
        InvalidTypeError: a bad ``warehouse`` or ``s3a``.
        JavaNotFoundError: no Java was found to start Spark with.
        IllegalStateError: Spark failed to start, or ``s3a``'s jars are not there (run
            ``make peers``).
    """
    from ..connection import Connection, context_of
    from ..sparkio.session import spark_errors
    from ..sparkio.session import spark_session as new_session

    if isinstance(warehouse, Connection):
        warehouse = context_of(warehouse).warehouse
    spark = new_session(app_name, warehouse=warehouse, s3a=s3a)
    with spark_errors("register format('leasekit')"):
        register(spark)
    return spark
