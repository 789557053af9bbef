"""The risk report's int8[] literals, parsed in C (plpy_anon.db.class_counts.int_array)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.class_counts import int_array


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
