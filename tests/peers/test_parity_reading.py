"""Reading, side by side with Kafka: records and positions after poll and getone, seeks,
offsets for times, pause and resume. Each scenario runs on a real Kafka broker (aiokafka) and
on leasekit; the tests compare what both did and check it against the expected values."""

from __future__ import annotations

import time

from . import parity
from .parity import agree, on_both
from .sides import Side, attempt, count, merge, read, values

sides = parity.sides  # the fixture: [KafkaSide, LeasekitSide]


def test_poll_and_getone_hand_out_each_record_once_and_move_positions(sides):
    # C1: after handing out offset o the position is o + 1, whether by getone or poll;
    # poll(max_records) hands out at most that many; nothing is handed out twice
    def scenario(side: Side):
        topic = side.topic(2)
        side.write(topic, {0: ["a0", "a1", "a2"], 1: ["b0", "b1"]})
        reader = side.reader(topic)
        steps = []
        for _ in range(2):
            partition, offset, value = reader.getone()
            steps.append((partition, offset, value, reader.position(partition)))
        capped = reader.poll(timeout=5, max_records=1)
        rest = merge(read(reader, 5 - 2 - count(capped)), capped)
        for partition, offset, value, _ in steps:
            merge(rest, {partition: [(offset, value)]})
        handed = {p: sorted(r) for p, r in rest.items()}
        return (
            all(position == offset + 1 for _, offset, _, position in steps),
            count(capped),
            handed,
            {p: reader.position(p) for p in (0, 1)},
        )

    expected = (
        True,
        1,
        {0: [(0, "a0"), (1, "a1"), (2, "a2")], 1: [(0, "b0"), (1, "b1")]},
        {0: 3, 1: 2},
    )
    agree(*on_both(sides, scenario), expected)


def test_seek_seek_to_beginning_and_seek_to_end(sides):
    # C6: seek makes an offset the next record handed out, and takes no negative offset
    # (Kafka: ValueError; leasekit: InvalidArgumentError, a ValueError too); seek_to_beginning
    # and seek_to_end move to the log's first offset and its end; a record written later is
    # next after the end
    def scenario(side: Side):
        topic = side.topic(2)
        side.write(topic, {0: [f"a{i}" for i in range(5)], 1: [f"b{i}" for i in range(3)]})
        reader = side.reader(topic)
        read(reader, 8)
        negative = attempt(side, reader.seek, 0, -1)
        reader.seek(0, 2)
        after_seek = (reader.position(0), values(read(reader, 3)))
        reader.seek_to_beginning(1)
        after_beginning = (reader.position(1), values(read(reader, 3)))
        reader.seek(0, 1)
        reader.seek_to_end(0)
        at_end = reader.position(0)
        side.write(topic, {0: ["a5"]})
        return negative.kind, after_seek, after_beginning, at_end, values(read(reader, 1))

    expected = (
        "invalid-argument",
        (2, {0: ["a2", "a3", "a4"]}),
        (0, {1: ["b0", "b1", "b2"]}),
        5,
        {0: ["a5"]},
    )
    agree(*on_both(sides, scenario), expected)


def test_offsets_for_times_between_two_writes_and_after_the_end(sides):
    # C7: the earliest offset whose timestamp is at or after the time asked, None when no
    # record is that recent; a negative time is refused (Kafka: ValueError; leasekit:
    # InvalidArgumentError); asking moves no position. Kafka's records carry the timestamps the
    # producer gave (two writes 1 s apart); leasekit's are their commit times (W3), so the time
    # asked is taken from the records' own timestamps on each side: just after the first
    # write's last record
    def scenario(side: Side):
        topic = side.topic(2)
        now = int(time.time() * 1000)
        first = side.write(topic, {0: ["a0", "a1"], 1: ["b0"]}, timestamp_ms=now - 1000)
        time.sleep(0.05)  # leasekit: the second write commits at a later millisecond
        second = side.write(topic, {0: ["a2"], 1: ["b1", "b2"]}, timestamp_ms=now)
        between = max(t for ts in first.values() for t in ts) + 1
        assert between <= min(t for ts in second.values() for t in ts)
        reader = side.reader(topic)
        asked = {
            "zero": reader.offsets_for_times({0: 0, 1: 0}),
            "between": reader.offsets_for_times({0: between, 1: between}),
            "after": reader.offsets_for_times({0: now + 3_600_000, 1: now + 3_600_000}),
            "negative": attempt(side, reader.offsets_for_times, {0: -1}).kind,
        }
        return asked, values(read(reader, 6))  # nothing moved: every record from the start

    expected = (
        {
            "zero": {0: 0, 1: 0},
            "between": {0: 2, 1: 1},
            "after": {0: None, 1: None},
            "negative": "invalid-argument",
        },
        {0: ["a0", "a1", "a2"], 1: ["b0", "b1", "b2"]},
    )
    agree(*on_both(sides, scenario), expected)


def test_paused_partitions_hand_out_nothing_until_resumed(sides):
    # docs/consumers.md "Moving around" (pause, resume): a paused partition's records stay
    # where they are while the others' are handed out; resumed, it hands them out from its
    # position
    def scenario(side: Side):
        topic = side.topic(3)
        side.write(topic, {p: [f"{p}-{i}" for i in range(2)] for p in range(3)})
        reader = side.reader(topic)
        reader.pause(1)
        while_paused = values(read(reader, 4))
        side.write(topic, {1: ["1-2"], 2: ["2-2"]})
        more = values(read(reader, 1))
        position = reader.position(1)
        reader.resume(1)
        return while_paused, more, position, values(read(reader, 3))

    expected = (
        {0: ["0-0", "0-1"], 2: ["2-0", "2-1"]},
        {2: ["2-2"]},
        0,
        {1: ["1-0", "1-1", "1-2"]},
    )
    agree(*on_both(sides, scenario), expected)


def test_a_position_outside_the_log_follows_the_reset_policy(sides):
    # C5: a position past the log end (a seek to 100 in a log of 3) is reset by the policy:
    # "earliest" reads from the beginning, "latest" waits at the end; with "none" the read
    # raises OffsetOutOfRangeError (the same class on both sides), the position stays where
    # it was, and a seek back into the log reads on
    def scenario(side: Side):
        topic = side.topic(1)
        side.write(topic, {0: ["a0", "a1", "a2"]})
        early, late, strict = (side.reader(topic, reset=r) for r in ("earliest", "latest", "none"))
        for reader in (early, late, strict):
            reader.seek(0, 100)
        reset = (values(read(early, 3)), early.position(0), late.poll(timeout=1), late.position(0))
        refused = attempt(side, strict.poll, 1.0)[:2], strict.position(0)
        strict.seek(0, 1)
        return reset, refused, values(read(strict, 2))

    expected = (
        ({0: ["a0", "a1", "a2"]}, 3, {}, 3),
        (("out-of-range", "OffsetOutOfRangeError"), 100),
        {0: ["a1", "a2"]},
    )
    agree(*on_both(sides, scenario), expected)
