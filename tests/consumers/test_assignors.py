"""The assignors of consumer groups (C9): fixed examples, including Kafka's documented ones, and
properties over random sequences of joins, leaves, subscription and table changes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Set

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasekit.consumers.assignors import (
    ASSIGNORS,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    get_assignor,
)
from leasekit.errors import InvalidArgumentError
from leasekit.structs import TableBucket

TB = TableBucket
NAMES = ("sticky", "range", "roundrobin")
IDS = [f"m{i}" for i in range(10)] + ["a", "Z", "m1x"]  # "m10" < "m2": ids sort as strings
TABLES = ("t0", "t1", "t2", "t3")


def buckets(table: str, *numbers: int) -> set[TableBucket]:
    return {TB(table, n) for n in numbers}


def counts(assignment: Mapping[str, Set[TableBucket]]) -> dict[str, int]:
    return {member: len(owned) for member, owned in assignment.items()}


def check_valid(result, members, tables) -> None:
    """C9: an entry for every member; every bucket of every subscribed table exactly once; a
    member only gets buckets of tables it subscribes to."""
    assert set(result) == set(members)
    subscribed = set().union(*members.values()) if members else set()
    given_out = [tb for owned in result.values() for tb in owned]
    assert len(given_out) == len(set(given_out))
    assert set(given_out) == {TB(t, b) for t in subscribed for b in tables[t]}
    for member, owned in result.items():
        assert {tb.table for tb in owned} <= members[member]


def valid_current(members, tables, current) -> dict[str, set[TableBucket]]:
    """The buckets each member may keep: still existing and subscribed."""
    return {
        m: {
            tb
            for tb in current.get(m, ())
            if tb.table in members[m] and tb.bucket in tables.get(tb.table, ())
        }
        for m in members
    }


def minimum_moves(members, tables, current) -> int:
    """Fewest kept buckets that must change owner under identical subscriptions: quotas are
    ceil(N/M) for the members holding the most valid buckets, floor(N/M) for the others."""
    if not members:
        return 0
    total = sum(len(tables[t]) for t in set().union(*members.values()))
    floor, extra = divmod(total, len(members))
    kept = sorted(map(len, valid_current(members, tables, current).values()), reverse=True)
    return sum(max(0, k - floor - (1 if i < extra else 0)) for i, k in enumerate(kept))


def moves(members, tables, current, result) -> int:
    """Buckets of members still present that change owner."""
    return sum(
        len(owned - result[m]) for m, owned in valid_current(members, tables, current).items()
    )


def reordered(rnd, members, tables, current):
    """The same inputs, built with mappings and sets in another insertion order."""

    def shuffled(items):
        items = list(items)
        rnd.shuffle(items)
        return items

    return (
        {m: frozenset(shuffled(members[m])) for m in shuffled(members)},
        {t: tables[t] for t in shuffled(tables)},
        {m: set(shuffled(current[m])) for m in shuffled(current)},
    )


def sticky_balanced(members, result) -> bool:
    """Sticky's balance with any subscriptions: no member holds a bucket of a table that a member
    with at least 2 fewer buckets subscribes to."""
    return not any(
        len(result[d]) >= len(result[r]) + 2 and any(tb.table in members[r] for tb in result[d])
        for d in result
        for r in result
    )


def check_range_shape(members, tables, result) -> None:
    """Range: per table, its subscribers sorted by id hold contiguous ranges in bucket order, the
    first n % m of them one more."""
    for table in sorted(set().union(*members.values()) if members else ()):
        subscribers = sorted(m for m in members if table in members[m])
        runs = [sorted(tb.bucket for tb in result[m] if tb.table == table) for m in subscribers]
        assert [b for run in runs for b in run] == sorted(tables[table])
        quota, extra = divmod(len(tables[table]), len(subscribers))
        assert [len(run) for run in runs] == [
            quota + (1 if i < extra else 0) for i in range(len(runs))
        ]


# --- fixed examples -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_ten_buckets_over_three_members_is_4_3_3(name):
    # C9: 10 buckets over 3 members -> 4/3/3
    members = {m: frozenset({"t"}) for m in ("c", "a", "b")}
    result = get_assignor(name).assign(members, {"t": range(10)}, {})
    check_valid(result, members, {"t": range(10)})
    assert sorted(counts(result).values(), reverse=True) == [4, 3, 3]


def test_range_matches_kafkas_documented_example():
    # C9: Kafka's RangeAssignor example: t0, t1 with 3 partitions each, consumers C0 and C1
    members = {"C0": frozenset({"t0", "t1"}), "C1": frozenset({"t0", "t1"})}
    result = RangeAssignor().assign(members, {"t0": range(3), "t1": range(3)}, {})
    assert result == {
        "C0": buckets("t0", 0, 1) | buckets("t1", 0, 1),
        "C1": buckets("t0", 2) | buckets("t1", 2),
    }


def test_roundrobin_matches_kafkas_documented_examples():
    # C9: Kafka's RoundRobinAssignor examples, identical then different subscriptions
    members = {"C0": frozenset({"t0", "t1"}), "C1": frozenset({"t0", "t1"})}
    result = RoundRobinAssignor().assign(members, {"t0": range(3), "t1": range(3)}, {})
    assert result == {
        "C0": buckets("t0", 0, 2) | buckets("t1", 1),
        "C1": buckets("t0", 1) | buckets("t1", 0, 2),
    }
    members = {
        "C0": frozenset({"t0"}),
        "C1": frozenset({"t0", "t1"}),
        "C2": frozenset({"t0", "t1", "t2"}),
    }
    result = RoundRobinAssignor().assign(
        members, {"t0": range(1), "t1": range(2), "t2": range(3)}, {}
    )
    assert result == {
        "C0": buckets("t0", 0),
        "C1": buckets("t1", 0),
        "C2": buckets("t1", 1) | buckets("t2", 0, 1, 2),
    }


def test_sticky_matches_kafkas_documented_examples():
    # C9: Kafka's StickyAssignor examples. Different subscriptions: as balanced as they allow.
    members = {
        "C0": frozenset({"t0"}),
        "C1": frozenset({"t0", "t1"}),
        "C2": frozenset({"t0", "t1", "t2"}),
    }
    result = StickyAssignor().assign(members, {"t0": range(1), "t1": range(2), "t2": range(3)}, {})
    assert result == {
        "C0": buckets("t0", 0),
        "C1": buckets("t1", 0, 1),
        "C2": buckets("t2", 0, 1, 2),
    }
    # Identical subscriptions, C1 leaves: C0 and C2 keep all they had.
    everything = frozenset(TABLES)
    tables = dict.fromkeys(TABLES, range(2))
    before = {
        "C0": {TB("t0", 0), TB("t1", 1), TB("t3", 0)},
        "C1": {TB("t0", 1), TB("t2", 0), TB("t3", 1)},
        "C2": {TB("t1", 0), TB("t2", 1)},
    }
    result = StickyAssignor().assign({"C0": everything, "C2": everything}, tables, before)
    assert result == {
        "C0": before["C0"] | {TB("t2", 0)},
        "C2": before["C2"] | {TB("t0", 1), TB("t3", 1)},
    }


def test_sticky_leave_moves_only_the_leavers_buckets():
    # C9: a leave from 4/3/3 moves only the leaver's buckets, to the members with the fewest
    sticky = get_assignor("sticky")
    three = {m: frozenset({"t"}) for m in ("a", "b", "c")}
    before = sticky.assign(three, {"t": range(10)}, {})
    leaver = max(before, key=lambda m: len(before[m]))
    two = {m: subs for m, subs in three.items() if m != leaver}
    after = sticky.assign(two, {"t": range(10)}, before)
    check_valid(after, two, {"t": range(10)})
    assert all(before[m] <= after[m] for m in two)
    assert sorted(counts(after).values()) == [5, 5]


def test_sticky_join_moves_only_the_minimum():
    # C9: a join to 4/3/3 gives the newcomer 2 buckets and moves no others: 3/3/2/2
    sticky = get_assignor("sticky")
    members = {m: frozenset({"t"}) for m in ("a", "b", "c")}
    before = sticky.assign(members, {"t": range(10)}, {})
    members["d"] = frozenset({"t"})
    after = sticky.assign(members, {"t": range(10)}, before)
    check_valid(after, members, {"t": range(10)})
    assert len(after["d"]) == 2
    assert (
        moves(members, {"t": range(10)}, before, after)
        == 2
        == minimum_moves(members, {"t": range(10)}, before)
    )
    assert all(after[m] <= before[m] for m in ("a", "b", "c"))


def test_sticky_drops_buckets_that_are_no_longer_valid():
    # C9: buckets of gone members, dropped or shrunk tables and unsubscribed tables are reassigned
    members = {"a": frozenset({"t0"}), "b": frozenset({"t0", "t1"})}
    current = {
        "a": buckets("t0", 0, 1, 7) | buckets("t1", 0) | buckets("gone", 0),
        "b": buckets("t0", 1),
        "left": buckets("t1", 1),
    }
    result = StickyAssignor().assign(members, {"t0": range(4), "t1": range(2)}, current)
    check_valid(result, members, {"t0": range(4), "t1": range(2)})
    assert (
        buckets("t0", 0, 1) <= result["a"]
    )  # "a" keeps t0/1 too: a duplicate goes to the smaller id
    assert sticky_balanced(members, result)


@pytest.mark.parametrize("name", NAMES)
def test_no_members_or_no_buckets(name):
    # C9: nothing to assign still gives every member an entry
    assignor = get_assignor(name)
    assert assignor.assign({}, {"t": range(3)}, {"gone": buckets("t", 0)}) == {}
    members = {"a": frozenset({"t"}), "b": frozenset()}
    assert assignor.assign(members, {"t": range(0)}, {}) == {"a": set(), "b": set()}


def test_assignors_by_name():
    # C9: "sticky" (the default), "range" and "roundrobin", selected by name
    assert list(ASSIGNORS) == ["sticky", "range", "roundrobin"]
    for name in NAMES:
        assert get_assignor(name).name == name
        assert get_assignor(name) is ASSIGNORS[name]


@pytest.mark.parametrize("name", ["", "Sticky", "cooperative-sticky", None])
def test_unknown_assignor_names_the_valid_ones(name):
    # C9: an unknown assignor is an InvalidArgumentError (also a ValueError) naming the valid ones
    with pytest.raises(InvalidArgumentError, match="sticky, range, roundrobin") as raised:
        get_assignor(name)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("ids", [[-1], [1.5], ["3"], [True], 3, "3", None])
def test_bad_bucket_ids_are_rejected(ids):
    for name in NAMES:
        with pytest.raises(InvalidArgumentError):
            get_assignor(name).assign({"a": frozenset({"t"})}, {"t": ids}, {})


def test_sticky_follows_a_split_4_3_3_then_4_4_3_then_6_5():
    # K5, C9: the assignor gets the bucket ids to assign: 10 buckets over 3 members 4/3/3; a
    # bucket of the member with 4 split and its parent drained (ids 0-9 without it, plus the
    # children 10 and 11): 4/4/3, the member keeping its other 3; a member leaves: 6/5
    sticky = get_assignor("sticky")
    members = {m: frozenset({"t"}) for m in ("a", "b", "c")}
    before = sticky.assign(members, {"t": range(10)}, {})
    first = max(before, key=lambda m: len(before[m]))
    parent = min(before[first]).bucket
    while_undrained = sticky.assign(members, {"t": range(10)}, before)
    assert while_undrained == before  # the sealed parent is still assigned: nothing moves
    after = sticky.assign(members, {"t": [*(b for b in range(10) if b != parent), 10, 11]}, before)
    assert sorted(counts(after).values(), reverse=True) == [4, 4, 3]
    assert all(before[m] - {TB("t", parent)} <= after[m] for m in members)
    assert TB("t", 10) in set().union(*after.values())
    gone = min(m for m in members if m != first)
    two = {m: s for m, s in members.items() if m != gone}
    final = sticky.assign(two, {"t": [*(b for b in range(10) if b != parent), 10, 11]}, after)
    assert sorted(counts(final).values(), reverse=True) == [6, 5]


def test_output_does_not_depend_on_the_hash_seed():
    # C9: deterministic across processes, where set iteration order of strings differs
    script = (
        "from leasekit.consumers.assignors import ASSIGNORS\n"
        "from leasekit.structs import TableBucket as TB\n"
        "members = {m: frozenset(['x', 'y', 'z'][: 1 + i % 3]) for i, m in enumerate('pqrstuvw')}\n"
        "tables = {'x': range(7), 'y': (0, 2, 3, 4, 9), 'z': range(9)}\n"
        "current = {'q': {TB('x', b) for b in range(7)}, 'w': {TB('z', 1), TB('y', 2)}}\n"
        "for a in ASSIGNORS.values():\n"
        "    r = a.assign(members, tables, current)\n"
        "    print(a.name, sorted((m, sorted(b)) for m, b in r.items()))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1


# --- properties over random histories -----------------------------------------------------------

counts_st = st.lists(st.integers(min_value=0, max_value=20), max_size=13, unique=True).map(
    lambda ids: tuple(sorted(ids))
)
"""A table's bucket ids: after rescales they need not be contiguous (K5)."""


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_identical_subscriptions_over_joins_and_leaves(data):
    # C9: coverage, balance (sticky and roundrobin within 1; range within 1 per table),
    # determinism, and sticky moving exactly the minimum, after every join, leave or table change
    tables = {
        t: data.draw(counts_st) for t in data.draw(st.sets(st.sampled_from(TABLES), min_size=1))
    }
    ids: list[str] = data.draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=4, unique=True))
    current: dict[str, dict[str, set[TableBucket]]] = {name: {} for name in NAMES}
    rnd = data.draw(st.randoms(use_true_random=False))
    for _ in range(data.draw(st.integers(min_value=1, max_value=12))):
        members = {m: frozenset(tables) for m in ids}
        for name, assignor in ASSIGNORS.items():
            result = assignor.assign(members, tables, current[name])
            check_valid(result, members, tables)
            assert assignor.assign(*reordered(rnd, members, tables, current[name])) == result
            sizes = counts(result).values()
            if name == "range":
                check_range_shape(members, tables, result)
            else:
                assert max(sizes, default=0) - min(sizes, default=0) <= 1
            if (
                name == "roundrobin"
            ):  # the k-th bucket in (table, bucket) order goes to member k % M
                order = sorted(members)
                every = sorted(TB(t, b) for t in tables for b in tables[t])
                assert all(tb in result[order[k % len(order)]] for k, tb in enumerate(every))
            if name == "sticky":
                assert moves(members, tables, current[name], result) == minimum_moves(
                    members, tables, current[name]
                )
            current[name] = result
        event = data.draw(st.sampled_from(["join", "leave", "resize", "add table", "drop table"]))
        absent = [m for m in IDS if m not in ids]
        if event == "join" and absent:
            ids.append(data.draw(st.sampled_from(absent)))
        elif event == "leave" and len(ids) > 1:
            ids.remove(data.draw(st.sampled_from(ids)))
        elif event == "resize":
            tables[data.draw(st.sampled_from(sorted(tables)))] = data.draw(counts_st)
        elif event == "add table" and len(tables) < len(TABLES):
            tables[data.draw(st.sampled_from([t for t in TABLES if t not in tables]))] = data.draw(
                counts_st
            )
        elif event == "drop table" and len(tables) > 1:
            del tables[data.draw(st.sampled_from(sorted(tables)))]


