"""Privacy models as Mondrian constraints (issue 15): entropy and recursive (c,l) l-diversity and
t-closeness. Every class of every output is checked by a brute-force computation over its rows
(pandas value counts and the textbook formulas written out with loops, not the module under
test), k still holds, and for the median split the labels equal the slow recursive reference with
the brute-force check as its allowability rule."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import privacy_models as pm
from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.prioritized import PrioritizedMondrian
from tests.unit.test_mondrian import KINDS, _random_column, reference_mondrian

EPS = 1e-9


# ---------------------------------------------------------------------- brute force
def brute_ok(values, table_values, *, l=None, kind="distinct", c=None, t=None, ordered=False):
    """Does the class with SA ``values`` satisfy the models? (pandas + loops, per definition;
    a missing value, -1, is no value: left out of the class and of the table)"""
    values = [v for v in values if v >= 0]
    table_values = [v for v in table_values if v >= 0]
    counts = pd.Series(values, dtype=np.int64).value_counts()
    n = counts.sum()
    if l is not None and l > 1:
        if kind == "distinct" and len(counts) < l:
            return False
        if kind == "entropy":
            h = -sum((x / n) * math.log(x / n) for x in counts)
            if h < math.log(l) - EPS:
                return False
        if kind == "recursive":
            r = sorted(counts.tolist(), reverse=True) + [0] * int(l)
            if not r[0] < c * sum(r[int(l) - 1:]):
                return False
    if t is not None:
        if not table_values:
            return False                # no known value in the table: refused
        domain = sorted(set(table_values))
        q = pd.Series(table_values).value_counts()
        p = [counts.get(v, 0) / n if n else 0.0 for v in domain]   # no known value: no mass
        qq = [q[v] / len(table_values) for v in domain]
        if ordered:
            m = len(domain)
            run, emd = 0.0, 0.0
            for i in range(m - 1):
                run += p[i] - qq[i]
                emd += abs(run)
            emd = emd / (m - 1) if m > 1 else 0.0
        else:
            emd = sum(abs(a - b) for a, b in zip(p, qq)) / 2
        if emd > t + EPS:
            return False
    return True


def brute_valid(sensitive, models):
    sens = np.asarray(sensitive).reshape(len(sensitive), -1)

    def valid(rows):
        return all(brute_ok(sens[rows, j], sens[:, j], **models) for j in range(sens.shape[1]))
    return valid


# ---------------------------------------------------------------------- the pure functions
def test_functions_hand_computed():
    assert pm.entropy([5, 5])[0] == pytest.approx(math.log(2))
    assert pm.entropy([[4, 0], [2, 2]]).tolist() == pytest.approx([0.0, math.log(2)])
    assert pm.entropy_l([6, 3, 1], 2).tolist() == [True]      # H = 0.898 >= ln 2 = 0.693
    assert pm.entropy_l([8, 1, 1], 2).tolist() == [False]     # H = 0.639
    # r = 6, 3, 1: (3, 2): 6 < 3 * (3 + 1) yes; (1, 2): 6 < 4 no; (2, 3): 6 < 2 * 1 no
    assert pm.recursive_cl([1, 6, 3], 3, 2).tolist() == [True]
    assert pm.recursive_cl([1, 6, 3], 1, 2).tolist() == [False]
    assert pm.recursive_cl([1, 6, 3], 2, 3).tolist() == [False]
    assert pm.recursive_cl([5, 0, 0], 100, 2).tolist() == [False]   # one value: tail is 0
    # Li et al. 2007, salaries 3k..11k uniform in the table: {3k, 4k, 5k} -> 0.375,
    # {6k, 8k, 11k} -> 0.167 (ordered distance); equal distance: 2/3 for both
    q = np.full(9, 1 / 9)
    p1 = np.array([1, 1, 1, 0, 0, 0, 0, 0, 0]) / 3
    p2 = np.array([0, 0, 0, 1, 0, 1, 0, 0, 1]) / 3
    assert pm.emd_ordered(p1, q)[0] == pytest.approx(0.375)
    assert pm.emd_ordered(p2, q)[0] == pytest.approx(1 / 6)
    assert pm.emd_equal(p1, q)[0] == pytest.approx(2 / 3)
    assert pm.distinct_values([[0, 3, 1], [0, 0, 2]]).tolist() == [2, 1]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=40),
       st.lists(st.integers(0, 6), min_size=1, max_size=40))
def test_merging_two_valid_classes_keeps_them_valid(a, b):
    # the generalization property the refusal of a failing table rests on
    table = a + b
    for models in ({"l": 2, "kind": "entropy"}, {"l": 2, "kind": "recursive", "c": 2},
                   {"t": 0.3}, {"t": 0.3, "ordered": True}):
        if brute_ok(a, table, **models) and brute_ok(b, table, **models):
            assert brute_ok(table, table, **models)


# ---------------------------------------------------------------------- the partitioner
MODELS = st.sampled_from([
    {"l": 2, "kind": "entropy"}, {"l": 1.5, "kind": "entropy"}, {"l": 3, "kind": "entropy"},
    {"l": 2, "kind": "recursive", "c": 3}, {"l": 2, "kind": "recursive", "c": 1},
    {"l": 3, "kind": "recursive", "c": 2},
    {"t": 0.2}, {"t": 0.5}, {"t": 0.15, "ordered": True},
    {"l": 2, "kind": "distinct", "t": 0.3},
    {"l": 2, "kind": "entropy", "t": 0.4, "ordered": True},
])


def _kwargs(models):
    return {"l": models.get("l"), "l_diversity": models.get("kind", "distinct"),
            "c": models.get("c"), "t": models.get("t")}


@st.composite
def cases(draw, max_rows=60):
    n = draw(st.integers(4, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    columns = [_random_column(draw(st.sampled_from(KINDS)), f"q{i}", n, rng)
               for i in range(draw(st.integers(1, 4)))]
    k = draw(st.integers(2, max(2, n // 3)))
    n_sens = draw(st.integers(1, 2))
    domain = draw(st.integers(2, 6))
    skew = draw(st.floats(0, 0.8))
    sens = np.where(rng.random((n, n_sens)) < skew, 0, rng.integers(0, domain, (n, n_sens)))
    # some values missing (SQL NULL, code -1), which no model counts
    sens = np.where(rng.random((n, n_sens)) < draw(st.sampled_from([0, 0.2])), -1, sens)
    return columns, k, sens, draw(MODELS)


def _fit_or_refusal(model, columns, sens, models, **fit):
    valid = brute_valid(sens, models)
    if not valid(np.arange(len(sens))):
        with pytest.raises((InvalidParameter, InsufficientData)):
            model.fit(columns, sens, sensitive_ordered=models.get("ordered", False), **fit)
        return None
    return model.fit(columns, sens, sensitive_ordered=models.get("ordered", False), **fit)


def _assert_every_class(model, k, sens, models):
    valid = brute_valid(sens, models)
    for cls in range(model.n_classes_):
        rows = np.flatnonzero(model.labels_ == cls)
        assert rows.size >= k
        assert valid(rows), (cls, models)


@settings(max_examples=150, deadline=None)
@given(cases())
def test_median_every_class_satisfies_the_models_and_equals_reference(case):
    columns, k, sens, models = case
    model = _fit_or_refusal(Mondrian(k=k, **_kwargs(models)), columns, sens, models)
    if model is None:
        return
    _assert_every_class(model, k, sens, models)
    np.testing.assert_array_equal(
        model.labels_, reference_mondrian(columns, k, valid=brute_valid(sens, models)))


@settings(max_examples=80, deadline=None)
@given(cases(), st.sampled_from(["utility", "median"]))
def test_utility_and_prioritized_every_class_satisfies_the_models(case, split):
    columns, k, sens, models = case
    model = _fit_or_refusal(Mondrian(k=k, split=split, **_kwargs(models)), columns, sens, models)
    if model is None:
        return
    _assert_every_class(model, k, sens, models)
    weights = {c.name: float(i + 1) for i, c in enumerate(columns)}
    prio = PrioritizedMondrian(k=k, priorities=weights, split=split, **_kwargs(models))
    _assert_every_class(prio.fit(columns, sens, sensitive_ordered=models.get("ordered", False)),
                        k, sens, models)


def test_entropy_needs_more_merging_than_distinct():
    # x = 0..59; SA: 0 on 9 of 10 rows, 1 on the tenth: distinct 2 splits (60 -> 30 -> 15),
    # entropy 2 (H >= ln 2: a 50/50 class at best) fails on the whole table already
    x = encode_numeric("x", np.arange(60))
    sens = np.array([1 if i % 10 == 0 else 0 for i in range(60)])
    assert Mondrian(k=10, l=2).fit([x], sens).n_classes_ == 4
    with pytest.raises(InvalidParameter, match=r"entropy is 0\.3251 < ln\(2\)"):
        Mondrian(k=10, l=2, l_diversity="entropy").fit([x], sens)
    # a 2:1 table: entropy 0.637 >= ln 1.8 = 0.588; classes must keep a mix
    sens = np.array([i % 3 == 0 for i in range(60)], dtype=int)
    distinct = Mondrian(k=3, l=2).fit([x], sens)
    entropy = Mondrian(k=3, l=1.8, l_diversity="entropy").fit([x], sens)
    assert entropy.n_classes_ < distinct.n_classes_
    _assert_every_class(entropy, 3, sens[:, None], {"l": 1.8, "kind": "entropy"})


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"l": 2, "l_diversity": "shannon"}, "l_diversity must be one of distinct, entropy, recursive"),
    ({"l": 2, "l_diversity": "recursive"}, "needs c"),
    ({"l": 2, "l_diversity": "recursive", "c": 0}, "c must be greater than 0"),
    ({"l": 2, "c": 3}, "c applies to recursive"),
    ({"t": 0}, r"t must be in \(0, 1\]"),
    ({"t": 1.5}, r"t must be in \(0, 1\]"),
    ({"l_diversity": "entropy"}, "entropy l-diversity needs l"),
    ({"l": 2.5, "l_diversity": "recursive", "c": 2}, "l must be an integer"),
    ({"t": 0.2, "l": 3, "l_diversity": "recursive", "c": 1},
     r"fails recursive \(1, 3\): most frequent value 8 rows, not < 1 x 2"),
])
def test_refusals_name_the_fix(kwargs, match):
    x = encode_numeric("x", np.arange(12))
    sens = np.array([0] * 8 + [1, 1, 2, 2])
    with pytest.raises(InvalidParameter, match=match) as err:
        Mondrian(k=2, **kwargs).fit([x], sens)
    assert err.value.sqlstate == "22023"
    assert err.value.hint


def test_table_refusal_names_column_and_figure():
    x = encode_numeric("x", np.arange(12))
    sens = np.array([0] * 10 + [1, 2])
    with pytest.raises(InvalidParameter, match=r"the table's income entropy is 0\.5661 < ln\(2\)")\
            as err:
        Mondrian(k=2, l=2, l_diversity="entropy").fit([x], sens, sensitive_names=["income"])
    assert "Choose l <= 1.761" in err.value.hint       # exp(0.5661) = 1.7615, rounded down
    with pytest.raises(InvalidParameter) as err:
        Mondrian(k=2, l=3, l_diversity="recursive", c=1).fit([x], sens)
    assert "Choose c > 10" in err.value.hint               # 10 rows vs 1 + ... from the 3rd on


def test_t_needs_a_sensitive_column():
    with pytest.raises(InvalidParameter, match="t = 0.2 needs the sensitive"):
        Mondrian(k=2, t=0.2).fit([encode_numeric("x", np.arange(6))])
