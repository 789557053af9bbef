"""Mondrian: hand-computed partitions, tie-aware cuts, k-anonymity / l-diversity checked by an
independent count, and equality with a slow, obvious recursive reference implementation."""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.hierarchy import Hierarchy
from plpy_anon.core.mondrian import Mondrian

SMALL_TREE = Hierarchy.from_paths([
    ["a1", "A", "*"], ["a2", "A", "*"], ["a3", "A", "*"],
    ["b1", "B", "*"], ["b2", "B", "*"], ["c", "*"],
])


# ---------------------------------------------------------------------- reference implementation
def _reference_spread(col, codes):
    """Normalized spread of one partition, computed from labels and the hierarchy API."""
    present = sorted(set(codes.tolist()))
    if col.kind == "numeric":
        values = np.asarray(col.labels)
        if np.issubdtype(values.dtype, np.datetime64):
            values = values.astype(np.int64)
        values = values.astype(np.float64)
        shift = 1 if col.null_code == 0 else 0
        if col.null_code is not None and present[0] == col.null_code:
            return 0.0 if len(present) == 1 else 1.0
        width = values[-1] - values[0]
        if width <= 0:
            return 0.0
        return (values[present[-1] - shift] - values[present[0] - shift]) / width
    if col.hierarchy is None:
        domain = len(col.labels)
        return 0.0 if domain <= 1 else (len(present) - 1) / (domain - 1)
    tree = col.hierarchy
    domain = len(tree.leaves) + (col.null_code is not None)
    leaves = [tree.leaves[c] for c in present if c != col.null_code]
    if not leaves:
        count = 1
    elif len(leaves) < len(present):
        count = domain                                     # NULL with values -> root
    else:
        level = next(h for h in range(tree.height + 1)
                     if len({tree.ancestor(x, h) for x in leaves}) == 1)
        count = tree.leaf_count(tree.ancestor(leaves[0], level))
    return (count - 1) / (domain - 1)


