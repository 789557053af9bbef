"""The column-wise literals a release's classes are written with equal their per-class
reference: value sets straight from the (class, value) pairs, slice by slice, against the
tuples of ``class_bounds``, and bound texts computed once per distinct value against each
value's own."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import mondrian_jit
from plpy_anon.core.encoding import encode_categorical
from plpy_anon.core.generalize import ClassIndex, class_bounds, class_code_range
from plpy_anon.db import class_sets, stored_classes
from plpy_anon.db.generalization import (
    array_element,
    class_literals,
    class_set_literals,
    pack_literals,
)


class Categorical:
    kind = "categorical"


# values that need quoting in an array literal beside plain ones, and NULL
VALUES = st.one_of(st.none(), st.sampled_from(["a", "b", "zz", "", "NULL", "x y", 'q"t', "b\\s",
                                               "{c}", "é"]))


@settings(max_examples=60, deadline=None)
@given(st.lists(VALUES, min_size=1, max_size=60), st.data())
def test_set_literals_equal_the_literals_of_the_class_value_tuples(values, data):
    n_classes = data.draw(st.integers(1, len(values)))
    labels = np.array(data.draw(st.permutations(
        list(range(n_classes)) + data.draw(st.lists(st.integers(0, n_classes - 1),
                                                    min_size=len(values) - n_classes,
                                                    max_size=len(values) - n_classes)))))
    enc = encode_categorical("c", np.array(values, dtype=object))
    reference = class_literals(Categorical, class_bounds([enc], labels, n_classes)["c"])
    literals = class_set_literals(enc, labels, n_classes)
    assert list(literals(0, n_classes)) == reference
    cut = data.draw(st.integers(0, n_classes))                  # written in two slices
    assert list(literals(0, cut)) + list(literals(cut, n_classes)) == reference


DAYS = st.one_of(st.integers(-800_000, 3_000_000).map(float),
                 st.sampled_from([float("inf"), float("-inf")]))
MICROS = st.one_of(st.integers(-(2**62), 2**62),
                   st.sampled_from([np.iinfo(np.int64).max, np.iinfo(np.int64).min]))


@settings(max_examples=60, deadline=None)
@given(st.lists(DAYS, min_size=0, max_size=40))
def test_date_texts_equal_each_value_formatted_alone(days):
    texts = stored_classes.number_texts(None, np.array(days, dtype=np.float64), "date")
    assert texts == [stored_classes._date_text(d) for d in days]


@settings(max_examples=60, deadline=None)
@given(st.lists(MICROS, min_size=0, max_size=40), st.sampled_from(["timestamp", "timestamptz"]))
def test_timestamp_texts_equal_each_value_formatted_alone(micros, type_name):
    zone = "+00" if type_name == "timestamptz" else ""
    texts = stored_classes.number_texts(None, np.array(micros, dtype=np.int64), type_name)
    assert texts == [stored_classes.time_texts([m], zone)[0] for m in micros]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.booleans()), min_size=1, max_size=50),
       st.data())
def test_class_extremes_and_code_ranges_equal_a_per_class_loop(rows, data):
    values = np.array([v for v, _ in rows], dtype=np.int64)
    null = np.array([n for _, n in rows])
    n_classes = data.draw(st.integers(1, len(rows) + 2))             # some classes empty
    labels = np.array(data.draw(st.lists(st.integers(0, n_classes - 1), min_size=len(rows),
                                         max_size=len(rows))))
    index = ClassIndex.of(labels, n_classes)
    low, high, only_null = stored_classes.class_extremes(values, null, index)
    lo_code, hi_code = class_code_range(values + 5, labels, n_classes, index)
    for c in range(n_classes):
        members = values[labels == c]
        present = values[(labels == c) & ~null]
        assert only_null[c] == (present.size == 0)
        assert (low[c], high[c]) == ((present.min(), present.max()) if present.size else (0, 0))
        assert (lo_code[c], hi_code[c]) == ((members.min() + 5, members.max() + 5) if members.size
                                            else (np.iinfo(np.int64).max, -1))


ENTRIES = st.lists(st.text(min_size=0, max_size=4).map(array_element), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(ENTRIES, st.lists(st.integers(0, 6), min_size=1, max_size=12), st.data())
def test_compiled_array_literals_pack_as_the_joined_ones(entries, sizes, data):
    """A slice's array literals written by the compiled writer are, byte for byte, the packed
    join of its classes' elements (NULL code -1, unicode, quoted elements, empty classes)."""
    kernels = mondrian_jit.kernels()
    if kernels is None:
        pytest.skip("numba cannot be imported")
    elements = stored_classes.array_elements(entries)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    codes = np.array(data.draw(st.lists(st.integers(-1, len(entries) - 1), min_size=int(bounds[-1]),
                                        max_size=int(bounds[-1]))), dtype=np.int64)
    order = np.array(data.draw(st.permutations(range(codes.size))), dtype=np.int64)
    first = data.draw(st.integers(0, len(sizes) - 1))
    last = data.draw(st.integers(first + 1, len(sizes)))
    joined = stored_classes.array_literals(codes, elements, order, bounds, first, last)
    table = class_sets.EntryTable(elements, kernels.write_class_sets)
    written = stored_classes.array_literals(codes, table, order, bounds, first, last)
    assert list(written) == joined
    # packed after a separator none of them holds (chosen among the characters of every
    # element, so it may differ from the joined literals' own choice)
    packed, (separator, _) = pack_literals(written)
    assert packed.decode() == separator + separator.join(joined)
    assert not any(separator in literal for literal in joined)
    # a release made before packing gets them as jsonb (mondrian_family.partition_slices)
    assert json.loads(json.dumps(written, default=list)) == joined


