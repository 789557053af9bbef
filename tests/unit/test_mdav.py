"""MDAV microaggregation: hand-computed groups, MDAV's defining properties, k-anonymity."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType
from plpy_anon.core.mdav import MDAV, microaggregate


@st.composite
def matrices_and_k(draw, min_groups=1):
    """An integer matrix plus a tiny random jitter, so distances have no exact ties."""
    k = draw(st.integers(2, 6))
    n_rows = draw(st.integers(min_groups * k, 60))
    n_cols = draw(st.integers(1, 3))
    values = draw(
        st.lists(st.integers(-20, 20), min_size=n_rows * n_cols, max_size=n_rows * n_cols)
    )
    seed = draw(st.integers(0, 2**31))
    jitter = np.random.default_rng(seed).uniform(0, 1e-3, size=(n_rows, n_cols))
    return np.array(values, dtype=float).reshape(n_rows, n_cols) + jitter, k


def _standardized(X):
    # Written independently of mdav.standardize: population std, constant column -> zeros.
    std = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(std > 0, std, 1.0)


def test_hand_computed_two_groups():
    # n = 6 < 3k: one group around the record farthest from the centroid (37/6 ~ 6.17): that is
    # 13 (6.83 away) rather than 0 (6.17 away); its 3 nearest are 13, 11, 10; the rest is {0,1,2}.
    X = np.array([[0.0], [1.0], [2.0], [10.0], [11.0], [13.0]])
    mdav = MDAV(k=3).fit(X)
    assert mdav.labels_.tolist() == [1, 1, 1, 0, 0, 0]
    np.testing.assert_allclose(mdav.centroids_.ravel(), [34 / 3, 1.0])
    np.testing.assert_allclose(microaggregate(X, 3).ravel(), [1, 1, 1, 34 / 3, 34 / 3, 34 / 3])


def test_hand_computed_three_k_loop_on_a_line():
    # 9 points, k = 3, so the >= 3k loop runs once. Centroid 4 (after standardizing, distances
    # keep their order on a line); farthest from it is 12, farthest from 12 is 0: groups
    # {12, 5, 4}, then {0, 1, 2} from what is left, and the last group {3, 3.5, 3.6}.
    X = np.array([0, 1, 2, 3, 3.5, 3.6, 4, 5, 12], dtype=float).reshape(-1, 1)
    labels = MDAV(k=3).fit(X).labels_
    assert labels.tolist() == [1, 1, 1, 2, 2, 2, 0, 0, 0]


def test_dataframe_in_dataframe_out_and_standardized_distances():
    # Column b is 1000x column a's scale; without standardization b alone would decide the
    # groups. Rows 0-1 are close in a and b (in std units), rows 2-3 likewise.
    frame = pd.DataFrame(
        {"a": [0.0, 0.1, 5.0, 5.1], "b": [0.0, 100.0, 5000.0, 5100.0]}, index=[10, 11, 12, 13]
    )
    out = MDAV(k=2).fit_transform(frame)
    assert list(out.columns) == ["a", "b"] and list(out.index) == [10, 11, 12, 13]
    np.testing.assert_allclose(out["a"], [0.05, 0.05, 5.05, 5.05])


@settings(max_examples=60, deadline=None)
@given(matrices_and_k())
def test_groups_of_k_and_last_of_k_to_2k_minus_1(data):
    X, k = data
    sizes = MDAV(k=k).fit(X).group_sizes_
    assert sizes.sum() == len(X)
    assert (sizes[:-1] == k).all()
    assert k <= sizes[-1] <= 2 * k - 1
    assert len(sizes) == len(X) // k


@settings(max_examples=60, deadline=None)
@given(matrices_and_k())
def test_release_is_k_anonymous_and_keeps_the_means(data):
    X, k = data
    released = MDAV(k=k).fit_transform(X)
    counts = pd.DataFrame(released).round(9).value_counts()
    assert counts.min() >= k
    np.testing.assert_allclose(released.mean(axis=0), X.mean(axis=0), atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(matrices_and_k(min_groups=3))
def test_first_two_groups_are_built_around_the_extreme_records(data):
    """MDAV's defining step, checked by brute force on the standardized data."""
    X, k = data
    labels = MDAV(k=k).fit(X).labels_
    Z = _standardized(X)
    r = int(np.argmax(((Z - Z.mean(axis=0)) ** 2).sum(axis=1)))
    s = int(np.argmax(((Z - Z[r]) ** 2).sum(axis=1)))
    to_r = ((Z - Z[r]) ** 2).sum(axis=1)
    assert labels[r] == 0
    assert to_r[labels == 0].max() <= to_r[labels != 0].min()
    # Group 1: s and its k-1 nearest neighbours among the records not in group 0.
    to_s = ((Z - Z[s]) ** 2).sum(axis=1)
    rest = labels != 0
    assert set(np.flatnonzero(labels == 1)) <= set(np.flatnonzero(rest))
    assert to_s[labels == 1].max() <= to_s[rest & (labels != 1)].min()


def test_n_between_k_and_2k_is_one_group():
    X = np.arange(5, dtype=float).reshape(-1, 1)
    assert MDAV(k=3).fit(X).group_sizes_.tolist() == [5]


def test_constant_column_is_ignored_not_divided_by_zero():
    X = np.column_stack([np.zeros(6), [0, 1, 2, 10, 11, 13]])
    assert MDAV(k=3).fit(X).labels_.tolist() == [1, 1, 1, 0, 0, 0]


@pytest.mark.parametrize("k", [1, 0, 2.5, True, "3"])
def test_bad_k(k):
    with pytest.raises(InvalidParameter, match="k must be (an integer|at least 2)"):
        MDAV(k=k).fit(np.zeros((4, 1)))


def test_k_above_rows():
    with pytest.raises(InsufficientData, match="has 4 rows, fewer than k = 5") as error:
        MDAV(k=5).fit(np.arange(4.0).reshape(-1, 1))
    assert "k <= 4" in error.value.hint


def test_non_numeric_and_missing_values():
    with pytest.raises(UnsupportedType, match="not numeric: title"):
        MDAV(k=2).fit(pd.DataFrame({"x": [1, 2, 3], "title": ["a", "b", "c"]}))
    with pytest.raises(InsufficientData, match="NULL/NaN"):
        MDAV(k=2).fit(np.array([[1.0], [np.nan], [3.0]]))


def test_init_only_stores_parameters():
    mdav = MDAV(k=4)
    assert vars(mdav) == {"k": 4}
