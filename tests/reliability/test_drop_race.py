"""drop_table racing acquire (docs/security.md): the drop is refused or the acquire fails,
never a pin left on deleted data."""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import pytest
from helpers import seed_empty_snapshots

import leasekit as lk
from leasekit import testing

SCHEMA = "id BIGINT, v STRING"
ROUND_SECONDS = 6.0
ACQUIRERS = 2


def _race(conns, name: str, lease_ids: list[str]) -> tuple[object, list[object]]:
    """Start a drop and one acquire_latest per lease at once; what each returned or raised."""
    start = threading.Barrier(1 + len(lease_ids))
    outcomes: list[object] = [None] * (1 + len(lease_ids))

    def run(index: int, call) -> None:
        start.wait()
        time.sleep(random.uniform(0, 0.004))
        try:
            outcomes[index] = call()
        except Exception as exc:  # recorded and judged below
            outcomes[index] = exc

    acquirers = [conns[1 + i % (len(conns) - 1)] for i in range(len(lease_ids))]
    calls = [lambda: conns[0].drop_table(name)]
    calls += [
        lambda lid=lid, c=c: c.lease(lid, "1h").acquire_latest(name)
        for lid, c in zip(lease_ids, acquirers)
    ]
    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a racer hung"
    return outcomes[0], outcomes[1:]


def _lease_arrays_on(conn, lease_id: str, table_id: str) -> list[str]:
    ctx = testing.context(conn)
    names = ctx.store.children(ctx.paths.lease_pins(lease_id)) or []
    return [n for n in names if n.startswith(f"{table_id}.")]


def test_drop_table_racing_acquire_never_leaves_a_pin_on_deleted_data(
    conn, zookeeper, warehouse, namespace
):
    # race (docs/security.md): drop_table racing acquire refuses the drop or fails the acquire (L3)
    ctx = testing.context(conn)
    others = [lk.connect(zookeeper, warehouse, namespace=namespace) for _ in range(2)]
    conns = [conn, *others]
    counts = {"refused": 0, "dropped": 0, "acquire failed": 0}
    deadline = time.monotonic() + ROUND_SECONDS
    rounds = 0
    try:
        while time.monotonic() < deadline:
            name = f"t{rounds}"
            table = conn.create_table(name, SCHEMA, "id", buckets=4)
            seed_empty_snapshots(ctx, table)
            lease_ids = [f"r{rounds}-{k}" for k in range(ACQUIRERS)]
            dropped, acquired = _race(conns, name, lease_ids)
            for lid, result in zip(lease_ids, acquired):
                assert isinstance(result, (lk.AcquireResult, lk.TableNotFoundError)), (
                    f"{lid}: {result!r}"
                )
                if isinstance(result, lk.TableNotFoundError):
                    counts["acquire failed"] += 1
            if isinstance(dropped, lk.IllegalStateError):
                # refused: the table and every pin an acquire reported are intact
                counts["refused"] += 1
                assert conn.table(name).table_id == table.table_id
                for lid, result in zip(lease_ids, acquired):
                    assert isinstance(result, lk.AcquireResult), f"{lid}: {result!r}"
                    assert conn.lease(lid).info().pins == result.acquired
                    for tb, sid in result.acquired.items():
                        pin = ctx.paths.pin(table.table_id, tb.bucket, sid, lid)
                        assert ctx.store.exists(pin) is not None, f"{pin} is gone"
                for lid in lease_ids:
                    conn.drop_kv_snapshot_lease(lid)
                conn.drop_table(name)
            else:
                assert dropped is None, f"drop_table raised {dropped!r}"
                counts["dropped"] += 1
                with pytest.raises(lk.TableNotFoundError):
                    conn.table(name)
                assert (
                    ctx.store.exists(ctx.paths.table_data(table.table_id)) is None
                )  # no pin znode left
                for lid in lease_ids:
                    arrays = _lease_arrays_on(conn, lid, table.table_id)
                    pins = (
                        {tb: s for tb, s in conn.lease(lid).info().pins.items() if tb.table == name}
                        if ctx.store.exists(ctx.paths.lease(lid))
                        else {}
                    )
                    assert not arrays and not pins, (
                        f"lease {lid} still pins dropped table {name}: {pins or arrays}"
                    )
                    conn.drop_kv_snapshot_lease(lid)
            rounds += 1
    finally:
        for other in others:
            other.close()
    print(f"{rounds} rounds: {counts}")
    assert rounds >= 5


def test_refused_drop_leaves_the_table_open_to_acquires(conn):
    # race, L3: a drop refused because of a pin does not fence the table afterwards
    ctx = testing.context(conn)
    table = conn.create_table("t", SCHEMA, "id", buckets=2)
    seed_empty_snapshots(ctx, table)
    conn.lease("a", "1h").acquire_latest("t")
    with pytest.raises(lk.IllegalStateError, match="pinned by lease"):
        conn.drop_table("t")
    before = ctx.store.round_trips
    result = conn.lease("b", "1h").acquire_latest("t")
    assert result.acquired == {lk.TableBucket("t", b): 1 for b in range(2)}
    assert ctx.store.round_trips - before <= 4  # no waiting on a leftover fence


def test_fence_of_a_dropper_that_died_before_deciding_is_cleared(conn, clock):
    # race (docs/security.md): a dropper killed after
    # marking the table does not block acquires for good
    ctx = testing.context(conn)
    from leasekit.tables import fence as drop_fence

    table = conn.create_table("t", SCHEMA, "id", buckets=2)
    seed_empty_snapshots(ctx, table)
    node = ctx.store.get(ctx.paths.table_data(table.table_id))
    drop_fence.mark(ctx, table.table_id, node.stat.version)  # ... and the dropper died here
    clock.advance(timedelta(milliseconds=drop_fence.STALE_MARK_MS + 1000))
    result = conn.lease("a", "1h").acquire_latest("t")
    assert result.acquired == {lk.TableBucket("t", b): 1 for b in range(2)}
    with pytest.raises(lk.IllegalStateError, match=r"pinned by lease\(s\) a"):
        conn.drop_table("t")


def test_dropper_that_died_after_committing_keeps_acquires_out(conn, clock):
    # race (docs/security.md): between the drop's commit and its data removal (the janitor finishes
    # it), an acquire fails with TableNotFoundError, however old the fence
    ctx = testing.context(conn)
    from leasekit import janitor
    from leasekit.leases.acquire import acquire_latest
    from leasekit.tables import fence as drop_fence
    from leasekit.zk import Check, Create, Delete
    from leasekit.zk.formats import DroppedTable

    table = conn.create_table("t", SCHEMA, "id", buckets=2)
    seed_empty_snapshots(ctx, table)
    data = ctx.paths.table_data(table.table_id)
    marked = drop_fence.mark(ctx, table.table_id, ctx.store.get(data).stat.version)
    ctx.store.commit(
        [
            Check(data, marked),
            Delete(ctx.paths.table("t")),
            Create(
                ctx.paths.dropped_table(table.table_id), DroppedTable("t", table.data_dir).encode()
            ),
        ]
    )
    clock.advance(timedelta(milliseconds=drop_fence.STALE_MARK_MS + 1000))
    with pytest.raises(lk.TableNotFoundError):
        acquire_latest(ctx, "a", [table], 3_600_000)  # a handle loaded before the drop
    assert ctx.store.exists(ctx.paths.lease("a")) is None
    janitor.run_once(conn)
    assert ctx.store.exists(data) is None and ctx.store.children(ctx.paths.dropped) == []
