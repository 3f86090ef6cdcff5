"""Refusals, side by side with Kafka: calls on a partition the consumer does not own, odd
offsets, a consumer without a group, a zombie member's commit, and offsets changed from outside
a group that has members. Both sides must refuse alike; the error classes are mapped to one
kind of refusal each (sides.Outcome)."""

from __future__ import annotations

from . import parity
from .parity import agree, on_both
from .sides import Side, attempt, count, merge, poll_until, read, unique, values

sides = parity.sides  # the fixture: [KafkaSide, LeasekitSide]


def _split(a, b) -> bool:
    return len(a.assignment()) == len(b.assignment()) == 1 and a.assignment() | b.assignment() == {
        0,
        1,
    }


def test_calls_on_a_partition_owned_by_another_member_are_refused(sides):
    # C3, C6: position, seek, pause and commit of a partition this member is not assigned
    # raise (Kafka: IllegalStateError; leasekit: IllegalStateError); committed reads any
    # partition of the group, owned or not
    def scenario(side: Side):
        topic, group = side.topic(2), unique("g")
        side.write(topic, {0: ["a0", "a1"], 1: ["b0", "b1"]})
        a, b = side.reader(topic, group), side.reader(topic, group)
        poll_until([a, b], lambda: _split(a, b))
        (other,) = b.assignment()
        b.commit({other: (1, "b's")})
        calls = {
            "position": lambda: a.position(other),
            "seek": lambda: a.seek(other, 0),
            "pause": lambda: a.pause(other),
            "commit": lambda: a.commit({other: 2}),
            "committed": lambda: a.committed(other),
        }
        return {name: attempt(side, call)[:2] for name, call in calls.items()}

    not_assigned = ("not-assigned", "IllegalStateError")
    expected = {
        "position": not_assigned,
        "seek": not_assigned,
        "pause": not_assigned,
        "commit": not_assigned,
        "committed": ("ok", None),
    }
    agree(*on_both(sides, scenario), expected)


def test_a_consumer_without_a_group_reads_everything_and_cannot_commit(sides):
    # C3 and docs/consumers.md: without a group a consumer is given every partition at once,
    # reads them all, and neither commits nor reads committed offsets (Kafka:
    # IllegalOperation; leasekit: IllegalOperationError)
    def scenario(side: Side):
        topic = side.topic(3)
        side.write(topic, {0: ["a0"], 1: ["b0", "b1"], 2: ["c0"]})
        reader = side.reader(topic)
        got = values(read(reader, 4))
        calls = {
            "commit()": lambda: reader.commit(),
            "commit(offsets)": lambda: reader.commit({0: 1}),
            "committed": lambda: reader.committed(0),
        }
        refusals = {name: attempt(side, call)[:2] for name, call in calls.items()}
        return reader.assignment(), got, refusals

    kafka, leasekit = on_both(sides, scenario)
    agree(kafka[:2], leasekit[:2], ({0, 1, 2}, {0: ["a0"], 1: ["b0", "b1"], 2: ["c0"]}))
    agree(
        {name: kind for name, (kind, _) in kafka[2].items()},
        {name: kind for name, (kind, _) in leasekit[2].items()},
        {"commit()": "no-group", "commit(offsets)": "no-group", "committed": "no-group"},
    )
    assert {error for _, error in kafka[2].values()} == {"IllegalOperation"}
    assert {error for _, error in leasekit[2].values()} == {"IllegalOperationError"}


def test_a_zombie_members_commit_is_refused_after_its_session_expired(sides):
    # C11, C12: a member that goes silent past its session timeout (Kafka: its heartbeats stop;
    # leasekit: its ZooKeeper connection is cut) loses its partitions to the other member, which
    # reads them from the committed offsets; the zombie's commit is then refused (Kafka:
    # CommitFailedError, the coordinator answering UNKNOWN_MEMBER_ID; leasekit:
    # CommitFailedError) and writes nothing
    def scenario(side: Side):
        topic, group = side.topic(2), unique("g")
        side.write(topic, {0: ["a0", "a1"], 1: ["b0", "b1"]})
        zombie = side.reader(topic, group, zombie=True, session_s=2)
        read(zombie, 4)
        zombie.commit({0: (1, "zombie, alive")})
        zombie.silence()
        heir = side.reader(topic, group, session_s=2)
        got = poll_until([heir], lambda: heir.assignment() == {0, 1})[0]
        zombie.unsilence()
        refused = attempt(side, zombie.commit, {0: (2, "zombie"), 1: (2, "zombie")})
        merge(got, read(heir, 3 - count(got)))
        return refused[:2], values(got), side.committed_metadata(group, topic)

    expected = (
        ("commit-failed", "CommitFailedError"),
        {0: ["a1"], 1: ["b0", "b1"]},
        {0: (1, "zombie, alive")},
    )
    agree(*on_both(sides, scenario), expected)


