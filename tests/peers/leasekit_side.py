"""leasekit's side of the parity scenarios: a table stands for a topic (its buckets for the
partitions), a record's value is its ``v`` column, and a "partition" write appends rows whose
keys route to that bucket."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from helpers import TcpProxy, read_log

import leasekit as lk
from leasekit import errors
from leasekit.tables.bucketing import murmur3_hash

from .sides import Records, unique, wait_until

TB = lk.TableBucket
KINDS = {
    errors.CommitFailedError: "commit-failed",
    errors.IllegalStateError: "not-assigned",
    errors.IllegalOperationError: "no-group",
    errors.GroupNotEmptyError: "group-not-empty",
    errors.InvalidArgumentError: "invalid-argument",
    errors.NoOffsetForBucketError: "no-offset",
    errors.OffsetOutOfRangeError: "out-of-range",
}


class _Listener(lk.BucketRebalanceListener):
    """Records the calls; with ``commit_on_revoke`` set, commits each revoked bucket's
    position with that metadata inside ``on_buckets_revoked``."""

    def __init__(self, reader: LeasekitReader) -> None:
        self.reader = reader

    def on_buckets_revoked(self, revoked: set[TB]) -> None:
        self.reader.calls.append(("revoked", frozenset(tb.bucket for tb in revoked)))
        meta, consumer = self.reader.commit_on_revoke, self.reader.consumer
        if meta is not None and revoked:
            consumer.commit(
                {tb: lk.OffsetAndMetadata(consumer.position(tb), meta) for tb in revoked}
            )

    def on_buckets_assigned(self, assigned: set[TB]) -> None:
        self.reader.calls.append(("assigned", frozenset(tb.bucket for tb in assigned)))


class LeasekitReader:
    """A leasekit consumer of one table; a ``zombie`` one reaches ZooKeeper through a proxy
    that ``silence`` cuts (a network partition) and ``unsilence`` restores."""

    def __init__(self, side: LeasekitSide, table: str, group: str | None, **options: Any) -> None:
        self.table, self.calls = table, []
        self.commit_on_revoke = options.pop("commit_on_revoke", None)
        self.proxy = self.own_conn = None
        conn = side.conn
        if options.pop("zombie", False):
            self.proxy = TcpProxy(side.zookeeper)
            self.own_conn = conn = lk.connect(
                self.proxy.address, side.warehouse, namespace=side.namespace
            )
        settings: dict[str, Any] = {
            "group_id": group,
            "auto_offset_reset": options.pop("reset", "earliest"),
            "enable_auto_commit": options.pop("auto_commit", False),
            "auto_commit_interval": f"{options.pop('auto_commit_s', 5)}s",
            "session_timeout": f"{options.pop('session_s', 6)}s",
        }
        if "assignor" in options:
            settings["assignor"] = options.pop("assignor")
        if group is not None:
            settings["listener"] = _Listener(self)
        assert not options, f"options {sorted(options)} are not known"
        self.consumer = conn.consumer(table, **settings)
        self._closed = False

    def _tb(self, bucket: int) -> TB:
        return TB(self.table, bucket)

    def poll(self, timeout: float = 0.2, max_records: int | None = None) -> Records:
        got = self.consumer.poll(timeout=f"{timeout}s", max_records=max_records)
        return {
            tb.bucket: list(zip(rows.column("_offset").to_pylist(), rows.column("v").to_pylist()))
            for tb, rows in got.items()
        }

    def getone(self, timeout: float = 10.0) -> tuple[int, int, str] | None:
        record = self.consumer.getone(timeout=f"{timeout}s")
        return (
            None
            if record is None
            else (record.table_bucket.bucket, record.offset, record.value["v"])
        )

    def assignment(self) -> set[int]:
        return {tb.bucket for tb in self.consumer.assignment()}

    def position(self, partition: int) -> int:
        return self.consumer.position(self._tb(partition))

    def committed(self, partition: int) -> int | None:
        return self.consumer.committed(self._tb(partition))

    def commit(self, offsets: dict[int, int | tuple[int, str]] | None = None) -> None:
        if offsets is None:
            self.consumer.commit()
            return
        self.consumer.commit(
            {
                self._tb(p): lk.OffsetAndMetadata(*o) if isinstance(o, tuple) else o
                for p, o in offsets.items()
            }
        )

    def seek(self, partition: int, offset: int) -> None:
        self.consumer.seek(self._tb(partition), offset)

    def seek_to_beginning(self, *partitions: int) -> None:
        self.consumer.seek_to_beginning(*map(self._tb, partitions))

    def seek_to_end(self, *partitions: int) -> None:
        self.consumer.seek_to_end(*map(self._tb, partitions))

    def offsets_for_times(self, times: dict[int, int]) -> dict[int, int | None]:
        got = self.consumer.offsets_for_times({self._tb(p): t for p, t in times.items()})
        return {tb.bucket: o for tb, o in got.items()}

    def pause(self, *partitions: int) -> None:
        self.consumer.pause(*map(self._tb, partitions))

    def resume(self, *partitions: int) -> None:
        self.consumer.resume(*map(self._tb, partitions))

    def silence(self) -> None:
        assert self.proxy is not None, "only a zombie reader can be silenced"
        self.proxy.cut()

    def unsilence(self) -> None:
        """Restore the connection and wait until the member is connected again (its session
        found expired if it was cut longer than its timeout): a refusal after this is the
        expired membership's, not the cut connection's (C16)."""
        assert self.proxy is not None, "only a zombie reader can be silenced"
        self.proxy.restore()
        coordinator = self.consumer._coordinator
        wait_until("the zombie's reconnection", lambda: not coordinator.suspended)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.consumer.close()
        finally:
            if self.own_conn is not None:
                self.own_conn.close()
            if self.proxy is not None:
                self.proxy.close()


class LeasekitSide:
    """leasekit on the test's connection (embedded ZooKeeper, a fresh namespace)."""

    name = "leasekit"

    def __init__(self, conn: Any, zookeeper: str, warehouse: str, namespace: str) -> None:
        self.conn, self.zookeeper = conn, zookeeper
        self.warehouse, self.namespace = warehouse, namespace
        self.readers: list[LeasekitReader] = []
        self._keys: dict[str, dict[int, list[int]]] = {}
        self._used: dict[str, set[int]] = {}

    def topic(self, partitions: int) -> str:
        name = unique("parity").replace("-", "_")
        self.conn.create_table(name, "id BIGINT, v STRING", "id", buckets=partitions)
        self._used[name] = set()
        self._route(name)
        return name

    def _route(self, name: str) -> None:
        """The keys not written yet, by the active bucket each routes to now."""
        keys = [k for k in range(50_000) if k not in self._used[name]]
        hashes = murmur3_hash(pa.table({"id": pa.array(keys, pa.int64())}), ["id"])
        routed: dict[int, list[int]] = {}
        for key, bucket in zip(keys, self.conn.table(name).layout.route(hashes).tolist()):
            routed.setdefault(bucket, []).append(key)
        self._keys[name] = routed

    def grow(self, topic: str) -> list[int]:
        """Split bucket 0 (sealed at its end, K1): the two new buckets."""
        low, high = self.conn.table(topic).split_bucket(0)
        self._route(topic)
        return [low.bucket, high.bucket]

    def shrink(self, topic: str, buckets: list[int]) -> int:
        """Merge the two buckets of a split back into one new bucket."""
        merged = self.conn.table(topic).merge_buckets(*buckets)
        self._route(topic)
        return merged.bucket

    def write(
        self, topic: str, values: dict[int, list[str]], timestamp_ms: int | None = None
    ) -> dict[int, list[int]]:
        """Append ``values`` to each bucket in order (``timestamp_ms`` cannot be chosen: a
        record's timestamp is its commit time, W3); the records' timestamps."""
        table = self.conn.table(topic)
        before = table.end_offsets()
        rows = []
        for bucket, vals in values.items():
            keys = self._keys[topic][bucket]
            rows += [{"id": keys.pop(0), "v": v} for v in vals]
            self._used[topic].update(row["id"] for row in rows)
        table.append(rows)
        since = {tb.bucket: o for tb, o in before.items()}
        log = read_log(table, since)
        return {b: [r["_timestamp_ms"] for r in log[b] if r["_offset"] >= since[b]] for b in values}

    def end_offsets(self, topic: str) -> dict[int, int]:
        return {tb.bucket: o for tb, o in self.conn.table(topic).end_offsets().items()}

    def reader(self, topic: str, group: str | None = None, **options: Any) -> LeasekitReader:
        made = LeasekitReader(self, topic, group, **options)
        self.readers.append(made)
        return made

    def _rows(self, frame: Any, topic: str) -> list[dict[str, Any]]:
        return [r for r in frame.to_dict("records") if r["table"] == topic]

    def committed_metadata(self, group: str, topic: str) -> dict[int, tuple[int, str]]:
        rows = self._rows(self.conn.group_board(group).frame, topic)
        return {
            r["bucket"]: (int(r["current_offset"]), r["metadata"])
            for r in rows
            if _value(r["current_offset"]) is not None
        }

    def lag(self, group: str, topic: str) -> dict[int, tuple[int | None, int, int | None]]:
        out = {}
        for r in self._rows(self.conn.describe_group(group), topic):
            known = _value(r["current_offset"])
            out[r["bucket"]] = (known, int(r["log_end_offset"]), _value(r["lag"]))
        return out

    def reset_offsets(self, group: str, topic: str, offset: int, partitions: list[int]) -> None:
        buckets = [TB(topic, p) for p in partitions]
        self.conn.reset_offsets(group, to=offset, tables=[topic], buckets=buckets, dry_run=False)

    def delete_group(self, group: str) -> None:
        assert self.conn.delete_group(group)

    def members(self, group: str) -> list[set[int]]:
        return [{tb.bucket for tb in m.assigned} for m in self.conn.group_members(group)]

    def kind_of(self, error: BaseException) -> str | None:
        return KINDS.get(type(error))  # the exact class: a subclass is another refusal

    def error_name(self, error: BaseException) -> str:
        return type(error).__name__

    def close(self) -> None:
        for reader in self.readers:
            try:
                reader.close()
            except Exception:  # noqa: BLE001 - closing what a test left open, best effort
                pass


def _value(cell: Any) -> int | None:
    """An int cell of a frame, None for a missing one (``<NA>``)."""
    import pandas as pd

    return None if pd.isna(cell) else int(cell)
