"""Every example of README.md and docs/ runs as written: each page's ```python blocks and
``leasekit ...`` shell lines, in order, in a fresh working directory (so a fresh embedded
ZooKeeper, warehouse and namespaces of its own), twice in a row in one Python process as a
reader re-running a notebook would (the second run finds what the first left). A block that
is not meant to run says why with ``<!-- not run: ... -->`` (tests/docs/examples.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from leasekit import embedded

from .examples import ROOT, examples, pages

RUNNER = r"""
import json, os, subprocess, sys, traceback
items, page = json.load(open(sys.argv[1])), sys.argv[2]
for run in (1, 2):
    print(f"=== run {run}", flush=True)
    scope = {"__name__": "__main__"}
    for item in items:
        where = f"{page}:{item['line']}"
        print(f"--- {where}", flush=True)
        if item["kind"] == "python":
            try:
                exec(compile(item["code"], where, "exec"), scope)
            except BaseException:
                print(f"FAILED {where} on run {run}", flush=True)
                traceback.print_exc()
                sys.stdout.flush(); sys.stderr.flush()
                os._exit(1)
            continue
        done = subprocess.run(["bash", "-o", "pipefail", "-c", item["code"]], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
        print(done.stdout, flush=True)
        if done.returncode != item["exit_code"]:
            print(f"FAILED {where} on run {run}: {item['code']!r} exited {done.returncode}, "
                  f"not {item['exit_code']}", flush=True)
            os._exit(1)
sys.stdout.flush(); sys.stderr.flush()
os._exit(0)
"""

PAGES = [p for p in pages() if examples(p.read_text())]


def _env() -> dict[str, str]:
    """The reader's environment: no leasekit settings, the virtualenv's commands first."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEKIT_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_page(name: str, text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run the examples of a page (its name and text) as the test does, in ``tmp_path``."""
    items = examples(text)
    (tmp_path / ".examples.json").write_text(json.dumps([i._asdict() for i in items]))
    work = tmp_path / "work"
    work.mkdir()
    try:
        return subprocess.run(
            [sys.executable, "-c", RUNNER, str(tmp_path / ".examples.json"), name],
            cwd=work,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=1800,
        )
    finally:
        embedded.stop(work / "leasekit-warehouse" / "_zookeeper")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_example_of_the_page_runs_twice(page: Path, tmp_path: Path) -> None:
    done = run_page(str(page.relative_to(ROOT)), page.read_text(), tmp_path)
    shown = f"{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-4000:]}"
    assert done.returncode == 0, shown
    assert done.stdout.count("=== run ") == 2, shown


def test_a_block_that_fails_as_written_fails_the_page(tmp_path: Path) -> None:
    # The README's former "In a notebook" block used spark_df, defined nowhere; a block that
    # only works once (creating a table unconditionally) fails on the second run.
    page = (
        "```python\nimport leasekit as lk\nprint('ready')\n```\n"
        "<!-- not run: shown only -->\n```python\n1/0\n```\n"
        "```sh\nleasekit --version\n```\n"
        "```python\nspark_df.count()\n```\n"
    )
    done = run_page("page.md", page, tmp_path)
    assert done.returncode == 1
    assert "FAILED page.md:13 on run 1" in done.stdout and "NameError" in done.stderr
    once = "```python\nimport os\nos.mkdir('made')\n```\n"
    (tmp_path / "again").mkdir()
    done = run_page("once.md", once, tmp_path / "again")
    assert done.returncode == 1 and "FAILED once.md:2 on run 2" in done.stdout


def test_shell_lines_and_markers_are_found() -> None:
    text = (
        "```bash\nmake demo\n$ leasekit table list   # the tables\n"
        "leasekit lease drop nope  # exits 2\n```\n"
        "<!-- not run: runs until interrupted -->\n```sh\nleasekit exporter\n```\n"
        "```text\nleasekit table list\n```\n"
    )
    assert [(e.code, e.exit_code, e.line) for e in examples(text)] == [
        ("leasekit table list   # the tables", 0, 3),
        ("leasekit lease drop nope  # exits 2", 2, 4),
    ]
