"""What Spark's Python workers of a stream load: every one of them (the source runner, the read
planner, the readers) imports ``leasekit.datasource.stream`` when it unpickles the reader, before
the first batch; each module it loads for nothing adds to that batch's delay."""

from __future__ import annotations

import subprocess
import sys


def test_a_streams_workers_do_not_load_pandas():
    # D2: pandas (0.2-1 s a process, more on a busy machine) came with pyarrow.dataset, which
    # only a batch read's filtered whole-file scan needs; a stream's row ranges need
    # pyarrow.parquet
    probe = (
        "import sys, leasekit.datasource.stream; "
        "print(sorted({'pandas', 'pyarrow.dataset'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
