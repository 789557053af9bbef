"""finite_for_ordering: ±inf and NaN become finite stand-ins in PostgreSQL's order (issue 11)."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.core.encoding import encode_numeric, finite_for_ordering
from plpy_anon.core.generalize import SpreadMeasure

values = st.lists(st.one_of(st.floats(-1e300, 1e300), st.sampled_from([np.inf, -np.inf, np.nan])),
                  min_size=1, max_size=40)


def pg_key(v):
    """PostgreSQL's float8 order: -Infinity < finite < Infinity < NaN (NaN equal to itself)."""
    return (1, 0.0) if np.isnan(v) else (0, v)


@given(values, st.lists(st.booleans(), min_size=40, max_size=40))
def test_order_is_postgres_order_and_everything_is_finite(xs, nulls):
    x = np.array(xs, dtype=np.float64)
    mask = np.array(nulls[:len(xs)])
    out = finite_for_ordering(x, mask)
    present = ~mask
    assert np.isfinite(out[present]).all()
    assert np.array_equal(out[mask], x[mask], equal_nan=True)         # NULL entries untouched
    idx = np.flatnonzero(present)
    for i in idx:
        for j in idx:
            assert (pg_key(x[i]) < pg_key(x[j])) == (out[i] < out[j])
            assert (pg_key(x[i]) == pg_key(x[j])) == (out[i] == out[j])


def test_spread_is_not_poisoned_by_infinity():
    x = np.array([1.0, 2.0, 3.0, np.inf, -np.inf, np.nan])
    col = encode_numeric("w", finite_for_ordering(x))
    assert col.null_code is None                  # NaN is a value here, not NULL
    spread = SpreadMeasure(col)(np.array([1]), np.array([3]))
    assert 0 < spread[0] < 1 and np.isfinite(spread[0])


def test_close_large_values_keep_infinity_above():
    x = np.array([1e16, 1e16 - 2, np.inf, -np.inf, np.nan])
    out = finite_for_ordering(x)
    assert out[3] < out[1] < out[0] < out[2] < out[4]


def test_integers_and_finite_floats_are_unchanged():
    ints = np.array([1, 2, 3], dtype=np.int64)
    assert finite_for_ordering(ints) is ints
    floats = np.array([1.5, -2.0])
    assert finite_for_ordering(floats) is floats
