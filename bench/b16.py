"""B16: latency of a commit of 1,000 offsets, ``consumer.commit`` against a Kafka consumer's
commit through aiokafka and through confluent-kafka (target: ratio >= 1.0, the faster
client's median latency over leasekit's).

A 1,000-bucket table and a 1,000-partition topic of a Kafka broker of the benchmark's own get
the same number of records in every bucket and partition (one more than the commits of the
benchmark, so every committed offset lies within the log). Each side has its own group and a
consumer that is assigned all 1,000 buckets or partitions by hand (no group membership: the
group has no live members; the Kafka consumers' partitions are paused, so they fetch nothing
in the background), built untimed, and commits offset 0 everywhere untimed (leasekit
creates its offset znodes; Kafka creates ``__consumer_offsets`` and finds the coordinator):

- leasekit: ``consumer.commit({tb: offset, ...})`` of all 1,000 buckets (one pipelined read of
  the stored offsets, the log ends and the clock, then one ZooKeeper transaction, fsynced by
  the server).
- aiokafka: ``await consumer.commit({tp: offset, ...})`` of all 1,000 partitions (one
  OffsetCommit request to the group coordinator).
- confluent-kafka: ``consumer.commit(offsets=[...], asynchronous=False)``, the same request
  (the partitions' errors in its answer checked).

Every commit moves every offset on by one, so each writes all 1,000. A run measures each side
in two blocks of 10 commits, the blocks in counterbalanced order (``peer_runs``), each after a
settle step, after one untimed run of each; a side's figure in a run is the median latency of
its 20 commits. The headline is the faster client's median latency over leasekit's, median
over runs; each client's ratio, the latencies and the CPU ratio (this process and the broker's
JVM over this process and the ZooKeeper server, over the same number of commits) beside it.
After each block the first and last offsets are read back (untimed) and checked. After each
run, untimed for the ratio, three bare ZooKeeper transactions of 1,000 setData ops write the
leasekit group's offset znodes back as they are (``bench.b4``'s floor): what any commit of
1,000 offsets through ZooKeeper costs at least (``zookeeper_floor_ms``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .common import Benchmark, Outcome, load_average, log, median, temp_warehouse, zk_cpu_seconds
from .peer import broker_cpu_seconds, create_topic, kafka_broker, produce
from .peer_clients import PEERS, AioLoop, aiokafka_consumer, confluent_consumer
from .peer_runs import Timed, summary, timed_run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run"]

TARGET = 1.0
TOPIC = "orders"
GROUP = "b16-leasekit"
FULL = {"buckets": 1000, "commits_per_block": 10}
QUICK = FULL  # a commit of 1,000 offsets is cheap: the quick run measures the full size


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    n = p["buckets"]
    records = (runs + 1) * 2 * p["commits_per_block"] + 1  # every committed offset in the log
    results: list[dict[str, Any]] = []
    checks = {"offsets_stored_every_side": True}
    with temp_warehouse("B16") as conn, kafka_broker("B16") as broker:
        _seed(conn, broker.bootstrap, n, records)
        loop = AioLoop()
        committers = _committers(conn, broker.bootstrap, loop, n)
        try:
            sides = {name: _side(c, p["commits_per_block"]) for name, c in committers.items()}
            cpu = {
                "leasekit": lambda: zk_cpu_seconds(conn),
                **{peer: lambda: _peer_cpu(broker) for peer in PEERS},
            }

            def check(name: str, last: int) -> None:
                checks["offsets_stored_every_side"] &= committers[name].stored() == [last, last]

            for i in range(-1, runs):  # run -1: one untimed warm-up of each side
                record = timed_run(max(i, 0), sides, cpu, check)
                record["zookeeper_floor_s"] = _zookeeper_floor(conn, n)
                if i >= 0:
                    results.append(record)
                    _log_run(record, i, runs)
        finally:
            for committer in committers.values():
                committer.close()
            loop.close()
    figures = _summary(results, p)
    parameters = {**p, "records_per_bucket": records, "runs": runs, "quick": quick}
    return Outcome(figures["ratio"], figures, results, parameters, checks)


def _seed(conn: Any, bootstrap: str, n: int, records: int) -> None:
    """``records`` records in each of ``n`` buckets and of ``n`` partitions."""
    import pyarrow as pa

    from .members import ids_per_bucket

    table = conn.create_table(TOPIC, "id BIGINT", "id", buckets=n)
    table.append(pa.table({"id": pa.array(ids_per_bucket(n, records))}))
    create_topic(bootstrap, TOPIC, n)
    value = b"x" * 40
    produce(bootstrap, TOPIC, ((p, None, value) for p in range(n) for _ in range(records)))
    log(f"B16: {records} records in each of {n:,} buckets and partitions")


class _Committer:
    """One side's consumer: ``commit(offset)`` commits ``offset`` to every bucket or partition,
    ``stored()`` reads back the first and last committed offsets."""

    def __init__(self, commit: Any, stored: Any, close: Any) -> None:
        self.commit, self.stored, self.close = commit, stored, close
        self.offset = 0
        self.commit(0)  # untimed: creates what the first commit creates


def _committers(conn: Any, bootstrap: str, loop: AioLoop, n: int) -> dict[str, _Committer]:
    from aiokafka import TopicPartition as AioTP
    from confluent_kafka import TopicPartition

    import leasekit as lk

    buckets = [lk.TableBucket(TOPIC, b) for b in range(n)]
    lease = conn.consumer(group_id=GROUP, enable_auto_commit=False)
    lease.assign(buckets)
    tps = [AioTP(TOPIC, p) for p in range(n)]
    aio = loop.run(_aio_assigned(bootstrap, tps))
    conf = confluent_consumer(bootstrap, "b16-confluent")
    conf.assign([TopicPartition(TOPIC, p) for p in range(n)])
    conf.pause([TopicPartition(TOPIC, p) for p in range(n)])  # commits only, no fetches

    async def aio_stored() -> list[int]:
        return [await aio.committed(tps[0]), await aio.committed(tps[-1])]

    ends = [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, n - 1)]
    return {
        "leasekit": _Committer(
            lambda o: lease.commit({tb: o for tb in buckets}),
            lambda: [lease.committed(buckets[0]), lease.committed(buckets[-1])],
            lease.close,
        ),
        "aiokafka": _Committer(
            lambda o: loop.run(aio.commit({tp: o for tp in tps})),
            lambda: loop.run(aio_stored()),
            lambda: loop.run(aio.stop()),
        ),
        "confluent": _Committer(
            lambda o: _confluent_commit(conf, [TopicPartition(TOPIC, p, o) for p in range(n)]),
            lambda: [tp.offset for tp in conf.committed(ends, 30)],
            conf.close,
        ),
    }


def _confluent_commit(consumer: Any, offsets: list[Any]) -> None:
    """A synchronous commit, its partitions' errors checked (it raises for the request's own)."""
    failed = [tp for tp in consumer.commit(offsets=offsets, asynchronous=False) if tp.error]
    if failed:
        raise RuntimeError(f"commit of {len(failed)} offsets failed: {failed[0].error}")


async def _aio_assigned(bootstrap: str, tps: list[Any]) -> Any:
    """aiokafka's consumer of group ``b16-aiokafka``, assigned ``tps``, paused: it commits
    and fetches nothing."""
    consumer = await aiokafka_consumer(bootstrap, "b16-aiokafka")
    consumer.assign(tps)
    consumer.pause(*tps)
    return consumer


def _side(committer: _Committer, commits: int) -> Any:
    """A side's block: ``commits`` commits, each of every offset moved on by one, each timed."""

    def block() -> tuple[list[float], int]:
        latencies = []
        for _ in range(commits):
            committer.offset += 1
            start = time.perf_counter()
            committer.commit(committer.offset)
            latencies.append(time.perf_counter() - start)
        return latencies, committer.offset

    return lambda: Timed(block)


