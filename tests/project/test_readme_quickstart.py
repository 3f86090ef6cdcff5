"""The README's quickstart block, taken from README.md, runs as it is twice in a row in one
Python process (as when pasted into a notebook twice): it works in a namespace of its own on
the embedded defaults, and the second run reuses its table instead of failing with
TableExistsError."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from leasekit import embedded

ROOT = Path(__file__).resolve().parents[2]

RUNNER = """
import sys
code = open(sys.argv[1]).read()
for run in (1, 2):
    print(f"--- run {run}", flush=True)
    exec(compile(code, "README quickstart", "exec"), {})
import leasekit as lk
with lk.connect(namespace="leasekit") as conn:
    print("default namespace tables:", conn.tables())
"""


def quickstart_block() -> str:
    """The first ```python block of README.md's "Quickstart" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md's Quickstart has no python block"
    return match.group(1)


def test_readme_quickstart_runs_twice(tmp_path):
    code = quickstart_block()
    assert 'conn.create_table("orders"' in code and "Dashboard(conn)" in code
    (tmp_path / "quickstart.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEKIT_")}
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, "quickstart.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        embedded.stop(tmp_path / "leasekit-warehouse" / "_zookeeper")
    assert done.returncode == 0, done.stderr[-3000:]
    runs = done.stdout.split("--- run ")[1:]
    assert len(runs) == 2
    for out in runs:  # the lease reads the 1,000 upserted keys, on the first run and the second
        assert re.search(r"\|\s*new\|\s*1000\|", out), out
    assert "default namespace tables: []" in done.stdout  # its own namespace only
    assert "TableExistsError" not in done.stderr
