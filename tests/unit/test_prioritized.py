"""Prioritized Mondrian: still k-anonymous / l-diverse, priorities steer splits, cuts snap."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.errors import InvalidParameter, UndefinedObject
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.prioritized import PrioritizedMondrian, _normalized_gain
from plpy_anon.core.workload import (
    Condition,
    weighted_discernibility,
    workload_precision,
)


def columns_of(frame):
    return [
        encode_numeric(c, frame[c].to_numpy()) if frame[c].dtype.kind in "if"
        else encode_categorical(c, frame[c].to_numpy())
        for c in frame.columns
    ]


def random_frame(seed, n=400):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(18, 90, n),
        "zip": rng.integers(0, 1000, n),
        "sex": rng.choice(["F", "M"], n),
        "job": rng.choice(list("abcdef"), n),
    })


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 10_000), st.integers(2, 30), st.sampled_from(["age", "zip", "sex", "job"]),
    st.booleans(), st.lists(st.integers(10, 100), max_size=4),
)
def test_every_class_keeps_k_rows_and_l_values(seed, k, favourite, with_target, thresholds):
    frame = random_frame(seed)
    sensitive = np.random.default_rng(seed + 1).integers(0, 4, len(frame))
    model = PrioritizedMondrian(
        k=k, l=2, priorities={favourite: 1.0},
        cut_points={"age": [(t, t % 2 == 0) for t in thresholds]},
    ).fit(columns_of(frame), sensitive=sensitive,
          target=frame["sex"].to_numpy() if with_target else None)
    sizes = np.bincount(model.labels_)
    assert sizes.min() >= k
    distinct = pd.Series(sensitive).groupby(model.labels_).nunique()
    assert distinct.min() >= 2


def test_without_priorities_it_is_plain_mondrian():
    cols = columns_of(random_frame(3))
    plain = Mondrian(k=7).fit(cols)
    same = PrioritizedMondrian(k=7).fit(cols)
    np.testing.assert_array_equal(plain.labels_, same.labels_)


def test_a_prioritized_attribute_ends_finer():
    # all four attributes start at spread 1, and plain Mondrian breaks ties by column order, so
    # it cuts age first; with zip prioritized, zip is cut whenever it still has spread
    frame = random_frame(5)
    cols = columns_of(frame)
    model = PrioritizedMondrian(k=10, priorities={"zip": 1}).fit(cols)
    plain = Mondrian(k=10).fit(cols)
    zip_range = frame["zip"].groupby(model.labels_).agg(np.ptp).mean()
    plain_zip_range = frame["zip"].groupby(plain.labels_).agg(np.ptp).mean()
    assert zip_range < plain_zip_range / 2
    weights = {"zip": 1}
    assert weighted_discernibility(frame, model.labels_, weights) < \
        weighted_discernibility(frame, plain.labels_, weights)


def test_cut_points_stop_classes_straddling_the_predicate():
    frame = pd.DataFrame({"age": np.arange(200)})  # ages 0..199, medians fall on round numbers
    cols = columns_of(frame)
    query = Condition("age", ">", (37,))
    plain = Mondrian(k=10).fit(cols)
    snapped = PrioritizedMondrian(k=10, cut_points={"age": [(37, True)]}).fit(cols)
    assert workload_precision(frame, plain.labels_, [query]).mean_precision < 1
    # no class holds both an age <= 37 and an age > 37
    side = frame["age"] > 37
    assert side.groupby(snapped.labels_).nunique().max() == 1
    assert workload_precision(frame, snapped.labels_, [query]).mean_precision == 1


def test_a_cut_point_far_from_the_median_is_ignored():
    frame = pd.DataFrame({"age": np.arange(100)})
    cols = columns_of(frame)
    # left side of x <= 2 holds 3 rows: k = 40 forbids that cut, so the median cut stands
    model = PrioritizedMondrian(k=40, cut_points={"age": [(2, True)]}).fit(cols)
    plain = Mondrian(k=40).fit(cols)
    np.testing.assert_array_equal(model.labels_, plain.labels_)


def test_information_gain_prefers_the_attribute_that_separates_the_target():
    rng = np.random.default_rng(0)
    n = 400
    frame = pd.DataFrame({"noise": rng.integers(0, 1000, n), "signal": rng.integers(0, 10, n)})
    target = (frame["signal"] >= 5).to_numpy()
    cols = columns_of(frame)
    # plain ranks by spread: both full range; the gain metric pulls "signal" to the top
    model = PrioritizedMondrian(k=100, metric_weights={"spread": 1, "infogain": 5}).fit(
        cols, target=target)
    purity = pd.Series(target).groupby(model.labels_).mean()
    assert set(np.round(purity, 6)) <= {0.0, 1.0}


def test_normalized_gain_by_hand():
    total = np.array([[4, 4], [4, 4], [8, 0]])
    left = np.array([[4, 0], [2, 2], [4, 0]])
    gain = _normalized_gain(total, left, np.array([True, True, True]))
    # perfect split -> 1; split keeping the mix -> 0; pure partition -> 0
    np.testing.assert_allclose(gain, [1.0, 0.0, 0.0])


def test_bad_parameters():
    cols = columns_of(random_frame(1, n=50))
    with pytest.raises(UndefinedObject, match="salary"):
        PrioritizedMondrian(k=5, priorities={"salary": 1}).fit(cols)
    with pytest.raises(InvalidParameter, match="zero"):
        PrioritizedMondrian(k=5, priorities={"age": 0}).fit(cols)
    with pytest.raises(InvalidParameter, match=">= 0"):
        PrioritizedMondrian(k=5, priorities={"age": -2}).fit(cols)
    with pytest.raises(InvalidParameter, match="unknown metric"):
        PrioritizedMondrian(k=5, metric_weights={"entropy": 1}).fit(cols)
    with pytest.raises(InvalidParameter, match="no target"):
        PrioritizedMondrian(k=5, metric_weights={"infogain": 1}).fit(cols)
    with pytest.raises(InvalidParameter, match="cut_tolerance"):
        PrioritizedMondrian(k=5, cut_tolerance=0.9).fit(cols)
    with pytest.raises(UndefinedObject, match="not a quasi-identifier"):
        PrioritizedMondrian(k=5, cut_points={"height": [(1, True)]}).fit(cols)
    with pytest.raises(InvalidParameter, match="target"):
        PrioritizedMondrian(k=5).fit(cols, target=np.zeros(3))


def test_init_only_stores_parameters():
    model = PrioritizedMondrian(k=3, priorities={"a": 1})
    assert vars(model) == {"k": 3, "l": None, "priorities": {"a": 1}, "metric_weights": None,
                           "cut_points": None, "cut_tolerance": 0.5, "split": "median",
                           "l_diversity": "distinct", "c": None, "t": None, "engine": "auto"}


def test_parameters_are_checked_without_data():
    model = PrioritizedMondrian(k=5, priorities={"age": 2, "sex": 2})
    assert model.check_parameters(["age", "sex", "zip"]).priorities_ == {
        "age": 0.5, "sex": 0.5, "zip": 0.0}
    assert model.metric_weights_ == {"spread": 1.0, "infogain": 0.0, "priority": 1.0}
    with pytest.raises(InvalidParameter, match="no target"):
        PrioritizedMondrian(k=5, metric_weights={"infogain": 1}).check_parameters(["age"])


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 12),
       st.lists(st.tuples(st.integers(0, 60), st.booleans()), min_size=1, max_size=4))
def test_no_class_straddles_a_cut_point_where_k_allows_cutting_it(seed, k, cuts):
    # "where k allows": every cell between consecutive cut points (and the two outer ones)
    # holds >= k rows, so every cut point can be cut in any partition holding it
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x": rng.integers(0, 60, 150)})
    left_of = [frame["x"] <= t if inclusive else frame["x"] < t for t, inclusive in cuts]
    cell = sum(side.astype(int) for side in left_of)
    assume(cell.value_counts().min() >= k and cell.nunique() == len(
        {side.sum() for side in left_of}) + 1)
    labels = PrioritizedMondrian(k=k, cut_points={"x": cuts}).fit(columns_of(frame)).labels_
    assert np.bincount(labels).min() >= k
    for side in left_of:
        assert side.groupby(labels).nunique().max() == 1


@pytest.mark.parametrize("cls", [Mondrian, PrioritizedMondrian])
def test_a_fitted_estimator_keeps_no_row_sized_state(cls):
    """An estimator may be kept around after its fit: then it holds
    labels_ and parameters, not the fit's row orders, codes, levels or target."""
    frame = random_frame(3, n=500)
    kwargs = {"metric_weights": {"spread": 1, "priority": 0, "infogain": 1}} \
        if cls is PrioritizedMondrian else {}
    fit_kwargs = {"target": frame["sex"].to_numpy()} if cls is PrioritizedMondrian else {}
    model = cls(k=5, **kwargs).fit(columns_of(frame), **fit_kwargs)
    held = {name: value for name, value in vars(model).items()
            if name != "labels_" and (np.size(value) >= len(frame) if isinstance(value, np.ndarray)
                                      else hasattr(value, "orders"))}
    assert held == {}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 8),
       st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3, unique=True))
