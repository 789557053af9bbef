"""Discrete Bayesian networks: BIC hill-climbing structure learning, CPTs, dependency rules.

Nadimpalli & Vatsavayi ("Detection and prevention of leaks in anonymized datasets") detects leaks in an anonymized table by learning a Bayesian
network over the released attributes and reading its conditional probability tables (CPTs): a CPT
entry ``P(child = y | parents = x) >= alpha`` is a *dependency rule* ``x -> y`` an adversary can use.

The paper used Weka's ICS search; we implement the score-based alternative the issue allows:
hill climbing over DAGs (add / remove / reverse one edge, with a tabu list to leave local optima)
maximising the BIC score

    BIC(G) = sum_i [ sum_jk N_ijk log(N_ijk / N_ij) - (log N / 2) (r_i - 1) q_i ]

where ``r_i`` is the number of values of node ``i``, ``q_i`` the number of configurations of its
parents, ``N_ijk`` the (weighted) count of rows with parents in configuration ``j`` and node ``i``
equal to its ``k``-th value. The score decomposes per family, so a move only re-scores the one or
two families it changes, and family scores are cached.

Speed: before searching, the rows are collapsed to their distinct value combinations with a
weight (the multiplicity). A released table has few distinct combinations -- generalized QIs and
categorical sensitive values -- so every family score is a ``bincount`` over a few thousand
weighted rows whatever the table size; 100,000 rows x 7 columns learn in a fraction of a second.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InsufficientData, InvalidParameter

__all__ = ["BayesNet", "conditional_probability_table", "encode_columns", "family_bic"]


# --------------------------------------------------------------------------------------------
# Encoding and compression


def encode_columns(frame):
    """Factorize every column of ``frame`` to integer codes (NULL is a value of its own).

    Returns ``(codes, categories)``: an ``(n_rows, n_columns)`` int64 array and, per column, the
    ``pandas.Index`` of its values in code order (sorted, NULL last).
    """
    codes = np.empty(frame.shape, dtype=np.int64)
    categories = {}
    for j, column in enumerate(frame.columns):
        col_codes, uniques = pd.factorize(frame[column], sort=True, use_na_sentinel=False)
        codes[:, j] = col_codes
        categories[column] = pd.Index(uniques)
    return codes, categories


def _compress_rows(codes, cardinalities, sample_weight):
    """Distinct rows of ``codes`` with their total weight.

    WHY: every score and CPT is a function of the weighted contingency table only, so searching on
    the distinct rows gives identical results at a fraction of the cost.
    """
    n_rows = codes.shape[0]
    if np.prod(cardinalities.astype(float)) < 2.0**62:
        radix = np.concatenate(([1], np.cumprod(cardinalities[::-1])[:-1]))[::-1]
        keys = codes @ radix
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    else:  # too many combinations for one int64 key: compare rows directly (slower, still exact)
        _, first, inverse = np.unique(codes, axis=0, return_index=True, return_inverse=True)
    weights = sample_weight if sample_weight is not None else np.ones(n_rows)
    totals = np.bincount(inverse.ravel(), weights=weights, minlength=first.size)
    return codes[first], totals


def _parent_configuration(codes, cardinalities, parents):
    """Mixed-radix index of each row's parent configuration, and the number of configurations."""
    config = np.zeros(codes.shape[0], dtype=np.int64)
    n_configs = 1
    for p in parents:
        config = config * cardinalities[p] + codes[:, p]
        n_configs *= int(cardinalities[p])
    return config, n_configs


def _family_counts(codes, weights, cardinalities, child, parents):
    """Counts ``N_jk`` as a ``(n_observed_configs, r_child)`` array, plus the observed configs."""
    config, n_configs = _parent_configuration(codes, cardinalities, parents)
    r_child = int(cardinalities[child])
    observed, config_index = np.unique(config, return_inverse=True)
    cell = config_index.ravel() * r_child + codes[:, child]
    counts = np.bincount(cell, weights=weights, minlength=observed.size * r_child)
    return counts.reshape(observed.size, r_child), observed, n_configs


