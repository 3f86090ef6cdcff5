"""A committed segment whose file is lost (a disk fault, an operator's ``rm``) while its metadata
still lists it: the consumer raises a typed error naming the file and the bucket instead of
returning nothing for ever (docs/security.md), and ``describe_group``, ``group_status`` and the
consumer panel show the bucket as broken (docs/consumers.md)."""

from __future__ import annotations

import os

import pytest

import leasekit as lk
from leasekit.log.segments import list_segments

TB = lk.TableBucket
TB0, TB1 = TB("orders", 0), TB("orders", 1)


@pytest.fixture
def orders(conn):
    """Two buckets, three segments each."""
    table = conn.create_table("orders", "id BIGINT", "id", buckets=2)
    for start in (0, 100, 200):
        table.append([{"id": i} for i in range(start, start + 20)])
    assert all(len(segs) == 3 for segs in list_segments(table, [0, 1]).values())
    return table


def _segments(table, bucket):
    return list_segments(table, [bucket])[bucket]


def _read_first_segments(consumer, table):
    """Poll until each bucket's first segment was handed out; the offsets handed out."""
    ends = {b: _segments(table, b)[0].end_offset for b in (0, 1)}
    got: dict[TB, list[int]] = {TB0: [], TB1: []}
    while any(len(got[tb]) < ends[tb.bucket] for tb in got):
        for tb, data in consumer.poll(timeout="5s", max_records=1).items():
            got[tb] += data.column("_offset").to_pylist()
        for tb in got:
            if len(got[tb]) >= ends[tb.bucket] and tb not in consumer.paused():
                consumer.pause(tb)
    consumer.resume(TB0, TB1)
    return got


def test_poll_raises_naming_the_lost_file_and_its_bucket_every_time(conn, orders):
    # docs/security.md (a typed error, never silence): the segment holding bucket 0's position has
    # lost its file while the bucket's metadata still lists it; poll raises DataFileMissingError
    # naming the file and the bucket, at every poll, and the position stays where it was
    with conn.consumer("orders", group_id="g", auto_offset_reset="earliest") as c:
        _read_first_segments(c, orders)
        lost = _segments(orders, 0)[2]  # (not the next one: that one is decoded ahead, open)
        os.remove(lost.file)
        for _ in range(3):
            with pytest.raises(lk.DataFileMissingError) as caught:
                for _ in range(6):  # the second segment, bucket 1's records may come first
                    c.poll(timeout="0.5s")
            assert caught.value.file == lost.file and caught.value.bucket == TB0
            assert lost.file in str(caught.value) and str(TB0) in str(caught.value)
            assert isinstance(caught.value, lk.IllegalStateError)
        assert c.position(TB0) == lost.base_offset  # nothing skipped silently (C1)
        c.pause(TB0)  # the other bucket reads on
        end = orders.end_offsets()[TB1]
        while c.position(TB1) < end:
            assert TB0 not in c.poll(timeout="5s")


def test_getone_and_iteration_raise_it_too(conn, orders):
    # docs/security.md: getone and iteration meet the
    # lost file as poll does (a typed error naming it)
    lost = _segments(orders, 1)[0]
    os.remove(lost.file)
    with conn.consumer("orders", auto_offset_reset="earliest") as c:
        c.pause(TB0)
        with pytest.raises(lk.DataFileMissingError) as caught:
            c.getone(timeout="5s")
        assert caught.value.file == lost.file and caught.value.bucket == TB1
        with pytest.raises(lk.DataFileMissingError):
            next(iter(c))
        assert c.position(TB1) == 0


def test_describe_group_and_the_panel_show_the_bucket_as_missing(conn, orders):
    # docs/consumers.md: a bucket whose next record (at the committed offset) lies in a segment
    # whose file is missing while the metadata lists it is MISSING, an ERR for the group; the
    # consumer panel's grid and summary say so; the other bucket keeps its own status
    from leasekit.widgets import ConsumerPanel

    with conn.consumer("orders", group_id="g", auto_offset_reset="earliest") as c:
        _read_first_segments(c, orders)
        c.commit()
    before = conn.describe_group("g").set_index("bucket")["status"]
    assert list(before) == ["OK", "OK"] and conn.group_status("g").status == "OK"
    lost = _segments(orders, 0)[1]
    os.remove(lost.file)
    described = conn.describe_group("g").set_index("bucket")
    assert described.loc[0, "status"] == "MISSING"
    assert described.loc[1, "status"] == "OK"
    assert described.loc[0, "lag"] > 0  # the lag is still measured
    status = conn.group_status("g")
    assert status.status == "ERR"
    assert status.buckets == {TB0: "MISSING", TB1: "OK"}
    # M5, M6: the overview and the metrics say the same as group_status
    assert conn.group_overview().set_index("group").loc["g", "status"] == "ERR"
    series = _bucket_statuses(conn)
    assert series == {("0", "MISSING"): 1.0, ("1", "OK"): 1.0}
    panel = ConsumerPanel(conn, "g", auto_refresh=False)
    try:
        panel.refresh()
        panel.sort.value = "bucket"
        assert list(panel.rows()["status"]) == ["MISSING", "OK"]
        assert "ERR" in panel.summary.value
        panel.status_filter.value = "MISSING"
        assert list(panel.rows()["bucket"]) == [0]
    finally:
        panel.close()


def _bucket_statuses(conn) -> dict[tuple[str, str], float]:
    """The ``leasekit_bucket_status`` series of group g: (bucket, status) -> value."""
    from leasekit import testing
    from leasekit.monitor.exporter.serve import MetricsServer
    from tests.monitor.test_metrics import scrape

    with MetricsServer(testing.context(conn), port=0, interval="1h") as server:
        got = scrape(server.url)["leasekit_bucket_status"]
    return {
        (labels["bucket"], labels["status"]): value
        for key, value in got.items()
        if (labels := dict(key))["group"] == "g"
    }


def test_read_changes_raises_naming_the_lost_file_and_its_bucket(conn, spark, orders):
    # docs/spark.md, docs/security.md: a change read over a lost segment file raises
    # DataFileMissingError naming the file and the bucket (not a Spark error, not an empty read)
    from leasekit import spark as lks

    lost = _segments(orders, 1)[1]
    os.remove(lost.file)
    with pytest.raises(lk.DataFileMissingError) as caught:
        lks.read_changes(spark, orders, "etl").df.collect()
    assert caught.value.file == lost.file and caught.value.bucket == TB1
    assert lost.file in str(caught.value)


def test_the_stream_reads_task_raises_naming_the_lost_file_and_its_bucket(conn, orders):
    # docs/spark.md, docs/security.md: a task of the Spark stream reading a segment whose file is
    # gone raises a leasekit error naming the file and the bucket, not an OS or pyarrow error
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from leasekit.datasource import stream

    segment = _segments(orders, 1)[1]
    warehouse = orders.context.warehouse
    rel = warehouse.relative(segment.file)
    os.remove(segment.file)
    part = stream.SegmentSlice(
        warehouse.location,
        rel,
        1,
        segment.base_offset,
        segment.base_offset,
        segment.end_offset,
        segment.timestamp_ms,
    )
    schema = StructType(
        [StructField("_bucket", LongType()), StructField("_offset", LongType())]
        + [StructField("_timestamp", LongType()), StructField("_op", StringType())]
        + [StructField("id", LongType())]
    )
    with pytest.raises(lk.OffsetOutOfRangeError, match="bucket 1") as caught:
        list(stream.read_slice(part, schema))
    assert rel in str(caught.value)
