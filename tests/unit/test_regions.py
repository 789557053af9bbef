"""The pure rules of the out-of-core Mondrian's top cuts (plpy_anon/core/regions.py)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.core import regions
from plpy_anon.core.encoding import encode_factorized, encode_numeric
from plpy_anon.core.generalize import SpreadMeasure


@given(rows=st.integers(1, 10**7), data=st.data())
def test_median_fraction_picks_the_value_at_the_in_memory_median_position(rows, data):
    non_null = data.draw(st.integers(0, rows))
    nulls = rows - non_null
    f = regions.median_fraction(rows, non_null)
    if rows // 2 < nulls or non_null == 0:
        assert f is None
    else:   # percentile_disc returns the value at 1-based index ceil(f * N) of the sorted values
        assert math.ceil(f * non_null) == rows // 2 - nulls + 1


@given(values=st.lists(st.one_of(st.none(), st.integers(0, 20)), min_size=1, max_size=300))
def test_median_from_counts_per_value_is_the_value_percentile_disc_gives(values):
    """The value found in a region's counts per value (NULL lowest, left out of the counts) is
    the one at position rows // 2 of its rows sorted, as percentile_disc at median_fraction
    reads it."""
    rows, present = len(values), sorted(v for v in values if v is not None)
    f = regions.median_fraction(rows, len(present))
    counts = sorted((v, present.count(v)) for v in set(present))
    found = regions.value_at(counts, regions.median_index(rows, len(present))) if f is not None else None
    ordered = [None] * (rows - len(present)) + present
    assert found == ordered[rows // 2]


def test_region_budget_leaves_room_for_what_the_backend_holds():
    mib = 1 << 20
    assert regions.leaf_budget(512 * mib, 120 * mib) == 392 * mib
    assert regions.leaf_budget(64 * mib, 300 * mib) == 32 * mib          # half at least


@given(rows=st.integers(2, 200), k=st.integers(1, 50), lt=st.integers(0, 200), extra=st.integers(0, 200))
def test_chosen_cut_keeps_k_rows_on_both_sides_and_is_the_more_balanced(rows, k, lt, extra):
    lt = min(lt, rows)
    le = min(rows, lt + extra)
    chosen = regions.choose(rows, k, None, regions.Candidate(lt), regions.Candidate(le))
    ok = [n for n in (lt, le) if n >= k and rows - n >= k]
    if not ok:
        assert chosen is None
        return
    left = lt if chosen else le
    assert left >= k and rows - left >= k
    assert abs(2 * left - rows) == min(abs(2 * n - rows) for n in ok)
    if lt in ok and abs(2 * lt - rows) == abs(2 * le - rows):
        assert chosen is True                                  # ties to "<"


def test_cut_is_refused_when_a_side_has_fewer_than_l_sensitive_values():
    good = regions.Candidate(10, (2,), (3,))
    thin = regions.Candidate(10, (1,), (3,))
    assert regions.choose(20, 5, 2, good, None) is True
    assert regions.choose(20, 5, 2, thin, None) is None
    assert regions.choose(20, 5, 2, thin, good) is False


@given(values=st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=60),
       low=st.integers(-100, -50), high=st.integers(50, 100))
def test_widened_numeric_column_keeps_every_value_and_measures_against_the_table(values, low, high):
    raw = np.array([0 if v is None else v for v in values], dtype=np.int64)
    enc = encode_numeric("x", raw, np.array([v is None for v in values]))
    wide, shift = regions.widened(enc, regions.QIStats(0, float(low), float(high)))
    present = np.array([v is not None for v in values])
    if present.any():
        before = enc.labels[enc.codes[present] - (1 if enc.null_code == 0 else 0)]
        after = wide.labels[wide.codes[present] - (1 if wide.null_code == 0 else 0)]
        assert (before == after).all()
        assert SpreadMeasure(wide)._width == high - low
        assert shift == int(low < enc.labels[0])
    assert (wide.codes[~present] == enc.codes[~present]).all()


def test_widened_categorical_column_counts_the_tables_values():
    enc = encode_factorized("c", np.array([0, 1, 1, -1]), ["a", "b"])
    wide, shift = regions.widened(enc, regions.QIStats(4, distinct=10))
    assert shift == 0 and len(wide.labels) == 10 and (wide.codes == enc.codes).all()
    assert list(wide.labels[:3]) == list(enc.labels)
