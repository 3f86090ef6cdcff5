"""B18: the lag of one group over 1,000 and over 10,000 buckets, ``describe_group`` against
the lag a Kafka admin client computes for a group over as many partitions (target: ratio >=
1.0, the faster client's latency over leasekit's, at 1,000; at 10,000 checked against the
same target).

For each size n, a table of n buckets and a topic of n partitions (on a Kafka broker of the
benchmark's own; KRaft creates at most 10,000 metadata records per request, so a topic of
more than 5,000 partitions is created 5,000 at a time) get 3 records in every bucket and
partition, and a group of each commits offset 1 everywhere (lag 2 per bucket) and has no live
members. Each side asks for the group's lag per bucket knowing only the group's id:

- leasekit: ``conn.describe_group(group)``: a DataFrame of every bucket's committed offset, log
  end, lag and more (time lag, owning member, last commit, status; which Kafka's figure does not
  include).
- confluent-kafka: ``AdminClient.list_consumer_group_offsets`` of the group (every partition it
  committed), then ``list_offsets`` of those partitions with ``OffsetSpec.latest()``, the lag per
  partition computed into a DataFrame (topic, partition, committed offset, log end, lag).
- aiokafka: ``AIOKafkaAdminClient.list_consumer_group_offsets``, then ``end_offsets`` of those
  partitions on an ``AIOKafkaConsumer`` without a group (aiokafka's admin client has no
  ``list_offsets``), the same DataFrame.

The Kafka calls go one after the other, as ``kafka-consumer-groups --describe`` makes them: the
partitions to ask the log ends of are those the group committed. The clients (a connection, two
admin clients, a consumer) are made once, untimed. Each size is seeded, then measured, before
the next one is seeded. A run measures each side twice in counterbalanced order (``peer_runs``),
each time three queries, after one untimed run of each; a side's figure in a run is the median
of its six latencies. Every query's frame is checked: one row per bucket, a lag of 2 in each.
The headline is the faster client's median latency over leasekit's at 1,000, median over runs;
each client's ratio and the CPU ratio (this process and the broker's JVM over this process and
the ZooKeeper server, over the same queries) beside it, and the same at 10,000.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .common import Benchmark, Outcome, load_average, log, temp_warehouse, zk_cpu_seconds
from .peer import broker_cpu_seconds, kafka_broker, produce
from .peer_clients import PEERS, AioLoop, aiokafka_consumer, create_wide_topic
from .peer_runs import Timed, summary, timed_run

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run"]

TARGET = 1.0
FULL = {"sizes": (1_000, 10_000), "records_per_bucket": 3, "committed": 1, "queries": 3}
QUICK = {**FULL, "sizes": (1_000,)}


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    measured: dict[int, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    checks: dict[str, bool] = {}
    with temp_warehouse("B18") as conn, kafka_broker("B18") as broker:
        loop = AioLoop()
        clients = _Clients(loop, broker.bootstrap)
        try:
            for n in p["sizes"]:
                _seed(conn, broker.bootstrap, n, p)
                measured[n] = _measure(conn, broker, clients, n, p, runs, checks)
        finally:
            clients.close()
            loop.close()
    first, *more = p["sizes"]
    figures, results = measured[first]
    for n in more:
        figures[f"at_{n}"] = measured[n][0]
        figures["note"] += f"; at {n:,} buckets: {measured[n][0]['note']}"
        checks[f"ratio_at_{n}_at_least_{TARGET:g}"] = measured[n][0]["ratio"] >= TARGET
        results = results + measured[n][1]
    parameters = {**p, "sizes": list(p["sizes"]), "runs": runs, "quick": quick}
    return Outcome(figures["ratio"], figures, results, parameters, checks)


def _names(n: int) -> tuple[str, str]:
    """The table and topic name, and the group's id, of size ``n``."""
    return f"lagged{n}", f"lag-{n}"


