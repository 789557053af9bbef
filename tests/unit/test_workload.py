"""Workload precision/recall and weighted discernibility (plpy_anon.core.workload)."""

import itertools
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.core.workload import (
    AllOf,
    AnyOf,
    ClassRegions,
    Condition,
    attribute_discernibility,
    discernibility,
    evaluate_classes,
    evaluate_rows,
    minimum_weighted_discernibility,
    normalize_weights,
    restrict_predicate,
    weighted_discernibility,
    workload_precision,
)

DATA = pd.DataFrame(
    {"age": [20, 25, 30, 35, 60, 70], "sex": ["F", "M", "F", "F", "M", "M"]}
)
LABELS = np.array([0, 0, 1, 1, 2, 2])  # classes: ages [20,25] {F,M}; [30,35] {F}; [60,70] {M}


def test_precision_by_hand():
    queries = [
        Condition("age", ">", (27,)),  # true 4 rows; released: classes 1, 2 -> 4 rows
        Condition("age", "<=", (22,)),  # true 1 (20); released class 0 -> 2 rows
        AllOf((Condition("sex", "=", ("M",)), Condition("age", "between", (24, 31)))),
        # true: 25 M -> 1; classes: 0 has M and [20,25] overlaps -> 2; 1 has no M; -> 2 rows
        Condition("sex", "in", ("F",)),  # true 3; classes 0, 1 -> 4
    ]
    result = workload_precision(DATA, LABELS, queries, frequencies=[1, 1, 1, 2])
    assert result.per_query["true_rows"].tolist() == [4, 1, 1, 3]
    assert result.per_query["released_rows"].tolist() == [4, 2, 2, 4]
    assert result.per_query["precision"].tolist() == pytest.approx([1, 0.5, 0.5, 0.75])
    assert result.mean_precision == pytest.approx(2.75 / 4)
    assert result.weighted_precision == pytest.approx((1 + 0.5 + 0.5 + 1.5) / 5)
    assert result.mean_recall == 1.0


def test_empty_answers_count_as_perfect():
    result = workload_precision(DATA, LABELS, [Condition("age", ">", (99,))])
    assert result.per_query.loc[0, ["true_rows", "released_rows", "precision", "recall"]].tolist() \
        == [0, 0, 1.0, 1.0]


def test_singleton_classes_give_exact_answers():
    queries = [Condition("age", "<>", (30,)), Condition("sex", "prefix", ("M",)),
               AnyOf((Condition("age", "=", (60,)), Condition("sex", "=", ("F",))))]
    result = workload_precision(DATA, np.arange(len(DATA)), queries)
    assert (result.per_query["precision"] == 1).all()
    assert (result.per_query["recall"] == 1).all()


def test_regions_missing_their_rows_show_as_lost_recall():
    # a release whose regions do NOT cover its rows is caught: recall drops
    regions = ClassRegions.from_rows(DATA, LABELS)
    regions.high["age"] = regions.high["age"] - 100  # corrupt: every class below its rows
    result = workload_precision(DATA, LABELS, [Condition("age", ">", (27,))], regions=regions)
    assert result.per_query.loc[0, "recall"] == 0.0


# hypothesis: brute force over rows of each class versus the vectorized evaluation
ops = st.sampled_from(["<", "<=", ">", ">=", "=", "<>", "between", "in"])


@st.composite
def conditions(draw):
    op = draw(ops)
    if op == "between":
        low = draw(st.integers(0, 9))
        return Condition("x", op, (low, draw(st.integers(low, 9))))
    if op == "in":
        return Condition("x", op, tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=3))))
    return Condition("x", op, (draw(st.integers(0, 9)),))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=30),
    st.lists(st.integers(0, 3), min_size=30, max_size=30),
    st.lists(st.sampled_from("abc"), min_size=30, max_size=30),
    conditions(),
    st.sampled_from("abc"),
)
def test_class_may_satisfy_iff_some_value_in_its_region_does(xs, labels, cats, cond, cat):
    n = len(xs)
    data = pd.DataFrame({"x": xs, "c": cats[:n]})
    labels = np.asarray(labels[:n])
    query = AnyOf((cond, Condition("c", "=", (cat,))))
    regions = ClassRegions.from_rows(data, labels)
    got = evaluate_classes(query, regions)
    codes = regions.codes
    for k in range(regions.n_classes):
        rows = data[codes == k]
        # region of class k: every integer in [min, max] crossed with its category set
        grid = pd.DataFrame(
            list(itertools.product(range(rows.x.min(), rows.x.max() + 1), set(rows.c))),
            columns=["x", "c"],
        )
        assert got[k] == bool(evaluate_rows(query, grid).any())
    # and released answers always contain the true answers
    assert not (evaluate_rows(query, data) & ~got[codes]).any()