subscriptions_st = st.frozensets(st.sampled_from(TABLES), max_size=len(TABLES))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_mixed_subscriptions_over_joins_and_leaves(data):
    # C9: with members subscribing to different tables, and a current assignment that may name
    # gone members, gone buckets and duplicates: coverage, only subscribed tables, an entry for
    # every member, determinism; sticky as balanced as the subscriptions allow and stable (its own
    # output is kept as it is); range in contiguous ranges per table
    tables = {t: data.draw(counts_st) for t in TABLES}
    members = data.draw(
        st.dictionaries(st.sampled_from(IDS), subscriptions_st, min_size=1, max_size=6)
    )
    junk = st.builds(TB, st.sampled_from((*TABLES, "gone")), st.integers(min_value=0, max_value=15))
    start = data.draw(st.dictionaries(st.sampled_from(IDS), st.sets(junk, max_size=8), max_size=6))
    current = {name: start for name in NAMES}
    rnd = data.draw(st.randoms(use_true_random=False))
    for _ in range(data.draw(st.integers(min_value=1, max_value=10))):
        for name, assignor in ASSIGNORS.items():
            result = assignor.assign(members, tables, current[name])
            check_valid(result, members, tables)
            assert assignor.assign(*reordered(rnd, members, tables, current[name])) == result
            if name == "range":
                check_range_shape(members, tables, result)
            if name == "sticky":
                assert sticky_balanced(members, result)
                assert assignor.assign(members, tables, result) == result
            current[name] = result
        event = data.draw(st.sampled_from(["join", "leave", "resubscribe", "resize"]))
        absent = [m for m in IDS if m not in members]
        if event == "join" and absent:
            members[data.draw(st.sampled_from(absent))] = data.draw(subscriptions_st)
        elif event == "leave" and len(members) > 1:
            del members[data.draw(st.sampled_from(sorted(members)))]
        elif event == "resubscribe":
            members[data.draw(st.sampled_from(sorted(members)))] = data.draw(subscriptions_st)
        elif event == "resize":
            tables[data.draw(st.sampled_from(TABLES))] = data.draw(counts_st)
