"""Fusion-resilient releases (FRED: Kumar, Jaiswal & Gupta): choose k against a simulated fusion attack.

An enterprise release keeps the identifier (say, the name), suppresses the sensitive column
(salary) and k-anonymizes the other numeric attributes with MDAV. An insider joins the release
with auxiliary facts found elsewhere, keyed by the identifier, and estimates the sensitive value.
For each k we simulate that attack and measure protection and utility; the chosen k maximizes a
weighted sum of both among the ks that meet the thresholds.

Threat model of the simulation
------------------------------
* The attacker sees the whole release (identifier + microaggregated attributes) and the
  auxiliary table Q (rows matching nobody are useless to him and are only counted).
* He knows the true sensitive value of a small random sample of the rows (``known_fraction``,
  default 10%: colleagues who told him, a leaked payroll excerpt). He uses it to fit his model;
  for those rows his estimate is the true value. The same sample is used for every k, so the
  scan compares like with like.
* F(P', Q) -> P_hat: a pluggable estimator with ``fit(X, y)`` / ``predict(X)`` on the fused
  feature table: ``RegressionAttacker`` (a scikit-learn regressor), ``FuzzyRuleAttacker`` (a
  small table of fuzzy if-then rules, zero-order Sugeno inference, as in the paper's Fig. 2), or
  any scikit-learn regressor that accepts a DataFrame.
* The no-fusion baseline P' (the paper's "best knowledge before fusion") is the *same* attacker
  given the release alone, so the gain G = P o P' - P o P_hat measures exactly what Q adds.

Measures and their normalization (the paper leaves H's scale open; this is our reading)
---------------------------------------------------------------------------------------
* ``P o P_hat = (1/m) Tr((P - P_hat)^T (P - P_hat))`` on the sensitive values standardized with
  P's mean and population std. It is the attacker's mean squared error in units of the variance,
  so 0 = exact disclosure and 1 = no better than guessing the mean.
* ``C_DM(k) = sum_{|E|>=k} |E|^2 + sum_{|E|<k} |D||E|`` and ``U_k = 1/C_DM(k)`` (reported raw).
* H puts both terms on one scale, the paper's solution space (see ``objective``): protection
  ``min(P o P_hat, 1)`` and utility ``|D| / C_DM(k)`` are each rescaled to [0, 1] over the
  admissible ks (all ks when none is admissible), then ``H = w_p * protection' + w_u * utility'``.
  (Until 0.1.0 the terms were unscaled: 1/k fell by 0.47 between k=2 and 30 while protection
  moved by a few hundredths, so k=2 won even at 0.95 / 0.05.)
* Verdict (``protection_verdict``): when the best scanned k improves protection over k_from by
  less than 0.05 of the variance, the attacker still explains >= 25% of it, and fusing the
  auxiliary data makes him better by >= 0.05 of it (median over k of P o P' - P o P_hat), no k
  protects against this auxiliary data; ``fusion_resilient_view`` refuses to publish under that
  verdict.
* Thresholds: ``min_protection`` applies to P o P_hat (standardized), ``min_utility`` to the
  normalized utility |D|/C_DM(k).
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestRegressor
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder
from sklearn.utils.validation import check_is_fitted

from plpy_anon.core.errors import (
    InsufficientData,
    InvalidParameter,
    UndefinedObject,
    UnsupportedType,
)
from plpy_anon.core.k_anonymity import check_k
from plpy_anon.core.mdav import MDAV

LEVELS = ("low", "medium", "high")
MISSING_CATEGORY = "(unknown)"


# --------------------------------------------------------------------------- feature handling
def _numeric_columns(X):
    return [c for c in X.columns if pd.api.types.is_numeric_dtype(X[c])]


def _categorical_columns(X):
    return [c for c in X.columns if not pd.api.types.is_numeric_dtype(X[c])]


def _categories_as_objects(X):
    """Categorical columns as plain objects with missing facts spelled out (one-hot safe)."""
    out = X.copy()
    for column in _categorical_columns(X):
        out[column] = X[column].astype(object).where(X[column].notna(), MISSING_CATEGORY)
    return out


# --------------------------------------------------------------------------- attackers
class RegressionAttacker(RegressorMixin, BaseEstimator):
    """The default fusion attacker: a scikit-learn regressor on the fused features.

    Numeric features are median-imputed with a missing-indicator (a person without a web page is
    itself a fact); categorical ones are one-hot encoded with "(unknown)" for missing facts.

    Parameters
    ----------
    regressor : scikit-learn regressor or None
        None = ``RandomForestRegressor(n_estimators=60, min_samples_leaf=3)``: non-linear,
        robust to unscaled inputs, and fast enough for a scan of ~30 ks on a few thousand rows.
    random_state : int
        Seed of the default regressor.
    """

    def __init__(self, regressor=None, random_state=0):
        self.regressor = regressor
        self.random_state = random_state

    def fit(self, X, y):
        X = pd.DataFrame(X)
        regressor = self.regressor
        if regressor is None:
            regressor = RandomForestRegressor(
                n_estimators=60, min_samples_leaf=3, random_state=self.random_state, n_jobs=1
            )
        encode = ColumnTransformer(
            [
                (
                    "numeric",
                    SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True),
                    _numeric_columns(X),
                ),
                ("categorical", OneHotEncoder(handle_unknown="ignore"), _categorical_columns(X)),
            ]
        )
        self.model_ = make_pipeline(encode, clone(regressor))
        self.model_.fit(_categories_as_objects(X), np.asarray(y, dtype=float))
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X):
        check_is_fitted(self, "model_")
        return self.model_.predict(_categories_as_objects(pd.DataFrame(X)))


def _validate_rules(rules):
    """Rules as (antecedents: dict column -> level/category, consequent level, weight)."""
    normalized = []
    for position, rule in enumerate(rules):
        antecedents = rule.get("if") if isinstance(rule, dict) else None
        consequent = rule.get("then") if isinstance(rule, dict) else None
        weight = rule.get("weight", 1.0) if isinstance(rule, dict) else None
        if not isinstance(antecedents, dict) or not antecedents:
            raise InvalidParameter(
                f"fuzzy rule #{position + 1} has no 'if' conditions: {rule!r}",
                hint='Write rules as {"if": {"title": "manager", "holdings": "high"}, '
                '"then": "high", "weight": 1}.',
            )
        if consequent not in LEVELS:
            raise InvalidParameter(
                f"fuzzy rule #{position + 1} concludes {consequent!r}",
                hint=f"'then' must be one of {', '.join(LEVELS)}.",
            )
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
            raise InvalidParameter(
                f"fuzzy rule #{position + 1} has weight {weight!r}",
                hint="Rule weights are positive numbers (1 = the paper's uniform weights).",
            )
        normalized.append((dict(antecedents), consequent, float(weight)))
    if not normalized:
        raise InvalidParameter("the fuzzy rule table is empty", hint="Give at least one rule.")
    return normalized


def default_rules(X, y):
    """A rule table an insider with domain knowledge would write, read off the known sample.

    Numeric attribute: three monotone rules (low -> low, medium -> medium, high -> high, or
    reversed when it falls with y), weighted by |Spearman correlation| with y. Categorical
    attribute: one rule per category concluding the level of the category's mean, weighted by the
    correlation ratio eta. (The paper weights its hand-written rules uniformly; generated rules
    would otherwise let uninformative attributes dilute the informative ones.)
    """
    y = pd.Series(np.asarray(y, dtype=float), index=X.index)
    low_cut, high_cut = y.quantile([1 / 3, 2 / 3])
    rules = []
    for column in _numeric_columns(X):
        rho = X[column].corr(y, method="spearman")
        if not np.isfinite(rho) or abs(rho) < 0.05:
            continue
        order = LEVELS if rho > 0 else LEVELS[::-1]
        rules += [
            {"if": {column: lvl}, "then": out, "weight": abs(rho)}
            for lvl, out in zip(LEVELS, order)
        ]
    for column in _categorical_columns(X):
        known = X[column].notna()
        means = y[known].groupby(X.loc[known, column].astype(object)).agg(["mean", "count"])
        if len(means) < 2 or y.var(ddof=0) == 0:
            continue
        between = (means["count"] * (means["mean"] - y[known].mean()) ** 2).sum() / known.sum()
        eta = float(np.sqrt(between / y[known].var(ddof=0)))
        for category, mean in means["mean"].items():
            level = "low" if mean < low_cut else "high" if mean > high_cut else "medium"
            rules.append({"if": {column: category}, "then": level, "weight": eta})
    return rules


def _triangular_memberships(values, low, high):
    """Memberships of low/medium/high: shoulders at the ends, a triangle in the middle.

    The three sets sum to 1 everywhere (a Ruspini partition), so no value is "unknown" unless it
    is missing (NaN -> 0 in every set).
    """
    if high <= low:
        position = np.full(len(values), 0.5)
    else:
        position = np.clip((values - low) / (high - low), 0.0, 1.0)
    memberships = {
        "low": np.clip(1 - 2 * position, 0, 1),
        "medium": 1 - np.abs(2 * position - 1),
        "high": np.clip(2 * position - 1, 0, 1),
    }
    missing = np.isnan(values)
    return {level: np.where(missing, 0.0, mu) for level, mu in memberships.items()}


class FuzzyRuleAttacker(RegressorMixin, BaseEstimator):
    """The paper's fuzzy-inference attacker, from a small rule table.

    Each rule is ``{"if": {column: level_or_category, ...}, "then": level, "weight": w}``.
    Numeric inputs have fuzzy sets low/medium/high over the range the attacker saw in his known
    sample; categorical inputs match crisply. A rule fires with ``w * min(memberships)``; the
    estimate is the firing-weighted mean of the output levels' centres (zero-order Sugeno: with
    the symmetric output sets of Fig. 2 it matches Mamdani centroid defuzzification up to the
    overlap of the sets). Output levels are the terciles of the known sample, centred on their
    medians (the 1/6, 1/2 and 5/6 quantiles), which follows skewed salaries better than the
    paper's equal-width thirds. A column absent from X or a missing fact makes the conditions on
    it fail (membership 0), so rules about Q cannot fire when Q is withheld. When no rule fires,
    the estimate is the known sample's mean.

    Parameters
    ----------
    rules : list of dict or None
        None = ``default_rules`` read off the known sample in ``fit``.
    """

    def __init__(self, rules=None):
        self.rules = rules

    def fit(self, X, y):
        X = pd.DataFrame(X)
        y = np.asarray(y, dtype=float)
        if len(y) < 2:
            raise InsufficientData(
                "the fuzzy attacker needs at least 2 known sensitive values",
                hint="Raise known_fraction.",
            )
        rules = self.rules if self.rules is not None else default_rules(X, y)
        self.rules_ = _validate_rules(rules) if rules else []
        self.centers_ = dict(zip(LEVELS, np.quantile(y, [1 / 6, 1 / 2, 5 / 6])))
        self.fallback_ = float(y.mean())
        self.ranges_ = {c: (float(X[c].min()), float(X[c].max())) for c in _numeric_columns(X)}
        self._check_numeric_levels()
        self.n_features_in_ = X.shape[1]
        return self

    def _check_numeric_levels(self):
        for antecedents, _, _ in self.rules_:
            for column, level in antecedents.items():
                if column in self.ranges_ and level not in LEVELS:
                    raise InvalidParameter(
                        f"fuzzy rule on numeric column {column!r} uses level {level!r}",
                        hint=f"Numeric columns take one of {', '.join(LEVELS)}.",
                    )

    def _membership(self, X, column, level):
        if column not in X.columns:
            return np.zeros(len(X))
        if column in self.ranges_:
            values = X[column].to_numpy(dtype=float)
            return _triangular_memberships(values, *self.ranges_[column])[level]
        return (X[column].astype(object) == level).to_numpy(dtype=float)

    def predict(self, X):
        check_is_fitted(self, "rules_")
        X = pd.DataFrame(X)
        numerator = np.zeros(len(X))
        denominator = np.zeros(len(X))
        for antecedents, consequent, weight in self.rules_:
            strength = np.ones(len(X))
            for column, level in antecedents.items():
                strength = np.minimum(strength, self._membership(X, column, level))
            numerator += weight * strength * self.centers_[consequent]
            denominator += weight * strength
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(denominator > 0, numerator / denominator, self.fallback_)


ATTACKERS = {"regression": RegressionAttacker, "fuzzy": FuzzyRuleAttacker}


def make_attacker(attacker="regression", *, rules=None, random_state=0):
    """An attacker from its name ('regression', 'fuzzy') or any fit/predict regressor."""
    if hasattr(attacker, "fit") and hasattr(attacker, "predict"):
        return attacker
    if attacker == "regression":
        return RegressionAttacker(random_state=random_state)
    if attacker == "fuzzy":
        return FuzzyRuleAttacker(rules=rules)
    raise InvalidParameter(
        f"unknown attacker {attacker!r}",
        hint=f"Use one of {', '.join(ATTACKERS)}, or pass a scikit-learn regressor.",
    )


def draw_known_sample(n_rows, known_fraction, random_state=0):
    """Boolean mask of the rows whose sensitive value the attacker is assumed to know."""
    if not isinstance(known_fraction, (int, float)) or not 0 < known_fraction < 1:
        raise InvalidParameter(
            f"known_fraction must be in (0, 1), got {known_fraction!r}",
            hint="It is the share of sensitive values the attacker already knows, e.g. 0.1.",
        )
    n_known = round(known_fraction * n_rows)
    if n_known < 2:
        raise InsufficientData(
            f"known_fraction = {known_fraction} of {n_rows} rows leaves the attacker "
            f"{n_known} known values; he needs at least 2 to learn from",
            hint=f"Use known_fraction >= {2 / n_rows:.3g} or a larger table.",
        )
    known = np.zeros(n_rows, dtype=bool)
    known[np.random.default_rng(random_state).choice(n_rows, n_known, replace=False)] = True
    return known


def simulate_attack(attacker, features, sensitive, known):
    """F(features) -> P_hat: fit a fresh copy on the known rows, estimate all; known rows exact."""
    sensitive = np.asarray(sensitive, dtype=float)
    fitted = clone(attacker).fit(features[known], sensitive[known])
    estimate = np.asarray(fitted.predict(features), dtype=float)
    estimate[known] = sensitive[known]
    return estimate


# --------------------------------------------------------------------------- measures
def dissimilarity(P, P_hat, *, standardized=True):
    """``(1/m) Tr((P - P_hat)^T (P - P_hat))``, on P-standardized values by default.

    P and P_hat are m x n (or length-m vectors). Standardizing both with P's column means and
    population stds makes the measure unit-free (1 = the error of guessing each column's mean).
    """
    P = np.asarray(P, dtype=float).reshape(len(P), -1)
    P_hat = np.asarray(P_hat, dtype=float).reshape(len(P_hat), -1)
    if P.shape != P_hat.shape:
        raise InvalidParameter(
            f"P is {P.shape} but its estimate is {P_hat.shape}",
            hint="Both must describe the same rows and attributes.",
        )
    difference = P - P_hat
    if standardized:
        scale = P.std(axis=0)
        if not (scale > 0).all():
            raise InsufficientData(
                "a sensitive column is constant, so there is nothing to protect or standardize",
                hint="Pick a sensitive column with at least two distinct values.",
            )
        difference = difference / scale
    return float(np.trace(difference.T @ difference) / len(P))


def discernibility_cost(group_sizes, k):
    """``C_DM(k) = sum_{|E|>=k} |E|^2 + sum_{|E|<k} |D| |E|`` (|D| = total rows)."""
    sizes = np.asarray(group_sizes, dtype=np.int64)
    n_rows = sizes.sum()
    return int(np.where(sizes >= k, sizes**2, n_rows * sizes).sum())


def utility(group_sizes, k):
    """``U_k = 1 / C_DM(k)``."""
    return 1.0 / discernibility_cost(group_sizes, k)


def normalized_utility(group_sizes, k):
    """``|D| / C_DM(k)`` in (0, 1]: 1 = every row alone, 1/k = groups of exactly k."""
    return float(np.sum(group_sizes)) / discernibility_cost(group_sizes, k)


def _scaled(values, over):
    """``values`` mapped affinely so that ``values[over]`` spans [0, 1] (0 where they are equal)."""
    values = np.asarray(values, dtype=float)
    low, high = values[over].min(), values[over].max()
    if not high > low:
        return np.zeros_like(values)
    return (values - low) / (high - low)


def _candidates(mask, n):
    """The ks H is scaled over: ``mask`` (default, or when it admits none: all ``n``)."""
    over = np.ones(n, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    return over if over.any() else np.ones(n, dtype=bool)


def objective(protection, utility_normalized, w_protection=0.5, w_utility=0.5, candidates=None):
    """The paper's ``H_k = W1 * (P o P_hat_k) + W2 * U_k`` with both terms on the same scale.

    The paper adds P o P_hat (squared salary units: T_p = 3.075) to U_k = 1/C_DM(k)
    (T_u = 0.0018) unscaled and compares H only across its solution space (Fig. 8: the ks meeting
    both thresholds); its final formula, ``(1/m) Tr(. W1 .) + (1/m) Tr(U^T W2 U)``, did not survive
    the extraction. A weighted sum of quantities in unrelated units means what its weights say
    only once each term has one scale, and the only scale the paper's setting defines is that
    solution space. So (our reading) each term is rescaled to [0, 1] over the ``candidates``
    (boolean mask, default all ks; 0 = the candidates' worst, 1 = their best): protection
    ``min(P o P_hat, 1)`` (error beyond the mean guess is not protection), utility
    ``|D| / C_DM(k)`` (an affine image of the paper's U_k, so the same ranking). W1 and W2 are
    then the shares of the trade-off across the candidates, whatever the units or the k range: with
    0.95 / 0.05 the k that protects best wins unless it costs 19 times more utility, relative to
    the candidates' spread, than it buys protection. A term constant over the candidates adds 0.
    """
    protection = np.minimum(np.atleast_1d(np.asarray(protection, dtype=float)), 1.0)
    utility_normalized = np.atleast_1d(np.asarray(utility_normalized, dtype=float))
    over = _candidates(candidates, len(protection))
    return w_protection * _scaled(protection, over) + w_utility * _scaled(utility_normalized, over)


# --------------------------------------------------------------------------- the verdict
# Protection "improves with k" when the best scanned k buys at least this much of the sensitive
# column's variance over k_from; an attacker explaining at least R2_DISCLOSURE of the variance at
# every scanned k has disclosed something worth refusing to publish as fusion-resilient.
MIN_PROTECTION_CHANGE = 0.05
R2_DISCLOSURE = 0.25
# ... and the refusal blames the auxiliary data only when fusing it makes the attacker better by at
# least this much of the variance (median over the scanned ks of P o P' - P o P_hat, both clipped
# at 1): an attacker who is as strong without it learns from the release and his known sample,
# which is what k is for (ours, not the paper's: see docs/fusion.md, "The verdict").
MIN_FUSION_GAIN = 0.05
#: most simulations of the attack per k (each one trains the attacker twice per k)
MAX_REPEATS = 50
PROTECTED, UNPROTECTED, NOT_ASSESSED = "protected", "unprotected", "not assessed"
VERDICT_COLUMNS = ("verdict", "protection_change", "attacker_r2")


def protection_verdict(scan_table):
    """Whether generalization protects against this auxiliary data, with the figures.

    ``protection_change`` = the best protection over the scanned ks minus protection at k_from;
    ``attacker_r2`` = 1 - P o P_hat at that best k: the share of the sensitive variance the
    attacker explains whatever k is chosen (P o P_hat is his mean squared error in units of the
    variance, so 1 - P o P_hat is his R^2 over all rows); ``fusion_gain`` = the median over the
    scanned ks of ``min(P o P', 1) - min(P o P_hat, 1)``: how much the auxiliary data adds to
    the same attacker given the release alone. The verdict is "unprotected" when the change is
    below MIN_PROTECTION_CHANGE, the attacker still explains R2_DISCLOSURE or more, and the
    fusion gain is MIN_FUSION_GAIN or more: no k in the range protects and the auxiliary data
    (not the release) carries the attack. Without that gain the attacker is as strong without
    the auxiliary data -- what he knows comes from the release and his known sample, whose
    flat protection across k is not evidence against this auxiliary data (a fuzzy attacker with
    coarse low/medium/high rules on a 300-row table was refused so, +0.045 < 0.05, while the
    auxiliary data made him worse). A scan of a single k (k_from = k_to) cannot tell whether k
    helps: its verdict is "not assessed".
    """
    protection = np.minimum(scan_table["protection"].to_numpy(dtype=float), 1.0)
    without = np.minimum(scan_table["protection_no_fusion"].to_numpy(dtype=float), 1.0)
    ks = scan_table["k"].to_numpy()
    best = int(np.argmax(protection))
    change = float(protection[best] - protection[0])
    r2 = float(1.0 - protection[best])
    gain = float(np.median(without - protection))
    unprotected = (change < MIN_PROTECTION_CHANGE and r2 >= R2_DISCLOSURE
                   and gain >= MIN_FUSION_GAIN)
    return {
        "verdict": NOT_ASSESSED if len(ks) < 2 else UNPROTECTED if unprotected else PROTECTED,
        "k_from": int(ks[0]),
        "k_to": int(ks[-1]),
        "protection_from": float(protection[0]),
        "protection_to": float(protection[-1]),
        "best_k": int(ks[best]),
        "protection_best": float(protection[best]),
        "protection_change": change,
        "attacker_r2": r2,
        "fusion_gain": gain,
        "min_protection_change": MIN_PROTECTION_CHANGE,
        "r2_disclosure": R2_DISCLOSURE,
        "min_fusion_gain": MIN_FUSION_GAIN,
    }


def describe_verdict(verdict):
    """The figures of a verdict in one sentence (for errors, warnings and docs)."""
    return (
        f"protection P o P_hat is {verdict['protection_from']:.3f} at k={verdict['k_from']} and "
        f"{verdict['protection_to']:.3f} at k={verdict['k_to']} (best {verdict['protection_best']:.3f}"
        f" at k={verdict['best_k']}): a change of {verdict['protection_change']:+.3f} "
        f"(< {verdict['min_protection_change']}), and the attacker's R^2 stays "
        f"{verdict['attacker_r2']:.3f} (>= {verdict['r2_disclosure']}), of which the auxiliary "
        f"data adds {verdict['fusion_gain']:.3f} (median P o P' - P o P_hat over k, "
        f">= {verdict['min_fusion_gain']})"
    )


def refuse_unprotected(verdict, *, accept_unprotected=False):
    """Raise InsufficientData (22000) under an "unprotected" verdict unless accepted."""
    if verdict["verdict"] != UNPROTECTED or accept_unprotected:
        return
    raise InsufficientData(
        "no k protects against this auxiliary data: " + describe_verdict(verdict),
        hint="The auxiliary data alone predicts the sensitive column, so a larger k does not "
        "help: withhold or coarsen the columns it predicts from, or publish anyway with "
        "accept_unprotected => true (recorded in the release's catalog row).",
        detail="protection is the attacker's mean squared error on the standardized sensitive "
        "values (1 = guessing the mean); R^2 = 1 - protection.",
    )


# --------------------------------------------------------------------------- the k scan
SCAN_COLUMNS = (
    "k",
    "n_groups",
    "protection",
    "protection_sd",
    "protection_no_fusion",
    "gain",
    "utility",
    "utility_normalized",
    "h",
    "admissible",
    "saturated",
)


@dataclass(frozen=True)
class FusionScan:
    """The per-k table (columns ``SCAN_COLUMNS``) and what the scan saw."""

    table: pd.DataFrame
    n_rows: int
    n_known: int
    n_auxiliary_rows: int
    n_auxiliary_matched: int
    n_auxiliary_unmatched: int
    attributes: list
    auxiliary_columns: list
    settings: dict = field(default_factory=dict)

    @property
    def verdict(self):
        return protection_verdict(self.table)

    @property
    def saturation(self):
        return saturation(self.table, self.settings.get("repeats", 1))

    def chosen_k(self):
        return choose_k(
            self.table, **{name: self.settings[name] for name in ("min_protection", "min_utility")},
            w_protection=self.settings["w_protection"], w_utility=self.settings["w_utility"],
            repeats=self.settings.get("repeats", 1),
        )


def _require_columns(frame, columns, what, table_name):
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UndefinedObject(
            f"{what} {', '.join(map(repr, missing))} not found in {table_name}",
            hint=f"Columns of {table_name}: {', '.join(map(str, frame.columns))}.",
        )


def require_unique_identifier(values, column, table_name):
    if values.isna().any():
        raise InvalidParameter(
            f"identifier {column!r} of {table_name} has {int(values.isna().sum())} NULL values",
            hint="Every row needs an identifier; filter the NULLs or choose another column.",
        )
    repeated = values[values.duplicated()].unique()
    if len(repeated):
        examples = ", ".join(map(repr, repeated[:3].tolist()))
        raise InvalidParameter(
            f"identifier {column!r} of {table_name} is not unique: "
            f"{len(repeated)} value{'s occur' if len(repeated) > 1 else ' occurs'} more than once "
            f"(e.g. {examples})",
            hint="Choose a unique column (a key) as identifier, or aggregate the rows per "
            "identifier first.",
        )


def validate_scan_parameters(
    n_rows, k_from, k_to, min_protection, min_utility, w_protection, w_utility
):
    """Raise the InvalidParameter / InsufficientData a user should see before any work is done."""
    for name, value in (("k_from", k_from), ("k_to", k_to)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InvalidParameter(f"{name} must be an integer, got {value!r}", hint="E.g. 2.")
    check_k(k_from, name="k_from")
    if k_to < k_from:
        raise InvalidParameter(
            f"the k range {k_from}..{k_to} is empty",
            hint="Use k_from <= k_to.",
        )
    if k_to > n_rows:
        raise InsufficientData(
            f"k_to = {k_to} exceeds the {n_rows} rows of the table",
            hint=f"Use k_to <= {n_rows}.",
        )
    for name, value in (("w_protection", w_protection), ("w_utility", w_utility)):
        if not np.isfinite(value) or value < 0:
            raise InvalidParameter(f"{name} must be >= 0, got {value}", hint="E.g. 0.5 and 0.5.")
    if w_protection + w_utility <= 0:
        raise InvalidParameter(
            "w_protection and w_utility are both 0", hint="Give at least one a positive weight."
        )
    if not 0 <= min_protection:
        raise InvalidParameter(
            f"min_protection must be >= 0, got {min_protection}",
            hint="It bounds P o P_hat on standardized values: 0 = none, 1 = mean-guess level.",
        )
    if not 0 <= min_utility <= 1:
        raise InvalidParameter(
            f"min_utility must be in [0, 1], got {min_utility}",
            hint="It bounds |D|/C_DM(k): 1/k for groups of exactly k.",
        )


def align_auxiliary(identifiers, auxiliary, auxiliary_identifier):
    """Q's rows in the order of ``identifiers`` (missing facts = NaN), plus match counts.

    Returns ``(aligned, n_matched, n_unmatched)``; Q rows matching no identifier are ignored.
    """
    keys = auxiliary[auxiliary_identifier]
    if keys.dtype != identifiers.dtype:
        # e.g. an integer row id against text: compare their text forms rather than fail.
        keys, identifiers = keys.astype(str), identifiers.astype(str)
    facts = auxiliary.drop(columns=[auxiliary_identifier]).set_axis(keys.to_numpy(), axis=0)
    matched = keys.isin(identifiers).to_numpy()
    aligned = facts.reindex(identifiers.to_numpy()).reset_index(drop=True)
    return aligned, int(matched.sum()), int((~matched).sum())


def _check_columns(
    table, auxiliary, identifier, sensitive, attributes, auxiliary_identifier, labels
):
    """The attribute list to anonymize, after checking every column the scan relies on."""
    table_label, auxiliary_label = labels
    _require_columns(table, [identifier, sensitive], "column", table_label)
    _require_columns(auxiliary, [auxiliary_identifier], "identifier", auxiliary_label)
    if attributes is None:
        attributes = [c for c in _numeric_columns(table) if c not in (identifier, sensitive)]
    attributes = list(attributes)
    _require_columns(table, attributes, "attribute", table_label)
    if not attributes or sensitive in attributes or identifier in attributes:
        raise InvalidParameter(
            f"the attributes to anonymize are {attributes!r}",
            hint="They must be at least one numeric column other than the identifier and the "
            "sensitive column.",
        )
    non_numeric = [c for c in attributes if not pd.api.types.is_numeric_dtype(table[c])]
    if non_numeric:
        raise UnsupportedType(
            f"MDAV needs numeric attributes; not numeric: {', '.join(non_numeric)}",
            hint="Leave them out of attributes or encode them as numbers.",
        )
    _check_sensitive(table[sensitive], sensitive)
    require_unique_identifier(table[identifier], identifier, table_label)
    require_unique_identifier(auxiliary[auxiliary_identifier], auxiliary_identifier,
                              auxiliary_label)  # fmt: skip
    return attributes


def _check_sensitive(values, sensitive):
    if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        raise UnsupportedType(
            f"sensitive column {sensitive!r} is {values.dtype}, not numeric",
            hint="The fusion attack estimates a number (salary, hours); pick a numeric column.",
        )
    if values.isna().any():
        raise InsufficientData(
            f"sensitive column {sensitive!r} has {int(values.isna().sum())} NULL values",
            hint="Filter or impute them before the scan.",
        )
    if values.nunique() < 2:
        raise InsufficientData(
            f"sensitive column {sensitive!r} holds a single value; there is nothing to protect",
            hint="Pick a sensitive column with at least two distinct values.",
        )


def _check_rule_columns(attacker, available):
    if isinstance(attacker, FuzzyRuleAttacker) and attacker.rules is not None:
        used = {c for rule in _validate_rules(attacker.rules) for c in rule[0]}
        _require_columns(pd.DataFrame(columns=available), sorted(used, key=str),
                         "fuzzy rule column", "the release or the auxiliary table")  # fmt: skip


def measure_k(k, attributes_table, facts, P, attacks):
    """One row of the scan: MDAV at k, then each of ``attacks`` (attacker, known rows) with and
    without the auxiliary facts; protection is their mean, ``protection_sd`` their spread."""
    mdav = MDAV(k=k)
    release = mdav.fit_transform(attributes_table)
    fused = pd.concat([release, facts], axis=1)
    protection = [dissimilarity(P, simulate_attack(a, fused, P, known)) for a, known in attacks]
    alone = [dissimilarity(P, simulate_attack(a, release, P, known)) for a, known in attacks]
    return {
        "k": k,
        "n_groups": len(mdav.group_sizes_),
        "protection": float(np.mean(protection)),
        "protection_sd": float(np.std(protection, ddof=1)) if len(attacks) > 1 else 0.0,
        "protection_no_fusion": float(np.mean(alone)),
        "utility": utility(mdav.group_sizes_, k),
        "utility_normalized": normalized_utility(mdav.group_sizes_, k),
    }


def fusion_scan(
    table,
    auxiliary,
    *,
    identifier,
    sensitive,
    attributes=None,
    auxiliary_identifier=None,
    k_from=2,
    k_to=30,
    attacker="regression",
    rules=None,
    known_fraction=0.1,
    min_protection=0.0,
    min_utility=0.0,
    w_protection=0.5,
    w_utility=0.5,
    random_state=0,
    repeats=5,
    labels=("the table", "the auxiliary table"),
):
    """Simulate the fusion attack on the MDAV release for each k in ``k_from..k_to``.

    The attack is simulated ``repeats`` times, each with its own known sample and attacker seed
    (``random_state``, ``random_state + 1``, ...): one simulation's protection moves by as much
    between seeds as between neighbouring ks, and a k chosen on one is chosen on noise.

    ``attributes`` default to every numeric column but the identifier and the sensitive one.
    ``labels`` name the two tables in error messages. Returns a ``FusionScan`` whose table has
    one row per k (see ``SCAN_COLUMNS``).
    """
    auxiliary_identifier = auxiliary_identifier or identifier
    attributes = _check_columns(table, auxiliary, identifier, sensitive, attributes,
                                auxiliary_identifier, labels)  # fmt: skip
    validate_scan_parameters(
        len(table), k_from, k_to, min_protection, min_utility, w_protection, w_utility
    )
    attacker_name = attacker if isinstance(attacker, str) else type(attacker).__name__
    if isinstance(repeats, bool) or not isinstance(repeats, (int, np.integer)) or \
            not 1 <= repeats <= MAX_REPEATS:
        raise InvalidParameter(f"repeats must be an integer in 1..{MAX_REPEATS}, got {repeats!r}",
                               hint="5 (the default) estimates the spread of the protection.")
    attackers = [make_attacker(attacker, rules=rules, random_state=random_state + r)
                 for r in range(repeats)]
    table = table.reset_index(drop=True)
    facts, n_matched, n_unmatched = align_auxiliary(
        table[identifier], auxiliary, auxiliary_identifier
    )
    facts = facts.rename(columns={c: f"{c}_aux" for c in facts.columns if c in attributes})
    _check_rule_columns(attackers[0], attributes + list(facts.columns))
    P = table[sensitive].to_numpy(dtype=float)
    attacks = [(a, draw_known_sample(len(table), known_fraction, random_state + r))
               for r, a in enumerate(attackers)]

    scan = pd.DataFrame(
        [measure_k(k, table[attributes], facts, P, attacks) for k in range(k_from, k_to + 1)]
    )
    scan["gain"] = scan["protection_no_fusion"] - scan["protection"]
    scan["admissible"] = (scan["protection"] >= min_protection) & (
        scan["utility_normalized"] >= min_utility
    )
    scan["h"] = objective(scan["protection"], scan["utility_normalized"], w_protection, w_utility,
                          candidates=scan["admissible"].to_numpy())  # fmt: skip
    scan["saturated"] = saturated(scan, repeats)
    return FusionScan(
        table=scan[list(SCAN_COLUMNS)],
        n_rows=len(table),
        n_known=int(attacks[0][1].sum()),
        n_auxiliary_rows=len(auxiliary),
        n_auxiliary_matched=n_matched,
        n_auxiliary_unmatched=n_unmatched,
        attributes=attributes,
        auxiliary_columns=list(facts.columns),
        settings={
            "attacker": attacker_name,
            "known_fraction": known_fraction,
            "min_protection": min_protection,
            "min_utility": min_utility,
            "w_protection": w_protection,
            "w_utility": w_utility,
            "random_state": random_state,
            "repeats": repeats,
        },
    )


def _closest_candidates(scan_table, min_protection, min_utility, count=3):
    """The ks whose summed relative shortfall below the two thresholds is smallest."""
    protection_short = np.maximum(0, min_protection - scan_table["protection"]) / max(
        min_protection, 1e-12
    )
    utility_short = np.maximum(0, min_utility - scan_table["utility_normalized"]) / max(
        min_utility, 1e-12
    )
    order = np.argsort((protection_short + utility_short).to_numpy(), kind="stable")
    return scan_table.iloc[order[:count]]


def protection_trend(scan_table):
    """``(slope, standard error)`` of the least-squares line of protection on log k over the
    scanned ks (protection clipped at 1, as ``objective`` uses it); the standard error comes
    from the ks' scatter around the line, so it holds the simulations' noise and whatever the
    line does not follow. ``(0.0, 0.0)`` with fewer than three ks."""
    return _trend_line(scan_table)[:2]


def _trend_line(scan_table):
    """:func:`protection_trend` and the line's protection at each scanned k."""
    protection = np.minimum(scan_table["protection"].to_numpy(dtype=float), 1.0)
    centred = np.log(scan_table["k"].to_numpy(dtype=float))
    centred -= centred.mean()
    if protection.size < 3:
        return 0.0, 0.0, np.full(protection.size, protection.mean() if protection.size else 0.0)
    slope = float(centred @ (protection - protection.mean()) / (centred @ centred))
    line = protection.mean() + slope * centred
    residual = protection - line
    se = float(np.sqrt(residual @ residual / (protection.size - 2) / (centred @ centred)))
    return slope, se, line


def _simulated(scan_table, repeats):
    """Whether the table's protections are means of simulations whose spread was measured."""
    return repeats > 1 and "protection_sd" in scan_table and \
        bool((scan_table["protection_sd"].fillna(0) > 0).any())


#: the window of the protection curve's running mean: the ks within this distance in log k
#: (k / 1.28 .. k * 1.28). MDAV releases at neighbouring ks protect alike, and one k's mean of five
#: simulations moves by as much as the protection rises from k = 2 to 30 on Adult.
SMOOTHING_WINDOW = 0.25
#: the saturation point is where the smoothed protection has bought this share of the gain the
#: scanned range buys over k_from: on a saturating curve still a steep part, where noise moves the
#: crossing little; higher shares fall where it flattens and follow the seed (Adult, five seeds:
#: 0.75 -> 17..24, 0.5 -> 7..9; docs/fusion.md)
SATURATION_SHARE = 0.5
#: a range whose smoothed protection gains less than this share of the sensitive variance over
#: k_from buys nothing worth a larger k (a practical floor beside the line's noise test: the
#: maximum of a noisy curve lies above its start even where nothing changes)
MIN_SATURATION_GAIN = 0.02


#: standard errors of the smoothed protection within which a k is not told apart from the
#: saturation threshold (as the line's slope test counts two)
SATURATION_ERRORS = 2.0


def smoothed_protection_error(scan_table):
    """Standard error of :func:`smoothed_protection` at each k, from the scatter of the ks'
    protections around it: what moves one k against its neighbours (a simulation's known sample
    that makes the attacker better or worse at every k moves the whole curve, which a share of
    its gain does not see), over the square root of the ks averaged."""
    protection = np.minimum(scan_table["protection"].to_numpy(dtype=float), 1.0)
    log_k = np.log(scan_table["k"].to_numpy(dtype=float))
    near = np.abs(log_k[:, None] - log_k[None, :]) <= SMOOTHING_WINDOW + 1e-12
    residual = protection - smoothed_protection(scan_table)
    scatter = np.sqrt(residual @ residual / max(protection.size - 1, 1))
    return scatter / np.sqrt(near.sum(axis=1))


def smoothed_protection(scan_table):
    """Protection (clipped at 1) averaged over the ks within SMOOTHING_WINDOW in log k of each k."""
    protection = np.minimum(scan_table["protection"].to_numpy(dtype=float), 1.0)
    log_k = np.log(scan_table["k"].to_numpy(dtype=float))
    near = np.abs(log_k[:, None] - log_k[None, :]) <= SMOOTHING_WINDOW + 1e-12
    return (near * protection[None, :]).sum(axis=1) / near.sum(axis=1)


def _saturation_point(scan_table, repeats):
    """``(index, plateau, threshold, flat)``: the smallest admissible k whose protection reaches
    the threshold, the plateau (best protection reachable among the admissible ks) and whether
    protection is flat (then the first admissible k, whose protection is the threshold).

    Measured spread (``repeats`` > 1): flat when the line of protection on log k has a slope
    within two standard errors of 0 (:func:`protection_trend`) or the smoothed curve gains less
    than MIN_SATURATION_GAIN over k_from; otherwise on the smoothed curve
    (:func:`smoothed_protection`) the plateau is its best admissible value and the threshold
    k_from's value plus SATURATION_SHARE of the gain up to the plateau. Every quantity is a mean
    over many ks, so the point moves little between re-runs, unlike where one k's noisy mean
    first crosses a plateau. Without a measured spread (one simulation, exact protections): the
    most protective admissible k itself."""
    protection = np.minimum(scan_table["protection"].to_numpy(dtype=float), 1.0)
    over = _candidates(scan_table["admissible"].to_numpy(dtype=bool), len(protection))
    first = int(np.flatnonzero(over)[0])
    if not _simulated(scan_table, repeats):
        best = int(np.flatnonzero(over)[np.argmax(protection[over])])
        return best, float(protection[best]), float(protection[best]), False
    slope, se = protection_trend(scan_table)
    if abs(slope) <= 2 * se:
        return first, float(protection[over].mean()), float(protection[first]), True
    smooth = smoothed_protection(scan_table)
    plateau = float(smooth[over].max())
    start = float(smooth[first])
    if plateau - start < MIN_SATURATION_GAIN:
        return first, plateau, start, True
    threshold = start + SATURATION_SHARE * max(plateau - start, 0.0)
    reached = np.flatnonzero(over & (smooth >= threshold - 1e-12))
    return int(reached[0]), plateau, threshold, False


def saturated(scan_table, repeats=1):
    """Per k: whether it lies past the point where more k stops paying: the ks from the
    saturation point on (:func:`saturation`); every k when protection is flat; with no spread
    measured, the most protective admissible k only."""
    index, _, _, flat = _saturation_point(scan_table, repeats)
    flags = np.zeros(len(scan_table), dtype=bool)
    if flat:
        flags[:] = True
    elif _simulated(scan_table, repeats):
        flags[index:] = True
    else:
        flags[index] = True
    return flags


def saturation(scan_table, repeats=1):
    """Where more k stops buying protection: ``k``, the saturation point
    (:func:`_saturation_point`; on a saturating curve the ks after it buy less protection per
    step of log k and cost utility), its protection, the ``plateau`` and the ``margin`` (plateau minus
    the threshold reached at k), the most protective admissible k and its protection, whether
    protection is flat (``flat``: every k saturated), whether the point lies inside the
    range (``inside_range``: k < k_to), the ks the point could fall on within the simulations'
    noise (``k_band``, :func:`_saturation_band`) and whether the data determine it
    (``determined``: each end of that band lies within one smoothing window's width of the
    point, a factor e^(2 · SMOOTHING_WINDOW) in k; otherwise re-runs with other known samples
    choose anywhere in it, and more simulations per k or more rows narrow it)."""
    protection = np.minimum(scan_table["protection"].to_numpy(dtype=float), 1.0)
    ks = scan_table["k"].to_numpy()
    over = _candidates(scan_table["admissible"].to_numpy(dtype=bool), len(ks))
    index, plateau, threshold, flat = _saturation_point(scan_table, repeats)
    best = int(np.flatnonzero(over)[np.argmax(protection[over])])
    band = _saturation_band(scan_table, repeats, index, threshold, flat)
    return {
        "k": int(ks[index]),
        "protection": float(protection[index]),
        "plateau": plateau,
        "margin": float(plateau - threshold),
        "most_protective_k": int(ks[best]),
        "protection_best": float(protection[best]),
        "flat": bool(flat),
        "inside_range": bool(ks[index] < ks[-1]),
        "k_band": band,
        "determined": bool(flat or max(np.log(band[1] / ks[index]), np.log(ks[index] / band[0]))
                           <= 2 * SMOOTHING_WINDOW + 1e-12),
    }


def _saturation_band(scan_table, repeats, index, threshold, flat):
    """``[earliest, latest]``: the admissible ks the saturation point could fall on within the
    simulations' noise: the first whose smoothed protection plus SATURATION_ERRORS standard
    errors reaches the threshold, and the first whose smoothed protection minus them does (the
    last k when none does). The point itself when protection is flat or no spread was
    measured."""
    ks = scan_table["k"].to_numpy()
    if flat or not _simulated(scan_table, repeats):
        return [int(ks[index]), int(ks[index])]
    over = _candidates(scan_table["admissible"].to_numpy(dtype=bool), len(ks))
    smooth = smoothed_protection(scan_table)
    noise = SATURATION_ERRORS * smoothed_protection_error(scan_table)
    early = np.flatnonzero(over & (smooth + noise >= threshold - 1e-12))
    late = np.flatnonzero(over & (smooth - noise >= threshold - 1e-12))
    return [int(ks[min(early[0], index)]) if early.size else int(ks[index]),
            int(ks[max(late[0], index)]) if late.size else int(ks[np.flatnonzero(over)[-1]])]


def choose_k(scan_table, *, min_protection, min_utility, w_protection=0.5, w_utility=0.5,
             repeats=1):
    """The admissible k of the best H among the ks up to saturation.

    The paper raises k while it stays admissible and takes the best H among those candidates.
    Candidates past the saturation point (:func:`saturation`: the smallest admissible k where
    protection averaged over neighbouring ks has bought half of what the scanned range buys over
    k_from) are left out: beyond it a saturating protection buys less per step of log k than
    before it, and the point is a landmark every re-run finds again (each simulation's known
    sample moves protection at every k alike, which cancels in a share of the gain).

    Among the remaining candidates, with protections averaged over ``repeats`` simulations, H is
    computed from protection smoothed across those ks (a k's own mean moves between re-runs by as
    much as neighbouring ks differ): the least-squares line of protection on log k over
    k_from..saturation (:func:`protection_trend`). When protection is flat within the noise from
    k_from on, k_from is the saturation point and the only candidate. On a rising line, H (each
    term rescaled over the candidates) is best at an end: the saturation point when protection
    weighs at least as much as utility, k_from otherwise. With one simulation (no spread
    measured) or exact protections: the candidate maximizing H (ties: the larger k, as the
    paper's ``>=``).

    Raises InsufficientData naming the closest candidates when no k meets both thresholds.
    """
    admissible = scan_table["admissible"].to_numpy(dtype=bool)
    if admissible.any():
        ks = scan_table["k"].to_numpy()
        upto = int(np.flatnonzero(ks == saturation(scan_table, repeats)["k"])[0]) + 1
        within = scan_table.iloc[:upto]
        candidates = np.flatnonzero(admissible[:upto])
        h = scan_table["h"].to_numpy(dtype=float)[:upto]
        if _simulated(scan_table, repeats):
            # two ks: the line through them is their own protections
            line = _trend_line(within)[2] if upto > 2 else within["protection"].clip(upper=1.0)
            h = objective(line, within["utility_normalized"], w_protection, w_utility,
                          candidates=admissible[:upto])
        best = candidates[np.flatnonzero(h[candidates] == h[candidates].max())[-1]]
        return int(ks[best])
    closest = _closest_candidates(scan_table, min_protection, min_utility)
    described = "; ".join(
        f"k={int(r.k)} (protection {r.protection:.3f}, utility {r.utility_normalized:.4f})"
        for r in closest.itertuples()
    )
    best = closest.iloc[0]
    raise InsufficientData(
        f"no k in {int(scan_table['k'].min())}..{int(scan_table['k'].max())} meets "
        f"min_protection = {min_protection} and min_utility = {min_utility}; "
        f"closest: {described}",
        hint=f"Lower min_protection to {best.protection:.3f} and min_utility to "
        f"{best.utility_normalized:.4f} to admit k={int(best.k)}, or widen the k range.",
        detail="protection is P o P_hat on standardized values; utility is |D|/C_DM(k).",
    )


def fusion_release(table, *, identifier, sensitive, attributes, k):
    """The release P'_k: identifier kept, attributes microaggregated with MDAV, sensitive dropped."""
    release = MDAV(k=k).fit_transform(table[list(attributes)])
    release.insert(0, identifier, table[identifier].to_numpy())
    return release


def fusion_resilient_release(table, auxiliary, **scan_options):
    """Scan, choose k, build the release: returns ``(release, k, scan)``."""
    scan = fusion_scan(table, auxiliary, **scan_options)
    k = scan.chosen_k()
    release = fusion_release(
        table.reset_index(drop=True),
        identifier=scan_options["identifier"],
        sensitive=scan_options["sensitive"],
        attributes=scan.attributes,
        k=k,
    )
    return release, k, scan