def _seed(conn: Any, bootstrap: str, n: int, p: dict[str, Any]) -> None:
    """``records_per_bucket`` records in each of n buckets and n partitions; each side's group
    commits ``committed`` everywhere."""
    import pyarrow as pa
    from confluent_kafka import TopicPartition

    import leasekit as lk

    from .members import ids_per_bucket
    from .peer_clients import commit_when_ready, confluent_consumer

    name, group = _names(n)
    started = time.perf_counter()
    table = conn.create_table(name, "id BIGINT", "id", buckets=n)
    table.append(pa.table({"id": pa.array(ids_per_bucket(n, p["records_per_bucket"]))}))
    with conn.consumer(group_id=group, enable_auto_commit=False) as consumer:
        buckets = [lk.TableBucket(name, b) for b in range(n)]
        consumer.assign(buckets)
        consumer.commit({tb: p["committed"] for tb in buckets})
    log(f"B18: leasekit: {n:,} buckets written, committed ({time.perf_counter() - started:.1f} s)")
    created = create_wide_topic(bootstrap, name, n)
    started = time.perf_counter()
    value = b"x" * 40
    produce(
        bootstrap,
        name,
        ((b, None, value) for b in range(n) for _ in range(p["records_per_bucket"])),
    )
    committer = confluent_consumer(bootstrap, group)
    commit_when_ready(committer, [TopicPartition(name, b, p["committed"]) for b in range(n)])
    committer.close()
    log(
        f"B18: Kafka: topic of {n:,} partitions created in {created:.1f} s, written and "
        f"committed in {time.perf_counter() - started:.1f} s"
    )


class _Clients:
    """The Kafka clients every query uses, made and connected once: confluent-kafka's admin
    client, aiokafka's admin client and a consumer without a group (for ``end_offsets``)."""

    def __init__(self, loop: AioLoop, bootstrap: str) -> None:
        from aiokafka.admin import AIOKafkaAdminClient
        from confluent_kafka.admin import AdminClient

        self.loop = loop
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        self.admin.list_topics(timeout=30)  # connected
        self.aio_admin = loop.run(_started(AIOKafkaAdminClient, bootstrap))
        self.aio_consumer = loop.run(aiokafka_consumer(bootstrap))

    def close(self) -> None:
        self.loop.run(self.aio_consumer.stop())
        self.loop.run(self.aio_admin.close())
        del self.admin


async def _started(kind: Any, bootstrap: str) -> Any:
    """An aiokafka client of ``kind``, made on the running loop and started."""
    client = kind(bootstrap_servers=bootstrap)
    await client.start()
    return client


