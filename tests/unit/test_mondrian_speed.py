"""Issue 14 item 3: the faster partitioner (codes kept in layout order, optional threads)
gives exactly the labels of the implementation it replaced (tests/unit/reference_mondrian.py)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import mondrian
from plpy_anon.core.mondrian import Mondrian
from tests.unit import reference_mondrian
from tests.unit.test_mondrian import KINDS, _random_column, tables


@settings(max_examples=80, deadline=None)
@given(tables(max_rows=80), st.integers(1, 3))
def test_labels_identical_to_previous_implementation(table, l):
    columns, k, rng = table
    n = len(columns[0].codes)
    sensitive = rng.integers(0, 5, size=n)
    if len(set(sensitive.tolist())) < l:
        l = 1
    for lv, sens in ((None, None), (l, sensitive)):
        new = Mondrian(k=k, l=lv).fit(columns, sens)
        old = reference_mondrian.Mondrian(k=k, l=lv).fit(columns, sens)
        np.testing.assert_array_equal(new.labels_, old.labels_)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2, 5, 10]))
def test_larger_tables_identical_to_previous_implementation_threads(seed, k):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2000, 6000))
    columns = [_random_column(kind, f"q{i}", n, rng) for i, kind in enumerate(KINDS * 2)]
    sensitive = rng.integers(0, 70, n)             # > 64 values: the sort-based distinct count
    saved = (mondrian._Workers.THREADS, mondrian._Workers.MIN_ROWS, mondrian._STACKED_CELLS,
             mondrian._COMPRESS_CHUNK)
    # every level on two threads, regrouped in chunks of 97 positions; the default (a table
    # this small: all attributes stacked); one array per attribute on one thread
    for threads, pool_rows, stacked, chunk in ((2, 0, 0, 97), saved, (1, saved[1], 0, saved[3])):
        mondrian._Workers.THREADS, mondrian._Workers.MIN_ROWS = threads, pool_rows
        mondrian._STACKED_CELLS, mondrian._COMPRESS_CHUNK = stacked, chunk
        try:
            for lv, sens in ((None, None), (3, sensitive)):
                new = Mondrian(k=k, l=lv).fit(columns, sens)
                old = reference_mondrian.Mondrian(k=k, l=lv).fit(columns, sens)
                np.testing.assert_array_equal(new.labels_, old.labels_)
        finally:
            (mondrian._Workers.THREADS, mondrian._Workers.MIN_ROWS, mondrian._STACKED_CELLS,
             mondrian._COMPRESS_CHUNK) = saved
