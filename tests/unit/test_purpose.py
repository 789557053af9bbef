"""Purposes: explicit priorities, mutual information, and Definition 1's recursion (paper 001)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.metrics import mutual_info_score, normalized_mutual_info_score

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.core.purpose import (
    MIPriorities,
    chain_priorities,
    discretize,
    entropy,
    mutual_information,
    normalized_mi_matrix,
    validate_priorities,
)

fast = settings(max_examples=50, deadline=None)


# --- mutual information ----------------------------------------------------------------------

def test_mi_of_a_fair_bit_with_itself_is_log_two():
    x = np.array([0, 1, 0, 1])
    assert mutual_information(x, x) == pytest.approx(np.log(2))


def test_mi_of_independent_columns_is_zero():
    x = np.array([0, 0, 1, 1])
    y = np.array([0, 1, 0, 1])  # every (x, y) pair once: the joint is the product of marginals
    assert mutual_information(x, y) == pytest.approx(0.0)


def reference_entropy(codes):
    """The hand-written formula entropy() replaced (issue 13 item 6), kept as the reference."""
    p = np.bincount(codes) / codes.size
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def reference_mutual_information(x, y):
    """The hand-written contingency-table formula mutual_information() replaced."""
    n_y = int(y.max()) + 1
    joint = np.bincount(x * n_y + y, minlength=(int(x.max()) + 1) * n_y).reshape(-1, n_y)
    joint = joint / x.size
    outer = joint.sum(axis=1, keepdims=True) @ joint.sum(axis=0, keepdims=True)
    nonzero = joint > 0
    return float((joint[nonzero] * np.log(joint[nonzero] / outer[nonzero])).sum())


@fast
@given(st.data())
def test_library_entropy_and_mi_equal_the_hand_written_formulas(data):
    n = data.draw(st.integers(1, 60))
    codes = data.draw(hnp.arrays(np.int64, (n, 2), elements=st.integers(0, 7)))
    x, y = codes[:, 0], codes[:, 1]
    assert entropy(x) == pytest.approx(reference_entropy(x), abs=1e-12)
    assert mutual_information(x, y) == pytest.approx(reference_mutual_information(x, y),
                                                     abs=1e-12)


@fast
@given(st.data())
def test_mi_and_normalized_mi_agree_with_scikit_learn(data):
    n = data.draw(st.integers(2, 40))
    codes = data.draw(hnp.arrays(np.int64, (n, 3), elements=st.integers(0, 4)))
    x, y = codes[:, 0], codes[:, 1]
    assert mutual_information(x, y) == pytest.approx(mutual_info_score(x, y), abs=1e-9)
    matrix = normalized_mi_matrix(codes)
    assert np.allclose(matrix, matrix.T)
    assert ((matrix >= 0) & (matrix <= 1)).all()
    if len(set(x)) > 1 and len(set(y)) > 1:
        expected = normalized_mutual_info_score(x, y, average_method="geometric")
        assert matrix[0, 1] == pytest.approx(expected, abs=1e-9)


def test_constant_column_has_zero_normalized_mi():
    codes = np.array([[0, 0], [0, 1], [0, 0], [0, 1]])
    assert normalized_mi_matrix(codes)[0].tolist() == [0.0, 0.0]


def test_discretize_bins_numbers_and_keeps_missing_as_a_category():
    frame = pd.DataFrame({"age": np.arange(100), "sex": ["F", None] * 50})
    codes = discretize(frame, n_bins=4)
    assert len(set(codes[:, 0])) == 4
    assert np.bincount(codes[:, 0]).tolist() == [25, 25, 25, 25]  # quantile bins: equal counts
    assert len(set(codes[:, 1])) == 2


# --- Definition 1 ----------------------------------------------------------------------------

def test_three_attribute_chain_by_hand():
    mi = np.array([[1.0, 0.1, 0.0],
                   [0.1, 1.0, 0.5],
                   [0.0, 0.5, 1.0]])
    # P2 = (MI(2,3) P1 + MI(2,1) P3) / (MI(2,3) + MI(2,1)), with the floor added to each weight
    floor = 1e-3
    expected = (0.5 + floor) / (0.5 + 0.1 + 2 * floor)
    assert chain_priorities(mi, mi_floor=floor) == pytest.approx([1.0, expected, 0.0])


def test_independent_neighbours_give_linear_interpolation():
    assert chain_priorities(np.eye(5)) == pytest.approx([1, 0.75, 0.5, 0.25, 0])


def test_zero_mi_between_neighbours_does_not_make_the_system_singular():
    mi = np.eye(4)
    # without a floor: MI(1, 2) = 0 puts all of attribute 1's weight on P2, and MI(2, 3) > 0 with
    # MI(2, 1) = 0 puts all of attribute 2's weight on P1 -- P1 = P2 has no unique solution
    mi[2, 3] = mi[3, 2] = 1.0
    priorities = chain_priorities(mi)
    assert np.isfinite(priorities).all() and ((priorities >= 0) & (priorities <= 1)).all()


symmetric_unit_matrices = st.integers(2, 8).flatmap(
    lambda m: hnp.arrays(float, (m, m), elements=st.floats(0, 1)).map(
        lambda a: np.triu(a, 1) + np.triu(a, 1).T + np.eye(m)))


@fast
@given(symmetric_unit_matrices)
def test_theorem_1_priorities_in_unit_interval_and_recursion_holds(mi):
    floor = 1e-3
    p = chain_priorities(mi, mi_floor=floor)
    assert p[0] == 1.0 and p[-1] == 0.0
    assert ((p >= 0) & (p <= 1)).all()
    for i in range(1, len(p) - 1):  # each equation of Definition 1, checked independently
        a, b = mi[i, i + 1] + floor, mi[i, i - 1] + floor
        assert p[i] == pytest.approx((a * p[i - 1] + b * p[i + 1]) / (a + b), abs=1e-9)


def test_chain_needs_two_attributes():
    with pytest.raises(InsufficientData):
        chain_priorities(np.eye(1))


# --- MIPriorities ----------------------------------------------------------------------------

@pytest.fixture
def frame():
    rng = np.random.default_rng(0)
    target = rng.integers(0, 4, 400)
    return pd.DataFrame({
        "noise": rng.integers(0, 4, 400),
        "target": target,
        "copy": target,  # carries everything the most useful attribute carries
        "half": np.where(rng.random(400) < 0.5, target, rng.integers(0, 4, 400)),
        "last": rng.integers(0, 4, 400),
    })


def test_most_gets_one_least_gets_zero_and_related_attributes_rank_first(frame):
    model = MIPriorities(most="target", least="last").fit(frame)
    assert model.priorities_["target"] == 1.0 and model.priorities_["last"] == 0.0
    assert model.order_[:3] == ["target", "copy", "half"]
    assert list(model.priorities_.index) == list(frame.columns)
    assert model.priorities_.between(0, 1).all()
    assert model.mi_matrix_.loc["target", "copy"] == pytest.approx(1.0)


def test_unknown_column_is_named(frame):
    with pytest.raises(UndefinedObject, match="'salary' is not a column"):
        MIPriorities(most="salary", least="last").fit(frame)


def test_most_and_least_must_differ(frame):
    with pytest.raises(InvalidParameter, match="both 'target'"):
        MIPriorities(most="target", least="target").fit(frame)


def test_init_only_stores_parameters():
    model = MIPriorities(most="nope", least="nothing", n_bins=1)  # validated in fit, not here
    assert (model.most, model.least, model.n_bins) == ("nope", "nothing", 1)


# --- explicit priorities ---------------------------------------------------------------------

def test_explicit_priorities_are_checked_against_the_table():
    assert validate_priorities({"age": 1, "sex": 0.9}, ["age", "sex", "race"]).to_dict() == {
        "age": 1.0, "sex": 0.9}
    with pytest.raises(UndefinedObject, match="priority for 'zip' is not a column"):
        validate_priorities({"zip": 1}, ["age", "sex"])
    with pytest.raises(InvalidParameter, match="priority of 'age' must lie in"):
        validate_priorities({"age": 1.5}, ["age"])
    with pytest.raises(InvalidParameter, match="at least one"):
        validate_priorities({}, ["age"])


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_derived_priorities_in_unit_interval_on_random_tables(data):
    n_rows = data.draw(st.integers(5, 60))
    n_columns = data.draw(st.integers(2, 5))
    codes = data.draw(hnp.arrays(np.int64, (n_rows, n_columns), elements=st.integers(0, 3)))
    frame = pd.DataFrame(codes, columns=[f"c{j}" for j in range(n_columns)]).astype(str)
    most, least = data.draw(st.lists(st.sampled_from(list(frame.columns)), min_size=2,
                                     max_size=2, unique=True))
    model = MIPriorities(most=most, least=least).fit(frame)
    assert model.priorities_[most] == 1.0 and model.priorities_[least] == 0.0
    assert model.priorities_.between(0, 1).all()
    assert sorted(model.order_) == sorted(frame.columns)
