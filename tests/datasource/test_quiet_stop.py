"""An orderly stop is quiet: ``query.stop()`` of a ``format("leasekit")`` stream, in a session
``leasekit.spark_session()`` started, prints no error even when it cancels a running batch
(D3, D4), and one stopped between two batches prints nothing. The query runs in a process of
its own (``stopped_query.py``) whose stderr, where Spark logs, is read whole."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent / "stopped_query.py"


def _stopped(conn, zookeeper, warehouse, namespace, tmp_path, *options: str) -> str:
    """Run ``stopped_query.py`` on a table of 2,000 records; its stderr."""
    conn.create_table("src", "id BIGINT, v STRING", "id", buckets=4)
    conn.create_table("dst", "id BIGINT, v STRING", "id", buckets=2)
    conn.table("src").append([{"id": i, "v": "x"} for i in range(2_000)])
    args = [zookeeper, warehouse, namespace, "src", "dst", "etl", str(tmp_path / "checkpoint")]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, *options],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the JVM's own notices (its unified log, e.g. a class-data archive made for another
    # checkout) go to stdout as "[0.37s][warning][cds...]": they are not the query's output
    said = [line for line in done.stdout.splitlines() if not re.match(r"\[[\d.]+s\]\[", line)]
    assert said == ["STOPPING", "STOPPED"], done.stdout
    return done.stderr


@pytest.mark.parametrize("sink", ["leasekit", "foreach"])
def test_a_query_stopped_during_a_batch_prints_no_error(
    conn, zookeeper, warehouse, namespace, tmp_path, sink
):
    # D3, D4: stop() cancels the batch it runs into. Spark's write path logged each cancelled
    # task and the aborted batch as ERROR (with TaskKilledException stacks), and with
    # foreachBatch its check of whether the failure was the stop overflowed the stream thread's
    # stack (a java.lang.StackOverflowError of 1,000 lines)
    stderr = _stopped(conn, zookeeper, warehouse, namespace, tmp_path, "--sink", sink)
    loud = [
        line
        for line in stderr.splitlines()
        if " ERROR " in line or "Exception in thread" in line or "StackOverflowError" in line
    ]
    assert loud == [], stderr[-5000:]


def test_a_query_stopped_between_batches_prints_nothing(
    conn, zookeeper, warehouse, namespace, tmp_path
):
    # D3: a query that caught up is stopped between two triggers: it cancels nothing, and
    # Spark's warnings that it found no job to cancel are left out too
    stderr = _stopped(conn, zookeeper, warehouse, namespace, tmp_path, "--when", "idle")
    assert stderr.split("STOPPING\n", 1)[1] == ""
