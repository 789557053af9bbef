"""Trust evaluation and projection (paper 001): hand-computed cases and properties."""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.trust import (
    TrustProjection,
    combine_trust,
    decay_weights,
    evaluate_trust,
    history_score,
    recommendation_score,
)

unit = st.floats(0.0, 1.0, allow_nan=False)
outcome_lists = st.lists(unit, max_size=20)
fast = settings(max_examples=60, deadline=None)


# --- history ---------------------------------------------------------------------------------

def test_no_history_is_neutral():
    assert history_score([]) == 0.5


def test_beta_reputation_counts_good_and_bad():
    # two good, one bad: mean of Beta(3, 2) = 3 / 5
    assert history_score([1, 1, 0]) == pytest.approx(3 / 5)


def test_decay_halves_an_outcome_one_half_life_old():
    # one good outcome at age 10 with half-life 10 counts as r = 0.5: (0.5 + 1) / (0.5 + 2)
    assert history_score([1], [10], half_life=10) == pytest.approx(1.5 / 2.5)
    assert decay_weights([0, 10, 20], 10) == pytest.approx([1, 0.5, 0.25])


def test_fractional_outcome_splits_into_good_and_bad():
    # 0.7 counts 0.7 good and 0.3 bad: (0.7 + 1) / (1 + 2)
    assert history_score([0.7]) == pytest.approx(1.7 / 3)


@fast
@given(outcome_lists)
def test_history_in_open_unit_interval(outcomes):
    assert 0.0 < history_score(outcomes) < 1.0


@fast
@given(outcome_lists, unit)
def test_an_extra_good_outcome_never_lowers_history(outcomes, extra):
    assert history_score([*outcomes, 1.0]) >= history_score(outcomes) - 1e-12
    assert history_score([*outcomes, 0.0]) <= history_score(outcomes) + 1e-12


@fast
@given(outcome_lists, st.floats(0, 100), st.floats(0, 100))
def test_an_older_bad_outcome_hurts_less(outcomes, age_a, age_b):
    young, old = sorted([age_a, age_b])
    ages = [0.0] * len(outcomes)
    recent = history_score([*outcomes, 0.0], [*ages, young], half_life=30)
    older = history_score([*outcomes, 0.0], [*ages, old], half_life=30)
    assert older >= recent - 1e-12


@pytest.mark.parametrize("outcome", [-0.1, 1.5, math.nan])
def test_history_rejects_outcomes_outside_unit_interval(outcome):
    with pytest.raises(InvalidParameter, match="outcome must lie in"):
        history_score([1, outcome])


def test_history_rejects_bad_half_life_and_mismatched_ages():
    with pytest.raises(InvalidParameter, match="half_life"):
        history_score([1], [0], half_life=0)
    with pytest.raises(InvalidParameter, match="2 outcomes but 1 ages"):
        history_score([1, 0], [0])


# --- recommendations -------------------------------------------------------------------------

def test_recommendations_weighted_by_recommender_trust():
    # (0.9 * 0.8 + 0.1 * 0.2) / (0.8 + 0.2) = 0.74
    assert recommendation_score([0.9, 0.1], [0.8, 0.2]) == pytest.approx(0.74)


def test_no_recommendation_or_only_distrusted_recommenders_gives_none():
    assert recommendation_score([], []) is None
    assert recommendation_score([0.9], [0.0]) is None


@fast
@given(st.lists(st.tuples(unit, st.floats(0.01, 1.0)), min_size=1, max_size=10))
def test_recommendation_between_lowest_and_highest_rating(pairs):
    ratings, weights = zip(*pairs)
    score = recommendation_score(ratings, weights)
    assert min(ratings) - 1e-12 <= score <= max(ratings) + 1e-12


@pytest.mark.parametrize("rating", [-0.01, 1.01])
def test_rating_outside_unit_interval_is_rejected(rating):
    with pytest.raises(InvalidParameter, match=r"rating must lie in \[0, 1\]"):
        recommendation_score([rating], [0.5])


# --- combination -----------------------------------------------------------------------------

def test_combination_is_the_weighted_sum():
    assert combine_trust(0.6, 0.9, history_weight=0.75) == pytest.approx(0.75 * 0.6 + 0.25 * 0.9)


def test_missing_recommendation_leaves_history():
    assert combine_trust(0.6, None, history_weight=0.1) == 0.6


def test_evaluate_trust_runs_the_three_steps():
    scores = evaluate_trust([1, 1, 0], [0, 0, 0], [0.9], [1.0], history_weight=0.5)
    assert scores.history == pytest.approx(0.6)
    assert scores.recommendation == pytest.approx(0.9)
    assert scores.trust == pytest.approx(0.75)


def test_history_weight_outside_unit_interval_is_rejected():
    with pytest.raises(InvalidParameter, match="history_weight"):
        combine_trust(0.5, 0.5, history_weight=1.5)


# --- projection ------------------------------------------------------------------------------

def test_projection_end_points():
    projection = TrustProjection(gamma=3, d_min=0.1, d_max=0.9)
    assert projection(0.0) == pytest.approx(0.9)
    assert projection(1.0) == pytest.approx(0.1)
    assert projection(0.5) == pytest.approx(0.1 + 0.8 * (1 - 0.125))


gammas = st.floats(1.0, 8.0)


@fast
@given(gammas, unit, unit)
def test_projection_is_decreasing_and_bounded(gamma, a, b):
    projection = TrustProjection(gamma=gamma, d_min=0.2, d_max=0.8)
    low, high = sorted([a, b])
    assert 0.2 - 1e-12 <= projection(high) <= projection(low) <= 0.8 + 1e-12


@fast
@given(gammas, st.lists(unit, min_size=3, max_size=3, unique=True))
def test_projection_is_concave_so_steeper_near_high_trust(gamma, points):
    t1, t2, t3 = sorted(points)
    assume(min(t2 - t1, t3 - t2) > 1e-4)  # secants over tinier gaps are rounding noise
    d = TrustProjection(gamma=gamma)
    # secant slopes of a concave function decrease: the drop per unit of trust is larger on
    # [t2, t3] (higher trust) than on [t1, t2]
    left = (d(t2) - d(t1)) / (t2 - t1)
    right = (d(t3) - d(t2)) / (t3 - t2)
    assert right <= left + 1e-9


def test_projection_vectorizes():
    d = TrustProjection(gamma=2)
    assert d(np.array([0.0, 0.5, 1.0])) == pytest.approx([1.0, 0.75, 0.0])


@pytest.mark.parametrize("kwargs, message", [
    ({"gamma": 0.5}, "gamma must be >= 1"),
    ({"d_min": 0.9, "d_max": 0.5}, "d_min"),
    ({"d_max": 1.2}, "d_max"),
])
def test_projection_rejects_bad_parameters(kwargs, message):
    with pytest.raises(InvalidParameter, match=message):
        TrustProjection(**kwargs)


def test_projection_rejects_trust_outside_unit_interval():
    with pytest.raises(InvalidParameter, match="trust must lie in"):
        TrustProjection()(1.2)
