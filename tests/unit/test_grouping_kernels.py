"""The stable refresh's per-group reductions on compiled kernels give numpy's results exactly:
each group's smallest and largest value (NaN kept, as numpy's minimum and maximum keep it), rows
added into groups, the stable order of group ids; and the vectorised helpers around them (rows
named by their values, ids absent from a sorted list) give what the sorts they replace gave."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import republication, republish

pytest.importorskip("numba")

LABELS = st.lists(st.integers(0, 6), min_size=1, max_size=60)


@pytest.fixture(autouse=True, scope="module")
def loaded_kernels():
    # loaded whatever the table's size: the helpers below then run on them
    assert republication._grouping_kernels() is not None


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@settings(deadline=None)
@given(LABELS, st.data(), st.booleans())
def test_group_min_max_is_numpys(labels, data, floats):
    labels = np.array(labels, dtype=np.int64)
    if floats:
        values = np.array(data.draw(st.lists(
            st.one_of(st.floats(allow_infinity=True), st.sampled_from([0.0, -0.0, np.nan])),
            min_size=labels.size, max_size=labels.size)), dtype=np.float64)
        start_low, start_high = np.full(7, np.inf), np.full(7, -np.inf)
    else:
        values = np.array(data.draw(st.lists(st.integers(-5, 5), min_size=labels.size,
                                             max_size=labels.size)), dtype=np.int64)
        start_low, start_high = np.full(7, np.iinfo(np.int64).max), np.full(7, -1)
    low, high = start_low.copy(), start_high.copy()
    republication.group_min_max(labels, values, low, high)
    want_low, want_high = start_low.copy(), start_high.copy()
    np.minimum.at(want_low, labels, values)
    np.maximum.at(want_high, labels, values)
    np.testing.assert_array_equal(low, want_low)
    np.testing.assert_array_equal(high, want_high)
    # the sign of a zero kept as numpy keeps it
    assert np.signbit(low).tolist() == np.signbit(want_low).tolist()


@settings(deadline=None)
@given(LABELS, st.integers(1, 4), st.integers(0, 2 ** 31))
def test_rows_added_into_groups_are_numpys(labels, width, seed):
    at = np.array(labels, dtype=np.int64)
    rows = np.random.default_rng(seed).integers(-3, 9, (at.size, width))
    out = np.zeros((7, width), dtype=np.int64)
    republish._add_rows(out, at, rows)
    want = np.zeros((7, width), dtype=np.int64)
    np.add.at(want, at, rows)
    np.testing.assert_array_equal(out, want)


@settings(deadline=None)
@given(st.lists(st.integers(0, 30), max_size=80))
def test_stable_order_is_numpys_stable_argsort(keys):
    keys = np.array(keys, dtype=np.int64)
    np.testing.assert_array_equal(republication.stable_order(keys),
                                  np.argsort(keys, kind="stable"))


@settings(deadline=None)
@given(st.lists(st.lists(st.integers(-3, 3), min_size=3, max_size=3), min_size=1, max_size=40))
def test_rows_are_named_by_their_values(rows):
    table = np.array(rows, dtype=np.int64)
    ids = republish._row_ids(table)
    # equal rows, equal numbers, from 0 up
    same = (table[:, None, :] == table[None, :, :]).all(axis=2)
    np.testing.assert_array_equal(ids[:, None] == ids[None, :], same)
    assert sorted(set(ids.tolist())) == list(range(len({tuple(r) for r in rows})))


@settings(deadline=None)
@given(st.integers(1, 12), st.lists(st.sampled_from([0, 1, 3, 200, 70000, 2**40, 2**62, 2**63 - 1]),
                                    min_size=12, max_size=12),
       st.integers(0, 2**32 - 1), st.integers(0, 300))
def test_rows_are_numbered_in_their_lexicographic_order(width, spans, seed, n):
    rng = np.random.default_rng(seed)
    # columns of small and huge ranges (int64's extremes among them), repeated rows
    table = np.column_stack([rng.integers(-1, spans[j], n, endpoint=True) if spans[j] < 2**63 - 1
                             else rng.choice([-1, 0, 2**63 - 1], n) for j in range(width)])
    table = table[rng.integers(0, max(1, n // 2), n)] if n else table.reshape(0, width)
    order = np.lexsort(table.T[::-1])
    ordered = table[order]
    new = np.ones(n, dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    expected = np.empty(n, dtype=np.int64)
    expected[order] = np.cumsum(new) - 1
    np.testing.assert_array_equal(republish._row_ids(table.astype(np.int64)), expected)


@settings(deadline=None)
@given(st.lists(st.integers(0, 20), unique=True), st.lists(st.integers(0, 20), unique=True))
def test_absent_ids_are_setdiff1d(values, ids):
    values = np.sort(np.array(values, dtype=np.int64))
    for listed in (np.sort(np.array(ids, dtype=np.int64)), np.array(ids, dtype=np.int64)):
        np.testing.assert_array_equal(republish._absent(values, listed),
                                      np.setdiff1d(values, listed))