def test_restrict_predicate_to_quasi_identifiers():
    q = AllOf((Condition("age", ">", (3,)), Condition("name", "=", ("x",))))
    assert restrict_predicate(q, {"age"}) == Condition("age", ">", (3,))
    assert restrict_predicate(AnyOf(q.parts), {"age"}) is None
    assert restrict_predicate(q, {"sex"}) is None


def test_discernibility_by_hand():
    assert discernibility(LABELS) == 4 + 4 + 4
    assert discernibility(["a", "b", "a", "a"]) == 9 + 1


def test_weighted_discernibility_by_hand():
    # each row is charged the rows whose original value lies in its class's released region
    # age: [20,25], [30,35], [60,70] hold 2 rows each -> 6 rows x 2 = 12
    assert attribute_discernibility(DATA, LABELS, "age") == 12
    # sex: {F,M} holds all 6 rows (2 rows charged 6), {F} 3 rows, {M} 3 rows -> 12 + 6 + 6
    assert attribute_discernibility(DATA, LABELS, "sex") == 24
    assert weighted_discernibility(DATA, LABELS, {"age": 3, "sex": 1}) == pytest.approx(
        0.75 * 12 + 0.25 * 24)
    merged = [0, 0, 0, 0, 1, 1]  # age [20,35] (4 rows) for 4 rows, [60,70] for 2
    assert attribute_discernibility(DATA, merged, "age") == 4 * 4 + 2 * 2
    assert weighted_discernibility(DATA, merged, {"age": 0, "sex": 1}) == pytest.approx(
        4 * 6 + 2 * 3)
    # exact release: one class per distinct row -> the floor sum of squared value counts
    exact = [0, 1, 2, 3, 4, 5]
    assert attribute_discernibility(DATA, exact, "sex") == 3 * 3 + 3 * 3 == \
        minimum_weighted_discernibility(DATA[["sex"]], {"sex": 1})


def test_an_exactly_released_attribute_scores_less_than_a_generalized_one():
    # the earlier reading (groups of identical released values) charged an exact attribute split
    # over many classes the most; now exact age beats any age range
    data = pd.DataFrame({"age": [30] * 4 + [40] * 4, "sex": list("FFMMFFMM")})
    by_age = [0, 0, 1, 1, 2, 2, 3, 3]          # age exact, sex exact too
    by_sex = [0, 0, 1, 1, 0, 0, 1, 1]          # age [30,40] everywhere, sex exact
    weights = {"age": 1, "sex": 0.1}
    assert weighted_discernibility(data, by_age, weights) < weighted_discernibility(
        data, by_sex, weights)


def _brute_force_wdm(data, labels, weights):
    labels = np.asarray(labels)
    total = sum(weights.values())
    score = 0.0
    for column, weight in weights.items():
        values = data[column].tolist()
        charged = 0
        for r in range(len(values)):
            members = [values[i] for i in range(len(values)) if labels[i] == labels[r]]
            if isinstance(values[0], str):
                charged += sum(v in set(members) for v in values)
            else:
                charged += sum(min(members) <= v <= max(members) for v in values)
        score += weight / total * charged
    return score


small_tables = st.integers(1, 14).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 6), min_size=n, max_size=n),
    st.lists(st.sampled_from("abc"), min_size=n, max_size=n),
    st.lists(st.integers(0, 3), min_size=n, max_size=n),
    st.lists(st.floats(0, 5), min_size=2, max_size=2),
))


@settings(max_examples=80, deadline=None)
@given(small_tables)
def test_wdm_matches_a_brute_force_count(table):
    x, s, labels, (wx, ws) = table
    data = pd.DataFrame({"x": x, "s": s})
    weights = {"x": wx + 0.01, "s": ws}
    assert weighted_discernibility(data, labels, weights) == pytest.approx(
        _brute_force_wdm(data, labels, weights))