def family_bic(codes, weights, cardinalities, child, parents):
    """BIC contribution of one family (``child`` given the tuple of column indices ``parents``)."""
    counts, _, n_configs = _family_counts(codes, weights, cardinalities, child, parents)
    totals = counts.sum(axis=1, keepdims=True)
    positive = counts > 0
    log_likelihood = np.sum(counts[positive] * np.log((counts / totals)[positive]))
    n_parameters = (int(cardinalities[child]) - 1) * n_configs
    return float(log_likelihood - 0.5 * np.log(weights.sum()) * n_parameters)


# --------------------------------------------------------------------------------------------
# Structure search


@dataclass(frozen=True)
class _Move:
    kind: str  # "add", "remove" or "reverse"
    parent: int
    child: int


def _reachable(adjacency):
    """Transitive closure of a boolean adjacency matrix (Warshall; the graphs have ~10 nodes)."""
    reach = adjacency.copy()
    for k in range(reach.shape[0]):
        reach |= reach[:, [k]] & reach[[k], :]
    return reach


def _candidate_moves(adjacency, max_parents, forbidden):
    """Every legal single-edge move from the DAG ``adjacency``: stays acyclic, within
    ``max_parents``, and never creates an edge ``u -> v`` with ``forbidden[u, v]``."""
    reach = _reachable(adjacency)
    n_parents = adjacency.sum(axis=0)
    n_nodes = adjacency.shape[0]
    for u in range(n_nodes):
        for v in range(n_nodes):
            if u == v:
                continue
            if adjacency[u, v]:
                yield _Move("remove", u, v)
                if n_parents[u] < max_parents and not forbidden[v, u]:
                    # Reversing u->v into v->u closes a cycle iff u still reaches v once u->v
                    # is gone (u ~> v -> u).
                    without = adjacency.copy()
                    without[u, v] = False
                    if not _reachable(without)[u, v]:
                        yield _Move("reverse", u, v)
            elif (
                not adjacency[v, u]
                and not forbidden[u, v]
                and n_parents[v] < max_parents
                and not reach[v, u]
            ):
                yield _Move("add", u, v)


class _FamilyScorer:
    """Caches family BIC scores keyed by (child, parent set)."""

    def __init__(self, codes, weights, cardinalities):
        self.codes, self.weights, self.cardinalities = codes, weights, cardinalities
        self.cache = {}

    def __call__(self, child, parents):
        key = (child, frozenset(parents))
        if key not in self.cache:
            self.cache[key] = family_bic(
                self.codes, self.weights, self.cardinalities, child, tuple(sorted(parents))
            )
        return self.cache[key]


def _move_delta(move, parent_sets, score):
    """Score change of ``move``: only the families whose parent set changes are re-scored."""
    u, v = move.parent, move.child
    if move.kind == "add":
        return score(v, parent_sets[v] | {u}) - score(v, parent_sets[v])
    if move.kind == "remove":
        return score(v, parent_sets[v] - {u}) - score(v, parent_sets[v])
    return (
        score(v, parent_sets[v] - {u})
        - score(v, parent_sets[v])
        + score(u, parent_sets[u] | {v})
        - score(u, parent_sets[u])
    )


def _apply(move, adjacency):
    u, v = move.parent, move.child
    if move.kind == "add":
        adjacency[u, v] = True
    elif move.kind == "remove":
        adjacency[u, v] = False
    else:
        adjacency[u, v], adjacency[v, u] = False, True


