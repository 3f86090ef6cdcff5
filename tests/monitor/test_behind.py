"""M6 replayed as a user meets it: a group consuming about a third as fast as its table is
written, in bursts, with the exporter sampling the lag history. Burrow's per-commit rules do
not fire on bursty appends; the overview, the CLI and the metrics must still say BEHIND, with
an eta of "never", and stop saying it once the group catches up."""

from __future__ import annotations

import threading
import time

from helpers import run_cli
from leasekit.widgets import ConsumerPanel

import leasekit as lk
from leasekit import testing
from leasekit.live import eta_text
from leasekit.monitor.exporter.serve import MetricsServer
from tests.monitor.test_metrics import scrape

TB = lk.TableBucket
GROUP = "enrich"
BEHIND_SERIES = (("group", GROUP),)


class Consumer(threading.Thread):
    """Polls and commits about ``rate`` records a second; as fast as it can once ``drain``."""

    def __init__(self, conn, rate: float) -> None:
        super().__init__(daemon=True)
        self.conn, self.rate = conn, rate
        self.drain, self.stop, self.error = threading.Event(), threading.Event(), None

    def run(self) -> None:
        try:
            with self.conn.consumer(
                "orders", group_id=GROUP, auto_offset_reset="earliest", enable_auto_commit=False
            ) as consumer:
                while not self.stop.is_set():
                    draining = self.drain.is_set()
                    got = consumer.poll(timeout="0.2s", max_records=10_000 if draining else 10)
                    if got:
                        consumer.commit()
                    if not draining:
                        time.sleep(sum(b.num_rows for b in got.values()) / self.rate)
        except Exception as exc:  # reported by the test
            self.error = exc


def _overview(conn):
    return conn.group_overview().set_index("group").loc[GROUP]


def test_a_group_falling_behind_bursty_appends_is_behind_until_it_catches_up(conn, capsys, target):
    # M6: consuming ~50 records/s of ~150 appended in bursts: BEHIND, eta "never", everywhere
    # (the overview, the ConsumerPanel's header, the CLI and the metrics)
    conn.update_settings({"monitor.interval": "1s", "monitor.rate-window": "20s"})
    table = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    consumer = Consumer(conn, rate=50)
    with MetricsServer(testing.context(conn), port=0) as server:
        consumer.start()
        try:
            deadline, next_id = time.monotonic() + 40, 0
            while time.monotonic() < deadline:
                table.append([{"id": next_id + i, "v": "x"} for i in range(300)])  # a burst
                next_id += 300
                time.sleep(2)
            assert consumer.error is None, consumer.error
            assert conn.group_status(GROUP).status in ("OK", "WARN")  # Burrow alone: no alarm
            row = _overview(conn)
            assert row["status"] == "BEHIND", row.to_dict()
            assert row["consume_rate"] < 0.9 * row["produce_rate"]
            assert eta_text(row["eta"], row["consume_rate"]) == "never"
            code, out, err = run_cli(capsys, "consumer", "overview", *target)
            assert code == 0, err
            (line,) = [x for x in out.splitlines() if x.startswith(GROUP)]
            assert "BEHIND" in line.split() and "never" in line.split()
            panel = ConsumerPanel(conn, GROUP, auto_refresh=False)  # its header, from its history
            panel.refresh()
            assert ">BEHIND</b>" in panel.summary.value, panel.summary.value
            got = scrape(server.url)
            assert got["leasekit_group_behind"][BEHIND_SERIES] == 1.0
            status = got["leasekit_group_status"]
            assert status[(("group", GROUP), ("status", "BEHIND"))] == 1.0
            assert got["leasekit_group_eta_seconds"][BEHIND_SERIES] == float("inf")

            consumer.drain.set()  # appends stop; the group catches up
            deadline = time.monotonic() + 60
            while _overview(conn)["status"] == "BEHIND" or _overview(conn)["total_lag"]:
                assert consumer.error is None, consumer.error
                assert time.monotonic() < deadline, _overview(conn).to_dict()
                time.sleep(0.5)
            assert _overview(conn)["status"] in ("OK", "WARN")
            panel.refresh()
            assert "BEHIND" not in panel.summary.value, panel.summary.value
            panel.close()
            deadline = time.monotonic() + 30
            while scrape(server.url)["leasekit_group_behind"][BEHIND_SERIES] != 0.0:
                assert time.monotonic() < deadline, "the metrics kept saying BEHIND"
                time.sleep(0.5)
        finally:
            consumer.stop.set()
            consumer.join(30)