def _zookeeper_floor(conn: Any, n: int, times: int = 3) -> float:
    """Median seconds of ``times`` bare ZooKeeper transactions of 1,000 setData ops writing
    the leasekit group's offset znodes back as they are (``bench.b4``'s floor)."""
    from leasekit import testing
    from leasekit.zk import SetData

    ctx = testing.context(conn)
    table_id = conn.table(TOPIC).table_id
    paths = [ctx.paths.offset(GROUP, table_id, b) for b in range(n)]
    seconds = []
    for _ in range(times):
        stored = ctx.store.get_many(paths)
        ops = [SetData(path, node.data, node.stat.version) for path, node in zip(paths, stored)]
        start = time.perf_counter()
        ctx.store.commit(ops)
        seconds.append(time.perf_counter() - start)
    return median(seconds)


def _peer_cpu(broker: Any) -> float | None:
    """CPU seconds of this process and the broker's JVM."""
    used = broker_cpu_seconds(broker)
    return None if used is None else used + time.process_time()


def _log_run(record: dict[str, Any], i: int, runs: int) -> None:
    times = ", ".join(
        f"{name} {record[f'{name}_s'] * 1000:.1f} ms" for name in ("leasekit", *PEERS)
    )
    log(
        f"B16: run {i + 1}/{runs} ({' '.join(n[0].upper() for n in record['order'])}): "
        f"median commit {times}; ratio {record['ratio']:.3f} against {record['fastest']}, "
        f"CPU ratio {record['cpu_ratio'] or 0:.3f}, other processes "
        f"{record['other_cpu_s'] or 0:.2f} CPU s, load {load_average()}"
    )


def _summary(results: list[dict[str, Any]], p: dict[str, Any]) -> dict[str, Any]:
    figures = summary(results, PEERS, TARGET)
    for name in ("leasekit", *PEERS):
        every = [s for r in results for s in r[f"{name}_timings_s"]]
        into = figures if name == "leasekit" else figures[name]
        prefix = "leasekit_" if name == "leasekit" else ""
        into[f"{prefix}commit_ms"] = round(median(every) * 1000, 2)
        into[f"{prefix}commit_max_ms"] = round(max(every) * 1000, 2)
    figures["zookeeper_floor_ms"] = round(
        median([r["zookeeper_floor_s"] for r in results]) * 1000, 2
    )
    peers = "; ".join(
        f"{peer} {figures[peer]['commit_ms']} ms (ratio {figures[peer]['ratio']:.3f}, CPU ratio "
        f"{figures[peer]['cpu_ratio'] or 0:.3f})"
        for peer in PEERS
    )
    figures["note"] = (
        f"against {figures['fastest_peer']}, the faster client; median commit of "
        f"{p['buckets']:,} offsets: leasekit {figures['leasekit_commit_ms']} ms; {peers}; "
        f"a bare ZooKeeper transaction of the same 1,000 writes {figures['zookeeper_floor_ms']} ms"
    )
    return figures


BENCHMARK = Benchmark(
    id="B16",
    what="commit of 1,000 offsets: consumer.commit vs a Kafka consumer's commit (aiokafka, "
    "confluent-kafka)",
    metric="ratio",
    target=TARGET,
    op=">=",
    run=run,
    target_note="median latency, the faster Kafka client over leasekit",
    spark=False,
    quick_full_size=True,
)