def test_offsets_are_reset_only_while_the_group_has_no_members(sides):
    # C13: changing a group's offsets from outside (Kafka: AdminClient
    # alter_consumer_group_offsets; leasekit: reset_offsets) and deleting the group are refused
    # while it has a live member; once it left, the reset is where the next member starts. A
    # difference: a reset past the log end is clamped to the end by leasekit, as Kafka's
    # kafka-consumer-groups tool does, while the AdminClient stores any offset as given
    def scenario(side: Side):
        topic, group = side.topic(2), unique("g")
        side.write(topic, {0: ["a0", "a1", "a2"], 1: ["b0", "b1"]})
        member = side.reader(topic, group)
        read(member, 5)
        member.commit()
        refused = {
            "reset": attempt(side, side.reset_offsets, group, topic, 1, [0, 1])[:2],
            "delete": attempt(side, side.delete_group, group)[:2],
        }
        kept = side.committed_metadata(group, topic)
        member.close()
        side.reset_offsets(group, topic, 100, [0, 1])
        beyond = side.committed_metadata(group, topic)
        side.reset_offsets(group, topic, 1, [0, 1])
        return refused, kept, values(read(side.reader(topic, group), 3)), beyond

    kafka, leasekit = on_both(sides, scenario)
    agree(
        {k: kind for k, (kind, _) in kafka[0].items()},
        {k: kind for k, (kind, _) in leasekit[0].items()},
        {"reset": "group-not-empty", "delete": "group-not-empty"},
    )
    assert {k: error for k, (_, error) in kafka[0].items()} == {
        "reset": "KafkaException(UNKNOWN_MEMBER_ID)",  # an outsider's commit
        "delete": "KafkaException(NON_EMPTY_GROUP)",
    }
    assert {k: error for k, (_, error) in leasekit[0].items()} == {
        "reset": "GroupNotEmptyError",
        "delete": "GroupNotEmptyError",
    }
    agree(kafka[1:3], leasekit[1:3], ({0: (3, ""), 1: (2, "")}, {0: ["a1", "a2"], 1: ["b1"]}))
    assert kafka[3] == {0: (100, ""), 1: (100, "")}  # as given
    assert leasekit[3] == {0: (3, ""), 1: (2, "")}  # clamped to each bucket's end


def test_commits_of_negative_offsets_and_offsets_past_the_end(sides):
    # C2, C5: an offset past the log end is committed as given on both sides; a member that
    # starts there finds it outside the log and starts by its reset policy (earliest: the
    # beginning). A difference: a negative offset. Kafka's coordinator stores it (aiokafka
    # sends it unchecked; Java's OffsetAndMetadata refuses it in the client) and reads it back;
    # leasekit refuses it before writing anything (C3: an offset is an int in [0, 2**63))
    def scenario(side: Side):
        topic, group = side.topic(1), unique("g")
        side.write(topic, {0: ["a0", "a1", "a2"]})
        first = side.reader(topic, group)
        poll_until([first], lambda: first.assignment() == {0})
        negative = attempt(side, first.commit, {0: -5})[:2]
        after_negative = first.committed(0)
        first.commit({0: (10, "past the end")})
        past = side.committed_metadata(group, topic)
        first.close()
        second = side.reader(topic, group)
        return negative, after_negative, past, values(read(second, 3))

    kafka, leasekit = on_both(sides, scenario)
    agree(kafka[2:], leasekit[2:], ({0: (10, "past the end")}, {0: ["a0", "a1", "a2"]}))
    assert kafka[:2] == (("ok", None), -5)  # stored as given
    assert leasekit[:2] == (("invalid-argument", "InvalidArgumentError"), None)  # nothing stored
