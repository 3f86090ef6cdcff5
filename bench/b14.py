"""B14: records delivered to user code as columns per second, ``Consumer.poll`` against a Kafka
topic read by aiokafka and by confluent-kafka (target: ratio >= 1.0, leasekit's records/s over
the faster client's).

The same 2,000,000 order rows (``id`` BIGINT, ``customer`` and ``status`` STRING, ``amount``
DOUBLE, ``ts`` TIMESTAMP; ``common.orders_batch``) go to a 4-bucket table in appends of 100,000
and to a 4-partition topic of a Kafka broker of the benchmark's own, each row to the partition
of its bucket, as one record: key ``id`` (8 bytes, big-endian), value the row as a msgpack array
(``ts`` in microseconds), about 47 bytes. Both sides read everything from the beginning and end
with the rows as pyarrow columns in user code:

- leasekit: a consumer without a group, ``auto_offset_reset="earliest"``, built untimed, polls
  (``max_poll_records`` 10,000, the default) until it has every record; each poll hands out a
  pyarrow table per bucket (the table's columns and ``_offset``, ``_timestamp``, ``_op``).
- aiokafka: a consumer without a group (``peer_clients.AIOKAFKA_CONSUMER``: 100 MiB fetches,
  ``max_poll_records`` None, CRC checks off), started and connected to the partitions' leader
  untimed (``end_offsets``); timed from ``assign`` (positions at the beginning) through
  ``getmany`` until every record came back.
- confluent-kafka: a consumer of a fresh group id (no group is joined: ``assign``), connected
  untimed (``get_watermark_offsets``); timed from ``assign`` at ``OFFSET_BEGINNING`` through
  ``consume(num_messages=10,000)`` until every record came back.

The Kafka sides decode each batch (a partition's records of one ``getmany``, one ``consume``)
into the same five columns the fastest way found: the values joined and fed to one
``msgpack.Unpacker`` (tuples, not lists), the rows transposed with ``zip``, one ``pa.array``
per column, ``pa.table``. Every side sums the ``id`` column of each table it gets (pyarrow
compute), checked against the ids written. Kafka's sides hand out the five data columns only,
not the records' offsets and timestamps as columns, which leasekit's tables carry.

Each run measures every side twice in counterbalanced order (``peer_runs``) after one untimed
run of each; a side's figure is the mean of its two reads. The headline is leasekit's records/s
over the faster client's in each run, median over runs; each client's ratio, its share of time
spent decoding and the CPU ratio (this process and the broker's JVM over this process and the
ZooKeeper server) are beside it.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

from .common import (
    Benchmark,
    Outcome,
    load_average,
    log,
    median,
    orders_batch,
    temp_warehouse,
    zk_cpu_seconds,
)
from .peer import broker_cpu_seconds, create_topic, kafka_broker, produce
from .peer_clients import PEERS, AioLoop, aiokafka_consumer, confluent_consumer
from .peer_runs import Timed, summary, timed_run

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["BENCHMARK", "run", "decode"]

TARGET = 1.0
TOPIC = "orders"
COLUMNS = ("id", "customer", "status", "amount", "ts")
READ_TIMEOUT_S = 600.0

FULL = {"records": 2_000_000, "buckets": 4, "append_rows": 100_000, "max_records": 10_000}
QUICK = {**FULL, "records": 200_000, "append_rows": 20_000}


def run(spark: SparkSession | None, quick: bool, runs: int) -> Outcome:
    p = QUICK if quick else FULL
    n = p["records"]
    results: list[dict[str, Any]] = []
    checks = {"same_records_every_side": True}
    expected = (n, n * (n - 1) // 2)  # count, sum of ids
    decode_s: dict[str, list[float]] = {peer: [] for peer in PEERS}

    def check(name: str, got: tuple[int, int, float]) -> None:
        checks["same_records_every_side"] &= got[:2] == expected
        if name in decode_s:
            decode_s[name].append(got[2])

    with temp_warehouse("B14") as conn, kafka_broker("B14") as broker:
        _seed(conn, broker.bootstrap, p)
        loop = AioLoop()
        try:
            sides = _sides(conn, broker.bootstrap, loop, p)
            cpu = {
                "leasekit": lambda: zk_cpu_seconds(conn),
                **{peer: lambda: _peer_cpu(broker) for peer in PEERS},
            }
            for i in range(-1, runs):  # run -1: one untimed warm-up of each side
                for shares in decode_s.values():
                    shares.clear()
                record = timed_run(max(i, 0), sides, cpu, check)
                if i < 0:
                    continue
                _add_rates(record, n, decode_s)
                results.append(record)
                _log_run(record, i, runs)
        finally:
            loop.close()
    figures = _summary(results, p)
    return Outcome(figures["ratio"], figures, results, {**p, "runs": runs, "quick": quick}, checks)


def _seed(conn: Any, bootstrap: str, p: dict[str, Any]) -> None:
    """The same rows appended to the table and produced to the topic, bucket = partition."""
    import numpy as np

    from leasekit.tables.bucketing import bucket_ids

    from .common import ORDERS_DDL

    n, rng = p["records"], np.random.default_rng(14)
    table = conn.create_table(TOPIC, ORDERS_DDL, "id", buckets=p["buckets"])
    batches = []
    for start in range(0, n, p["append_rows"]):
        batch = orders_batch(rng, np.arange(start, min(n, start + p["append_rows"])))
        table.append(batch)
        batches.append((batch, bucket_ids(batch, ["id"], p["buckets"])))
    log(f"B14: {n:,} records appended to {p['buckets']} buckets")
    create_topic(bootstrap, TOPIC, p["buckets"])
    started = time.perf_counter()
    produce(bootstrap, TOPIC, _records(batches))
    log(f"B14: {n:,} records produced ({time.perf_counter() - started:.1f} s)")


def _records(batches: list[tuple[pa.Table, Any]]) -> Any:
    """``(partition, key, value)`` of every row: the bucket, ``id`` as 8 bytes, the row as a
    msgpack array."""
    import msgpack
    import pyarrow as pa

    pack = msgpack.Packer().pack
    for batch, buckets in batches:
        columns = [batch.column(c).to_pylist() for c in COLUMNS[:-1]]
        columns.append(batch.column("ts").cast(pa.int64()).to_pylist())
        for bucket, row in zip(buckets.tolist(), zip(*columns)):
            yield bucket, row[0].to_bytes(8, "big", signed=True), pack(row)


def decode(values: list[bytes]) -> pa.Table:
    """The rows of msgpack-array values as the table's columns."""
    import msgpack
    import pyarrow as pa

    unpacker = msgpack.Unpacker(use_list=False, max_buffer_size=0)
    unpacker.feed(b"".join(values))
    ids, customers, statuses, amounts, stamps = zip(*unpacker)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": pa.array(customers, pa.string()),
            "status": pa.array(statuses, pa.string()),
            "amount": pa.array(amounts, pa.float64()),
            "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
        }
    )


