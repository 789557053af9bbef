"""Prioritized Mondrian (Xiong & Rangachari, "Towards application-oriented data
anonymization", section 4.4) with workload cut points (its future work).

:class:`PrioritizedMondrian` extends :class:`~plpy_anon.core.mondrian.Mondrian` only through its
two extension points, so the partitioning loop, the k / l checks and the speed of plain Mondrian
are unchanged (with no priorities, no target and no cut points it *is* plain Mondrian):

**Split attribute** (``_attribute_order``). For every partition and attribute i::

    O_i = Σ_j w_j · metric_j(i) / Σ_j w_j,   metric_j ∈ {spread, infogain, priority}

* ``spread``: the normalized spread inside the partition (the plain Mondrian criterion), in [0,1];
* ``priority``: the attribute's priority weight divided by the largest weight, in [0,1];
* ``infogain`` (only with ``target``): the paper's eq. 4.3 is the weighted entropy of the class
  label after the split. Reading chosen: the *gain* ``(H(P) − Σ_{P'} |P'|/|P| H(P')) / H(P)``, so
  that larger is better like the other two metrics and it lies in [0,1] (0 when the partition is
  pure); the split evaluated is the cut Mondrian would actually make on i.

``metric_weights`` are the w_j (default: spread 1, priority 1 when priorities are given, infogain
1 when a target is given). Attributes are tried best O_i first; attributes of spread 0 are never
tried, as in plain Mondrian.

**Cut point** (``_cut``: the median cut, or with ``split="utility"`` the cut of least information
loss, see :class:`~plpy_anon.core.mondrian.Mondrian`). A cut point of the workload (see
:mod:`plpy_anon.querylog.priorities`: ``left = {x <= t}`` or ``left = {x < t}``) becomes a code
boundary ``b``: ``left = {code <= b}``. Rule: on a numeric attribute, among the boundaries
adjacent to the partition's median code (the nearest one below and the nearest one at or above,
which are the most balanced ones since the left size is monotone in b), take the most balanced
*allowable* one (k, and l when asked); use it instead of the median cut when its left side holds
between ``1/2 − cut_tolerance`` and ``1/2 + cut_tolerance`` of the partition's rows. Otherwise the
median cut stands. Default tolerance 0.5: any allowable cut point is taken before any median cut,
so (with k alone; the two nearest boundaries are the most balanced ones) **no released class
straddles a cut point unless cutting it there would leave fewer than k rows on one side**: a final
class had no allowable cut on any attribute. A smaller tolerance trades that guarantee for balance
(0.25: a 25/75 split is accepted, a more lopsided one is not and the class may straddle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from plpy_anon.core.encoding import numeric_offset
from plpy_anon.core.errors import InvalidParameter, UndefinedObject
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.mondrian import Mondrian, _segment_bound, check_split
from plpy_anon.core.privacy_models import check_models
from plpy_anon.core.workload import (
    AllOf,
    ClassRegions,
    Condition,
    _as_numbers,
    _range_may_satisfy,
    evaluate_rows,
    is_number,
    normalize_weights,
)

METRICS = ("spread", "infogain", "priority")


class PrioritizedMondrian(Mondrian):
    """Mondrian whose split attribute follows priorities / information gain and whose cuts snap
    to the workload's predicate constants.

    Parameters
    ----------
    k, l, l_diversity, c, t : as :class:`Mondrian` (the same ``_allowable``: every cut, the
        snapped cut points included, keeps every asked privacy model on both sides).
    priorities : mapping column name -> weight >= 0 (not all 0), or None.
    metric_weights : mapping metric -> weight >= 0 over ``spread``, ``infogain``, ``priority``, or
        None for the defaults (module docstring).
    cut_points : mapping column name -> iterable of ``(threshold, left_inclusive)`` (a
        DataFrame with those columns works), or None.
    engine : as :class:`Mondrian` (the information gain runs on numpy).
    cut_tolerance : float in [0, 0.5]: how far from a balanced split a cut point may be (0.5, the
        default: any cut point k allows).
    split : ``"median"`` (default) or ``"utility"``, as :class:`Mondrian`. With no priorities,
        no information gain and no cut points, ``"utility"`` chooses attribute and cut by
        information loss exactly as plain Mondrian does; otherwise the attribute ranking and the
        cut points above stand and ``"utility"`` replaces only the median cut on the attribute
        tried (and the cut the information gain evaluates).

    Attributes (after :meth:`fit`)
    -------------------------------
    labels_, n_classes_ : as :class:`Mondrian`.
    priorities_ : dict column -> normalized weight (sum 1), or None.
    metric_weights_ : dict metric -> weight actually used.
    boundaries_ : dict column -> sorted code boundaries taken from the cut points.
    """

    def __init__(self, k=5, l=None, priorities=None, metric_weights=None, cut_points=None,
                 cut_tolerance=0.5, split="median", l_diversity="distinct", c=None, t=None,
                 engine="auto"):
        super().__init__(k=k, l=l, l_diversity=l_diversity, c=c, t=t, split=split, engine=engine)
        self.priorities = priorities
        self.metric_weights = metric_weights
        self.cut_points = cut_points
        self.cut_tolerance = cut_tolerance

    def check_parameters(self, names, has_target=False):
        """Validate priorities, metric weights, tolerance and split against the QI ``names``
        without any data (the database layer calls it before creating anything); :meth:`fit`
        calls it too."""
        self.priorities_ = (
            None if self.priorities is None else normalize_weights(dict(self.priorities), names)
        )
        self.metric_weights_ = self._resolve_metric_weights(has_target)
        self._check_tolerance()
        check_split(self.split)
        check_models(self.l, self.l_diversity, self.c, self.t)
        return self

    def fit(self, columns, sensitive=None, target=None, sensitive_ordered=False,
            sensitive_names=None):
        """Partition ``columns``; ``target``: class label per row for the information gain."""
        names = [c.name for c in columns]
        self.check_parameters(names, has_target=target is not None)
        self._target = None if target is None else _dense_target(target, len(columns[0].codes))
        self.boundaries_ = _boundaries(columns, self.cut_points)
        self._null_codes = [c.null_code for c in columns]
        self._priority_metric = None
        if self.priorities_ is not None:
            weights = np.array([self.priorities_[n] for n in names])
            self._priority_metric = weights / weights.max()
        self._level = None
        try:
            return super().fit(columns, sensitive, sensitive_ordered=sensitive_ordered,
                               sensitive_names=sensitive_names)
        finally:
            # the last level (row orders, codes) and the target are row-sized: not kept
            self._level = self._cand = self._target = None

    # ------------------------------------------------------------------ extension points
    def _spread_matrix(self, level, cand):
        # remember which partitions the ranking is about: the info gain needs their rows
        self._level, self._cand = level, cand
        return super()._spread_matrix(level, cand)

    def _attribute_order(self, spread):
        w = self.metric_weights_
        if w["priority"] == 0 and w["infogain"] == 0:
            return super()._attribute_order(spread)
        score = w["spread"] * spread
        if w["priority"] > 0:
            score = score + w["priority"] * self._priority_metric[None, :]
        if w["infogain"] > 0:
            score = score + w["infogain"] * self._information_gain(self._level, self._cand, spread)
        score = score / sum(w.values())
        # the partitioning loop stops at the first attribute of spread 0 in the ranking (plain
        # Mondrian ranks them last by construction): keep them last here too
        score = np.where(spread > 0, score, -np.inf)
        return np.argsort(-score, axis=1, kind="stable")

    def _compiled_supported(self):
        # the information gain evaluates cuts per attribute tried: it runs on numpy
        return super()._compiled_supported() and self.metric_weights_["infogain"] == 0

    def _compiled_ranking(self):
        w = self.metric_weights_
        if w["priority"] == 0:
            return None
        return self._priority_metric, w["spread"], w["priority"], sum(w.values())

    def _compiled_boundaries(self):
        return self.boundaries_, self.cut_tolerance

    def _renumber_rows(self, row_of):
        super()._renumber_rows(row_of)
        if self._target is not None:
            self._target = self._target[row_of]

    def _joint_utility(self):
        # priorities, information gain and cut points are stated intent: keep their attribute
        # ranking and cut points; split="utility" then only replaces the median cut
        w = self.metric_weights_
        return w["priority"] == 0 and w["infogain"] == 0 and not self.boundaries_

    def _cut(self, level, a, parts):
        cut = super()._cut(level, a, parts)
        boundaries = self.boundaries_.get(a)
        if boundaries is None or boundaries.size == 0:
            return cut
        starts, sizes = level.starts[parts], level.sizes[parts]
        order, codes = level.orders[a], self._codes[a]
        median_code = codes[order[starts + sizes // 2]].astype(np.int64)
        above = np.searchsorted(boundaries, median_code, side="left")
        best_left = np.zeros(parts.size, dtype=np.int64)
        best_gap = np.full(parts.size, np.iinfo(np.int64).max)
        for index in (above - 1, above):  # nearest boundary below the median, and at/above it
            exists = (index >= 0) & (index < boundaries.size)
            b = boundaries[np.clip(index, 0, boundaries.size - 1)]
            n_left = _segment_bound(order, codes, starts, starts + sizes, b + 1, strict=True)
            n_left = n_left - starts
            ok = exists & (n_left > 0) & (n_left < sizes)
            ok &= self._allowable(level, a, starts, sizes, n_left)
            gap = np.abs(2 * n_left - sizes)
            better = ok & (gap < best_gap)
            best_left = np.where(better, n_left, best_left)
            best_gap = np.where(better, gap, best_gap)
        close_enough = best_gap <= 2 * self.cut_tolerance * sizes
        return np.where(close_enough, best_left, cut)

    def _initial_groups(self, n_rows):
        """The workload's cells: the rows grouped by the side of every cut point they fall on
        (the *atoms* of each column: the intervals of its code order between its boundaries,
        which hold each queried value alone), so that a query's answer is a union of whole
        classes. Cells holding k rows and every asked model are groups; the rest are pooled by
        the atoms of all columns but one, the column whose atoms, once ignored, let the most of
        them form such cells (ties: the lower priority), then of all but two, and so on; the
        rows no cell holds form one group, or join the most pooled group that keeps the models
        (a whole cell only when no pooled group does; the whole table when no group does). A
        NULL is an atom of its own (it meets no predicate).

        Top-down cuts alone split a partition on one column at a time, and once a child is too
        small the cells below it mix; pooling the short cells instead keeps every large cell
        whole (on held-out mixed workloads over Adult, mean precision 0.85-0.89 ->
        0.91-0.93). Skipped with ``cut_tolerance`` < 0.5, which asks for balanced cuts."""
        columns = [a for a, b in self.boundaries_.items() if b.size]
        if not columns or self.cut_tolerance < 0.5:
            return None
        atoms = {}
        for a in columns:
            check_interrupts()
            atom = np.searchsorted(self.boundaries_[a], self._codes[a], side="left")
            if self._null_codes[a] is not None:   # NULL meets no predicate: an atom of its own
                atom[self._codes[a] == self._null_codes[a]] = self.boundaries_[a].size + 1
            atoms[a] = atom

        def cells(kept_columns, rows):
            check_interrupts()
            cell = np.zeros(rows.size, dtype=np.int64)
            if math.prod(self.boundaries_[a].size + 2 for a in kept_columns) < 2**62:
                # the atoms' mixed-radix number: one dense renumbering, the same cells in the
                # same (lexicographic) order as renumbering after each column
                for a in kept_columns:
                    cell = cell * (self.boundaries_[a].size + 2) + atoms[a][rows]
                cell = np.unique(cell, return_inverse=True)[1].ravel()
                return cell, int(cell.max()) + 1
            for a in kept_columns:
                check_interrupts()
                # dense after each column: the key never outgrows the number of rows
                cell = cell * (self.boundaries_[a].size + 2) + atoms[a][rows]
                cell = np.unique(cell, return_inverse=True)[1].ravel()
            return cell, int(cell.max()) + 1

        groups = np.full(n_rows, -1, dtype=np.int32)
        pending = np.arange(n_rows)
        n_groups, kept_by_group = 0, []            # columns whose atoms each group keeps
        kept = sorted(columns, key=lambda a: (-self._weight_of(a), a))
        while kept and pending.size:
            cell, n_cells = cells(kept, pending)
            whole = self._groups_satisfy(pending, cell, n_cells)[cell]
            new = np.unique(cell[whole], return_inverse=True)[1].ravel()
            groups[pending[whole]] = n_groups + new
            added = int(new.max()) + 1 if new.size else 0
            n_groups += added
            kept_by_group += [len(kept)] * added
            pending = pending[~whole]
            if len(kept) == 1 or not pending.size:
                break
            holds = []
            for a in kept:                         # kept is in priority order: ties drop the last
                cell, n_cells = cells([b for b in kept if b != a], pending)
                holds.append(int(self._groups_satisfy(pending, cell, n_cells)[cell].sum()))
            kept.pop(len(holds) - 1 - int(np.argmax(holds[::-1])))
        if pending.size:
            if self._groups_satisfy(pending, np.zeros(pending.size, dtype=np.int64), 1)[0]:
                groups[pending] = n_groups
                n_groups += 1
            else:
                # the most pooled groups (fewest columns kept) first, the largest among those;
                # (c, l), entropy l and t need not hold on a union: the first that keeps them
                size = np.bincount(groups[groups >= 0], minlength=n_groups)
                members = np.argsort(groups, kind="stable")[pending.size:]   # by group
                first = np.cumsum(size) - size
                for target in np.lexsort((-size, np.array(kept_by_group, dtype=np.int64))):
                    check_interrupts()
                    rows = np.concatenate(
                        [members[first[target]:first[target] + size[target]], pending])
                    if self._groups_satisfy(rows, np.zeros(rows.size, dtype=np.int64), 1)[0]:
                        groups[pending] = target
                        break
                else:
                    return None                # none does: start from the whole table
        return groups if n_groups > 1 else None

    def _weight_of(self, a):
        return 0.0 if self._priority_metric is None else float(self._priority_metric[a])

    # ------------------------------------------------------------------ information gain
    def _information_gain(self, level, cand, spread):
        """``(len(cand), A)`` normalized information gain of the cut Mondrian would make."""
        y = self._target
        n_labels = int(y.max()) + 1
        starts, sizes = level.starts[cand], level.sizes[cand]
        gain = np.zeros(spread.shape)
        for a in range(spread.shape[1]):
            check_interrupts()
            tried = np.flatnonzero(spread[:, a] > 0)
            if tried.size == 0:
                continue
            n_left = self._cut(level, a, cand[tried])
            # label counts by prefix sums over the attribute's layout
            onehot = np.zeros((level.orders[a].size + 1, n_labels), dtype=np.int64)
            onehot[1 + np.arange(level.orders[a].size), y[level.orders[a]]] = 1
            prefix = np.cumsum(onehot, axis=0)
            s, n = starts[tried], sizes[tried]
            total = prefix[s + n] - prefix[s]
            left = prefix[s + n_left] - prefix[s]
            gain[tried, a] = _normalized_gain(total, left, n_left > 0)
        return gain

    # ------------------------------------------------------------------ validation
    def _resolve_metric_weights(self, has_target):
        defaults = {
            "spread": 1.0,
            "priority": 1.0 if self.priorities_ is not None else 0.0,
            "infogain": 1.0 if has_target else 0.0,
        }
        if self.metric_weights is None:
            return defaults
        given = dict(self.metric_weights)
        unknown = sorted(set(given) - set(METRICS))
        if unknown:
            raise InvalidParameter(
                f"unknown metric(s) {', '.join(map(repr, unknown))} in metric_weights",
                hint=f"use the metrics {', '.join(METRICS)}",
            )
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0
            ):
                raise InvalidParameter(
                    f"metric weight {name!r} = {value!r} must be a finite number >= 0",
                    hint='e.g. {"spread": 1, "priority": 2}',
                )
        weights = {m: float(given.get(m, 0.0)) for m in METRICS}
        if weights["priority"] > 0 and self.priorities_ is None:
            raise InvalidParameter(
                "metric_weights gives 'priority' a weight but no priorities were given",
                hint="pass priorities, or set the 'priority' metric weight to 0",
            )
        if weights["infogain"] > 0 and not has_target:
            raise InvalidParameter(
                "metric_weights gives 'infogain' a weight but no target column was given",
                hint="pass target (the class label column), or set 'infogain' to 0",
            )
        if sum(weights.values()) <= 0:
            raise InvalidParameter(
                "all metric weights are zero", hint='give at least "spread" a positive weight'
            )
        return weights

    def _check_tolerance(self):
        t = self.cut_tolerance
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 0.5:
            raise InvalidParameter(
                f"cut_tolerance must be a number in [0, 0.5], got {t!r}",
                hint="0.25 accepts a cut point whose smaller side holds a quarter of the rows",
            )


@dataclass
class GuardedLearning:
    """What :func:`guard_learned` kept: the priorities (None: plain Mondrian's attribute choice)
    and cut points to release with, the columns whose cut points it left out, whether it left the
    priorities out, and on the training workload the per-column precision of plain Mondrian and
    of the kept release, the mean precision of both and, per column, the standard error of the
    kept release's mean gain over plain Mondrian (the margin it cleared)."""

    priorities: dict | None
    cut_points: dict
    dropped_cut_points: list
    dropped_priorities: bool
    plain_precision: pd.Series
    precision: pd.Series
    plain_mean: float
    mean: float
    standard_error: pd.Series
    fits: int


def guard_learned(columns, data: pd.DataFrame, queries, *, priorities, cut_points,
                  frequencies=None, k=5, tolerance=0.0, standard_errors=1.0, fit=None,
                  **model_params) -> GuardedLearning:
    """Learned priorities and cut points, kept only where they cost no queried column.

    ``columns``: the encoded QIs the release partitions; ``data``: their original values (named
    like ``columns``); ``queries``: the training workload's predicate trees over the QIs.
    Priorities and cut points read off a workload are a guess: one column's cut points spend the
    k rows of a class that the other columns' queries needed, and one column's boost widens the
    others' ranges. The promise is about the queries analysts will run, not only those learned
    from, so a release is *safe* when on every queried column the frequency-weighted mean of its
    per-query gain over plain Mondrian on the training workload stays at least
    ``standard_errors`` standard errors of that mean above ``-tolerance``: a gain that is mostly
    noise between the queries (or a tie reached by losing some queries and winning others) does
    not carry to queries not seen, and is refused. A column every query of which keeps plain
    Mondrian's precision has no error and stays safe; ``standard_errors=0`` asks only the means
    (safe on the training queries alone). Candidates, at most n + 4 fits for n columns with cut
    points: plain Mondrian (safe by definition); the learned priorities alone (the base when
    safe, else plain Mondrian is); all cut points with and without the priorities; then, when
    none of these with cut points is safe above the base, all but one column's with the base,
    each column left out in turn (one column's cut points often cost the others; with two
    columns these are each column's alone). The safe release of highest mean precision is
    kept: every column it answers clears the margin, hence also the means alone. The fits are
    plain and prioritized Mondrian's own (only what they are given changes), so the release
    built from the result is the one measured here. ``fit(priorities, cut_points) -> labels``,
    when given, replaces the fit of ``PrioritizedMondrian(k=k, **model_params)`` on
    ``columns`` (a release's own fit, with its sensitive column and target).
    """
    from plpy_anon.core import mondrian_jit

    score = WorkloadScore(data, queries, frequencies)
    fits = 0
    # the search's fits together (up to n + 4) are worth loading the compiled kernels for, where
    # one fit alone of this many rows is not (the later fits of the process then use them too)
    if len(data) * (len(cut_points or {}) + 4) >= mondrian_jit.COMPILED_FROM_ROWS:
        mondrian_jit.kernels()

    def measure(weights, cuts):
        nonlocal fits
        fits += 1
        if fit is not None:
            return score.precision(fit(weights, cuts))
        model = PrioritizedMondrian(k=k, priorities=weights, cut_points=cuts or None,
                                    **model_params)
        return score.precision(model.fit(columns).labels_)

    plain = measure(None, {})
    plain_mean = score.mean(plain)

    def margin(per_query):
        """Per column: the mean gain over plain Mondrian minus its allowed noise."""
        gain, error = score.column_gain(per_query, plain)
        return gain - standard_errors * error, error

    def safe(per_query):
        return bool((margin(per_query)[0] >= -tolerance - 1e-12).all())

    # (mean, priorities, cut points, per-query precision)
    safe_releases = [(plain_mean, None, {}, plain)]

    def consider(weights, cuts):
        """(mean, whether safe) of the release; recorded among the safe ones when it is."""
        per_query = measure(weights, cuts)
        mean, ok = score.mean(per_query), safe(per_query)
        if ok:
            safe_releases.append((mean, weights, dict(cuts), per_query))
        return mean, ok

    base_weights, base_mean = None, plain_mean
    if priorities is not None:
        mean, ok = consider(priorities, {})
        if ok:
            base_weights, base_mean = priorities, mean
    learned_cuts = dict(cut_points or {})
    if learned_cuts:
        for weights in [priorities] + ([None] if priorities is not None else []):
            consider(weights, learned_cuts)
        if len(learned_cuts) > 1 and not any(r[2] and r[0] > base_mean for r in safe_releases):
            # one column's cut points often cost the others: each column's left out in turn
            for column in sorted(learned_cuts):
                consider(base_weights, {c: f for c, f in learned_cuts.items() if c != column})
    best_mean, weights, kept, per_query = max(safe_releases, key=lambda r: r[0])  # first of equals
    return GuardedLearning(weights, kept, sorted(set(learned_cuts) - set(kept)),
                           priorities is not None and weights is None,
                           score.per_column(plain), score.per_column(per_query), plain_mean,
                           best_mean, margin(per_query)[1], fits)


class WorkloadScore:
    """Per-column and overall precision of releases of ``data`` on one workload (as
    :func:`~plpy_anon.core.workload.workload_precision` and
    :func:`~plpy_anon.core.workload.column_precision` measure them), with what does not depend on
    the release computed once: each query's true rows, each categorical condition's satisfying
    values and each categorical column's value codes. A class holding a row that satisfies a
    query may satisfy it (its ranges and value sets hold the row's values), so every true row is
    released (recall 1) and a release's precision for a query is its true count over the rows of
    the classes that may satisfy it: one pass over the classes per query. Where a numeric column
    holds a missing value a class's range is unknown and the true rows are counted in the
    released classes instead."""

    def __init__(self, data: pd.DataFrame, queries, frequencies=None):
        self.queries = list(queries)
        self.frequencies = (np.ones(len(self.queries)) if frequencies is None
                            else np.asarray(frequencies, dtype=float))
        self.columns = sorted(set().union(*(q.columns for q in self.queries)))
        uses = np.array([[c in q.columns for c in self.columns] for q in self.queries],
                        dtype=float).reshape(len(self.queries), len(self.columns))
        self.uses = uses * self.frequencies[:, None]
        used = sorted({c for q in self.queries for c in q.columns})
        template = ClassRegions.from_rows(data[used], np.zeros(len(data), dtype=np.int64))
        self.numbers = {c: data[c].to_numpy(dtype=float) for c in template.low}
        self.categories = template.categories
        self.value_codes = {c: pd.factorize(data[c].astype(str), sort=True,
                                            use_na_sentinel=False)[0] for c in template.members}
        # a categorical condition's satisfying values are the same for every release, and a
        # class may satisfy it iff it holds one of them
        self.satisfying = {}
        for query in self.queries:
            for cond in _conditions(query):
                if cond.column in template.members and cond not in self.satisfying:
                    self.satisfying[cond] = _satisfying_values(
                        cond, self.categories[cond.column])
        self.true_rows = [np.flatnonzero(self._rows(q, data)) for q in self.queries]
        self.true_counts = np.array([len(rows) for rows in self.true_rows], dtype=np.int64)
        self.recall_one = not any(np.isnan(v).any() for v in self.numbers.values())
        self.condition_index = {}
        for query in self.queries:
            for cond in _conditions(query):
                self.condition_index.setdefault(cond, len(self.condition_index))
        self._group_conditions()
        # queries anding 1, 2, ... conditions as (query indices, condition indices) arrays, each
        # scored at once; queries with an OR evaluated as trees
        flat, self.trees = {}, []
        for i, query in enumerate(self.queries):
            plan = self._plan(query)
            if isinstance(plan, np.ndarray):
                flat.setdefault(len(plan), []).append((i, plan))
            else:
                self.trees.append((i, plan))
        self.flat = [(np.array([i for i, _ in group]), np.array([p for _, p in group]))
                     for group in flat.values()]

    def _group_conditions(self):
        """The distinct conditions by column and operator, their constants as arrays, so that
        a release's classes meet all of a group's constants in one comparison."""
        categorical, numeric, points, other = {}, {}, {}, []
        for cond, i in self.condition_index.items():
            consts = None if cond in self.satisfying else _as_numbers(cond)
            if cond in self.satisfying:
                categorical.setdefault(cond.column, []).append(i)
            elif consts is not None and cond.op in _COMPARISONS:
                idx, values = numeric.setdefault((cond.column, cond.op), ([], []))
                idx.append(i)
                values.append(consts)
            elif consts is not None and cond.op == "in":
                idx, values = points.setdefault(cond.column, ([], []))
                idx.append(i)
                values.append(consts)
            else:
                other.append((i, cond))
        by_index = {i: cond for cond, i in self.condition_index.items()}
        # a categorical column's values as bits of 64-bit words: a class may satisfy a
        # condition iff its words and the condition's share a bit
        self.categorical_groups = [
            (column, np.array(idx), _value_bits(
                np.array([self.satisfying[by_index[i]] for i in idx], dtype=bool)))
            for column, idx in categorical.items()]
        self.numeric_groups = [(column, op, np.array(idx), np.array(values, dtype=float))
                               for (column, op), (idx, values) in numeric.items()]
        # IN lists on a numeric column: all the lists' values, and where each list starts
        self.point_groups = [
            (column, np.array(idx), np.concatenate([np.asarray(v, dtype=float) for v in values]),
             np.cumsum([0] + [len(v) for v in values[:-1]]))
            for column, (idx, values) in points.items()]
        self.other_conditions = other

    def _plan(self, predicate):
        """A query as the indices of the conditions it ands, or its tree when it has an OR."""
        parts = (predicate,) if isinstance(predicate, Condition) else predicate.parts
        if (isinstance(predicate, (Condition, AllOf)) and parts
                and all(isinstance(p, Condition) for p in parts)):
            return np.array([self.condition_index[p] for p in parts])
        return predicate

    def _rows(self, predicate, data):
        """The rows satisfying ``predicate`` (categorical conditions through the value codes)."""
        if isinstance(predicate, Condition):
            if predicate in self.satisfying:
                return self.satisfying[predicate][self.value_codes[predicate.column]]
            return evaluate_rows(predicate, data)
        masks = [self._rows(p, data) for p in predicate.parts]
        combine = np.logical_and if isinstance(predicate, AllOf) else np.logical_or
        initial = np.full(len(data), isinstance(predicate, AllOf))
        return combine.reduce([initial, *masks]) if masks else initial

    def _regions(self, labels):
        codes = pd.factorize(np.asarray(labels))[0].astype(np.int64)
        n_classes = int(codes.max()) + 1
        low, high, members = {}, {}, {}
        for column, numbers in self.numbers.items():
            low[column] = np.full(n_classes, np.inf)
            high[column] = np.full(n_classes, -np.inf)
            np.minimum.at(low[column], codes, numbers)
            np.maximum.at(high[column], codes, numbers)
        for column, value_codes in self.value_codes.items():
            matrix = np.zeros((n_classes, len(self.categories[column])), dtype=bool)
            matrix[codes, value_codes] = True
            members[column] = _value_bits(matrix)
        return codes, n_classes, low, high, members

    def _condition_classes(self, n_classes, low, high, members) -> np.ndarray:
        """(conditions × classes): the classes that may satisfy each distinct condition."""
        out = np.empty((len(self.condition_index), n_classes), dtype=bool)
        for column, idx, bits in self.categorical_groups:
            out[idx] = ((bits[:, None, :] & members[column][None, :, :]) != 0).any(axis=2)
        for column, op, idx, consts in self.numeric_groups:
            out[idx] = _ranges_may_satisfy(op, consts, low[column][None, :],
                                           high[column][None, :])
        for column, idx, values, starts in self.point_groups:
            inside = ((low[column][None, :] <= values[:, None])
                      & (values[:, None] <= high[column][None, :]))
            out[idx] = np.logical_or.reduceat(inside, starts, axis=0)
        for i, cond in self.other_conditions:
            out[i] = _range_may_satisfy(cond, low[cond.column], high[cond.column])
        return out

    def precision(self, labels) -> np.ndarray:
        """Per query: the share of the released answer (the rows of the classes that may
        satisfy it) that satisfies it; 1 for an empty released answer."""
        codes, n_classes, low, high, members = self._regions(labels)
        sizes = np.bincount(codes, minlength=n_classes)
        conditions = self._condition_classes(n_classes, low, high, members)

        def may(predicate):
            if isinstance(predicate, Condition):
                return conditions[self.condition_index[predicate]]
            masks = [may(p) for p in predicate.parts]
            combine = np.logical_and if isinstance(predicate, AllOf) else np.logical_or
            initial = np.full(n_classes, isinstance(predicate, AllOf))
            return combine.reduce([initial, *masks]) if masks else initial

        released = np.zeros(len(self.queries), dtype=np.int64)
        classes = {}
        for queries, plans in self.flat:
            mask = conditions[plans[:, 0]]
            for j in range(1, plans.shape[1]):
                mask &= conditions[plans[:, j]]
            released[queries] = mask @ sizes
            classes.update(zip(queries.tolist(), mask))
        for i, tree in self.trees:
            classes[i] = may(tree)
            released[i] = sizes[classes[i]].sum()
        hits = self.true_counts if self.recall_one else np.array(
            [np.count_nonzero(classes[i][codes[rows]]) for i, rows in enumerate(self.true_rows)])
        out = np.ones(len(self.queries))
        np.divide(hits, released, out=out, where=released > 0)
        return out

    def per_column(self, precision) -> pd.Series:
        """Frequency-weighted mean of per-query ``precision`` over the queries using each
        column."""
        return pd.Series(precision @ self.uses / self.uses.sum(axis=0), index=self.columns,
                         dtype=float, name="precision")

    def mean(self, precision) -> float:
        return float(np.average(precision, weights=self.frequencies))

    def column_gain(self, precision, baseline) -> tuple[pd.Series, pd.Series]:
        """Per column, the frequency-weighted mean of ``precision - baseline`` over the queries
        using it and that mean's standard error (the weighted spread of the differences over
        the square root of the effective number of queries less one; 0 for one query)."""
        diff = np.asarray(precision, dtype=float) - np.asarray(baseline, dtype=float)
        total = self.uses.sum(axis=0)
        gain = diff @ self.uses / total
        spread = ((diff[:, None] - gain[None, :]) ** 2 * self.uses).sum(axis=0) / total
        effective = total ** 2 / (self.uses ** 2).sum(axis=0)
        error = np.sqrt(spread / np.maximum(effective - 1.0, 1.0))
        return (pd.Series(gain, index=self.columns, dtype=float),
                pd.Series(np.where(effective > 1.0 + 1e-9, error, 0.0), index=self.columns,
                          dtype=float))

    def __call__(self, labels) -> tuple[pd.Series, float]:
        """(frequency-weighted precision per queried column, overall weighted precision)."""
        precision = self.precision(labels)
        return self.per_column(precision), self.mean(precision)


#: numeric comparisons tested for all of a column's constants at once
_COMPARISONS = ("<", "<=", ">", ">=", "=", "between")


def _ranges_may_satisfy(op, consts, lo, hi):
    """(constants × classes): whether a class's [lo, hi] may hold a value ``op`` each row of
    ``consts`` (as :func:`~plpy_anon.core.workload._range_may_satisfy` for one)."""
    c = consts[:, :1]
    if op == "<":
        return lo < c
    if op == "<=":
        return lo <= c
    if op == ">":
        return hi > c
    if op == ">=":
        return hi >= c
    if op == "=":
        return (lo <= c) & (c <= hi)
    return (hi >= c) & (lo <= consts[:, 1:2])        # between


def _value_bits(held: np.ndarray) -> np.ndarray:
    """Rows of booleans over a column's values as rows of 64-bit words (bit j of word w: value
    64·w + j)."""
    n_words = max(1, -(-held.shape[1] // 64))
    out = np.zeros((held.shape[0], n_words), dtype=np.uint64)
    for w in range(n_words):
        block = held[:, 64 * w:64 * (w + 1)]
        out[:, w] = (block * _BITS[:block.shape[1]]).sum(axis=1, dtype=np.uint64)
    return out


_BITS = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))


def _satisfying_values(cond: Condition, categories) -> np.ndarray:
    """Which of a categorical column's values (as text) satisfy ``cond``."""
    if cond.op in ("=", "<>", "in"):
        found = np.isin(categories.astype(str), [str(v) for v in cond.values])
        return ~found if cond.op == "<>" else found
    return evaluate_rows(cond, pd.DataFrame({cond.column: pd.Series(categories, dtype=object)}))


def _conditions(predicate):
    if isinstance(predicate, Condition):
        yield predicate
    else:
        for part in predicate.parts:
            yield from _conditions(part)


def _normalized_gain(total, left, has_left):
    """``(H(P) − Σ |P'|/|P| H(P')) / H(P)`` per row of label-count matrices (0 if H(P) = 0)."""
    right = total - left

    def entropy(counts):
        n = counts.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(n > 0, counts / np.maximum(n, 1), 0.0)
            terms = np.where(p > 0, -p * np.log2(np.where(p > 0, p, 1.0)), 0.0)
        return terms.sum(axis=1), n[:, 0]

    h_total, n_total = entropy(total)
    h_left, n_left = entropy(left)
    h_right, n_right = entropy(right)
    after = (n_left * h_left + n_right * h_right) / np.maximum(n_total, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = np.where(h_total > 0, (h_total - after) / h_total, 0.0)
    return np.where(has_left, np.clip(gain, 0.0, 1.0), 0.0)


def _dense_target(target, n_rows):
    values = np.asarray(target)
    if values.shape != (n_rows,):
        raise InvalidParameter(
            f"target has shape {values.shape}; expected one label per row ({n_rows},)",
            hint="pass the class label column of the same rows",
        )
    return np.unique(values.astype(str) if values.dtype == object else values,
                     return_inverse=True)[1].astype(np.int64).ravel()


def _boundaries(columns, cut_points):
    """Per attribute index: sorted code boundaries ``b`` (``left = {code <= b}``)."""
    if not cut_points:
        return {}
    by_name = {c.name: i for i, c in enumerate(columns)}
    out = {}
    for name, cuts in _cut_items(cut_points):
        if name not in by_name:
            raise UndefinedObject(
                f"cut points given for {name!r}, which is not a quasi-identifier",
                hint=f"give cut points for {', '.join(by_name)}",
            )
        col = columns[by_name[name]]
        if col.kind == "categorical":
            out[by_name[name]] = _categorical_boundaries(col, cuts)
            continue
        if np.issubdtype(col.labels.dtype, np.datetime64):
            continue  # thresholds are numbers; a date column's are not learned
        wrong = [t for t, _ in cuts if not is_number(t)]
        if wrong:
            raise InvalidParameter(
                f"cut point {wrong[0]!r} of the numeric column {name!r} is not a number",
                hint="give numeric columns numeric thresholds (categorical ones take values)")
        thresholds = np.array([t for t, _ in cuts], dtype=float)
        inclusive = np.array([bool(i) for _, i in cuts], dtype=bool)
        values = col.labels.astype(float)
        # last value on the left side, as an index into labels; -1 when the left side is empty
        last_left = np.where(
            inclusive,
            np.searchsorted(values, thresholds, side="right"),
            np.searchsorted(values, thresholds, side="left"),
        ) - 1
        codes = last_left + numeric_offset(col)
        valid = (last_left >= 0) & (last_left < values.size - 1)  # both sides non-empty
        out[by_name[name]] = np.unique(codes[valid]).astype(np.int64)
    return out


def _categorical_boundaries(col, cuts):
    """A categorical column's cut points (``(value, False)``: before the value, ``(value, True)``:
    after it) as boundaries of its code order, which isolate each queried value; values the
    column does not hold, and non-string thresholds, give none."""
    code_of = {label: code for code, label in enumerate(col.labels) if isinstance(label, str)}
    bounds = [code_of[value] - (0 if inclusive else 1)
              for value, inclusive in cuts if isinstance(value, str) and value in code_of]
    n_codes = len(col.labels)
    return np.unique([b for b in bounds if 0 <= b < n_codes - 1]).astype(np.int64)


def _cut_items(cut_points: Mapping):
    for name, cuts in cut_points.items():
        if hasattr(cuts, "itertuples"):
            cuts = [(row.threshold, row.left_inclusive) for row in cuts.itertuples()]
        cuts = list(cuts)
        for cut in cuts:
            if not isinstance(cut, (tuple, list)) or len(cut) != 2:
                raise InvalidParameter(
                    f"cut point {cut!r} of {name!r} is not a (threshold, left_inclusive) pair",
                    hint="give each column's cut points as (value, True/False) pairs")
        yield name, cuts
