"""A consumer group member in a process of its own, for the takeover tests (C12, C11): it
consumes ``orders`` and writes what happens to an event file, one line each, flushed at once:

    ASSIGNED <time> <member> <generation> <bucket> ...   (on_buckets_assigned)
    REVOKED <time> <member> <bucket> ...                 (on_buckets_revoked)
    R <bucket> <offset>                                  (a record returned by poll)
    PROCESSING <time>                                    (records written, commit next)
    COMMITTED <time>
    REFUSED <time> <error>                               (the commit raised CommitFailedError)

After each batch it commits the positions it reached (at least once: records are written
before their commit), after sleeping ``--pause`` seconds when asked to. With ``--getone N``
it takes records one at a time instead (``getone``: the rest of what it read stays buffered),
N in a row, then sleeps ``--pause`` seconds, and commits nothing.

    python tests/group_member.py ZOOKEEPER WAREHOUSE NAMESPACE EVENTS
        [--session-timeout S] [--pause S] [--getone N]
"""

from __future__ import annotations

import argparse
import sys
import time

import leasekit as lk


class Events(lk.BucketRebalanceListener):
    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (lives as long as the process)
        self.consumer: lk.Consumer | None = None

    def line(self, *fields: object) -> None:
        self.file.write(" ".join(str(f) for f in fields) + "\n")
        self.file.flush()

    def on_buckets_assigned(self, assigned):
        c = self.consumer
        self.line(
            "ASSIGNED",
            time.time(),
            c.member_id,
            c.generation,
            *sorted(tb.bucket for tb in assigned),
        )

    def on_buckets_revoked(self, revoked):
        self.line(
            "REVOKED", time.time(), self.consumer.member_id, *sorted(tb.bucket for tb in revoked)
        )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("zookeeper", "warehouse", "namespace", "events"):
        parser.add_argument(name)
    parser.add_argument("--session-timeout", default="2s")
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--getone", type=int, default=0)
    args = parser.parse_args(argv)
    events = Events(args.events)
    with lk.connect(args.zookeeper, args.warehouse, namespace=args.namespace) as conn:
        consumer = conn.consumer(
            "orders",
            group_id="g",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout=args.session_timeout,
            listener=events,
        )
        events.consumer = consumer
        if args.getone:
            return take_one_at_a_time(consumer, events, args.getone, args.pause)
        while True:
            batch = consumer.poll(timeout="0.2s")
            if not batch:
                continue
            for tb, table in batch.items():
                for offset in table.column("_offset").to_pylist():
                    events.line("R", tb.bucket, offset)
            positions = {tb: consumer.position(tb) for tb in batch}
            events.line("PROCESSING", time.time())
            if args.pause:
                time.sleep(args.pause)
            try:
                consumer.commit(positions)
                events.line("COMMITTED", time.time())
            except lk.CommitFailedError as exc:
                events.line("REFUSED", time.time(), str(exc).replace("\n", " "))


def take_one_at_a_time(consumer: lk.Consumer, events: Events, n: int, pause: float) -> int:
    while True:
        for _ in range(n):
            record = consumer.getone(timeout="0.1s")
            if record is not None:
                events.line("R", record.table_bucket.bucket, record.offset)
        time.sleep(pause)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
