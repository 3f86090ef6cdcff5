"""How leasekit's errors reach whoever ran the Spark query: in the Python worker where Spark runs
a step of the data source, a ``LeasekitError`` is reported as one line, its type and message,
instead of under a Python traceback of the data source's own frames."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import LeasekitError

__all__ = ["reported", "in_spark_worker", "HIDE_TRACEBACK"]

HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"
"""PySpark's switch (what ``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets for
every worker): the error a worker ends with is reported by its type and message alone. Spark
still puts its own words first ("[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source
instance: ")."""

Step = TypeVar("Step", bound=Callable[..., Any])


def in_spark_worker() -> bool:
    """Whether this process is one of Spark's Python workers (``python -m pyspark.…``: a
    planner, a streaming runner, or an executor's worker forked by ``pyspark.daemon``)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and str(spec.name).startswith("pyspark.")


def _hide_traceback() -> None:
    # A worker ends after reporting the error it stops with, so the switch lasts as long as
    # this one report; outside Spark's workers (a test calling a step itself) nothing changes.
    if in_spark_worker():
        os.environ[HIDE_TRACEBACK] = "1"


def reported(step: Step) -> Step:
    """``step`` (a method Spark calls, or a generator of its rows), reporting a ``LeasekitError``
    that ends it as its one line; other errors keep their traceback (they are bugs)."""
    if inspect.isgeneratorfunction(step):

        @functools.wraps(step)
        def rows(*args: Any, **kwargs: Any) -> Any:
            try:
                return (yield from step(*args, **kwargs))
            except LeasekitError:
                _hide_traceback()
                raise

        return rows  # type: ignore[return-value]

    @functools.wraps(step)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return step(*args, **kwargs)
        except LeasekitError:
            _hide_traceback()
            raise

    return run  # type: ignore[return-value]
