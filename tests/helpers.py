"""Test helpers that look at what a user cannot see directly: znodes, files, raw log records."""

from __future__ import annotations

import time
import uuid

import leasekit as lk
from leasekit import testing
from leasekit.testing import seed_empty_snapshots as seed_empty_snapshots


class Recorder(lk.BucketRebalanceListener):
    """A rebalance listener that records its calls, in order, as ("revoked" | "assigned",
    buckets)."""

    def __init__(self):
        self.calls = []

    def on_buckets_revoked(self, revoked):
        self.calls.append(("revoked", set(revoked)))

    def on_buckets_assigned(self, assigned):
        self.calls.append(("assigned", set(assigned)))

    def revoked(self):
        """Every bucket revoked so far."""
        return set().union(*(b for kind, b in self.calls if kind == "revoked"))


def namespace_tree(conn) -> dict[str, bytes]:
    """Every znode of the connection's namespace with its data (the clock excluded)."""
    ctx = testing.context(conn)
    paths = [p for p in ctx.store.descendants(ctx.paths.root) if p != ctx.paths.clock]
    nodes = ctx.store.get_many(paths)
    return {p: n.data for p, n in zip(paths, nodes) if n is not None}


def warehouse_files(conn) -> set[str]:
    """Every data file of the connection's namespace (warehouse-relative paths)."""
    ctx = testing.context(conn)
    return {e.path for e in ctx.warehouse.list(ctx.tables_dir)}


def read_log(table, since: dict[int, int] | None = None) -> dict[int, list[dict]]:
    """Every stored log record per bucket, with ``_offset`` and ``_timestamp_ms``, read with pyarrow
    (only the segments that reach past ``since[bucket]``, when given)."""
    import pyarrow.parquet as pq

    from leasekit.log.segments import list_segments

    out: dict[int, list[dict]] = {}
    for bucket, segs in list_segments(table, range(table.refresh().layout.count)).items():
        rows = []
        for seg in segs:
            if since is not None and seg.end_offset <= since.get(bucket, 0):
                continue
            for i, rec in enumerate(pq.read_table(seg.file).to_pylist()):
                rec["_offset"] = seg.base_offset + i
                # a merged segment's file keeps each record's own timestamp (R8)
                own = rec.pop("_timestamp", None)
                rec["_timestamp_ms"] = seg.timestamp_ms if own is None else own
                rows.append(rec)
        out[bucket] = rows
    return out


def pin_znodes(
    conn, table, lease_id: str, snapshot_ids: dict[int, int] | None = None
) -> dict[int, int]:
    """{bucket: snapshot_id} of every pin znode the lease has under the table's snapshots
    (only under ``snapshot_ids``, when given, to keep checks of 100,000 buckets quick)."""
    ctx = testing.context(conn)
    paths, tid = ctx.paths, table.table_id
    if snapshot_ids is None:
        buckets = list(range(table.num_buckets))
        snaps = ctx.store.children_many([paths.snapshots(tid, b) for b in buckets])
        candidates = [(b, int(s)) for b, names in zip(buckets, snaps) for s in (names or [])]
    else:
        candidates = sorted(snapshot_ids.items())
    kids = ctx.store.children_many([paths.snapshot(tid, b, s) for b, s in candidates])
    return {b: s for (b, s), names in zip(candidates, kids) if names and lease_id in names}


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Run the ``leasekit`` command line in-process: (exit code, stdout, stderr)."""
    from leasekit import cli

    capsys.readouterr()
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_cli_json(capsys, *argv: str):
    """Run the command line with ``--json`` (added if missing); its parsed output."""
    import json

    code, out, err = run_cli(capsys, *argv, *([] if "--json" in argv else ["--json"]))
    assert code == 0, err
    return json.loads(out)


def grow(table, rounds: int, rows: int | None = None) -> None:
    """``rounds`` times: append to the table's buckets, then register a snapshot of each at its
    end offset with one small Parquet file (no Spark job, so a long history stays cheap;
    retention reads only snapshot metadata and file names)."""
    import pyarrow as pa

    from leasekit.log.markers import in_flight
    from leasekit.log.state import read_states
    from leasekit.snapshots.register import Written, register

    ctx = table.context
    for r in range(rounds):
        table.append([{"id": k, "v": f"r{r}"} for k in range(rows or 8 * table.num_buckets)])
        with in_flight(ctx) as token:
            rel = f"{table.data_dir}/snapshots/{token}"
            written = {}
            for b, state in enumerate(read_states(table, range(table.num_buckets))):
                if state is not None:
                    path = f"{rel}/_bucket={b}/part-00000.parquet"
                    written[b] = Written(
                        state.end,
                        [path],
                        1,
                        ctx.warehouse.write_parquet(path, pa.table({"id": [b]})),
                    )
            register(table, written, token)


class TcpProxy:
    """A TCP relay in front of ZooKeeper, so a test can cut one client's connection (as a
    network partition would) and restore it: clients connect to ``address``."""

    def __init__(self, upstream: str) -> None:
        import socket
        import threading

        host, port = upstream.split(",")[0].rsplit(":", 1)
        self._upstream = (host, int(port))
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._held: set[int] = set()
        """Clients (by id) whose connections carry nothing any more and are never closed."""
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="test-proxy").start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if self._cut or self._closed:
                    client.close()  # partitioned: the connection attempt fails
                    continue
                upstream = socket.create_connection(self._upstream)
                self._pairs.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b, id(client)), daemon=True).start()

    def _pump(self, source, target, client: int) -> None:
        import socket

        try:
            while data := source.recv(65536):
                if client not in self._held:
                    target.sendall(data)
        except OSError:
            pass
        if client in self._held:
            return  # the client hears nothing, not even that the server closed the connection
        for s in (source, target):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        """Drop every connection and refuse new ones until ``restore``."""
        import socket

        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def hold(self) -> None:
        """From now on the connections open now carry nothing either way and stay open, even
        when the server closes its side: their clients hear of nothing until their own
        timeouts (as across a network that loses the server's FIN); new connections work."""
        with self._lock:
            self._held |= {id(client) for client, _ in self._pairs}

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._server.close()


def wait_for(predicate, timeout: float, what: str, step: float = 0.02):
    """The first truthy value of ``predicate()`` within ``timeout`` seconds, else an
    AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Compacted:
    """A table made of ``rounds`` (each an append followed by a snapshot), compacted by Spark once
    in a warehouse and namespace of its own; ``make`` gives a test's connection the same table
    with copies of those snapshots registered as its own (``testing.register_copies``), so a
    module's tests pay Spark's compaction once instead of once each."""

    def __init__(self, zookeeper, spark, folder, schema, rounds, *, name="orders", buckets=4):
        self.schema, self.rounds, self.name, self.buckets = schema, rounds, name, buckets
        with lk.connect(zookeeper, str(folder), namespace=f"t{uuid.uuid4().hex[:12]}") as conn:
            table = conn.create_table(name, schema, "id", buckets=buckets)
            self.generations = []
            for rows in rounds:
                table.append(rows)
                self.generations.append(table.snapshot(spark))

    def make(self, conn):
        """The table in ``conn``'s namespace: the same appends, each followed by the copies of
        its generation of snapshots."""
        table = conn.create_table(self.name, self.schema, "id", buckets=self.buckets)
        for rows, snapshots in zip(self.rounds, self.generations):
            table.append(rows)
            assert len(testing.register_copies(table, snapshots)) == len(snapshots)
        return table