def _sides(conn: Any, bootstrap: str, loop: AioLoop, p: dict[str, Any]) -> dict[str, Any]:
    n, partitions = p["records"], p["buckets"]
    return {
        "leasekit": lambda: _leasekit(conn, n, p["max_records"]),
        "aiokafka": lambda: _aiokafka(loop, bootstrap, n, partitions),
        "confluent": lambda: _confluent(bootstrap, n, partitions, p["max_records"]),
    }


def _leasekit(conn: Any, n: int, max_records: int) -> Timed:
    import pyarrow.compute as pc

    consumer = conn.consumer(
        TOPIC, auto_offset_reset="earliest", enable_auto_commit=False, max_poll_records=max_records
    )

    def read() -> tuple[list[float], tuple[int, int, float]]:
        start = time.perf_counter()
        got = ids = 0
        while got < n:
            _deadline(start)
            for data in consumer.poll(timeout="1s").values():
                got += data.num_rows
                ids += pc.sum(data.column("id")).as_py()
        return [time.perf_counter() - start], (got, ids, 0.0)

    return Timed(read, consumer.close)


def _aiokafka(loop: AioLoop, bootstrap: str, n: int, partitions: int) -> Timed:
    from aiokafka import TopicPartition

    consumer = loop.run(aiokafka_consumer(bootstrap))
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    loop.run(consumer.end_offsets(tps))  # connects to the partitions' leader, untimed

    async def read() -> tuple[list[float], tuple[int, int, float]]:
        start = time.perf_counter()
        consumer.assign(tps)  # no group: every position resets to the beginning
        got = ids = 0
        decoding = 0.0
        while got < n:
            _deadline(start)
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                begin = time.perf_counter()
                got, ids = _columns([r.value for r in records], got, ids)
                decoding += time.perf_counter() - begin
        return [time.perf_counter() - start], (got, ids, decoding)

    return Timed(lambda: loop.run(read()), lambda: loop.run(consumer.stop()))