def reference_mondrian(columns, k, l=None, sensitive=None, valid=None):
    """One recursive call per partition, the rules of plpy_anon.core.mondrian spelled out.
    ``valid(rows) -> bool``: another privacy model asked of both sides of every cut."""
    n = len(columns[0].codes)
    sens = None if sensitive is None else np.asarray(sensitive).reshape(n, -1)
    classes = []

    def diverse(rows):
        if valid is not None and not valid(rows):
            return False
        # a missing value (negative code, SQL NULL) is no value an attacker is unsure between
        return l is None or all(len(set(sens[rows, j]) - {-1}) >= l for j in range(sens.shape[1]))

    def allowable(rows, left):
        return k <= left.sum() <= len(rows) - k and diverse(rows[left]) and diverse(rows[~left])

    def split(rows):
        if len(rows) >= 2 * k:
            spreads = [_reference_spread(c, c.codes[rows]) for c in columns]
            for a in sorted(range(len(columns)), key=lambda i: -spreads[i]):
                if spreads[a] <= 0:
                    break
                codes = columns[a].codes[rows]
                v = sorted(codes)[len(rows) // 2]
                options = [codes < v, codes <= v]
                ok = [o for o in options if allowable(rows, o)]
                if ok:
                    left = min(ok, key=lambda o: abs(2 * o.sum() - len(rows)))  # ties: "< v"
                    split(rows[left])
                    split(rows[~left])
                    return
        classes.append(rows)

    split(np.arange(n))
    labels = np.empty(n, dtype=np.int64)
    for i, rows in enumerate(sorted(classes, key=min)):
        labels[rows] = i
    return labels


# ---------------------------------------------------------------------- random tables
@st.composite
def tables(draw, max_rows=50):
    n = draw(st.integers(2, max_rows))
    n_cols = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    columns = [_random_column(draw(st.sampled_from(KINDS)), f"q{i}", n, rng)
               for i in range(n_cols)]
    k = draw(st.integers(2, n))
    return columns, k, rng


def _random_column(kind, name, n, rng):
    skew = rng.random() < 0.3                      # heavy skew: one value dominates
    domain = int(rng.integers(1, 12))
    raw = np.where(rng.random(n) < 0.8, 0, rng.integers(0, domain, n)) if skew \
        else rng.integers(0, domain, n)
    nulls = rng.random(n) < (0.2 if rng.random() < 0.5 else 0.0)
    if kind == "int":
        return encode_numeric(name, raw * 7 - 3, nulls)
    if kind == "float":
        return encode_numeric(name, raw * 0.5 + rng.integers(0, 2, n) * 0.25, nulls)
    if kind == "date":
        return encode_numeric(name, np.datetime64("2020-01-01") + raw.astype("timedelta64[D]"),
                              nulls)
    labels = np.array([f"v{x}" for x in raw], dtype=object)
    if kind == "tree":
        labels = np.array(SMALL_TREE.leaves, dtype=object)[raw % len(SMALL_TREE.leaves)]
        labels[nulls] = None
        return encode_categorical(name, labels, SMALL_TREE)
    labels[nulls] = None
    return encode_categorical(name, labels)


KINDS = ["int", "float", "date", "cat", "tree"]


def assert_valid_labels(labels, n, n_classes):
    assert labels.shape == (n,)
    assert set(np.unique(labels).tolist()) == set(range(n_classes))


def class_sizes(labels):
    return Counter(labels.tolist())


# ---------------------------------------------------------------------- hand-computed cases
def test_eight_rows_k2_exact_classes():
    # Row i: age 10(i+1), sex M/F alternating. Whole table: age spread 1, sex spread 1, tie ->
    # age (first column); median code at position 4 is age 50: left {10..40}. In each half age
    # spreads 30/70 < sex 1, so sex splits: F (code 0, ties by label) left of M.
    age = encode_numeric("age", np.arange(10, 90, 10))
    sex = encode_categorical("sex", ["M", "F"] * 4)
    model = Mondrian(k=2).fit([age, sex])
    assert model.labels_.tolist() == [0, 1, 0, 1, 2, 3, 2, 3]
    assert model.n_classes_ == 4


@pytest.mark.parametrize("values, k, expected", [
    # median is the tied value 1: "< 1" leaves nothing left, "<= 1" leaves 6 | 2 -> split
    ([1, 1, 1, 1, 1, 1, 2, 2], 2, [0, 0, 0, 0, 0, 0, 1, 1]),
    # median 2: "< 2" gives 2 | 6, "<= 2" would take every row
    ([1, 1, 2, 2, 2, 2, 2, 2], 2, [0, 0, 1, 1, 1, 1, 1, 1]),
    # median 2: 3 | 7 and 8 | 2 both allowable, 3 | 7 more balanced; then 7 rows split 5 | 2
    ([1, 1, 1, 2, 2, 2, 2, 2, 3, 3], 2, [0, 0, 0, 1, 1, 1, 1, 1, 2, 2]),
    # all equal but one: neither cut keeps k = 2 on both sides -> one class
    ([5, 5, 5, 5, 5, 9], 2, [0, 0, 0, 0, 0, 0]),
])
def test_tie_aware_median_cut(values, k, expected):
    col = encode_numeric("x", np.array(values))
    assert Mondrian(k=k).fit([col]).labels_.tolist() == expected


def test_naive_strict_cut_would_refuse_but_tie_aware_splits():
    values = np.array([3] * 9 + [4] * 3)
    codes = encode_numeric("x", values).codes
    median = np.sort(codes)[codes.size // 2]
    assert np.count_nonzero(codes < median) == 0    # the naive "< median" cut is impossible
    assert Mondrian(k=3).fit([encode_numeric("x", values)]).n_classes_ == 2


def test_next_attribute_when_best_has_no_allowable_cut():
    # x has the widest spread but only 1 row differs, so no x cut keeps k = 3; y splits 3 | 3.
    x = encode_numeric("x", np.array([0, 0, 0, 0, 0, 100]))
    y = encode_numeric("y", np.array([1, 1, 1, 2, 2, 2]))
    assert Mondrian(k=3).fit([x, y]).labels_.tolist() == [0, 0, 0, 1, 1, 1]


def test_null_is_isolated_by_a_cut():
    values = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    col = encode_numeric("x", values, null_mask=[True, True, True, False, False, False])
    assert Mondrian(k=3).fit([col]).labels_.tolist() == [0, 0, 0, 1, 1, 1]


def test_l_diversity_blocks_a_cut_that_k_allows():
    x = encode_numeric("x", np.arange(8))
    income = np.array([0, 0, 0, 0, 1, 1, 1, 1])   # the median cut on x would be homogeneous
    assert Mondrian(k=2).fit([x]).n_classes_ == 4
    assert Mondrian(k=2, l=2).fit([x], income).n_classes_ == 1


def test_k_equals_n_gives_one_class():
    col = encode_numeric("x", np.arange(7))
    model = Mondrian(k=7).fit([col])
    assert model.n_classes_ == 1 and model.labels_.tolist() == [0] * 7


def test_fit_returns_self_and_init_only_stores():
    model = Mondrian(k=3, l=None)
    assert vars(model) == {"k": 3, "l": None, "l_diversity": "distinct", "c": None, "t": None,
                           "split": "median", "engine": "auto"}
    assert model.fit([encode_numeric("x", np.arange(6))]) is model


# ---------------------------------------------------------------------- properties
@settings(max_examples=120, deadline=None)
@given(tables())
def test_k_anonymous_and_equal_to_reference(table):
    columns, k, _ = table
    n = len(columns[0].codes)
    model = Mondrian(k=k).fit(columns)
    assert_valid_labels(model.labels_, n, model.n_classes_)
    assert min(class_sizes(model.labels_).values()) >= k
    np.testing.assert_array_equal(model.labels_, reference_mondrian(columns, k))


@settings(max_examples=60, deadline=None)
@given(tables(), st.integers(1, 3), st.integers(1, 2))
def test_l_diverse_and_equal_to_reference(table, l, n_sensitive):
    columns, k, rng = table
    n = len(columns[0].codes)
    sensitive = rng.integers(-1, 4, size=(n, n_sensitive))      # -1: NULL, no value
    if l > 1 and min(len(set(sensitive[:, j]) - {-1}) for j in range(n_sensitive)) < l:
        with pytest.raises(InsufficientData):
            Mondrian(k=k, l=l).fit(columns, sensitive)
        return
    model = Mondrian(k=k, l=l).fit(columns, sensitive)
    for cls in range(model.n_classes_):
        rows = model.labels_ == cls
        assert rows.sum() >= k
        assert l == 1 or all(len(set(sensitive[rows, j]) - {-1}) >= l for j in range(n_sensitive))
    np.testing.assert_array_equal(model.labels_,
                                  reference_mondrian(columns, k, l if l > 1 else None, sensitive))


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2, 5, 10]))
def test_larger_tables_many_qis_equal_reference(seed, k):
    # enough rows for many levels, and both tie-count methods (segment search, partition keys)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(300, 800))
    columns = [_random_column(kind, f"q{i}", n, rng) for i, kind in enumerate(KINDS * 2)]
    model = Mondrian(k=k).fit(columns)
    assert min(class_sizes(model.labels_).values()) >= k
    np.testing.assert_array_equal(model.labels_, reference_mondrian(columns, k))


