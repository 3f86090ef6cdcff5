"""What the fuzzed calls share (docs/security.md): the errors they may raise, the values
hypothesis draws for their arguments (any values, bucket and snapshot maps, oversized numbers)
and the hypothesis settings."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import leasekit as lk

ALLOWED = (lk.LeasekitError, ValueError, TypeError)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.binary(max_size=20),
    st.timedeltas(min_value=timedelta(days=-10), max_value=timedelta(days=10)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=10), inner, max_size=4),
        st.tuples(inner, inner),
    ),
    max_leaves=8,
)
buckets = st.builds(
    lk.TableBucket,
    st.one_of(st.text(max_size=12), st.just("t")),
    st.one_of(st.integers(-3, 10), st.just(0)),
)
snapshot_maps = st.one_of(
    values,
    st.dictionaries(
        st.one_of(buckets, scalars), st.one_of(scalars, st.integers(-2, 5)), max_size=4
    ),
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


SPARK_FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _call(func, *args, **kwargs):
    try:
        func(*args, **kwargs)
    except ALLOWED:
        pass


huge_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -(2**63), -(2**70)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, -1e300, 1e308, float("inf"), float("-inf"), float("nan")]),
)
