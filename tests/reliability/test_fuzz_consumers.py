"""Fuzzed arguments for consumers, subscriptions and group administration (docs/security.md):
only LeasekitError, ValueError or TypeError come out, never a kazoo or pyarrow exception."""

from __future__ import annotations

from fuzz_cases import ALLOWED, FUZZ, _call, buckets, scalars, values
from hypothesis import given
from hypothesis import strategies as st

import leasekit as lk

offset_maps = st.one_of(
    values,
    st.dictionaries(
        st.one_of(buckets, scalars),
        st.one_of(
            scalars,
            st.integers(-2, 50),
            st.builds(
                lk.OffsetAndMetadata, st.integers(-2, 50), st.one_of(st.text(max_size=20), scalars)
            ),
        ),
        max_size=4,
    ),
)


@FUZZ
@given(
    group=values,
    reset=values,
    auto=values,
    interval=values,
    records=values,
    assignor=values,
    timeout=values,
    listener=st.one_of(st.none(), values, st.just(lk.BucketRebalanceListener())),
)
def test_fuzz_consumer_construction(
    conn, table, group, reset, auto, interval, records, assignor, timeout, listener
):
    # docs/security.md: conn.consumer and every keyword
    try:
        consumer = conn.consumer(
            "t",
            group_id=group,
            auto_offset_reset=reset,
            enable_auto_commit=auto,
            auto_commit_interval=interval,
            max_poll_records=records,
            assignor=assignor,
            session_timeout=timeout,
            max_poll_interval=timeout,
            listener=listener,
        )
    except ALLOWED:
        return
    _call(consumer.poll)
    consumer.close()


@FUZZ
@given(
    offsets=offset_maps,
    tb=st.one_of(buckets, values),
    offset=values,
    timeout=values,
    limit=values,
    times=offset_maps,
    tbs=st.lists(st.one_of(buckets, scalars), max_size=3),
)
def test_fuzz_consumer_calls(conn, table, offsets, tb, offset, timeout, limit, times, tbs):
    # docs/security.md: every public method of a consumer
    with conn.consumer(
        "t", group_id="fuzz", auto_offset_reset="earliest", enable_auto_commit=False
    ) as c:
        c.poll(max_records=1)  # joins: its buckets are assigned
        _call(c.commit, offsets)
        _call(c.committed, tb)
        _call(c.seek, tb, offset)
        _call(c.position, tb)
        _call(c.poll, timeout="0s", max_records=limit)
        _call(
            c.poll,
            timeout=timeout if isinstance(timeout, (int, float)) and abs(timeout) < 0.01 else "0s",
        )
        _call(c.getone, timeout="0s")
        _call(c.seek_to_beginning, *[x for x in tbs if not isinstance(x, lk.TableBucket)] or tbs)
        _call(c.seek_to_end, *tbs)
        _call(c.seek_to_committed, *tbs)
        _call(c.beginning_offsets, tbs)
        _call(c.end_offsets, tbs)
        _call(c.offsets_for_times, times)
        _call(c.highwater, tb)
        _call(c.last_poll_timestamp, tb)
        _call(c.pause, *tbs)
        _call(c.resume, *tbs)
        _call(c.assign, tbs)
        _call(c.subscribe, tbs, listener=offset)
        _call(c.poll)
        _call(c.unsubscribe)


regexes = st.one_of(st.none(), values, st.text(alphabet="^$.*+?()[]{}|\\d_tx0-9,", max_size=12))


@FUZZ
@given(
    tables=st.one_of(values, st.lists(st.one_of(st.just("t"), scalars), max_size=3)),
    pattern=regexes,
    listener=st.one_of(st.none(), values, st.just(lk.BucketRebalanceListener())),
    group=st.sampled_from([None, "fz"]),
)
def test_fuzz_subscribe(conn, table, tables, pattern, listener, group):
    # C17: subscribe with any tables, pattern and listener: a clear error, or a subscription
    # whose assignment (once polled) has buckets of the tables it names or matches only
    with conn.consumer(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False) as c:
        try:
            c.subscribe(tables, pattern=pattern, listener=listener)
        except ALLOWED:
            assert c.assignment() == set()
            return
        for _ in range(20):
            c.poll(timeout="0.05s")
            if c.assignment() or group is None:
                break
        if pattern is not None:
            import re

            regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
            assert c.assignment() == (set(table.buckets) if regex.fullmatch("t") else set())
        else:
            assert c.assignment() == set(table.buckets)
        _call(c.subscribe, tables, pattern=pattern, listener=listener)
        _call(c.unsubscribe)


@FUZZ
@given(group=values, to=values, shift=values, tables=values, bkts=values, dry=values)
def test_fuzz_consumer_admin(conn, table, group, to, shift, tables, bkts, dry):
    # docs/security.md: the administration calls
    _call(conn.describe_group, group)
    _call(conn.group_members, group)
    _call(conn.group_status, group, stop_after=to, stall_after=shift)
    _call(
        conn.reset_offsets, group, to=to, shift_by=shift, tables=tables, buckets=bkts, dry_run=dry
    )
    _call(conn.delete_offsets, group, bkts)
    _call(conn.delete_group, group)
