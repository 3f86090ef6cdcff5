"""Rescaling, side by side with Kafka, where the two deliberately differ: Kafka grows a topic
by adding partitions (the old ones stay open) and cannot shrink it; leasekit splits a bucket
(sealed at its end, its keys going to two new buckets) and merges the two back (K1). New
partitions and new buckets alike start at offset 0 without a committed offset (K6); a group
that starts them with auto_offset_reset="latest" skips what was written there before it looked
on Kafka, while leasekit reads a bucket made by a split from 0 once the group drained its
parent (K5), so no record of the parent's keys is skipped."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from . import parity
from .sides import WAIT, Side, merge, poll_until, read, unique

sides = parity.sides  # the fixture: [KafkaSide, LeasekitSide]


def _rescaled(side: Side) -> dict:
    topic, group = side.topic(2), unique("g")
    side.write(topic, {0: ["a0", "a1"], 1: ["b0"]})
    first = side.reader(topic, group)
    read(first, 3)
    first.commit()
    first.close()
    new = side.grow(topic)
    side.write(topic, {p: [f"{p}-0", f"{p}-1"] for p in new})
    ends = {p: side.end_offsets(topic)[p] for p in new}
    second = side.reader(topic, group, reset="latest")
    got = merge(*poll_until([second], lambda: set(new) <= second.assignment()), {})
    for p in new:  # each position set (Kafka: by the reset policy) before the next write
        second.position(p)
    side.write(topic, {p: [f"{p}-2"] for p in new})
    last = {f"{p}-2" for p in new}
    deadline = time.monotonic() + WAIT
    while not last <= {v for records in got.values() for _, v in records}:
        assert time.monotonic() < deadline, f"{side.name}: only {got} came"
        merge(got, second.poll(timeout=0.5))
    second.close()
    return {
        "new": new,
        "ends": ends,
        "read": {p: [v for _, v in got[p]] for p in new},
        "first offsets": {p: got[p][0][0] for p in new},
        "topic": topic,
    }


def test_new_partitions_start_at_zero_and_latest_skips_only_on_kafka(sides):
    # K6: a new partition (Kafka) and a new bucket (leasekit) start at offset 0, without a
    # committed offset. K5: Kafka's group with "latest" starts the new partition at its end,
    # skipping its first two records; leasekit's group drained the parent before the split and
    # reads both new buckets from 0. Kafka refuses to shrink a topic; leasekit merges the two
    # new buckets back into a third new bucket, which starts at 0 too (K1)
    kafka_side, leasekit_side = sides
    kafka, leasekit = _rescaled(kafka_side), _rescaled(leasekit_side)
    assert kafka["new"] == [2] and leasekit["new"] == [2, 3]
    for seen in (kafka, leasekit):  # offsets 0 and 1: each new one started at 0
        assert seen["ends"] == {p: 2 for p in seen["new"]}
    assert kafka["first offsets"] == {2: 2}  # the end: "latest"
    assert kafka["read"] == {2: ["2-2"]}  # 2-0 and 2-1 skipped
    assert leasekit["first offsets"] == {2: 0, 3: 0}  # the beginning: the parent was drained
    assert leasekit["read"] == {p: [f"{p}-0", f"{p}-1", f"{p}-2"] for p in (2, 3)}
    with pytest.raises(KafkaException) as refused:
        kafka_side.shrink(kafka["topic"], [2])
    assert refused.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    merged = leasekit_side.shrink(leasekit["topic"], [2, 3])
    assert merged == 4 and leasekit_side.end_offsets(leasekit["topic"])[merged] == 0