def test_two_blocks_of_duplicates_give_two_classes():
    # 20 copies of one record and 20 of another: exactly two classes at k = 10
    col = encode_categorical("c", ["a"] * 20 + ["b"] * 20)
    model = Mondrian(k=10).fit([col])
    assert model.n_classes_ == 2
    assert len(set(model.labels_[:20])) == 1 and len(set(model.labels_[20:])) == 1


# ---------------------------------------------------------------------- bad input
@pytest.mark.parametrize("k", [1, 0, -3])
def test_k_below_two(k):
    with pytest.raises(InvalidParameter, match=f"k must be at least 2, got {k}"):
        Mondrian(k=k).fit([encode_numeric("x", np.arange(5))])


@pytest.mark.parametrize("k", [2.5, "3", True])
def test_k_not_an_integer(k):
    with pytest.raises(InvalidParameter, match="k must be an integer"):
        Mondrian(k=k).fit([encode_numeric("x", np.arange(5))])


def test_k_above_rows():
    with pytest.raises(InsufficientData, match=r"the table has 5 rows, fewer than k = 6") as e:
        Mondrian(k=6).fit([encode_numeric("x", np.arange(5))])
    assert e.value.hint.startswith("Use k <= 5") and e.value.sqlstate == "22000"


def test_empty_input():
    with pytest.raises(InsufficientData, match="empty"):
        Mondrian(k=2).fit([encode_numeric("x", np.array([], dtype=float))])
    with pytest.raises(InvalidParameter, match="no quasi-identifier"):
        Mondrian(k=2).fit([])


