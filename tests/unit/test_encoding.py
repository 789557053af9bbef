"""Encoding of quasi-identifiers: code order = cut order, NULL as a value of its own, round trips."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.encoding import encode_categorical, encode_factorized, encode_numeric
from plpy_anon.core.errors import InvalidParameter, UndefinedObject, UnsupportedType
from plpy_anon.core.generalize import value_bounds
from plpy_anon.core.hierarchy import Hierarchy


def test_numeric_codes_follow_value_order():
    col = encode_numeric("age", np.array([30, 10, 20, 10]))
    assert col.kind == "numeric" and col.null_code is None
    assert col.codes.dtype == np.int32
    assert col.codes.tolist() == [2, 0, 1, 0]
    assert col.labels.tolist() == [10, 20, 30]


def test_numeric_null_gets_code_zero_before_every_value():
    col = encode_numeric("x", np.array([5.0, -1.0, 0.0, 7.0]), null_mask=[False, False, True, False])
    assert col.null_code == 0
    assert col.codes.tolist() == [2, 1, 0, 3]       # -1 -> 1, 5 -> 2, 7 -> 3; NULL -> 0
    assert col.labels.tolist() == [-1.0, 5.0, 7.0]  # labels exclude NULL


def test_nan_and_nat_count_as_null():
    col = encode_numeric("x", np.array([1.0, np.nan, 2.0]))
    assert col.null_code == 0 and col.codes.tolist() == [1, 0, 2]
    dates = np.array(["2020-01-02", "NaT", "2019-05-01"], dtype="datetime64[D]")
    col = encode_numeric("d", dates)
    assert col.codes.tolist() == [2, 0, 1]
    assert col.labels.dtype == dates.dtype


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-50, 50)), min_size=1, max_size=40))
def test_numeric_value_bounds_round_trip(values):
    null = np.array([v is None for v in values])
    raw = np.array([0 if v is None else v for v in values])
    col = encode_numeric("x", raw, null_mask=null)
    lo, hi = value_bounds(col, col.codes, col.codes)
    np.testing.assert_array_equal(np.isnan(lo), null)
    np.testing.assert_array_equal(lo[~null], raw[~null])
    np.testing.assert_array_equal(hi[~null], raw[~null])
    # order of codes is order of values, NULL first
    key = np.where(null, -np.inf, raw)
    assert all((key[i] < key[j]) == (col.codes[i] < col.codes[j])
               for i in range(len(values)) for j in range(len(values)))


def test_categorical_by_frequency_with_ties_by_label():
    col = encode_categorical("c", ["b", "a", "c", "c", None, "a", "c", None])
    # counts: c 3, a 2, NULL 2, b 1 -- NULL after the string of equal frequency
    assert col.labels.tolist() == ["c", "a", None, "b"]
    assert col.null_code == 2
    assert col.codes.tolist() == [3, 1, 0, 0, 2, 1, 0, 2]
    assert col.hierarchy is None and col.kind == "categorical"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(list("abcdef"))), min_size=1, max_size=40))
def test_categorical_round_trip_and_frequency_order(values):
    col = encode_categorical("c", values)
    assert col.labels[col.codes].tolist() == values
    counts = np.bincount(col.codes, minlength=len(col.labels))
    assert (np.diff(counts) <= 0).all()             # most frequent first
    assert (col.null_code is None) == (None not in values)


def test_categorical_with_hierarchy_uses_depth_first_leaves():
    tree = Hierarchy.from_paths([["x", "A", "*"], ["q", "B", "*"], ["y", "A", "*"]])
    assert tree.leaves == ["x", "y", "q"]
    col = encode_categorical("c", ["q", "x", None, "q"], tree)
    assert col.codes.tolist() == [2, 0, 3, 2]       # NULL after the last leaf
    assert col.labels.tolist() == ["x", "y", "q", None]
    assert col.null_code == 3 and col.hierarchy is tree


def test_value_outside_hierarchy_names_value_and_column():
    tree = Hierarchy.from_paths([["x", "*"], ["y", "*"]])
    with pytest.raises(UndefinedObject, match="column 'planet' does not cover 1 value") as error:
        encode_categorical("planet", ["x", "Mars"], tree)
    assert "Mars" not in error.value.message and "'Mars'" in error.value.detail


def test_text_is_not_numeric():
    with pytest.raises(UnsupportedType, match="'name' has dtype"):
        encode_numeric("name", np.array(["a", "b"]))


def test_shape_errors():
    with pytest.raises(InvalidParameter, match="one-dimensional"):
        encode_numeric("x", np.zeros((2, 2)))
    with pytest.raises(InvalidParameter, match="null_mask"):
        encode_numeric("x", np.zeros(3), null_mask=[True])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "c", "d", ""])), min_size=1,
                max_size=40))
def test_encoding_already_factorized_codes_matches_encoding_the_values(values):
    """The reader hands text columns over as codes into a dictionary (first appearance order,
    -1 for NULL); encoding those gives exactly the encoding of the values themselves."""
    factor, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    direct = encode_categorical("c", values)
    from_codes = encode_factorized("c", factor.astype(np.int32), [str(u) for u in uniques])
    assert from_codes.codes.tolist() == direct.codes.tolist()
    assert from_codes.labels.tolist() == direct.labels.tolist()
    assert from_codes.null_code == direct.null_code


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint64"]),
       st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1),
       st.lists(st.tuples(st.booleans(), st.floats(0, 1)), min_size=1, max_size=60))
def test_integer_codes_are_numpys_sorted_distinct_values_at_any_range(dtype, a, b, draws):
    """The range table for narrow integer ranges gives np.unique's labels and codes, in every
    width, at the edges of each type's range and across wide ranges (which sort)."""
    info = np.iinfo(dtype)
    lo, hi = sorted(info.min + x % (int(info.max) - int(info.min) + 1) for x in (a, b))
    raw = np.array([lo + int(f * (hi - lo)) for _, f in draws], dtype=dtype)
    null = np.array([n for n, _ in draws])
    col = encode_numeric("x", raw, null_mask=null)
    labels, inverse = np.unique(raw[~null], return_inverse=True)
    assert col.labels.dtype == raw.dtype
    np.testing.assert_array_equal(col.labels, labels)
    np.testing.assert_array_equal(col.codes[~null], inverse + (1 if null.any() else 0))
    assert (col.codes[null] == 0).all()
