"""Issue 14 item 5: split="utility" (attribute and cut chosen by the children's NCP).

The guarantee is checked on the output labels (k, and l by an independent count) for random
tables with both strategies; the vectorized utility split is compared with a slow recursive
reference of the same rule; a constructed case shows the cut of lower NCP being taken where the
median rule takes another."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.generalize import SpreadMeasure
from plpy_anon.core.metrics import release_metrics
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.prioritized import PrioritizedMondrian
from tests.unit.test_mondrian import KINDS, _random_column, class_sizes, tables


# ---------------------------------------------------------------------- reference
def reference_utility(columns, k, l=None, sensitive=None):
    """One recursive call per partition: the utility rule of plpy_anon.core.mondrian spelled out
    (spreads through SpreadMeasure so that equal penalties compare equal in both)."""
    n = len(columns[0].codes)
    measures = [SpreadMeasure(c) for c in columns]
    sens = None if sensitive is None else np.asarray(sensitive).reshape(n, -1)
    classes = []

    def spread(b, rows):
        codes = columns[b].codes[rows]
        lo, hi, d = np.array([codes.min()]), np.array([codes.max()]), [len(set(codes.tolist()))]
        return float(measures[b](lo, hi, np.array(d))[0])

    def diverse(rows):
        return l is None or all(len(set(sens[rows, j])) >= l for j in range(sens.shape[1]))

    def allowable(rows, left):
        return k <= left.sum() <= len(rows) - k and diverse(rows[left]) and diverse(rows[~left])

    def penalty(rows, left):
        m, total = len(rows), 0.0
        for b in range(len(columns)):
            total += left.sum() * spread(b, rows[left]) + (m - left.sum()) * spread(b, rows[~left])
        return total / m

    def best_cut(rows, a):
        codes = columns[a].codes[rows]
        values = sorted(set(codes.tolist()))
        cands = []
        for v in values[1:]:
            left = codes < v
            if k <= left.sum() <= len(rows) - k:
                cands.append((penalty(rows, left), abs(2 * left.sum() - len(rows)), int(left.sum()),
                              left))
        cands.sort(key=lambda c: c[:3])
        for c in cands[: 8 if l is not None else 1]:
            if allowable(rows, c[3]):
                return c[0], c[1], c[3]
        if l is None:
            return None
        v = sorted(codes)[len(rows) // 2]             # the median rule, as fallback
        ok = [o for o in (codes < v, codes <= v) if allowable(rows, o)]
        if not ok:
            return None
        left = min(ok, key=lambda o: abs(2 * o.sum() - len(rows)))
        return penalty(rows, left), abs(2 * left.sum() - len(rows)), left

    def split(rows):
        if len(rows) >= 2 * k:
            best = None
            for a in range(len(columns)):
                if spread(a, rows) <= 0:
                    continue
                cut = best_cut(rows, a)
                if cut is not None and (best is None or cut[:2] < best[:2]):
                    best = cut
            if best is not None:
                split(rows[best[2]])
                split(rows[~best[2]])
                return
        classes.append(rows)

    split(np.arange(n))
    labels = np.empty(n, dtype=np.int64)
    for i, rows in enumerate(sorted(classes, key=min)):
        labels[rows] = i
    return labels


def assert_k_l(labels, k, l=None, sensitive=None):
    assert min(class_sizes(labels).values()) >= k
    if l is not None:
        sens = np.asarray(sensitive).reshape(labels.size, -1)
        for cls in np.unique(labels):
            rows = labels == cls
            assert all(len(set(sens[rows, j])) >= l for j in range(sens.shape[1]))


# ---------------------------------------------------------------------- guarantee
@settings(max_examples=80, deadline=None)
@given(tables(), st.sampled_from(["median", "utility"]))
def test_k_holds_on_output_both_strategies(table, split):
    columns, k, _ = table
    labels = Mondrian(k=k, split=split).fit(columns).labels_
    assert_k_l(labels, k)


@settings(max_examples=60, deadline=None)
@given(tables(), st.integers(2, 3), st.sampled_from(["median", "utility"]))
def test_k_and_l_hold_on_output_both_strategies(table, l, split):
    columns, k, rng = table
    n = len(columns[0].codes)
    sensitive = np.concatenate([np.arange(l), rng.integers(0, 4, n)])[:n]
    rng.shuffle(sensitive)
    if len(set(sensitive.tolist())) < l:
        return
    labels = Mondrian(k=k, l=l, split=split).fit(columns, sensitive).labels_
    assert_k_l(labels, k, l, sensitive)


# ---------------------------------------------------------------------- equal to the reference
@settings(max_examples=80, deadline=None)
@given(tables(max_rows=40))
def test_utility_equals_reference(table):
    columns, k, _ = table
    labels = Mondrian(k=k, split="utility").fit(columns).labels_
    np.testing.assert_array_equal(labels, reference_utility(columns, k))


@settings(max_examples=40, deadline=None)
@given(tables(max_rows=40), st.integers(2, 3))
def test_utility_with_l_equals_reference(table, l):
    columns, k, rng = table
    n = len(columns[0].codes)
    sensitive = rng.integers(0, 4, size=n)
    if len(set(sensitive.tolist())) < l:
        return
    labels = Mondrian(k=k, l=l, split="utility").fit(columns, sensitive).labels_
    assert_k_l(labels, k, l, sensitive)
    np.testing.assert_array_equal(labels, reference_utility(columns, k, l, sensitive))


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2, 5, 10]))
def test_utility_larger_tables_equal_reference(seed, k):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(150, 300))
    columns = [_random_column(kind, f"q{i}", n, rng) for i, kind in enumerate(KINDS)]
    labels = Mondrian(k=k, split="utility").fit(columns).labels_
    assert_k_l(labels, k)
    np.testing.assert_array_equal(labels, reference_utility(columns, k))


# ---------------------------------------------------------------------- constructed case
def test_utility_takes_the_cut_of_lower_ncp_where_median_does_not():
    # k = 3, 8 rows: each side of any cut is final (< 2k). Median cut: {1..4} | {5,6,7,100},
    # NCP of x = (4*3 + 4*95) / (8*99). Utility: {1..5} | {6,7,100}, (5*4 + 3*94) / (8*99).
    x = encode_numeric("x", np.array([1, 2, 3, 4, 5, 6, 7, 100]))
    median = Mondrian(k=3).fit([x]).labels_
    utility = Mondrian(k=3, split="utility").fit([x]).labels_
    assert median.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert utility.tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    ncp = {name: release_metrics([x], lab, 3)["ncp_percent"]
           for name, lab in (("median", median), ("utility", utility))}
    assert ncp["utility"] == pytest.approx(100 * 302 / 792)
    assert ncp["median"] == pytest.approx(100 * 392 / 792)


def test_utility_chooses_the_attribute_by_total_ncp():
    # k = 6, 12 rows: one cut, then both halves are final. x and y both have spread 1, so the
    # median rule cuts x (tie -> first column): halves x 0..5 / 6..11, y still {0, 9(, 10)}.
    # Children's NCP summed over x and y: x cut (5/11 + 9/10 + 5/11 + 1) / 2 = 1.40; y cut
    # (y < 9: the even rows) (10/11 + 0 + 10/11 + 1/10) / 2 = 0.96 -> utility cuts y.
    x = encode_numeric("x", np.arange(12))
    y = encode_numeric("y", np.array([0, 9] * 5 + [0, 10]))
    median = Mondrian(k=6).fit([x, y]).labels_
    utility = Mondrian(k=6, split="utility").fit([x, y]).labels_
    assert median.tolist() == [0] * 6 + [1] * 6
    assert utility.tolist() == [0, 1] * 6
    ncp = {name: release_metrics([x, y], lab, 6)["ncp_percent"]
           for name, lab in (("median", median), ("utility", utility))}
    assert ncp["median"] == pytest.approx(100 * (5 / 11 + 19 / 20) / 2)
    assert ncp["utility"] == pytest.approx(100 * (10 / 11 + 1 / 20) / 2)


# ---------------------------------------------------------------------- parameter, prioritized
@pytest.mark.parametrize("split", ["mean", "", None, 1, "Median"])
def test_bad_split(split):
    with pytest.raises(InvalidParameter, match="split must be one of median, utility"):
        Mondrian(k=2, split=split).fit([encode_numeric("x", np.arange(5))])


def test_prioritized_checks_split_without_data():
    with pytest.raises(InvalidParameter, match="split must be one of") as e:
        PrioritizedMondrian(k=5, split="mean").check_parameters(["age"])
    assert e.value.sqlstate == "22023"
    assert PrioritizedMondrian(k=5, split="utility").check_parameters(["age"]).split == "utility"


@settings(max_examples=20, deadline=None)
@given(tables())
def test_prioritized_without_intent_is_plain_utility(table):
    columns, k, _ = table
    plain = Mondrian(k=k, split="utility").fit(columns).labels_
    same = PrioritizedMondrian(k=k, split="utility").fit(columns).labels_
    np.testing.assert_array_equal(plain, same)


@settings(max_examples=30, deadline=None)
@given(tables(), st.integers(1, 3))
def test_prioritized_utility_keeps_k_and_l(table, l):
    columns, k, rng = table
    n = len(columns[0].codes)
    sensitive = rng.integers(0, 4, size=n)
    if len(set(sensitive.tolist())) < l:
        return
    priorities = {c.name: float(rng.integers(1, 4)) for c in columns}
    numeric = [c.name for c in columns if c.kind == "numeric"
               and not np.issubdtype(c.labels.dtype, np.datetime64)]
    cut_points = {name: [(0.5, True)] for name in numeric[:1]}
    target = rng.integers(0, 2, n)
    model = PrioritizedMondrian(k=k, l=l, priorities=priorities, cut_points=cut_points,
                                metric_weights={"spread": 1, "priority": 1, "infogain": 1},
                                split="utility").fit(columns, sensitive, target=target)
    assert_k_l(model.labels_, k, l, sensitive)
