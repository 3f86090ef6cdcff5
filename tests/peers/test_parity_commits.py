"""Committed offsets, side by side with Kafka: what commit() commits, offsets with metadata,
offsets surviving the consumer, where a new group starts (auto_offset_reset), refusals for a
partition the consumer does not own, odd offsets, and consumers without a group."""

from __future__ import annotations

from . import parity
from .parity import agree, on_both
from .sides import Side, attempt, poll_until, read, unique, values

sides = parity.sides  # the fixture: [KafkaSide, LeasekitSide]


def test_commit_commits_the_positions_and_offsets_with_metadata(sides):
    # C2, C3: committed is None before the first commit; commit() commits the positions of the
    # assignment (a seek included); commit({p: (o, metadata)}) exactly that, read back with its
    # metadata by committed and by the group's admin view
    def scenario(side: Side):
        topic, group = side.topic(2), unique("g")
        side.write(topic, {0: ["a0", "a1", "a2", "a3"], 1: ["b0", "b1"]})
        reader = side.reader(topic, group)
        read(reader, 6)
        before = {p: reader.committed(p) for p in (0, 1)}
        reader.seek(0, 1)
        reader.commit()
        positions = {p: reader.committed(p) for p in (0, 1)}
        reader.commit({1: (1, "batch 7")})
        return before, positions, reader.committed(1), side.committed_metadata(group, topic)

    expected = (
        {0: None, 1: None},
        {0: 1, 1: 2},
        1,
        {0: (1, ""), 1: (1, "batch 7")},
    )
    agree(*on_both(sides, scenario), expected)


def test_committed_offsets_and_metadata_outlive_the_consumer(sides):
    # C4: a new consumer of the group starts at the committed offsets, whose metadata stays;
    # C8: a consumer with auto-commit commits its positions when it closes
    def scenario(side: Side):
        topic, group = side.topic(2), unique("g")
        side.write(topic, {0: [f"a{i}" for i in range(5)], 1: [f"b{i}" for i in range(3)]})
        first = side.reader(topic, group)
        read(first, 8)
        first.commit({0: (2, "up to a1"), 1: (1, "up to b0")})
        first.close()
        second = side.reader(topic, group, auto_commit=True, auto_commit_s=3600)
        got = values(read(second, 3 + 2))
        kept = side.committed_metadata(group, topic)
        second.close()  # auto-commit on close: its positions, 5 and 3
        return got, kept, side.committed_metadata(group, topic)

    expected = (
        {0: ["a2", "a3", "a4"], 1: ["b1", "b2"]},
        {0: (2, "up to a1"), 1: (1, "up to b0")},
        {0: (5, ""), 1: (3, "")},
    )
    agree(*on_both(sides, scenario), expected)


def test_a_new_group_starts_at_earliest_or_latest(sides):
    # C5: without a committed offset, "earliest" starts at the log's beginning and "latest" at
    # its end: only records written after the position was set are handed out
    def scenario(side: Side):
        topic = side.topic(2)
        side.write(topic, {0: ["a0", "a1"], 1: ["b0"]})
        early = side.reader(topic, unique("early"), reset="earliest")
        late = side.reader(topic, unique("late"), reset="latest")
        poll_until([late], lambda: late.assignment() == {0, 1})
        at = {p: late.position(p) for p in (0, 1)}
        side.write(topic, {1: ["b1"]})
        return values(read(early, 4)), at, values(read(late, 1))

    expected = (
        {0: ["a0", "a1"], 1: ["b0", "b1"]},
        {0: 2, 1: 1},
        {1: ["b1"]},
    )
    agree(*on_both(sides, scenario), expected)


def test_a_new_group_with_reset_none_is_refused_a_position(sides):
    # C5: with "none", a partition without a committed offset has no position: reading it
    # raises (Kafka: NoOffsetForPartitionError; leasekit: NoOffsetForBucketError); a committed
    # offset is a position again
    def scenario(side: Side):
        topic, group = side.topic(1), unique("g")
        side.write(topic, {0: ["a0", "a1"]})
        reader = side.reader(topic, group, reset="none")
        refused = attempt(side, lambda: poll_until([reader], lambda: False, seconds=30))
        reader.close()
        side.reset_offsets(group, topic, 1, [0])
        again = side.reader(topic, group, reset="none")
        return refused.kind, refused.error, values(read(again, 1))

    kafka, leasekit = on_both(sides, scenario)
    agree(kafka[0], leasekit[0], "no-offset")
    assert (kafka[1], leasekit[1]) == ("NoOffsetForPartitionError", "NoOffsetForBucketError")
    agree(kafka[2], leasekit[2], {0: ["a1"]})


def test_a_fresh_commit_and_metadata_of_up_to_4096_bytes(sides):
    # C3: commit() by a member that has handed out nothing commits the position its reset
    # policy gave ("latest": the end). C2: metadata of up to 4 KB is committed and read back;
    # 4097 bytes are refused and nothing is written. The refusals differ in class: Kafka's
    # coordinator answers OFFSET_METADATA_TOO_LARGE (offset.metadata.max.bytes, 4096 by
    # default), leasekit raises InvalidArgumentError before writing anything
    def scenario(side: Side):
        topic, group = side.topic(1), unique("g")
        side.write(topic, {0: ["a0", "a1", "a2"]})
        member = side.reader(topic, group, reset="latest")
        poll_until([member], lambda: member.assignment() == {0})
        member.position(0)  # set by the reset policy (Kafka's is set in the background)
        member.commit()
        fresh = side.committed_metadata(group, topic)
        member.commit({0: (1, "m" * 4096)})
        whole = side.committed_metadata(group, topic) == {0: (1, "m" * 4096)}
        refused = attempt(side, member.commit, {0: (2, "m" * 4097)})[:2]
        return fresh, whole, refused, member.committed(0)

    kafka, leasekit = on_both(sides, scenario)
    agree((kafka[:2], kafka[3]), (leasekit[:2], leasekit[3]), (({0: (3, "")}, True), 1))
    assert kafka[2] == ("metadata-too-large", "OffsetMetadataTooLargeError")
    assert leasekit[2] == ("invalid-argument", "InvalidArgumentError")
