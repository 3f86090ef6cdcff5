"""Groups, side by side with Kafka: a second member joining (revoke before assign, with a
commit inside the revoke callback), how partitions are spread over two members, and the
group's lag as its admin view shows it. Kafka runs with aiokafka (the classic protocol, eager
rebalances) and, where noted, with confluent-kafka: the cooperative-sticky assignor and KIP-848's
``group.protocol=consumer``."""

from __future__ import annotations

import pytest

from . import parity
from .parity import agree
from .sides import Side, merge, poll_until, read, unique, values

sides = parity.sides  # the fixture: [KafkaSide, LeasekitSide]


def _split(a, b, total: int) -> bool:
    mine, theirs = a.assignment(), b.assignment()
    return bool(mine) and bool(theirs) and not mine & theirs and len(mine | theirs) == total


def _joining(side: Side, **options) -> dict:
    """Member A reads 3 records of each of 2 partitions and commits nothing; B joins; A's
    revoke callback commits the revoked partitions' positions ("revoked"). What each saw."""
    topic, group = side.topic(2), unique("g")
    side.write(topic, {0: ["a0", "a1", "a2"], 1: ["b0", "b1", "b2"]})
    a = side.reader(topic, group, commit_on_revoke="revoked", **options)
    read(a, 6)
    b = side.reader(topic, group, **options)
    handed = merge(*poll_until([a, b], lambda: _split(a, b, 2)))
    (moved,) = b.assignment()
    (kept,) = a.assignment()
    side.write(topic, {0: ["a3"], 1: ["b3"]})
    start = b.position(moved)  # the next record it hands out, fetched or not
    later = poll_until([a, b], lambda: a.position(kept) == b.position(moved) == 4)
    name = {moved: "moved", kept: "kept"}
    return {
        "handed out while joining": handed,
        "committed in the revoke": side.committed_metadata(group, topic).get(moved),
        "new owner starts at": start,
        "new owner reads": {name[p]: r for p, r in later[1].items()},
        "old owner reads": {name[p]: [o for o, _ in r] for p, r in later[0].items()},
        "A heard": [(what, frozenset(name[p] for p in ps)) for what, ps in a.calls if ps],
    }


EXPECTED_JOIN = {
    "handed out while joining": {},
    "committed in the revoke": (3, "revoked"),
    "new owner starts at": 3,
    "old owner reads": {"kept": [3]},
}


def test_a_new_member_starts_where_the_revoke_callback_committed(sides):
    # C10: revoked before assigned; an offset committed inside on_partitions_revoked
    # (leasekit: on_buckets_revoked) is accepted, and the partition's new owner starts exactly
    # there. A difference (C15): aiokafka's rebalances are eager, every partition of every
    # member is revoked and assigned again, so A hears both revoked and commits both; leasekit's
    # are cooperative, A hears only the bucket that moves
    kafka, leasekit = (_joining(side) for side in sides)
    for seen in (kafka, leasekit):
        moved_value = [v for _, v in seen.pop("new owner reads")["moved"]]
        assert moved_value in (["a3"], ["b3"])
    both = {"moved", "kept"}
    kafka_heard, leasekit_heard = kafka.pop("A heard"), leasekit.pop("A heard")
    agree(kafka, leasekit, EXPECTED_JOIN)
    assert kafka_heard == [
        ("assigned", frozenset(both)),
        ("revoked", frozenset(both)),
        ("assigned", frozenset({"kept"})),
    ]
    assert leasekit_heard == [("assigned", frozenset(both)), ("revoked", frozenset({"moved"}))]


@pytest.mark.parametrize("client", ["cooperative", "consumer"])
def test_cooperative_rebalances_revoke_only_what_moves(sides, client):
    # C10, C15: with incremental rebalances, confluent-kafka's cooperative-sticky assignor and
    # KIP-848's consumer protocol, Kafka too revokes only the partition that moves, as
    # leasekit does; the new owner starts at the offset committed in the revoke callback
    kafka_side, leasekit_side = sides
    kafka, leasekit = _joining(kafka_side, client=client), _joining(leasekit_side)
    for seen in (kafka, leasekit):
        assert [v for _, v in seen.pop("new owner reads")["moved"]] in (["a3"], ["b3"])
    expected = {
        **EXPECTED_JOIN,
        "A heard": [
            ("assigned", frozenset({"moved", "kept"})),
            ("revoked", frozenset({"moved"})),
        ],
    }
    agree(kafka, leasekit, expected)


def _spread(side: Side, **options) -> tuple[list[list[int]], bool]:
    """Two members over 6 partitions: the sorted assignments (once the group's admin view
    shows them too), and whether they stayed so."""
    topic, group = side.topic(6), unique("g")
    a, b = side.reader(topic, group, **options), side.reader(topic, group, **options)
    poll_until([a, b], lambda: _split(a, b, 6))
    held = sorted([sorted(a.assignment()), sorted(b.assignment())])
    # the admin view may trail the members by a heartbeat (KIP-848): polled until it agrees
    poll_until([a, b], lambda: sorted(sorted(m) for m in side.members(group)) == held)
    return held, sorted([sorted(a.assignment()), sorted(b.assignment())]) == held


@pytest.mark.parametrize(
    "assignor, expected",
    [
        ("range", [[0, 1, 2], [3, 4, 5]]),
        ("roundrobin", [[0, 2, 4], [1, 3, 5]]),
        ("sticky", None),
    ],
)
def test_two_members_share_six_partitions_three_each(sides, assignor, expected):
    # C9: every partition assigned exactly once, 3 and 3; range gives each member a run of
    # consecutive partitions and round-robin every other one, as Kafka's assignors of the same
    # names do; sticky balances (which 3 is its own choice on each side)
    kafka, leasekit = (_spread(side, assignor=assignor) for side in sides)
    for held, stayed in (kafka, leasekit):
        assert sorted(p for ps in held for p in ps) == list(range(6))
        assert [len(ps) for ps in held] == [3, 3] and stayed
        if expected is not None:
            assert held == expected


@pytest.mark.parametrize("client", ["cooperative", "consumer"])
def test_two_members_share_six_partitions_like_kafkas_incremental_protocols(sides, client):
    # C9: KIP-848's server-side assignor and cooperative-sticky balance 3/3 too
    kafka_side, leasekit_side = sides
    for held, stayed in (_spread(kafka_side, client=client), _spread(leasekit_side)):
        assert sorted(p for ps in held for p in ps) == list(range(6))
        assert [len(ps) for ps in held] == [3, 3] and stayed


def test_lag_per_partition_as_the_admin_view_shows_it(sides):
    # docs/consumers.md "Looking at a group": per partition the committed offset, the log end
    # and their difference, measured now (Kafka: list_consumer_group_offsets and the end
    # offsets; leasekit: describe_group); a partition never committed has neither, while
    # the member is there and after it left
    def scenario(side: Side):
        topic, group = side.topic(3), unique("g")
        side.write(topic, {0: list("abcde"), 1: list("abc"), 2: list("ab")})
        member = side.reader(topic, group)
        got = values(read(member, 10))
        member.commit({0: 2, 1: 3})
        side.write(topic, {1: ["d", "e"]})
        live = side.lag(group, topic), side.members(group)
        member.close()
        return got, live, side.lag(group, topic)

    lag = {0: (2, 5, 3), 1: (3, 5, 2), 2: (None, 2, None)}
    expected = (
        {0: list("abcde"), 1: list("abc"), 2: list("ab")},
        (lag, [{0, 1, 2}]),
        lag,
    )
    agree(*(scenario(side) for side in sides), expected)