INT64 = np.iinfo(np.int64)
RANGE_TYPES = {"int2": st.integers(-(2**15), 2**15 - 1), "int4": st.integers(-(2**31), 2**31 - 1),
               "int8": st.integers(INT64.min, INT64.max),
               "date": DAYS, "timestamp": MICROS,
               "timestamptz": MICROS}


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(sorted(RANGE_TYPES)), st.data())
def test_compiled_range_literals_pack_as_the_joined_ones(type_name, data):
    """A slice's range literals written by the compiled writer are, byte for byte, the packed
    join of range_literals' texts: closed, open at the type's maximum, NULL for a class of
    NULLs only; integers at their limits, dates and timestamps at +-infinity."""
    if mondrian_jit.kernels() is None:
        pytest.skip("numba cannot be imported")
    values = RANGE_TYPES[type_name]
    maximum = stored_classes.DISCRETE_MAXIMUM.get(type_name)
    if maximum is not None:          # the maximum itself, where a class is released open above
        values = st.one_of(values, st.just(float(maximum) if type_name == "date" else maximum))
    pairs = data.draw(st.lists(st.tuples(values, values, st.booleans()), min_size=1, max_size=30))
    low = [min(a, b) for a, b, _ in pairs]
    high = [max(a, b) for a, b, _ in pairs]
    dtype = np.float64 if type_name == "date" else np.int64
    low, high = np.array(low, dtype=dtype), np.array(high, dtype=dtype)
    only_null = np.array([null for _, _, null in pairs])
    joined = stored_classes.range_literals(None, type_name, low, high, only_null)
    ranges = stored_classes.class_ranges(None, type_name, low, high, only_null,
                                         mondrian_jit.COMPILED_FROM_ROWS)
    assert callable(ranges), "not written by the compiled kernel"
    first = data.draw(st.integers(0, len(pairs) - 1))
    last = data.draw(st.integers(first + 1, len(pairs)))
    written = ranges(first, last)
    assert list(written) == joined[first:last]
    assert pack_literals(written) == pack_literals(joined[first:last])
    # a release made before packing gets them as jsonb (mondrian_family.partition_slices)
    assert json.loads(json.dumps(written, default=list)) == joined[first:last]
