"""The Python a local session gives Spark's workers (``sparkio.worker_python``): the same
interpreter and pyspark, with only pyspark's bundled, uncompiled archive taken off the path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from leasekit.sparkio import session as sessions
from leasekit.sparkio.worker_python import bundled_archive, worker_python

ARCHIVE = str(bundled_archive())


def _path_seen(launcher: str, pythonpath: str | None) -> str | None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [
            launcher,
            "-c",
            "import os, sys; print(repr((os.environ.get('PYTHONPATH'), sys.executable)))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen, python = eval(out)  # noqa: S307 - our own repr of a str pair
    assert python == sys.executable
    return seen


@pytest.mark.parametrize(
    ("given", "seen"),
    [
        (f"{ARCHIVE}:/opt/a:/opt/b", "/opt/a:/opt/b"),  # where Spark puts it: first
        (f"/opt/a:{ARCHIVE}:/opt/b", "/opt/a:/opt/b"),
        (f"/opt/a:{ARCHIVE}", "/opt/a"),
        (ARCHIVE, None),
        (f"{ARCHIVE}.bak:/opt/a", f"{ARCHIVE}.bak:/opt/a"),  # only that exact entry
        ("/opt/a:/opt/b", "/opt/a:/opt/b"),
        (None, None),
    ],
)
def test_the_launcher_takes_only_the_bundled_archive_off_the_path(tmp_path, given, seen):
    assert _path_seen(worker_python(tmp_path), given) == seen


def test_the_launcher_is_written_once_and_survives_a_hostile_cache_path(tmp_path):
    cache = tmp_path / "we ird $HOME `id` 'q\"\nline"
    first = worker_python(cache)
    assert worker_python(cache) == first and os.listdir(cache) == [os.path.basename(first)]
    assert _path_seen(first, f"{ARCHIVE}:/opt/a") == "/opt/a"


@pytest.mark.parametrize("damage", ["other text", "truncated", "not executable"])
def test_a_launcher_that_is_not_the_right_one_is_written_again(tmp_path, damage):
    launcher = worker_python(tmp_path)
    right = open(launcher).read()
    if damage == "other text":
        with open(launcher, "w") as out:
            out.write("#!/bin/sh\nexec /bin/false\n")
    elif damage == "truncated":
        with open(launcher, "w") as out:
            out.write(right[:40])
    else:
        os.chmod(launcher, 0o644)
    assert worker_python(tmp_path) == launcher
    assert open(launcher).read() == right and os.access(launcher, os.X_OK)
    assert _path_seen(launcher, f"{ARCHIVE}:/opt/a") == "/opt/a"


def test_a_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    # Spark starts its workers from other working directories: the launcher's path is absolute
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    launcher = worker_python()
    assert launcher.startswith(str(tmp_path / "home" / ".cache" / "leasekit") + os.sep)
    assert not (tmp_path / "relative").exists()


def test_an_unwritable_cache_falls_back_to_this_interpreter(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert worker_python(blocker / "cache") == sys.executable


@pytest.mark.parametrize(
    ("env", "local"),
    [
        ({}, True),
        ({"PYSPARK_SUBMIT_ARGS": "--driver-memory 2g pyspark-shell"}, True),
        ({"PYSPARK_SUBMIT_ARGS": "--master spark://h:7077 pyspark-shell"}, False),
        ({"PYSPARK_SUBMIT_ARGS": "--conf spark.master=yarn pyspark-shell"}, False),
        ({"MASTER": "spark://h:7077"}, False),
        ({"SPARK_CONF_DIR": "/etc/spark"}, False),
        ({"SPARK_REMOTE": "sc://h"}, False),
    ],
)
def test_only_a_local_launch_gets_the_launcher(monkeypatch, env, local):
    for name in ("PYSPARK_SUBMIT_ARGS", "MASTER", "SPARK_CONF_DIR", "SPARK_REMOTE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert sessions._launches_locally() is local


def test_spark_workers_import_the_installed_pyspark_compiled(spark):
    def origin(_):
        import pyspark

        yield (pyspark.__file__, os.environ.get("PYTHONPATH", ""), sys.executable)

    ((module, path, python),) = (
        spark.sparkContext.parallelize([0], 1).mapPartitions(origin).collect()
    )
    installed = os.path.join(os.path.dirname(ARCHIVE), os.pardir, os.pardir, "__init__.py")
    assert os.path.realpath(module) == os.path.realpath(installed)  # not from inside the zip
    assert ARCHIVE not in path.split(os.pathsep) and python == sys.executable
