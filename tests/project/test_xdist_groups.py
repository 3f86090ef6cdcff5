"""The suite's distribution holds: under ``make test``'s ``--dist loadgroup`` the tests of one
``xdist_group`` run on one worker, whether the group is marked in the test file or added by a
``conftest.py`` hook as ``tests/conftest.py`` does (a module's module-scoped fixture, the
Spark server jobs). When a pytest and pytest-xdist pair stops honouring groups, nothing fails
by itself: module fixtures are built once per worker and the server jobs run at once."""

from __future__ import annotations

import subprocess
import sys

_CONFTEST = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith("test_hooked.py"):
            item.add_marker(pytest.mark.xdist_group("hooked"))
"""

_TEST = """
import os, time
import pytest

{mark}
@pytest.mark.parametrize("i", range(6))
def test_where(i):
    time.sleep(0.05)
    with open("workers.txt", "a") as f:
        f.write(f"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
"""


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_marked.py").write_text(_TEST.format(mark='@pytest.mark.xdist_group("m")'))
    (tmp_path / "test_hooked.py").write_text(_TEST.format(mark=""))
    (tmp_path / "test_free.py").write_text(_TEST.format(mark=""))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q"]
        + ["-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for line in (tmp_path / "workers.txt").read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
    assert len(workers["test_marked"]) == 1, workers  # marked in the file
    assert len(workers["test_hooked"]) == 1, workers  # marked by a conftest hook
    assert workers["test_free"] == {"gw0", "gw1"}, workers  # both workers had work
