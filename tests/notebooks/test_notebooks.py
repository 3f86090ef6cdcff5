"""The notebooks of notebooks/ run through papermill with a real kernel against the session's
ZooKeeper, a test warehouse and a fresh namespace; a failing cell fails the test.

Each run's kernel has the test's ``tmp_path`` as its working directory, so whatever it starts
(its Spark JVM included) can be found there afterwards: nothing may be left running."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pandas as pd
import papermill
import pytest
from helpers import grow
from lag_report_run import not_static

import leasekit as lk
from leasekit import embedded
from leasekit.sizes import human_bytes

TB = lk.TableBucket
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


# -- running notebooks ------------------------------------------------------------------------


def _execute(name: str, tmp_path: Path, **parameters) -> Path:
    """Run notebooks/<name> in a fresh python3 kernel working in ``tmp_path``; the output path."""
    output = tmp_path / f"{Path(name).stem}-output.ipynb"
    papermill.execute_notebook(
        str(NOTEBOOKS / name),
        str(output),
        parameters=parameters,
        kernel_name="python3",
        cwd=str(tmp_path),
        progress_bar=False,
        start_timeout=120,
        execution_timeout=300,
    )
    return output


def _run(name: str, tmp_path: Path, **parameters) -> nbformat.NotebookNode:
    return nbformat.read(_execute(name, tmp_path, **parameters), as_version=4)


def _text(cell) -> str:
    """What a code cell printed and displayed, as text (stdout, stderr, text/plain, text/html).
    A stream's consecutive outputs are one text: the kernel sends what a print writes in
    chunks when it flushes between them."""
    parts = []
    previous = None
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream" and previous == out["name"]:
            parts[-1] += out["text"]
        elif out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            parts.extend(out["data"].get(kind, "") for kind in ("text/plain", "text/html"))
        elif out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}")
        previous = out.get("name") if out["output_type"] == "stream" else None
    return "\n".join(parts)


def _all_text(nb) -> str:
    return "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")


def _cell(nb, starts_with: str):
    """The code cell whose source starts with ``starts_with``."""
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts_with)]
    return cell


def _processes_in(path: Path) -> list[str]:
    """Processes (pid and command) whose working directory is ``path`` or below it."""
    path = path.resolve()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry.name}/cwd")
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
        if cwd == str(path) or cwd.startswith(f"{path}/"):
            found.append(f"{entry.name}: {command}")
    return found


def _nothing_left_running(path: Path, timeout: float = 30.0) -> None:
    """The kernel and every process it started (Spark's JVM) end once papermill is done."""
    if not os.path.isdir("/proc"):
        return
    deadline = time.monotonic() + timeout
    while (left := _processes_in(path)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"still running in {path}: {left}"


# -- quickstart -------------------------------------------------------------------------------


@contextlib.contextmanager
def _embedded(warehouse: Path) -> Iterator[Path]:
    """A warehouse whose embedded ZooKeeper (started by a notebook, or by a connection of the
    test) is stopped at the end."""
    try:
        yield warehouse
    finally:
        embedded.stop(warehouse / "_zookeeper")


def _spark_start_is_quiet(nb) -> None:
    # the first Spark cell shows no stderr block: Spark starts quietly
    spark_cell = _cell(nb, "spark = lk.spark_session()")
    assert [o for o in spark_cell.outputs if o.get("name") == "stderr"] == []


def _no_widget_but_the_dashboard(nb) -> None:
    # progress persists as text: no tqdm widget is saved in a cell (only the Dashboard's view)
    views = [
        c.source.splitlines()[0]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert views == ["dash = Dashboard(conn)"]
    snapshot_cell = _text(_cell(nb, "snaps = orders.snapshot(spark)"))
    assert "snapshot orders: 100%" in snapshot_cell and "3/3" in snapshot_cell


def _check_quickstart(nb, conn) -> None:
    """What one run of the quickstart shows and leaves, the same on every run."""
    orders = conn.table("orders")
    assert (orders.schema.names, orders.num_buckets) == (["order_id", "status", "amount"], 4)

    # L12: the lease reads exactly its pinned snapshots while the table moves on.
    pinned_rows = len(set(range(1000)) - set(range(3, 1000, 40)))
    lease_cell = _text(_cell(nb, 'with conn.lease("quickstart"'))
    assert "pinned snapshots: {0: 1, 1: 1, 2: 1, 3: 1}" in lease_cell
    assert f"rows through the lease: {pinned_rows}\n" in lease_cell
    assert f"rows in the table now:  {pinned_rows + 500}\n" in lease_cell
    for status, count in {"cancelled": 225, "new": 200, "paid": 300, "shipped": 250}.items():
        assert f"|{status:>9}|{count:>5}|" in lease_cell

    # drop_on_exit: "quickstart" went with its block; the hold is this run's, on the new table.
    (hold,) = conn.leases()
    assert hold.lease_id == "quickstart-hold" and hold.pins == {TB("orders", 0): 1}
    assert all([s.snapshot_id for s in orders.snapshots(b)] == [1, 2, 3] for b in range(4))  # S2

    # C2, C3: 3 rounds of at most 200 records, committed; the consumer left the group on close.
    described = conn.describe_group("quickstart-billing")
    assert len(described) == 4 and described["current_offset"].sum() == 600
    assert (described["lag"] == described["log_end_offset"] - described["current_offset"]).all()
    assert described["consumer_id"].isna().all() and conn.group_members("quickstart-billing") == []
    assert (described["time_lag"] > pd.Timedelta(0)).all()
    lag_cell = _text(_cell(nb, "described = conn.describe_group(group)"))
    assert "consumer_id" in lag_cell and "days" not in lag_cell  # human_duration, not Timedelta

    # R1, R6: the plan the notebook showed keeps the pinned snapshot and says why.
    plan_cell = _text(_cell(nb, "orders.snapshot(spark)"))
    plan = conn.retention_plan("orders")
    assert f"reclaimable: {human_bytes(plan.reclaimable_bytes)}" in plan_cell  # one format
    assert (
        "pinned by lease quickstart-hold until" in plan_cell and "newest 2 of bucket" in plan_cell
    )
    assert {(i.table_bucket.bucket, i.item_id) for i in plan.deletes} == {(1, 1), (2, 1), (3, 1)}
    assert [i for i in plan.items if i.kind == "orphan"] == []  # no _SUCCESS, no .crc

    # The Dashboard is the last expression of its cell, its static rendering beside its view
    # what the notebook shows without a kernel
    (shown,) = _cell(nb, "dash = Dashboard(conn)").outputs
    assert "application/vnd.jupyter.widget-view+json" in shown["data"]
    static = shown["data"]["text/html"]
    assert "leasekit-static-dashboard" in static and "<script" not in static
    assert "quickstart-billing" in static and "quickstart-hold" in static
    _spark_start_is_quiet(nb)
    _no_widget_but_the_dashboard(nb)


def test_quickstart_runs_twice_as_is_in_its_own_namespace(tmp_path):
    # Run as a user does: only the warehouse is given (zookeeper None: its embedded server),
    # and the namespace is the notebook's own, "quickstart". What an earlier run left behind,
    # under other shapes, is started over; a second run in a row shows the same.
    with _embedded(tmp_path / "warehouse") as warehouse:
        with lk.connect(warehouse=str(warehouse), namespace="quickstart") as conn:
            old = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
            grow(old, 1)
            conn.lease("quickstart-hold", "1h").acquire_latest("orders")
            with conn.consumer(group_id="quickstart-billing", enable_auto_commit=False) as c:
                c.assign([TB("orders", 0)])
                c.commit({TB("orders", 0): 3})
        for run in (1, 2):
            nb = _run("quickstart.ipynb", tmp_path, warehouse=str(warehouse))
            with lk.connect(warehouse=str(warehouse), namespace="quickstart") as conn:
                _check_quickstart(nb, conn)
            assert not (tmp_path / "leasekit-warehouse").exists(), run  # the parameter was used
        with lk.connect(warehouse=str(warehouse)) as conn:
            assert conn.tables() == []  # nothing in the shared default namespace
    _nothing_left_running(tmp_path)


def test_quickstart_in_another_namespace_drops_nothing(
    conn, zookeeper, warehouse, namespace, tmp_path
):
    # Given a namespace that is not its own, the quickstart reuses an orders table of its
    # columns and drops nothing: the table, its rows and another lease stay.
    orders = conn.create_table(
        "orders", "order_id BIGINT, status STRING, amount DOUBLE", "order_id", buckets=4
    )
    orders.append([{"order_id": 10_000 + i, "status": "mine", "amount": 1.0} for i in range(8)])
    before = orders.end_offsets()
    nb = _run(
        "quickstart.ipynb", tmp_path, zookeeper=zookeeper, warehouse=warehouse, namespace=namespace
    )
    assert "reusing the table orders of namespace" in _text(
        _cell(nb, 'OWN_NAMESPACE = "quickstart"')
    )
    again = conn.table("orders")
    assert again.table_id == orders.table_id  # the same table, never dropped
    assert all(again.end_offsets()[tb] > before[tb] for tb in before)  # appended to
    # the rows that were there are still read through the notebook's lease
    assert f"|{'mine':>9}|{8:>5}|" in _text(_cell(nb, 'with conn.lease("quickstart"'))
    _nothing_left_running(tmp_path)


# -- pinned_read ------------------------------------------------------------------------------


def _orders_with_a_snapshot(conn, spark) -> pd.DataFrame:
    """An orders table whose newest snapshot holds the returned rows; rows appended after it
    (status "late") are in the log only."""
    orders = conn.create_table(
        "orders", "order_id BIGINT, status STRING, amount DOUBLE", "order_id", buckets=4
    )
    rows = pd.DataFrame(
        {
            "order_id": range(400),
            "status": [("new", "paid", "shipped")[i % 3] for i in range(400)],
            "amount": [(i % 10) * 0.5 for i in range(400)],  # sums are exact in binary
        }
    )
    orders.append(rows)
    gone = list(range(0, 400, 7))
    orders.delete([{"order_id": k} for k in gone])
    orders.snapshot(spark)
    orders.append(pd.DataFrame({"order_id": range(400, 450), "status": "late", "amount": 1.0}))
    return rows[~rows["order_id"].isin(gone)]


def test_pinned_read_writes_the_query_over_the_pinned_snapshot(
    conn, spark, zookeeper, warehouse, namespace, tmp_path
):
    # L12: the query sees exactly the pinned snapshot, not the log appended after it
    state = _orders_with_a_snapshot(conn, spark)
    nb = _run(
        "pinned_read.ipynb",
        tmp_path,
        zookeeper=zookeeper,
        warehouse=warehouse,
        namespace=namespace,
        table="orders",
        lease_id="nightly-report",
        lease_duration="10m",
        query="SELECT status, count(*) AS n, sum(amount) AS total FROM orders GROUP BY status",
        output_path="by_status.parquet",
    )

    written = (
        pd.read_parquet(tmp_path / "by_status.parquet").sort_values("status").reset_index(drop=True)
    )
    expected = (
        state.groupby("status")
        .agg(n=("order_id", "size"), total=("amount", "sum"))
        .reset_index()
        .sort_values("status")
        .reset_index(drop=True)
    )
    pd.testing.assert_frame_equal(written, expected, check_dtype=False)
    assert "late" not in set(written["status"])

    # drop_on_exit: the lease is gone, and the notebook stopped what it started.
    assert conn.leases() == []
    out = _all_text(nb)
    assert "lease nightly-report pins {0: 1, 1: 1, 2: 1, 3: 1}" in out
    assert "dropped lease nightly-report" in out
    assert "stopped the SparkSession" in out and "closed the connection" in out
    assert "lease:          nightly-report" in out
    assert f"rows written:   {len(expected)}\n" in out
    assert f"output:         {tmp_path.resolve() / 'by_status.parquet'} (parquet)" in out
    assert not_static(nb) == []  # tables saved as HTML
    _nothing_left_running(tmp_path)


def test_pinned_read_drops_its_lease_when_the_query_fails(
    conn, spark, zookeeper, warehouse, namespace, tmp_path
):
    # A failing cell fails the run and the lease is dropped all the same (drop_on_exit)
    _orders_with_a_snapshot(conn, spark)
    with pytest.raises(papermill.PapermillExecutionError) as failed:
        _execute(
            "pinned_read.ipynb",
            tmp_path,
            zookeeper=zookeeper,
            warehouse=warehouse,
            namespace=namespace,
            query="SELECT no_such_column FROM orders",
            output_format="csv",
            output_path="never.csv",
        )
    assert failed.value.ename == "AnalysisException"

    assert conn.leases() == []  # lease_id None: a new id, acquired and then dropped
    nb = nbformat.read(tmp_path / "pinned_read-output.ipynb", as_version=4)
    failing = _text(_cell(nb, "from pyspark.sql import SparkSession"))
    assert "pins {0: 1, 1: 1, 2: 1, 3: 1}" in failing  # the lease existed before the query failed
    assert "dropped lease" not in failing
    assert "stopped the SparkSession" in failing and "closed the connection" in failing
    assert not (tmp_path / "never.csv").exists()
    _nothing_left_running(tmp_path)


# -- retention_audit --------------------------------------------------------------------------


def _history(conn, spark) -> dict[tuple[str, int], list[int]]:
    """Two tables with three snapshots per bucket (the default keeps two) and a lease pinning
    the oldest snapshot of events bucket 0; the snapshot ids per (table, bucket)."""
    for name in ("events", "other"):
        table = conn.create_table(name, "id BIGINT, v STRING", "id", buckets=2)
        for i in range(3):
            table.append([{"id": k, "v": f"r{i}"} for k in range(20)])
            table.snapshot(spark)
    conn.lease("audit-pin", "1h").acquire({TB("events", 0): 1})
    return _snapshot_ids(conn)


def _snapshot_ids(conn) -> dict[tuple[str, int], list[int]]:
    return {
        (name, b): [s.snapshot_id for s in conn.table(name).snapshots(b)]
        for name in conn.tables()
        for b in range(conn.table(name).num_buckets)
    }


def test_retention_audit_shows_the_plan_and_changes_nothing(
    conn, spark, zookeeper, warehouse, namespace, tmp_path
):
    # R6: the plan changes nothing and gives every item a reason
    before = _history(conn, spark)
    plan = conn.retention_plan()
    nb = _run(
        "retention_audit.ipynb",
        tmp_path,
        zookeeper=zookeeper,
        warehouse=warehouse,
        namespace=namespace,
    )

    assert _snapshot_ids(conn) == before
    assert [lease.lease_id for lease in conn.leases()] == ["audit-pin"]
    out = _all_text(nb)
    assert f"{len(plan.items)} items, {len(plan.deletes)} to delete" in out
    # one byte format in panels, CLI and notebooks
    assert f"reclaimable: {human_bytes(plan.reclaimable_bytes)}" in out
    assert plan.reclaimable_bytes > 0
    assert "newest 2 of bucket" in out and "pinned by lease audit-pin until" in out
    assert "older than the newest 2 of bucket, not pinned" in out
    assert "audit only: nothing was changed" in out and "retention ran" not in out
    counts = _text(_cell(nb, 'items.groupby(["kind", "action"])'))
    assert "delete" in counts and "keep" in counts and "segment" in counts
    assert not_static(nb) == []  # tables saved as HTML
    _nothing_left_running(tmp_path)


def test_retention_audit_executes_on_one_table(
    conn, spark, zookeeper, warehouse, namespace, tmp_path
):
    # R1: newest 2 and the pinned snapshot kept, the rest deleted, files after metadata;
    # only `table`
    before = _history(conn, spark)
    plan = conn.retention_plan("events")
    doomed = conn.table("events").snapshots(1)[0]
    nb = _run(
        "retention_audit.ipynb",
        tmp_path,
        zookeeper=zookeeper,
        warehouse=warehouse,
        namespace=namespace,
        table="events",
        execute=True,
    )

    after = _snapshot_ids(conn)
    assert after[("events", 0)] == [1, 2, 3]  # snapshot 1 pinned by audit-pin
    assert after[("events", 1)] == [2, 3]
    assert (
        after[("other", 0)] == before[("other", 0)] and after[("other", 1)] == before[("other", 1)]
    )
    assert not any(os.path.exists(f) for f in doomed.files)

    out = _all_text(nb)
    assert f"reclaimable: {human_bytes(plan.reclaimable_bytes)}" in out
    assert (
        f"retention ran: 1 deleted, {human_bytes(doomed.size_bytes)} freed" in out
        and ", 0 errors" in out
    )
    report = _text(_cell(nb, "if execute:"))
    assert "older than the newest 2 of bucket, not pinned" in report and "events" in report
    assert not_static(nb) == []  # the report saved as HTML
    _nothing_left_running(tmp_path)


# -- every job notebook, twice, as is (the streaming pipeline: test_streaming_pipeline.py) -----

_EXAMPLES = {
    # notebook: (its own namespace, what the first run says it made, a line every run prints)
    "pinned_read.ipynb": (
        "pinned-read",
        "made the example table orders in namespace pinned-read",
        "dropped lease ",
    ),
    "retention_audit.ipynb": (
        "retention-audit",
        "made the example table events in namespace retention-audit",
        "audit only: nothing was changed",
    ),
    "consumer_lag_report.ipynb": (
        "lag-report",
        "made the example group billing in namespace lag-report",
        "VERDICT: OK — group billing, status OK, max lag 0",
    ),
}


@pytest.mark.parametrize("name", sorted(_EXAMPLES))
def test_job_notebook_runs_twice_as_is_in_its_own_namespace(name, tmp_path):
    # Only the warehouse is given: the embedded ZooKeeper, and the notebook's own namespace,
    # where it makes an example on the first run and reuses it on the second; nothing lands in
    # the shared default namespace.
    own, made, every_run = _EXAMPLES[name]
    with _embedded(tmp_path / "warehouse") as warehouse:
        nbs = [_run(name, tmp_path, warehouse=str(warehouse)) for _ in range(2)]
        outputs = [_all_text(nb) for nb in nbs]
        assert made in outputs[0] and made not in outputs[1]
        # "Reports that outlive the kernel" (docs/panels.md): every output reads without the
        # kernel (tables as HTML, charts as images, a panel with its static rendering), none is
        # only a repr
        assert [not_static(nb) for nb in nbs] == [[], []]
        assert all(every_run in out for out in outputs)
        with lk.connect(warehouse=str(warehouse)) as conn:
            assert conn.tables() == [] and conn.consumer_groups() == []
        with lk.connect(warehouse=str(warehouse), namespace=own) as conn:
            assert len(conn.tables()) == 1 and conn.leases() == []
    _nothing_left_running(tmp_path)