@settings(max_examples=80, deadline=None)
@given(small_tables, st.lists(st.integers(0, 2), min_size=4, max_size=4))
def test_exact_release_is_the_floor_and_coarser_never_scores_lower(table, merge):
    x, s, labels, (wx, ws) = table
    data = pd.DataFrame({"x": x, "s": s})
    weights = {"x": wx + 0.01, "s": ws}
    floor = minimum_weighted_discernibility(data, weights)
    # exact release: every class holds one original value per attribute
    exact, _ = pd.factorize(pd.Series(list(zip(x, s))))
    assert weighted_discernibility(data, exact, weights) == pytest.approx(floor)
    fine = weighted_discernibility(data, labels, weights)
    assert fine >= floor - 1e-9
    # merging classes (a coarser generalization) never lowers the score
    coarse = [merge[label] for label in labels]
    assert weighted_discernibility(data, coarse, weights) >= fine - 1e-9


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40))
def test_wdm_of_distinct_values_is_the_dm_of_the_classes(labels):
    # distinct values, contiguous classes: a class's range holds exactly its own rows
    order = np.argsort(labels, kind="stable")
    data = pd.DataFrame({"x": np.empty(len(labels))})
    data.loc[order, "x"] = np.arange(len(labels), dtype=float)
    assert weighted_discernibility(data, labels, {"x": 2.5}) == discernibility(labels)


def test_normalize_weights_and_bad_weights():
    assert normalize_weights({"age": 3, "sex": 1}, ["age", "sex", "zip"]) == {
        "age": 0.75, "sex": 0.25, "zip": 0.0}
    with pytest.raises(UndefinedObject, match="'salary'"):
        normalize_weights({"salary": 1}, ["age"])
    with pytest.raises(InvalidParameter, match=">= 0"):
        normalize_weights({"age": -1}, ["age"])
    with pytest.raises(InvalidParameter, match="all priority weights are zero"):
        normalize_weights({"age": 0}, ["age", "sex"])
    with pytest.raises(InvalidParameter, match="not a number"):
        normalize_weights({"age": "high"}, ["age"])
    with pytest.raises(InvalidParameter):
        normalize_weights({"age": float("nan")}, ["age"])


@pytest.mark.parametrize("weight", [10**400, -(10**400), Decimal("1e400"), Decimal("-1e400")],
                         ids=["int", "negative int", "Decimal", "negative Decimal"])
def test_weights_beyond_double_precision_are_refused_as_not_finite(weight):
    """jsonb's 1e400 reaches Python as a 401-digit int (or a Decimal): refused like inf."""
    with pytest.raises(InvalidParameter, match="must be finite"):
        normalize_weights({"age": weight, "sex": 1}, ["age", "sex"])


def test_bad_inputs():
    with pytest.raises(InsufficientData):
        workload_precision(DATA, LABELS, [])
    with pytest.raises(InvalidParameter, match="labels"):
        workload_precision(DATA, LABELS[:3], [Condition("age", ">", (1,))])
    with pytest.raises(UndefinedObject, match="zip"):
        workload_precision(DATA, LABELS, [Condition("zip", ">", (1,))])
    with pytest.raises(InvalidParameter):
        Condition("age", "between", (1,))
    with pytest.raises(InvalidParameter):
        Condition("age", "~", (1,))


@pytest.mark.parametrize("values", [[None] * 10,
                                    ["a", "a", None, "b", "b", None, "a", "b", "b", "b"]])
def test_discernibility_counts_null_as_a_category_of_its_own(values):
    """A categorical QI with NULLs (all of them, or some): NULL is a value of the released sets
    (GROUP BY keeps it), so a class holding a NULL row covers every NULL row. The count, brute
    force: for each row, the rows whose value is in its class's set (NULL matching NULL)."""
    frame = pd.DataFrame({"age": np.arange(10), "s": pd.Series(values, dtype=object)})
    labels = np.arange(10) // 5
    key = ["<NULL>" if v is None else v for v in values]
    sets = {c: {key[i] for i in range(10) if labels[i] == c} for c in set(labels)}
    expected = sum(sum(key[j] in sets[labels[i]] for j in range(10)) for i in range(10))
    assert attribute_discernibility(frame, labels, "s") == expected
    assert weighted_discernibility(frame, labels, {"age": 1, "s": 1}) == \
        0.5 * attribute_discernibility(frame, labels, "age") + 0.5 * expected
