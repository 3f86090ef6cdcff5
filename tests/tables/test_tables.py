"""Table administration and bad input: every mistake gets a typed error and writes nothing."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pyarrow as pa
import pytest
from helpers import namespace_tree, warehouse_files

import leasekit as lk
from leasekit import testing


def test_create_describe_list_drop(conn):
    table = conn.create_table(
        "orders",
        "id BIGINT, status STRING, amount DECIMAL(10,2)",
        "id",
        buckets=3,
        properties={"kv.snapshot.num-retained": "3", "log.retention": "2d"},
    )
    assert table.name == "orders"
    assert table.primary_key == ("id",)
    assert table.num_buckets == 3
    assert table.buckets == [lk.TableBucket("orders", b) for b in range(3)]
    assert table.schema.field("id").nullable is False
    assert table.schema.field("amount").type == pa.decimal128(10, 2)
    assert table.properties == {
        "kv.snapshot.num-retained": 3,
        "log.retention": timedelta(days=2),
        "log.retention.bytes": None,
        "log.retention.respect-consumers": False,
        "log.segment.max-rows": 1_000_000,
        "log.segment.target-bytes": 16 * 1024 * 1024,
        "log.segment.min-merge": 4,
    }
    assert conn.table("orders") == table
    assert conn.table(table).name == "orders"
    conn.create_table("a_first", pa.schema([("k", pa.string())]), "k")
    assert conn.tables() == ["a_first", "orders"]
    table.append(pd.DataFrame({"id": [1], "status": ["new"], "amount": [None]}))
    conn.drop_table("orders")
    assert conn.tables() == ["a_first"]
    with pytest.raises(lk.TableNotFoundError):
        conn.table("orders")
    assert not any(
        p.startswith(f"{testing.context(conn).tables_dir}/orders/{table.table_id}")
        for p in warehouse_files(conn)
    )


def test_recreated_table_does_not_see_old_data(conn):
    old = conn.create_table("t", "id BIGINT", "id", buckets=2)
    old.append([{"id": 1}, {"id": 2}])
    conn.drop_table("t")
    new = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=2)
    assert sum(new.end_offsets().values()) == 0
    with pytest.raises(lk.TableNotFoundError):
        old.append([{"id": 3}])  # a stale handle cannot write into the new table
    assert sum(new.end_offsets().values()) == 0


def test_create_existing_table(conn):
    conn.create_table("t", "id BIGINT", "id")
    before = namespace_tree(conn)
    with pytest.raises(lk.TableExistsError):
        conn.create_table("t", "id BIGINT", "id")
    assert namespace_tree(conn) == before


def test_input_forms_are_equivalent(conn):
    table = conn.create_table("t", "id BIGINT, v STRING", "id", buckets=1)
    table.append([{"id": 1, "v": "a"}])
    table.append(pd.DataFrame({"id": [2], "v": ["b"]}))
    table.append(pa.table({"id": pa.array([3], pa.int64()), "v": ["c"]}))
    table.delete(pd.DataFrame({"id": [1]}))
    table.delete(pa.table({"id": [2]}))
    assert table.end_offsets() == {lk.TableBucket("t", 0): 5}


BAD_CREATE = [
    pytest.param(dict(name=""), lk.InvalidArgumentError, id="empty-name"),
    pytest.param(dict(name="a/b"), lk.InvalidArgumentError, id="slash-name"),
    pytest.param(dict(name=".hidden"), lk.InvalidArgumentError, id="dot-name"),
    pytest.param(dict(name="-x"), lk.InvalidArgumentError, id="dash-name"),
    pytest.param(dict(name="x" * 129), lk.InvalidArgumentError, id="long-name"),
    pytest.param(dict(name=42), TypeError, id="int-name"),
    pytest.param(dict(schema="id BIGINT,"), lk.InvalidArgumentError, id="ddl-trailing-comma"),
    pytest.param(dict(schema="id NOTATYPE"), lk.InvalidArgumentError, id="ddl-unknown-type"),
    pytest.param(
        dict(schema="id BIGINT, ID STRING"), lk.InvalidArgumentError, id="duplicate-column"
    ),
    pytest.param(
        dict(schema="id BIGINT, a INT, a INT"), lk.InvalidArgumentError, id="duplicate-short-column"
    ),
    pytest.param(
        dict(schema="id BIGINT, _offset BIGINT"), lk.InvalidArgumentError, id="reserved-column"
    ),
    pytest.param(dict(schema=""), lk.InvalidArgumentError, id="empty-schema"),
    pytest.param(dict(schema=3), TypeError, id="schema-type"),
    pytest.param(dict(primary_key="nope"), lk.InvalidArgumentError, id="pk-not-in-schema"),
    pytest.param(dict(primary_key="price"), lk.InvalidArgumentError, id="pk-double"),
    pytest.param(dict(primary_key=[]), lk.InvalidArgumentError, id="pk-empty"),
    pytest.param(dict(primary_key=["id", "id"]), lk.InvalidArgumentError, id="pk-duplicate"),
    pytest.param(dict(buckets=0), lk.InvalidArgumentError, id="zero-buckets"),
    pytest.param(dict(buckets=-3), lk.InvalidArgumentError, id="negative-buckets"),
    pytest.param(dict(buckets="4"), TypeError, id="str-buckets"),
    pytest.param(dict(buckets=True), TypeError, id="bool-buckets"),
    pytest.param(dict(properties={"nope": 1}), lk.InvalidArgumentError, id="unknown-property"),
    pytest.param(
        dict(properties={"kv.snapshot.num-retained": 0}), lk.InvalidArgumentError, id="retained-0"
    ),
    pytest.param(
        dict(properties={"log.retention": "soon"}), lk.InvalidArgumentError, id="bad-duration"
    ),
    pytest.param(
        dict(properties={"log.retention.respect-consumers": "maybe"}),
        lk.InvalidArgumentError,
        id="bad-bool",
    ),
    pytest.param(
        dict(properties={"log.segment.max-rows": "many"}), lk.InvalidArgumentError, id="bad-int"
    ),
    pytest.param(dict(properties=["x"]), lk.InvalidArgumentError, id="properties-list"),
]


@pytest.mark.parametrize("change, error", BAD_CREATE)
def test_bad_create_table_input(conn, change, error):
    args = dict(
        name="t",
        schema="id BIGINT, name STRING, price DOUBLE",
        primary_key="id",
        buckets=4,
        properties=None,
    )
    args.update(change)
    before = namespace_tree(conn)
    with pytest.raises(error) as info:
        conn.create_table(**args)
    assert isinstance(info.value, lk.LeasekitError)
    assert namespace_tree(conn) == before
    assert warehouse_files(conn) == set()


BAD_ROWS = [
    pytest.param([{"name": "no key"}], id="missing-key-column"),
    pytest.param([{"id": "abc", "name": "x"}], id="string-into-bigint"),
    pytest.param([{"id": 2**70, "name": "x"}], id="overflow"),
    pytest.param([{"id": None, "name": "x"}], id="null-key"),
    pytest.param([{"id": 1, "name": "x", "extra": 1}], id="extra-column"),
    pytest.param(pd.DataFrame({"id": [1]}), id="dataframe-missing-column"),
    pytest.param(pd.DataFrame({"id": ["x"], "name": ["y"]}), id="dataframe-wrong-type"),
    pytest.param(pa.table({"id": [1.5], "name": ["y"]}), id="arrow-float-key"),
]


@pytest.mark.parametrize("rows", BAD_ROWS)
def test_bad_rows_write_nothing(conn, rows):
    table = conn.create_table("t", "id BIGINT, name STRING", "id", buckets=2)
    table.append([{"id": 1, "name": "ok"}])
    before, files = namespace_tree(conn), warehouse_files(conn)
    with pytest.raises(lk.LeasekitError) as info:
        table.append(rows)
    assert isinstance(info.value, (ValueError, TypeError))
    assert namespace_tree(conn) == before
    assert warehouse_files(conn) == files


@pytest.mark.parametrize(
    "keys", [[{"name": "x"}], [{"id": 1, "name": "x"}], "id=1", 5, [{"id": None}]]
)
def test_bad_delete_keys_write_nothing(conn, keys):
    table = conn.create_table("t", "id BIGINT, name STRING", "id", buckets=2)
    before = namespace_tree(conn)
    with pytest.raises(lk.LeasekitError):
        table.delete(keys)
    assert namespace_tree(conn) == before


@pytest.mark.parametrize(
    "name, error",
    [("missing", lk.TableNotFoundError), ("bad/name", lk.InvalidArgumentError), (None, TypeError)],
)
def test_unknown_or_invalid_table(conn, name, error):
    before = namespace_tree(conn)
    with pytest.raises(error):
        conn.table(name)
    with pytest.raises(error):
        conn.drop_table(name)
    assert namespace_tree(conn) == before


def test_bucket_arguments(conn):
    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    with pytest.raises(lk.BucketNotFoundError):
        table.snapshots(bucket=2)
    with pytest.raises(TypeError):
        table.snapshots(bucket="0")
    assert table.snapshots(bucket=1) == []
    assert table.latest_snapshots() == {}


@pytest.mark.parametrize("parent", ["tables", "data"])
def test_create_table_in_a_namespace_missing_a_znode_says_so(conn, parent):
    # docs/concepts.md: a failed transaction surfaces as a documented error naming the cause
    ctx = testing.context(conn)
    from leasekit.zk import Delete

    ctx.store.commit([Delete(getattr(ctx.paths, parent))])
    with pytest.raises(
        lk.IllegalStateError, match=f"{getattr(ctx.paths, parent)} is missing from namespace"
    ):
        conn.create_table("t", "id BIGINT", "id")
    with lk.connect(conn.zookeeper, conn.warehouse, namespace=conn.namespace):
        pass  # connecting again recreates the namespace's znodes
    assert conn.create_table("t", "id BIGINT", "id").name == "t"


def test_drop_table_in_a_namespace_missing_a_znode_says_so_and_keeps_the_table(conn, clock):
    # docs/concepts.md: the failed drop names the missing znode and leaves the table in place
    from leasekit.tables.fence import STALE_MARK_MS
    from leasekit.zk import Delete

    ctx = testing.context(conn)

    table = conn.create_table("t", "id BIGINT", "id", buckets=2)
    ctx.store.commit([Delete(ctx.paths.dropped)])
    with pytest.raises(
        lk.IllegalStateError, match=f"{ctx.paths.dropped} is missing from namespace"
    ):
        conn.drop_table("t")
    assert conn.table("t") == table
    with lk.connect(conn.zookeeper, conn.warehouse, namespace=conn.namespace):
        pass  # connecting again recreates the namespace's znodes
    clock.advance(
        timedelta(milliseconds=STALE_MARK_MS + 1000)
    )  # the failed drop's fence is taken over once stale
    conn.drop_table("t")
    assert conn.tables() == []


def test_a_failed_transaction_is_an_illegal_state_error(conn):
    # docs/concepts.md: the ZooKeeper layer's conflict
    # error, if a caller missed it, is still documented
    ctx = testing.context(conn)
    from leasekit.zk import Delete

    with pytest.raises(lk.IllegalStateError):
        ctx.store.commit([Delete(ctx.paths.table("nope"))])


def _pinned_tables(conn) -> dict[str, set[str]]:
    return {info.lease_id: {tb.table for tb in info.pins} for info in conn.leases()}


def test_forced_drop_removes_the_pins_of_the_table_names_the_leases_and_keeps_them(conn, caplog):
    # drop_table(force=True), L9: the leases' pins of the table go, a WARNING names those
    # leases; a lease left with no pins stays valid; a table re-created under the same name
    # is to them a table they never pinned
    ctx = testing.context(conn)
    import logging

    from leasekit import janitor
    from leasekit.testing import seed_empty_snapshots

    orders = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    other = conn.create_table("other", "id BIGINT, v STRING", "id", buckets=1)
    seed_empty_snapshots(ctx, orders, snapshot_id=5)
    seed_empty_snapshots(ctx, other)
    q3, both = conn.lease("q3", "1h"), conn.lease("both", "1h")
    bystander = conn.lease("bystander", "1h")
    q3.acquire_latest("orders")
    both.acquire_latest(["orders", "other"])
    bystander.acquire_latest("other")
    with caplog.at_level(logging.WARNING, logger="leasekit"):
        conn.drop_table("orders", force=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "orders" in warnings[0] and "q3" in warnings[0] and "both" in warnings[0]
    assert "bystander" not in warnings[0]
    assert _pinned_tables(conn) == {"q3": set(), "both": {"other"}, "bystander": {"other"}}
    assert q3.info().pins == {} and q3.alive
    janitor.run_once(conn)
    assert q3.info().pins == {}  # empty, not removed
    q3.renew()

    again = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    seed_empty_snapshots(ctx, again)
    assert q3.info().pins == {}
    result = q3.acquire_latest("orders")
    assert result.acquired == {lk.TableBucket("orders", 0): 1, lk.TableBucket("orders", 1): 1}
    assert q3.info().pins == result.acquired
    assert {i.lease_id: i.pins for i in conn.leases()}["q3"] == result.acquired
    q3.release(again.buckets)
    assert q3.info().pins == {}


def test_a_forced_drop_finished_by_the_janitor_also_removes_the_pins(conn, spark):
    # R7, L12: a drop interrupted after its commit and finished by a janitor pass leaves
    # no pin of the dropped table in any lease; the notebook run again reads the new table
    ctx = testing.context(conn)
    from leasekit import janitor
    from leasekit.testing import seed_empty_snapshots
    from leasekit.zk import Create, Delete
    from leasekit.zk.formats import DroppedTable

    orders = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    seed_empty_snapshots(ctx, orders, snapshot_id=5)
    lease = conn.lease("q3", "1h")
    lease.acquire_latest("orders")
    node = ctx.store.get(ctx.paths.table("orders"))  # the drop's commit, then its dropper died
    ctx.store.commit(
        [
            Delete(ctx.paths.table("orders"), node.stat.version),
            Create(
                ctx.paths.dropped_table(orders.table_id),
                DroppedTable("orders", orders.data_dir).encode(),
            ),
        ]
    )
    janitor.run_once(conn)
    assert lease.info().pins == {}
    assert ctx.store.children(ctx.paths.lease_pins("q3")) == []

    again = conn.create_table("orders", "id BIGINT, v STRING", "id", buckets=2)
    again.append([{"id": i, "v": "new"} for i in range(6)])
    again.snapshot(spark)
    result = lease.acquire_latest("orders")
    assert lease.info().pins == result.acquired
    assert sorted(r.id for r in lease.read(spark, "orders").collect()) == list(range(6))
