"""The SparkSession leasekit uses (the active one, or ``local[*]``), Spark error translation and
SQL settings scoped to a block."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from ..errors import IllegalStateError, InvalidTypeError, LeasekitError
from .s3a import s3a_conf
from .worker_python import worker_python

__all__ = [
    "spark_session",
    "session",
    "spark_errors",
    "session_conf",
    "micros_timestamps",
    "known_files",
    "struct_type",
    "is_connect",
]

_LOG4J2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
_JVM_NOTICES = (b"WARNING: Using incubator modules",)
"""Lines the JVM itself prints at every start (Spark adds ``--add-modules
jdk.incubator.vector``), which log4j cannot silence: dropped from its stderr."""

_TIMESTAMP_CONF = "spark.sql.parquet.outputTimestampType"
_LISTING_CONF = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def spark_session(
    app_name: str = "leasekit", *, warehouse: object = None, s3a: bool | None = None
) -> SparkSession:
    """The active SparkSession, or a new one (``local[*]`` unless spark-submit says otherwise).

    A new one starts quietly: log4j2 logs warnings and errors only, without Spark's start-up
    notices (``log4j2.properties`` beside this module, unless ``SPARK_CONF_DIR`` or
    ``PYSPARK_SUBMIT_ARGS`` configure logging), and the JVM's own start-up notice is dropped,
    so a notebook's first Spark cell shows no stderr block; a streaming query's ``stop()``
    logs no error for the batch it cancels (``log4j2.properties``, ``_THREAD_STACK``). Unless
    ``PYSPARK_PYTHON`` says otherwise, its Python workers run this interpreter (on ``local[*]``
    through ``worker_python``'s launcher, which spares each worker compiling pyspark from
    source). A new session that reads an S3 warehouse gets Spark's ``s3a`` file system: the
    ``hadoop-aws`` jars on its classpath and the warehouse's endpoint, region and credentials
    as Hadoop settings (``s3a.s3a_conf``); an active session is returned as it is.

    Arguments:
        app_name: the application name of a new session.
        warehouse: the warehouse the session reads (a path or URI); None: the one
            ``LEASEKIT_WAREHOUSE`` names, if any.
        s3a: True: set up ``s3a`` whatever the warehouse; False: never; None: when the
            warehouse is ``s3://``.

    Returns:
        The SparkSession.

    Raises:
        InvalidTypeError: a bad ``warehouse`` or ``s3a``.
        JavaNotFoundError: no Java was found to start Spark with.
        IllegalStateError: Spark failed to start, or ``s3a``'s jars are not there (run
            ``make peers``).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = any(os.environ.get(name) for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED"))
    s3a_settings = {} if remote else s3a_conf(warehouse, s3a)
    if not os.environ.get("JAVA_HOME"):
        from ..embedded.java import java_home

        os.environ["JAVA_HOME"] = java_home()
    if "PYSPARK_PYTHON" not in os.environ:
        os.environ["PYSPARK_PYTHON"] = worker_python() if _launches_locally() else sys.executable
    # Spark's console progress bar would draw over leasekit's own progress bars.
    builder = SparkSession.builder.appName(app_name).config("spark.ui.showConsoleProgress", "false")
    for key, value in {**_quiet_logging(), **s3a_settings}.items():
        builder = builder.config(key, value)
    with spark_errors("start Spark"), _without_jvm_notices():
        return builder.getOrCreate()


def _launches_locally() -> bool:
    """Whether a new session runs on this machine, as ``local[*]``: no master, Spark
    configuration directory or Spark Connect server is set by the environment. Only then do its
    Python workers get ``worker_python``'s launcher (a cluster's executors would not have it)."""
    submit = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return not (
        "--master" in submit
        or "spark.master" in submit
        or any(os.environ.get(name) for name in ("MASTER", "SPARK_CONF_DIR", "SPARK_REMOTE"))
    )


_THREAD_STACK = "-Xss16m"
"""The driver's thread stacks. When stop() cancels a ``foreachBatch`` whose function is running,
Spark tells the stop from a failure by matching the function's error (a Python traceback
quoting the cancelled job's Java stack) against a regular expression that recurses once per
character: with the JVM's 1 MB (and with 4 MB) the stream thread died of a StackOverflowError
printed as 1,000 lines. Only reserved address space, until a thread uses it."""


def _quiet_logging() -> dict[str, str]:
    """Spark settings pointing log4j2 at leasekit's configuration, with the driver's thread
    stacks of ``_THREAD_STACK``, unless logging or the driver's Java options are configured
    already."""
    if os.environ.get("SPARK_CONF_DIR") or any(
        word in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
        for word in ("log4j", "extraJavaOptions", "--driver-java-options")
    ):
        return {}
    options = f"-Dlog4j2.configurationFile=file:{_LOG4J2} {_THREAD_STACK}"
    return {"spark.driver.extraJavaOptions": options}


@contextlib.contextmanager
def _without_jvm_notices() -> Iterator[None]:
    """While a JVM may be launched, point file descriptor 2 (which the JVM inherits) at a pipe
    whose lines a thread copies back to the real stderr, all but ``_JVM_NOTICES``."""
    from pyspark import SparkContext

    if getattr(SparkContext, "_gateway", None) is not None:
        yield  # the JVM runs already
        return
    try:
        saved, (read, write) = os.dup(2), os.pipe()
    except OSError:
        yield
        return
    threading.Thread(
        target=_relay, args=(read, os.dup(saved)), name="leasekit-jvm-stderr", daemon=True
    ).start()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _relay(read: int, out: int) -> None:
    """Copy lines from ``read`` to ``out`` until the writers close it, dropping JVM notices."""
    pending = b""
    try:
        while chunk := os.read(read, 65536):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not line.startswith(_JVM_NOTICES))
            if kept:
                os.write(out, kept)
        if pending and not pending.startswith(_JVM_NOTICES):
            os.write(out, pending)
    except OSError:
        pass  # stderr went away: nothing left to show it on
    finally:
        os.close(read)
        os.close(out)