def _confluent(bootstrap: str, n: int, partitions: int, batch: int) -> Timed:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = confluent_consumer(bootstrap, f"b14-{uuid.uuid4().hex[:8]}")
    consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), 30)  # connects, untimed

    def read() -> tuple[list[float], tuple[int, int, float]]:
        start = time.perf_counter()
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = ids = 0
        decoding = 0.0
        while got < n:
            _deadline(start)
            messages = consumer.consume(batch, 1.0)
            if messages:
                begin = time.perf_counter()
                got, ids = _columns([m.value() for m in messages], got, ids)
                decoding += time.perf_counter() - begin
        return [time.perf_counter() - start], (got, ids, decoding)

    return Timed(read, consumer.close)


def _columns(values: list[bytes], got: int, ids: int) -> tuple[int, int]:
    """Decode a batch as user code would and sum its ids: the running count and sum."""
    import pyarrow.compute as pc

    data = decode(values)
    return got + data.num_rows, ids + pc.sum(data.column("id")).as_py()


def _deadline(start: float) -> None:
    if time.perf_counter() - start > READ_TIMEOUT_S:
        raise TimeoutError(f"B14: not every record read after {READ_TIMEOUT_S:.0f} s")


def _peer_cpu(broker: Any) -> float | None:
    """CPU seconds of this process and the broker's JVM."""
    used = broker_cpu_seconds(broker)
    return None if used is None else used + time.process_time()


def _add_rates(record: dict[str, Any], n: int, decode_s: dict[str, list[float]]) -> None:
    """Records/s of each side and the share of each client's time spent decoding."""
    for name in ("leasekit", *PEERS):
        record[f"{name}_records_per_s"] = n / record[f"{name}_s"]
    for peer, seconds in decode_s.items():
        record[f"{peer}_decode_share"] = sum(seconds) / (2 * record[f"{peer}_s"])


def _log_run(record: dict[str, Any], i: int, runs: int) -> None:
    rates = ", ".join(
        f"{name} {record[f'{name}_records_per_s']:,.0f}/s" for name in ("leasekit", *PEERS)
    )
    log(
        f"B14: run {i + 1}/{runs} ({' '.join(n[0].upper() for n in record['order'])}): {rates}; "
        f"ratio {record['ratio']:.3f} against {record['fastest']}, CPU ratio "
        f"{record['cpu_ratio'] or 0:.3f}, other processes {record['other_cpu_s'] or 0:.2f} CPU s, "
        f"load {load_average()}"
    )


def _summary(results: list[dict[str, Any]], p: dict[str, Any]) -> dict[str, Any]:
    figures = summary(results, PEERS, TARGET)
    figures["leasekit_records_per_s"] = round(
        median([r["leasekit_records_per_s"] for r in results])
    )
    for peer in PEERS:
        figures[peer]["records_per_s"] = round(
            median([r[f"{peer}_records_per_s"] for r in results])
        )
        figures[peer]["decode_share"] = round(
            median([r[f"{peer}_decode_share"] for r in results]), 3
        )
    peers = "; ".join(
        f"{peer} {figures[peer]['records_per_s']:,} records/s (ratio {figures[peer]['ratio']:.3f}, "
        f"{figures[peer]['decode_share']:.0%} of it decoding msgpack into columns)"
        for peer in PEERS
    )
    figures["note"] = (
        f"against {figures['fastest_peer']}, the faster client; leasekit "
        f"{figures['leasekit_records_per_s']:,} records/s; {peers}; {p['records']:,} records, "
        f"{p['buckets']} buckets/partitions"
    )
    return figures


BENCHMARK = Benchmark(
    id="B14",
    what="Consumer.poll vs a Kafka topic read by aiokafka and confluent-kafka, msgpack rows "
    "decoded into the same pyarrow columns",
    metric="ratio",
    target=TARGET,
    op=">=",
    run=run,
    target_note="records/s as columns, leasekit over the faster Kafka client",
    spark=False,
    quick_note="200,000 of 2,000,000 records",
)