def _measure(
    conn: Any,
    broker: Any,
    clients: _Clients,
    n: int,
    p: dict[str, Any],
    runs: int,
    checks: dict[str, bool],
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every run of size ``n``: the figures and each run's record."""
    _, group = _names(n)
    lag = n * (p["records_per_bucket"] - p["committed"])
    for name in ("leasekit", *PEERS):
        checks[f"{name}_every_bucket_and_lag_at_{n}"] = True

    def check(name: str, frame: pd.DataFrame) -> None:
        ok = len(frame) == n and int(frame["lag"].sum()) == lag
        if not ok:
            log(f"B18: {name}: {len(frame)} rows, lag {frame['lag'].sum()} (expected {n}, {lag})")
        checks[f"{name}_every_bucket_and_lag_at_{n}"] &= ok

    queries = {
        "leasekit": lambda: conn.describe_group(group),
        "aiokafka": lambda: clients.loop.run(_aiokafka_lag(clients, group)),
        "confluent": lambda: _confluent_lag(clients.admin, group),
    }
    sides = {name: _side(query, p["queries"]) for name, query in queries.items()}
    cpu = {
        "leasekit": lambda: zk_cpu_seconds(conn),
        **{peer: lambda: _peer_cpu(broker) for peer in PEERS},
    }
    results = []
    for i in range(-1, runs):  # run -1: one untimed warm-up of each side
        record = timed_run(max(i, 0), sides, cpu, check)
        if i >= 0:
            record["buckets"] = n
            results.append(record)
            _log_run(record, n, i, runs)
    return _summary(results, n), results


def _side(query: Any, queries: int) -> Any:
    """A side's timing: ``queries`` queries, each timed; what it got is the last frame."""

    def timing() -> tuple[list[float], Any]:
        latencies = []
        for _ in range(queries):
            start = time.perf_counter()
            frame = query()
            latencies.append(time.perf_counter() - start)
        return latencies, frame

    return lambda: Timed(timing)


def _confluent_lag(admin: Any, group: str) -> pd.DataFrame:
    """The group's committed offsets, then the log ends of those partitions: lag per partition."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import OffsetSpec

    request = [ConsumerGroupTopicPartitions(group)]
    committed = admin.list_consumer_group_offsets(request)[group].result().topic_partitions
    latest = OffsetSpec.latest()
    ends = admin.list_offsets({tp: latest for tp in committed})
    return _frame(
        [(tp.topic, tp.partition, tp.offset, ends[tp].result().offset) for tp in committed]
    )


async def _aiokafka_lag(clients: _Clients, group: str) -> pd.DataFrame:
    """As ``_confluent_lag``, through aiokafka's admin client and consumer."""
    committed = await clients.aio_admin.list_consumer_group_offsets(group)
    ends = await clients.aio_consumer.end_offsets(list(committed))
    return _frame([(tp.topic, tp.partition, om.offset, ends[tp]) for tp, om in committed.items()])


def _frame(rows: list[tuple[str, int, int, int]]) -> pd.DataFrame:
    """One row per partition: topic, partition, committed offset, log end, lag."""
    import pandas as pd

    topics, partitions, offsets, ends = zip(*rows)
    frame = pd.DataFrame(
        {"topic": topics, "partition": partitions, "current_offset": offsets, "log_end": ends}
    )
    frame["lag"] = (frame["log_end"] - frame["current_offset"]).clip(lower=0)
    return frame


def _peer_cpu(broker: Any) -> float | None:
    """CPU seconds of this process and the broker's JVM."""
    used = broker_cpu_seconds(broker)
    return None if used is None else used + time.process_time()


def _log_run(record: dict[str, Any], n: int, i: int, runs: int) -> None:
    times = ", ".join(
        f"{name} {record[f'{name}_s'] * 1000:.1f} ms" for name in ("leasekit", *PEERS)
    )
    log(
        f"B18: {n:,} buckets, run {i + 1}/{runs} "
        f"({' '.join(x[0].upper() for x in record['order'])}): median lag query {times}; ratio "
        f"{record['ratio']:.3f} against {record['fastest']}, CPU ratio "
        f"{record['cpu_ratio'] or 0:.3f}, other processes {record['other_cpu_s'] or 0:.2f} CPU s, "
        f"load {load_average()}"
    )


def _summary(results: list[dict[str, Any]], n: int) -> dict[str, Any]:
    figures = summary(results, PEERS, TARGET)
    figures["buckets"] = n
    figures["leasekit_query_ms"] = round(figures["leasekit_s"] * 1000, 2)
    for peer in PEERS:
        figures[peer]["query_ms"] = round(figures[peer]["s"] * 1000, 2)
    peers = "; ".join(
        f"{peer} {figures[peer]['query_ms']} ms (ratio {figures[peer]['ratio']:.3f}, CPU ratio "
        f"{figures[peer]['cpu_ratio'] or 0:.3f})"
        for peer in PEERS
    )
    figures["note"] = (
        f"against {figures['fastest_peer']}, the faster client; the lag of one group over "
        f"{n:,} buckets: leasekit describe_group {figures['leasekit_query_ms']} ms; {peers}"
    )
    return figures


BENCHMARK = Benchmark(
    id="B18",
    what="lag of one group over 1,000 buckets (and 10,000): describe_group vs a Kafka admin "
    "client's committed offsets and log ends (aiokafka, confluent-kafka)",
    metric="ratio",
    target=TARGET,
    op=">=",
    run=run,
    target_note="median latency, the faster Kafka client over leasekit; at 10,000 (checked)",
    spark=False,
    quick_note="1,000 buckets only (the headline's size; 10,000 not measured)",
)