def hill_climb(
    score, n_nodes, max_parents, max_iter, forbidden=None, patience=10, tabu_length=20, tol=1e-9
):
    """Tabu-enhanced hill climbing from the empty graph; returns the best DAG's adjacency matrix.

    Each step applies the best legal move whose resulting graph is not among the last
    ``tabu_length`` graphs visited, even when it lowers the score -- plain greedy climbing stops at
    the first local optimum, and on Adult-like data that is often a wrong orientation of a
    v-structure (e.g. ``income -> workclass`` instead of ``workclass -> income <- marital``). The
    search stops after ``patience`` steps without a new best. The best graph is a local optimum:
    from it, no single move improves the score by more than ``tol``. Ties go to the first move in
    (kind, parent, child) enumeration order, so the result is deterministic.
    """
    adjacency = np.zeros((n_nodes, n_nodes), dtype=bool)
    if forbidden is None:
        forbidden = np.zeros((n_nodes, n_nodes), dtype=bool)
    current = sum(score(v, set()) for v in range(n_nodes))
    best, best_score, stall = adjacency.copy(), current, 0
    visited = deque([adjacency.tobytes()], maxlen=tabu_length)
    for _ in range(max_iter):
        step = _best_non_tabu_move(adjacency, max_parents, forbidden, score, visited)
        if step is None:
            break
        move, delta = step
        _apply(move, adjacency)
        current += delta
        visited.append(adjacency.tobytes())
        if current > best_score + tol:
            best, best_score, stall = adjacency.copy(), current, 0
        else:
            stall += 1
            if stall > patience:
                break
    return best


def _best_non_tabu_move(adjacency, max_parents, forbidden, score, visited):
    parent_sets = [set(np.flatnonzero(adjacency[:, v]).tolist()) for v in range(adjacency.shape[0])]
    best, best_delta = None, -np.inf
    for move in _candidate_moves(adjacency, max_parents, forbidden):
        delta = _move_delta(move, parent_sets, score)
        if delta > best_delta:
            trial = adjacency.copy()
            _apply(move, trial)
            if trial.tobytes() not in visited:
                best, best_delta = move, delta
    return None if best is None else (best, best_delta)


# --------------------------------------------------------------------------------------------
# Estimator


def _forbidden_edges(columns, tiers):
    """``forbidden[u, v]``: True when ``u`` sits in a later tier than ``v``."""
    rank = np.full(len(columns), -1)
    for level, tier in enumerate(tiers or []):
        unknown = [c for c in tier if c not in columns]
        if unknown:
            raise InvalidParameter(
                f"tiers name column(s) {unknown} that are not in the data",
                hint=f"tiers may only use the columns {list(columns)}",
            )
        rank[[columns.index(c) for c in tier]] = level
    constrained = rank >= 0
    return (rank[:, None] > rank[None, :]) & constrained[:, None] & constrained[None, :]


def _validate_frame(X, sample_weight):
    if not isinstance(X, pd.DataFrame):
        raise InvalidParameter(
            "the data must be a pandas DataFrame of discrete columns",
            hint="wrap the rows in pandas.DataFrame(rows, columns=[...])",
        )
    if len(X) == 0:
        raise InsufficientData(
            "cannot learn a network from an empty table", hint="check the source"
        )
    if sample_weight is None:
        return None
    weights = np.asarray(sample_weight, dtype=float)
    if weights.shape != (len(X),) or np.any(weights < 0) or not np.all(np.isfinite(weights)):
        raise InvalidParameter(
            "sample_weight must hold one finite, non-negative weight per row",
            hint=f"pass an array of length {len(X)}",
        )
    if weights.sum() <= 0:
        raise InsufficientData("all sample weights are zero", hint="give some rows positive weight")
    return weights


