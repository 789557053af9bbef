"""Release metrics and class bounds on tiny, hand-computed releases."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.generalize import NumericBounds, class_bounds
from plpy_anon.core.hierarchy import Hierarchy
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.mondrian import Mondrian

TREE = Hierarchy.from_paths([["a", "X", "*"], ["b", "X", "*"], ["c", "Y", "*"], ["d", "*"]])


def test_hand_computed_release():
    age = encode_numeric("age", np.array([10, 20, 30, 40]))
    cat = encode_categorical("c", ["a", "b", "a", "a"])
    m = release_metrics([age, cat], np.array([0, 0, 1, 1]), k=2)
    # age: each class spans 10 of the global 30 -> 1/3; c: class 0 {a, b} of a 2-value domain
    # -> 1, class 1 {a} -> 0, averaged over rows -> 1/2
    assert m["ncp_per_attribute"] == pytest.approx({"age": 100 / 3, "c": 50.0})
    assert m["ncp_percent"] == pytest.approx((100 / 3 + 50) / 2)
    assert (m["achieved_k"], m["n_classes"], m["c_dm"]) == (2, 2, 8)
    assert m["c_avg"] == pytest.approx(4 / (2 * 2))


def test_hierarchy_ncp_uses_lca_leaf_count():
    col = encode_categorical("h", ["a", "b", "c", "d"], TREE)
    m = release_metrics([col], np.array([0, 0, 1, 1]), k=2)
    # {a, b} -> X (2 of 4 leaves): 1/3; {c, d} -> * : 1
    assert m["ncp_percent"] == pytest.approx(100 * (2 * (1 / 3) + 2 * 1) / 4)


def test_one_class_has_c_dm_n_squared():
    col = encode_numeric("x", np.arange(9))
    m = release_metrics([col], np.zeros(9, dtype=int), k=3)
    assert m["c_dm"] == 81 and m["n_classes"] == 1 and m["achieved_k"] == 9
    assert m["ncp_percent"] == pytest.approx(100.0)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=30))
def test_ncp_zero_when_every_class_is_one_value(values):
    values = np.array(values)
    cols = [encode_numeric("x", values), encode_categorical("c", [f"v{v}" for v in values])]
    labels = np.unique(values, return_inverse=True)[1]
    m = release_metrics(cols, labels, k=2)
    assert m["ncp_percent"] == 0.0
    assert m["c_dm"] == int((np.bincount(values)[np.bincount(values) > 0] ** 2).sum())


def test_class_below_k_is_visible():
    col = encode_numeric("x", np.arange(5))
    m = release_metrics([col], np.array([0, 0, 0, 0, 1]), k=2)
    assert m["achieved_k"] == 1 and m["n_classes"] == 2


def test_numeric_null_mixed_with_values_is_full_loss():
    col = encode_numeric("x", np.array([0.0, 1.0, 5.0, 9.0]), null_mask=[True, False, False, False])
    m = release_metrics([col], np.array([0, 0, 1, 1]), k=2)
    # class 0 = {NULL, 1}: 1 by definition; class 1 = {5, 9} of global 1..9: 4/8
    assert m["ncp_percent"] == pytest.approx(100 * (2 * 1 + 2 * 0.5) / 4)


def test_metrics_of_a_fitted_release_agree_with_independent_counts():
    rng = np.random.default_rng(3)
    x = encode_numeric("x", rng.integers(0, 50, 200))
    model = Mondrian(k=6).fit([x])
    m = release_metrics([x], model.labels_, 6)
    sizes = np.bincount(model.labels_)
    assert m["achieved_k"] == sizes.min() >= 6
    assert m["c_dm"] == (sizes ** 2).sum()
    values = x.labels[x.codes]
    per_row = [np.ptp(values[model.labels_ == c]) / np.ptp(values) for c in model.labels_]
    assert m["ncp_percent"] == pytest.approx(100 * np.mean(per_row))


def test_bad_input():
    col = encode_numeric("x", np.arange(3))
    with pytest.raises(InsufficientData):
        release_metrics([encode_numeric("x", np.array([]))], np.array([], dtype=int), k=2)
    with pytest.raises(InvalidParameter, match="non-negative integers"):
        release_metrics([col], np.array([0.5, 1, 1]), k=2)
    with pytest.raises(InvalidParameter, match="k must be at least 2, got 0"):
        release_metrics([col], np.array([0, 0, 0]), k=0)


# ---------------------------------------------------------------------- class_bounds
def test_numeric_bounds_with_null_only_class():
    col = encode_numeric("x", np.array([3, 0, 1, 7, 0]), null_mask=[False, True, False, False, True])
    bounds = class_bounds([col], np.array([0, 1, 0, 2, 2]), 3)["x"]
    assert isinstance(bounds, NumericBounds)
    np.testing.assert_array_equal(bounds.lo, [1.0, np.nan, 7.0])
    np.testing.assert_array_equal(bounds.hi, [3.0, np.nan, 7.0])
    assert bounds.has_null.tolist() == [False, True, True]


def test_datetime_bounds_keep_their_type():
    days = np.array(["2020-01-05", "2020-03-01", "NaT"], dtype="datetime64[D]")
    bounds = class_bounds([encode_numeric("d", days)], np.array([0, 0, 1]), 2)["d"]
    assert bounds.lo[0] == np.datetime64("2020-01-05") and bounds.hi[0] == np.datetime64("2020-03-01")
    assert np.isnat(bounds.lo[1]) and bounds.has_null.tolist() == [False, True]


def test_categorical_value_sets_and_hierarchy_labels():
    cat = encode_categorical("c", ["b", "a", None, "b", "c"])
    tree = encode_categorical("t", ["a", "b", "c", None, None], TREE)
    out = class_bounds([cat, tree], np.array([0, 0, 1, 1, 2]), 3)
    assert out["c"].tolist() == [("a", "b"), ("b", None), ("c",)]
    assert out["t"].tolist() == ["X", "*", None]    # {c, NULL} -> root; {NULL} -> None


def test_value_sets_of_equal_length_stay_tuples():
    col = encode_categorical("c", ["x", "y", "y", "x"])
    out = class_bounds([col], np.array([0, 1, 2, 3]), 4)["c"]
    assert out.shape == (4,) and out.tolist() == [("x",), ("y",), ("y",), ("x",)]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.sampled_from("pqrs"))),
                min_size=1, max_size=30))
def test_value_sets_equal_brute_force(rows):
    labels = np.unique([r[0] for r in rows], return_inverse=True)[1]
    values = [r[1] for r in rows]
    out = class_bounds([encode_categorical("c", values)], labels, labels.max() + 1)["c"]
    for cls in range(labels.max() + 1):
        present = {v for v, lab in zip(values, labels) if lab == cls}
        want = tuple(sorted(present - {None})) + ((None,) if None in present else ())
        assert out[cls] == want


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.one_of(st.none(), st.sampled_from("pqrst"))),
                min_size=2, max_size=60))
def test_ncp_from_given_distinct_counts_equals_the_ncp_counted_here(rows):
    # a release's literals list each class's values already; its NCP reuses their counts
    from plpy_anon.core.generalize import class_value_ranks
    labels = np.unique([r[0] for r in rows], return_inverse=True)[1].ravel()
    col = encode_categorical("c", [r[1] for r in rows])
    n_classes = int(labels.max()) + 1
    given_counts = np.diff(class_value_ranks(col, labels, n_classes)[2])
    counted = release_metrics([col], labels, 2)
    reused = release_metrics([col], labels, 2, distinct={"c": given_counts})
    assert reused == counted
    distinct = [len({r[1] for r, lab in zip(rows, labels) if lab == c}) for c in range(n_classes)]
    assert given_counts.tolist() == distinct


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 40)), min_size=1, max_size=50),
       st.integers(0, 30))
def test_class_code_pairs_are_each_class_distinct_codes_sorted(rows, extra_width):
    # narrow domains are marked in a table, wide ones sorted: both give the same pairs
    from plpy_anon.core.generalize import class_code_pairs
    labels = np.unique([r[0] for r in rows], return_inverse=True)[1].ravel()
    codes = np.array([r[1] for r in rows])
    n_classes = int(labels.max()) + 1
    width = int(codes.max()) + 1 + extra_width
    pairs, bounds = class_code_pairs(codes, labels, n_classes, width)
    expected = [sorted({int(c) for c, lab in zip(codes, labels) if lab == k})
                for k in range(n_classes)]
    assert [pairs[bounds[k]:bounds[k + 1]].tolist() for k in range(n_classes)] == expected