def session(spark: SparkSession | None, warehouse: object = None) -> SparkSession:
    """``spark``, checked; None: the active session, or a new one for ``warehouse`` (with
    ``s3a`` when it is an S3 warehouse)."""
    if spark is None:
        return spark_session(warehouse=warehouse)
    if not isinstance(spark, SparkSession) and not is_connect(spark):
        raise InvalidTypeError(f"spark must be a SparkSession, not {type(spark).__name__}")
    return spark


def is_connect(spark: object) -> bool:
    """Whether ``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``): a
    client of a remote driver, with no SparkContext, RDDs or JVM in this process."""
    cls = type(spark)
    return cls.__name__ == "SparkSession" and cls.__module__.startswith("pyspark.sql.connect.")


@contextlib.contextmanager
def spark_errors(what: str) -> Iterator[None]:
    """Translate Spark and Py4J errors into ``IllegalStateError``."""
    from py4j.protocol import Py4JError

    try:
        yield
    except LeasekitError:
        raise
    except (PySparkException, Py4JError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IllegalStateError(f"{what}: Spark failed: {first}") from None


_conf_lock = threading.Lock()
_conf_users: dict[tuple[int, str], tuple[int, str | None]] = {}


@contextlib.contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL confs for this block; concurrent blocks share them and the last one restores."""
    with _conf_lock:
        for key, value in settings.items():
            users, previous = _conf_users.get((id(spark), key), (0, None))
            if users == 0:
                previous = spark.conf.get(key, None)
                spark.conf.set(key, value)
            _conf_users[(id(spark), key)] = (users + 1, previous)
    try:
        yield
    finally:
        with _conf_lock:
            for key in settings:
                users, previous = _conf_users.pop((id(spark), key))
                if users > 1:
                    _conf_users[(id(spark), key)] = (users - 1, previous)
                elif previous is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, previous)


def micros_timestamps(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """Write timestamps as INT64 microseconds (readable by every Parquet reader) for this block."""
    return session_conf(spark, {_TIMESTAMP_CONF: "TIMESTAMP_MICROS"})


def known_files(spark: SparkSession) -> contextlib.AbstractContextManager[None]:
    """leasekit passes exact file lists: no distributed listing job is needed to index them."""
    return session_conf(spark, {_LISTING_CONF: str(2**31 - 1)})


def struct_type(spark: SparkSession, ddl: str) -> StructType:
    return spark.createDataFrame([], ddl).schema
