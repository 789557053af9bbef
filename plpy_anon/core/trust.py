"""Trust of a data requester, and its projection onto a degree of anonymisation.

The paper evaluates trust in three steps -- (1) from the provider's own history with the
requester, (2) from recommendations by others, (3) a combination of both -- and then maps trust
``T`` to the degree of anonymisation ``D`` of the whole table with a decreasing, concave "trust
projection". Its formulas were lost in extraction; the readings implemented here are:

* **History** -- the beta-reputation estimate (Josang & Ismail, 2002): with ``r`` good and ``s``
  bad outcomes, trust is the mean of Beta(r + 1, s + 1), ``(r + 1) / (r + s + 2)``. Each outcome
  is weighted by ``0.5 ** (age / half_life)`` so that old behaviour fades (time decay); outcomes
  may be fractional (0.7 = "mostly good"), counting 0.7 good and 0.3 bad. No history gives 0.5.
* **Recommendations** -- the mean of the ratings weighted by each recommender's own trust, so a
  distrusted recommender barely counts. No recommendation (or only weight 0) gives ``None``.
* **Combination** -- ``T = w_h * history + w_r * recommendation`` with ``w_h + w_r = 1``
  (``history_weight`` configurable); without recommendations, ``T = history``.
* **Projection** -- ``D = d_min + (d_max - d_min) * (1 - T ** gamma)`` with ``gamma >= 1``:
  decreasing, concave (``D'' = -(d_max - d_min) gamma (gamma - 1) T^(gamma-2) <= 0``) and steeper
  near high trust (``|D'| = (d_max - d_min) gamma T^(gamma-1)`` grows with ``T``), as the paper asks.
"""

from dataclasses import dataclass

import numpy as np

from plpy_anon.core.errors import InvalidParameter

_NEUTRAL_TRUST = 0.5  # the mean of the uniform Beta(1, 1) prior: "nothing known"


def _as_unit_interval_array(values, name):
    """Return ``values`` as a float array, raising if any is outside [0, 1] or not finite."""
    array = np.asarray(values, dtype=float).reshape(-1)
    bad = ~np.isfinite(array) | (array < 0.0) | (array > 1.0)
    if bad.any():
        raise InvalidParameter(
            f"{name} must lie in [0, 1]; got {float(array[bad][0])}",
            hint=f"rescale {name} to [0, 1] (1 = fully good / trusted, 0 = bad / untrusted)",
        )
    return array


def _check_positive(value, name):
    if not (np.isfinite(value) and value > 0):
        raise InvalidParameter(f"{name} must be a positive number; got {value!r}",
                               hint=f"pass {name} > 0")


def _check_unit(value, name):
    _as_unit_interval_array([value], name)


def decay_weights(ages, half_life):
    """Weight ``0.5 ** (age / half_life)`` of an observation ``age`` time units old.

    Ages are clipped at 0: an outcome recorded "in the future" (clock skew) counts as fresh.
    """
    _check_positive(half_life, "half_life")
    ages = np.clip(np.asarray(ages, dtype=float).reshape(-1), 0.0, None)
    return np.exp2(-ages / half_life)


def history_score(outcomes, ages=None, *, half_life=np.inf):
    """Beta-reputation trust from past interactions: ``(r + 1) / (r + s + 2)`` with decay.

    ``outcomes`` are in [0, 1] (1 = good, 0 = bad, fractions allowed); ``ages`` are how long ago
    each happened, in the unit of ``half_life`` (days, say). ``half_life=inf`` disables decay.
    """
    outcomes = _as_unit_interval_array(outcomes, "outcome")
    if ages is None:
        ages = np.zeros_like(outcomes)
    ages = np.asarray(ages, dtype=float).reshape(-1)
    if ages.shape != outcomes.shape:
        raise InvalidParameter(
            f"got {outcomes.size} outcomes but {ages.size} ages",
            hint="pass one age per outcome",
        )
    weights = np.ones_like(outcomes) if np.isinf(half_life) else decay_weights(ages, half_life)
    good = float(weights @ outcomes)
    bad = float(weights @ (1.0 - outcomes))
    return (good + 1.0) / (good + bad + 2.0)


def recommendation_score(ratings, recommender_trust):
    """Ratings averaged with the recommenders' own trust as weights; ``None`` without evidence."""
    ratings = _as_unit_interval_array(ratings, "rating")
    weights = _as_unit_interval_array(recommender_trust, "recommender trust")
    if ratings.shape != weights.shape:
        raise InvalidParameter(
            f"got {ratings.size} ratings but {weights.size} recommender trusts",
            hint="pass one recommender trust per rating",
        )
    total = weights.sum()
    if total == 0.0:
        return None
    return float(weights @ ratings / total)


def combine_trust(history, recommendation, *, history_weight=0.5):
    """``history_weight * history + (1 - history_weight) * recommendation``.

    Without a recommendation score (``None``) the history score is the trust: an absent opinion
    must not pull trust towards any value.
    """
    _check_unit(history_weight, "history_weight")
    _check_unit(history, "history score")
    if recommendation is None:
        return float(history)
    _check_unit(recommendation, "recommendation score")
    return float(history_weight * history + (1.0 - history_weight) * recommendation)


@dataclass(frozen=True)
class TrustScores:
    """The three numbers ``anon.trust`` reports."""

    history: float
    recommendation: float | None
    trust: float


def evaluate_trust(outcomes=(), ages=(), ratings=(), recommender_trust=(), *,
                   half_life=np.inf, history_weight=0.5):
    """All three steps of the paper's trust evaluation for one requester."""
    history = history_score(outcomes, ages, half_life=half_life)
    recommendation = recommendation_score(ratings, recommender_trust)
    trust = combine_trust(history, recommendation, history_weight=history_weight)
    return TrustScores(history=history, recommendation=recommendation, trust=trust)


@dataclass(frozen=True)
class TrustProjection:
    """``D = d_min + (d_max - d_min) * (1 - T ** gamma)``: trust to degree of anonymisation.

    ``gamma = 1`` is the straight line (concave in the weak sense); the larger ``gamma``, the
    more the degree stays high for middling trust and drops only near full trust.
    """

    gamma: float = 2.0
    d_min: float = 0.0
    d_max: float = 1.0

    def __post_init__(self):
        if not (np.isfinite(self.gamma) and self.gamma >= 1.0):
            raise InvalidParameter(
                f"gamma must be >= 1 for a concave projection; got {self.gamma!r}",
                hint="use gamma = 1 for a straight line, larger for a steeper drop near T = 1",
            )
        _check_unit(self.d_min, "d_min")
        _check_unit(self.d_max, "d_max")
        if self.d_min > self.d_max:
            raise InvalidParameter(
                f"d_min ({self.d_min}) exceeds d_max ({self.d_max})",
                hint="d_min is the degree at full trust and must not exceed d_max (trust 0)",
            )

    def __call__(self, trust):
        """The degree for ``trust`` (a scalar or an array, each in [0, 1])."""
        values = _as_unit_interval_array(trust, "trust")
        degree = self.d_min + (self.d_max - self.d_min) * (1.0 - values**self.gamma)
        return float(degree[0]) if np.ndim(trust) == 0 else degree.reshape(np.shape(trust))
