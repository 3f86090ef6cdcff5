"""Shared fixtures: one real local SparkSession per test session."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession, shared by the whole test session."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("leasekit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
