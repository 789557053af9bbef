"""The risk report's int8[] literals, parsed in C, and its packed int8s (plpy_anon.db.class_counts)."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.class_counts import count_pairs, int8_array, int_array


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=30))
def test_literal_reads_back_every_element_in_order(values):
    literal = "{" + ",".join(map(str, values)) + "}"      # what int8[]::text writes
    parsed = int_array(literal)
    assert parsed.dtype == np.int64
    assert parsed.tolist() == values


@pytest.mark.parametrize("text", [None, "", "{}"])
def test_empty_or_missing_is_an_empty_array(text):
    assert int_array(text).size == 0


@pytest.mark.parametrize("text", ["{1,NULL,3}", "{1,x}", "{1,,2}"])
def test_what_is_not_an_integer_list_is_refused_not_cut_short(text):
    with pytest.raises(ValueError, match="not an array of integers"):
        int_array(text)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-2**63, 2**63 - 1), max_size=30))
def test_packed_int8s_read_back_every_element_in_order(values):
    sent = b"".join(v.to_bytes(8, "big", signed=True) for v in values)   # what int8send writes
    parsed = int8_array(sent)
    assert parsed.dtype == np.int64
    assert parsed.tolist() == values


def test_packed_bytes_that_are_no_whole_int8s_are_refused():
    with pytest.raises(ValueError, match="not a whole number of int8s"):
        int8_array(b"\x00" * 12)


@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(-1, 3000)), max_size=60))
def test_counted_pairs_are_each_class_and_value_with_its_rows_in_order(elements):
    """Stored classes' elements counted by the reader (both the histogram for few values and
    the sort for many): every (class, value id) pair present, its rows, by class then value."""
    owner = np.array([c for c, _ in elements], dtype=np.int64)
    vid = np.array([v for _, v in elements], dtype=np.int64)
    classes, vids, rows = count_pairs(owner, vid)
    expected = sorted(Counter(elements).items())
    assert list(zip(classes.tolist(), vids.tolist(), rows.tolist())) == \
        [(c, v, n) for (c, v), n in expected]