class BayesNet:
    """Bayesian network over discrete columns, learned by BIC hill climbing.

    Parameters
    ----------
    max_parents : int
        Upper bound on the in-degree of every node (bounds CPT size and search cost).
    max_iter : int
        Upper bound on the number of hill-climbing moves.
    tiers : list of lists of column names, or None
        Background knowledge on edge direction: an edge may not point from a later tier to an
        earlier one (columns in no tier are unconstrained). WHY: Markov-equivalent DAGs score the
        same under BIC, so without tiers the orientation of e.g. ``age - income`` is arbitrary and
        a QI -> SA rule may come out as SA -> QI; ``tiers=[qis, sensitive]`` orients edges the
        way the adversary reasons (from what it knows to what it wants).

    Attributes (after ``fit``)
    --------------------------
    columns_ : list of column names (the nodes).
    categories_ : dict column -> pandas.Index of its values, in code order.
    parents_ : dict column -> tuple of parent column names.
    edges_ : list of ``(parent, child)`` name pairs.
    score_ : BIC score of the learned DAG.
    n_rows_ : total weight of the data (row count when unweighted).
    """

    def __init__(self, max_parents=3, max_iter=200, tiers=None):
        self.max_parents = max_parents
        self.max_iter = max_iter
        self.tiers = tiers

    def fit(self, X, sample_weight=None):
        """Learn the structure and the CPTs of ``X`` (a DataFrame of discrete columns)."""
        self._validate_params()
        weights = _validate_frame(X, sample_weight)
        if X.shape[1] < 2:
            raise InvalidParameter(
                f"a Bayesian network needs at least 2 columns, got {X.shape[1]}",
                hint="pass two or more released attributes (scope => 'all' includes QIs and SAs)",
            )
        codes, self.categories_ = encode_columns(X)
        self.columns_ = list(X.columns)
        self._cardinalities = np.array([len(self.categories_[c]) for c in self.columns_])
        self._codes, self._weights = _compress_rows(codes, self._cardinalities, weights)
        score = _FamilyScorer(self._codes, self._weights, self._cardinalities)
        forbidden = _forbidden_edges(self.columns_, self.tiers)
        adjacency = hill_climb(
            score, len(self.columns_), self.max_parents, self.max_iter, forbidden
        )
        self._set_structure(adjacency, score)
        self.n_rows_ = float(self._weights.sum())
        return self

    def _validate_params(self):
        if not isinstance(self.max_parents, (int, np.integer)) or self.max_parents < 0:
            raise InvalidParameter(
                f"max_parents must be a non-negative integer, got {self.max_parents!r}",
                hint="use 2 or 3: larger values rarely help and make CPTs sparse",
            )
        if not isinstance(self.max_iter, (int, np.integer)) or self.max_iter < 0:
            raise InvalidParameter(
                f"max_iter must be a non-negative integer, got {self.max_iter!r}",
                hint="the default, 200, is far more than a 10-node search needs",
            )

    def _set_structure(self, adjacency, score):
        names = self.columns_
        self.adjacency_ = adjacency
        self.parents_ = {
            names[v]: tuple(names[u] for u in np.flatnonzero(adjacency[:, v]))
            for v in range(len(names))
        }
        self.edges_ = [(names[u], names[v]) for u, v in zip(*np.nonzero(adjacency))]
        self.score_ = sum(
            score(v, set(np.flatnonzero(adjacency[:, v]).tolist())) for v in range(len(names))
        )

    def _check_fitted(self):
        if not hasattr(self, "parents_"):
            raise InvalidParameter("this BayesNet is not fitted yet", hint="call fit(X) first")

    def cpt(self, child):
        """CPT of ``child`` given its parents: one row per observed parent configuration.

        Columns: the parent columns, then one probability column per value of ``child``, then
        ``support`` (weighted number of rows with that parent configuration).
        """
        self._check_fitted()
        return self._cpt_frame(child, self.parents_[child])

    def _family(self, child, parents):
        """``(column index, _family_counts of child given parents)``, by column name."""
        index = {c: i for i, c in enumerate(self.columns_)}
        return index, _family_counts(self._codes, self._weights, self._cardinalities,
                                     index[child], [index[p] for p in parents])

    def _cpt_frame(self, child, parents):
        index, (counts, observed, _) = self._family(child, parents)
        return _cpt_from_counts(
            counts, observed, parents, child, self.categories_, self._cardinalities, index
        )

    def dependency_rules(self, risk, min_support=1):
        """Rules ``parents = values -> child = value`` with ``P(value | values) >= risk``.

        Only nodes with parents yield rules (a root's marginal is not a dependency). Returns a
        DataFrame with columns ``parents`` (tuple of names), ``parent_values`` (tuple of values),
        ``child``, ``child_value``, ``probability``, ``support`` (rows matching parents and child)
        and ``parent_support`` (rows matching the parents), sorted by decreasing probability.
        """
        self._check_fitted()
        if risk is None or not 0 < risk <= 1:
            raise InvalidParameter(
                f"risk must be in (0, 1], got {risk!r}",
                hint="risk is the confidence a rule must reach, e.g. 0.9",
            )
        frames = [
            self._rules_for(child, parents, risk, min_support)
            for child, parents in self.parents_.items()
            if parents
        ]
        columns = [
            "parents",
            "parent_values",
            "child",
            "child_value",
            "probability",
            "support",
            "parent_support",
        ]
        rules = pd.concat([f for f in frames if len(f)] or [pd.DataFrame(columns=columns)])
        return rules.sort_values(["probability", "support"], ascending=False, ignore_index=True)

    def _rules_for(self, child, parents, risk, min_support):
        # Straight from the counts, not from the readable CPT frame, whose column labels (the
        # child's values) could collide with parent names.
        index, (counts, observed, _) = self._family(child, parents)
        support = counts.sum(axis=1)
        probs = counts / support[:, None]
        rows, cols = np.nonzero((probs >= risk - 1e-12) & (support[:, None] >= min_support))
        decoded = _decode_configurations(
            observed, parents, self.categories_, self._cardinalities, index
        )
        return pd.DataFrame(
            {
                "parents": [tuple(parents)] * rows.size,
                "parent_values": list(zip(*(decoded[p][rows] for p in parents))),
                "child": child,
                "child_value": self.categories_[child][cols],
                "probability": probs[rows, cols],
                "support": counts[rows, cols],
                "parent_support": support[rows],
            }
        )


