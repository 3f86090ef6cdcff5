"""notebooks/streaming_pipeline.ipynb through papermill, twice as it is, in its own namespace of
a test warehouse (D2-D4): it makes its example tables, the target before the stream starts,
waits for its first batch to commit and says how long that took, shows the group's lag live
for ``run_for``, catches up, stops between two batches and checks the target; the second run
resumes from its checkpoint, which lies in the working directory."""

from __future__ import annotations

import re

import nbformat
from lag_report_run import not_static

import leasekit as lk
from tests.notebooks.test_notebooks import (
    NOTEBOOKS,
    _all_text,
    _embedded,
    _nothing_left_running,
    _run,
)

NAME = "streaming_pipeline.ipynb"
OWN = "streaming-pipeline"
FIRST_BATCH = re.compile(r"first batch committed \d+ s after start\(\): \d+ records")
LAG = re.compile(r"lag \d+ records, members \['spark-[0-9a-f]{32}-\d+'\], status OK")


def _check_run(nb: nbformat.NotebookNode, tmp_path) -> None:
    text = _all_text(nb)
    # D3: the run waits for its first batch to commit, then watches the group's lag with the
    # query as its live member (it printed "no batch committed yet" for all of run_for)
    assert "no batch committed yet" not in text
    first = FIRST_BATCH.search(text)
    assert first is not None, text[-3000:]
    lags = [line for line in text.splitlines() if line.startswith("lag ")]
    assert lags and all(LAG.fullmatch(line) for line in lags), lags
    assert first.end() < text.index(lags[0])
    assert f"checkpoint {tmp_path}/streaming_pipeline_checkpoint" in text
    assert "VERDICT: OK — orders_enriched holds the " in text


def test_streaming_pipeline_commits_a_batch_and_shows_its_lag_twice_as_is(tmp_path):
    with _embedded(tmp_path / "warehouse") as warehouse:
        nbs = [_run(NAME, tmp_path, warehouse=str(warehouse)) for _ in range(2)]
        for nb in nbs:
            _check_run(nb, tmp_path)
        first, second = (_all_text(nb) for nb in nbs)
        made = f"made the example table orders in namespace {OWN}"
        target = f"made the target table orders_enriched in namespace {OWN}"
        assert made in first and target in first.split("started: orders")[0]
        assert made not in second and target not in second
        # every output reads without the kernel (tables as HTML, the panel's static rendering)
        assert [not_static(nb) for nb in nbs] == [[], []]
        with lk.connect(warehouse=str(warehouse)) as conn:
            assert conn.tables() == [] and conn.consumer_groups() == []
        with lk.connect(warehouse=str(warehouse), namespace=OWN) as conn:
            assert conn.tables() == ["orders", "orders_enriched"] and conn.leases() == []
    _nothing_left_running(tmp_path)


def test_streaming_pipeline_says_how_long_its_first_batch_takes_and_cites_rule_ids():
    nb = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "The first micro-batch commits 10–40 seconds after `start()`" in text
    assert "D2" in text and "D3" in text and "docs/rules.md" in text
    every = "\n".join(c.source for c in nb.cells)
    imported = every.index("from pyspark.sql import functions as F")
    assert imported < every.index("F.upper(")