def test_l_above_distinct_sensitive_values():
    with pytest.raises(InsufficientData, match="2 distinct values that are not NULL; l = 3") as e:
        Mondrian(k=2, l=3).fit([encode_numeric("x", np.arange(6))], np.array([0, 1] * 3))
    assert "l <= 2" in e.value.hint


def test_l_without_sensitive_and_bad_shapes():
    col = encode_numeric("x", np.arange(6))
    with pytest.raises(InvalidParameter, match="needs the sensitive"):
        Mondrian(k=2, l=2).fit([col])
    with pytest.raises(InvalidParameter, match="shape"):
        Mondrian(k=2, l=2).fit([col], np.zeros(5, dtype=int))
    with pytest.raises(InvalidParameter, match="l = 0 is too small"):
        Mondrian(k=2, l=0).fit([col], np.zeros(6, dtype=int))


def test_columns_of_different_lengths():
    with pytest.raises(InvalidParameter, match="'y' has 4 rows"):
        Mondrian(k=2).fit([encode_numeric("x", np.arange(5)), encode_numeric("y", np.arange(4))])


@pytest.mark.parametrize("segment_search", [True, False])
def test_both_tie_count_methods_equal_reference(monkeypatch, segment_search):
    # The level loop picks binary search inside segments or searchsorted on partition keys by a
    # cost estimate; small tables always get the keys, so force each method here.
    from plpy_anon.core import mondrian
    monkeypatch.setattr(mondrian._Level, "_prefer_segment_search",
                        lambda self, a, sizes: segment_search)
    rng = np.random.default_rng(7)
    for k in (2, 3, 7):
        n = 400
        columns = [_random_column(kind, f"q{i}", n, rng) for i, kind in enumerate(KINDS)]
        model = Mondrian(k=k, engine="numpy").fit(columns)
        np.testing.assert_array_equal(model.labels_, reference_mondrian(columns, k))


@pytest.mark.parametrize("dtype, high", [(np.uint16, 1 << 16), (np.int32, 1 << 30)])
def test_stable_argsort_matches_numpy(dtype, high):
    from plpy_anon.core.stable_sort import stable_argsort
    codes = np.random.default_rng(1).integers(0, high, 5000).astype(dtype)
    codes[::7] = codes[0]                          # many ties: stability matters
    order = stable_argsort(codes)
    assert order.dtype == np.int32
    np.testing.assert_array_equal(order, np.argsort(codes, kind="stable"))


@pytest.mark.parametrize("n_values", [8, 9, 33, 64, 65, 90])
def test_l_diversity_bitmask_widths_and_sort_fallback_equal_reference(n_values):
    # <= 64 sensitive values use one-bit masks (uint8/16/32/64), more use a sort-based count
    rng = np.random.default_rng(n_values)
    for k, l in ((2, 2), (3, 3), (5, 4)):
        n = 150
        columns = [_random_column(kind, f"q{i}", n, rng) for i, kind in enumerate(KINDS)]
        sensitive = np.concatenate([np.arange(n_values),
                                    rng.integers(0, n_values, n - n_values)]) * 1000
        rng.shuffle(sensitive)
        model = Mondrian(k=k, l=l).fit(columns, sensitive)
        for cls in range(model.n_classes_):
            assert len(set(sensitive[model.labels_ == cls])) >= l
        np.testing.assert_array_equal(model.labels_, reference_mondrian(columns, k, l, sensitive))