def _decode_configurations(observed, parents, categories, cardinalities, index):
    """Parent values of each observed configuration index (undoes the mixed radix)."""
    remainder, decoded = observed, {}
    for p in reversed(parents):  # the last parent is the fastest digit
        r = int(cardinalities[index[p]])
        decoded[p] = np.asarray(categories[p][remainder % r], dtype=object)
        remainder = remainder // r
    return decoded


def _cpt_from_counts(counts, observed, parents, child, categories, cardinalities, index):
    """Turn family counts into a readable CPT DataFrame (parent values decoded)."""
    support = counts.sum(axis=1)
    frame = pd.DataFrame(counts / support[:, None], columns=list(categories[child]))
    decoded = _decode_configurations(observed, parents, categories, cardinalities, index)
    for position, p in enumerate(parents):
        frame.insert(position, p, decoded[p], allow_duplicates=True)
    frame["support"] = support
    return frame


def conditional_probability_table(X, child, parents=(), sample_weight=None):
    """Maximum-likelihood CPT of ``child`` given ``parents`` in ``X`` (a fixed structure).

    Same layout as :meth:`BayesNet.cpt`; useful to read the CPT of a hypothesised dependency.
    """
    weights = _validate_frame(X, sample_weight)
    columns = [*parents, child]
    missing = [c for c in columns if c not in X.columns]
    if missing:
        raise InvalidParameter(
            f"unknown column(s) {missing}", hint=f"choose among {list(X.columns)}"
        )
    codes, categories = encode_columns(X[columns])
    cardinalities = np.array([len(categories[c]) for c in columns])
    weights = weights if weights is not None else np.ones(len(X))
    index = {c: i for i, c in enumerate(columns)}
    counts, observed, _ = _family_counts(
        codes, weights, cardinalities, index[child], [index[p] for p in parents]
    )
    return _cpt_from_counts(
        counts, observed, list(parents), child, categories, cardinalities, index
    )