def test_no_class_mixes_a_queried_category_with_another_where_k_allows(seed, k, queried):
    """Equality constants on a categorical column are cut points (issue 29, point 4): a released
    class holds a queried value together with other values of the column only where cutting
    there would leave fewer than k rows on a side (the class had no allowable cut left)."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"c": rng.choice(list("abcdef"), 150),
                          "x": rng.integers(0, 60, 150)})
    cuts = [(v, inclusive) for v in queried for inclusive in (False, True)]
    columns = columns_of(frame)
    labels = PrioritizedMondrian(k=k, cut_points={"c": cuts}).fit(columns).labels_
    assert np.bincount(labels).min() >= k
    code_of = {label: code for code, label in enumerate(columns[0].labels)}
    for cls in range(labels.max() + 1):
        codes = columns[0].codes[labels == cls]
        for value in queried:
            if value not in code_of:
                continue
            here = codes == code_of[value]
            if here.any() and not here.all():
                for boundary in (code_of[value] - 1, code_of[value]):
                    left = int((codes <= boundary).sum())
                    assert min(left, codes.size - left) < k, (value, boundary, cls)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 12), st.sampled_from([None, 2]),
       st.lists(st.sampled_from("abcdef"), min_size=1, max_size=3, unique=True),
       st.lists(st.tuples(st.integers(0, 60), st.booleans()), min_size=1, max_size=3),
       st.lists(st.sampled_from(["F", "M"]), max_size=1))
def test_a_workload_cell_of_k_rows_is_never_mixed_with_other_rows(seed, k, l, queried, ranges,
                                                                  sex):
    """The cells of the cut points (the side of every cut point a row falls on: ranges of x,
    each queried category of c and of sex apart from its neighbours) are where queries' answers begin and end: a
    cell holding k rows and l values on its own is a union of whole classes, however the
    priorities rank the columns (top-down cuts alone mixed such cells once a parent partition
    had no cut left on one of the columns). One may take in the few rows no pooled group could
    hold, when no cell was pooled."""
    rng = np.random.default_rng(seed)
    n = 300
    frame = pd.DataFrame({"c": rng.choice(list("abcdef"), n, p=[.4, .2, .15, .1, .1, .05]),
                          "x": rng.integers(0, 60, n), "sex": rng.choice(["F", "M"], n),
                          "zip": rng.integers(0, 100, n)})
    sensitive = rng.integers(0, 3, n)
    cuts = {"c": [(v, side) for v in queried for side in (False, True)], "x": ranges}
    if sex:
        cuts["sex"] = [(sex[0], False), (sex[0], True)]
    weights = dict(zip(["c", "x", "sex", "zip"], rng.random(4)))
    columns = columns_of(frame)
    labels = PrioritizedMondrian(k=k, l=l, priorities=weights, cut_points=cuts).fit(
        columns, sensitive=sensitive).labels_
    assert np.bincount(labels).min() >= k
    if l:
        assert pd.Series(sensitive).groupby(labels).nunique().min() >= l
    # a categorical cut point (v, inclusive) cuts the column's code order before or after v
    position = {col.name: (col.codes, {v: c for c, v in enumerate(col.labels)}) for col in columns}
    sides = [frame["x"] <= t if inclusive else frame["x"] < t for t, inclusive in ranges]
    for column in ("c", "sex"):
        codes, code_of = position[column]
        sides += [pd.Series(codes <= code_of[v] if inclusive else codes < code_of[v])
                  for v, inclusive in cuts.get(column, [])]
    cell = pd.Series(list(zip(*sides)) if sides else [()] * n).astype(str)
    whole = cell.groupby(cell).transform("size").ge(k) & \
        pd.Series(sensitive).groupby(cell).transform("nunique").ge(l or 1)
    mixed = [name for name, rows in frame[whole].groupby(cell[whole]).groups.items()
             if np.isin(labels, np.unique(labels[rows])).sum() > len(rows)]
    assert len(mixed) <= 1, mixed


def test_a_null_is_a_workload_cell_of_its_own():
    """NULL meets neither side of ``x <= 10``: three NULLs form a class of their own instead of
    being pooled with the x <= 10 rows (they shared its cell: NULL's code is below every
    boundary)."""
    x = np.array([np.nan] * 3 + [1, 2, 3] + [20] * 3)
    z = np.array(["a", "a", "b", "a", "b", "b", "a", "b", "a"], dtype=object)
    labels = PrioritizedMondrian(k=3, priorities={"z": 1, "x": 0.1},
                                 cut_points={"x": [(10, True)]}).fit(
        [encode_numeric("x", x), encode_categorical("z", z)]).labels_
    assert len({labels[0], labels[1], labels[2]}) == 1
    assert not np.isin(labels[3:], labels[:3]).any()


def test_leftover_rows_join_a_group_that_keeps_the_model():
    """Cells x = 0..3 of 2, 10, 4 and 8 rows, k = 5, recursive (3, 2): the 6 leftover rows (all
    one value) cannot join x = 1 (a union failing (3, 2)) but can join x = 3; the grouping is
    kept and x = 1 stays whole (it was dropped, and both whole cells were mixed)."""
    x = np.array([0] * 2 + [1] * 10 + [2] * 4 + [3] * 8, dtype=float)
    sa = np.array([0, 0] + [0, 1, 1, 0, 0, 1, 1, 0, 0, 0] + [0] * 4 + [2, 1, 2, 1, 1, 2, 2, 1])
    labels = PrioritizedMondrian(k=5, l=2, l_diversity="recursive", c=3, priorities={"x": 1},
                                 cut_points={"x": [(0, True), (1, True), (2, True)]}).fit(
        [encode_numeric("x", x)], sensitive=sa).labels_
    ones = labels[x == 1]
    assert not np.isin(labels[x != 1], ones).any()
    for cls in np.unique(labels):
        counts = np.sort(np.bincount(sa[labels == cls]))[::-1]
        assert (labels == cls).sum() >= 5 and counts[0] < 3 * counts[1:].sum()


@pytest.mark.parametrize("cuts, message", [
    ({"age": [("abc", True)]}, "'abc' of the numeric column 'age' is not a number"),
    ({"age": [(None, True)]}, "None of the numeric column 'age' is not a number"),
    ({"age": [(5,)]}, r"\(5,\) of 'age' is not a \(threshold, left_inclusive\) pair"),
])
def test_malformed_cut_points_are_a_clear_error(cuts, message):
    with pytest.raises(InvalidParameter, match=message):
        PrioritizedMondrian(k=5, cut_points=cuts).fit(columns_of(random_frame(1)))
