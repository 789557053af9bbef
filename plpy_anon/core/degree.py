"""Degree of anonymisation over generalization hierarchies, and its decomposition.

**Degree of attribute anonymisation** (Definition 2.1). A hierarchy of height ``H`` has levels
``0`` (the value) .. ``H`` (the root, "*"); ``w_g`` weighs the step from level ``g - 1`` to ``g``.
Generalizing a value from level ``p`` up to level ``q`` costs the crossed weights over the total,
``sum(w_{p+1..q}) / sum(w_{1..H})``; from the value itself that is ``c_q = sum(w_{1..q}) / W``,
0 for the original and 1 for full suppression. Equal weights give the paper's ``q / H``.

**Decomposition** (Section 5; its formulas were lost in extraction -- the readings below are ours).
Each attribute gets a share ``s_i = 1 - P_i + min_share`` (low priority, large share). The table's
degree ``D`` is poured into the attributes like water: ``d_i = min(1, t * s_i)`` with the level
``t`` chosen so that ``mean_i d_i = D`` -- so ``D`` is the mean attribute degree, spread in
proportion to the shares, and an attribute that is fully suppressed passes its excess on. Each
attribute then takes the level whose degree interval ``[c_g, c_{g+1})`` contains ``d_i`` (the
paper's "interval containing the degree"; never more generalization than asked).

**Degree of a view** (Definition 2.1 applied to the view). The degree of a released view is the
degree actually applied to its values: attribute ``i`` released at level ``g_i`` has degree
``c_{g_i}`` (its weighted levels crossed from the value), a suppressed row counts as fully
generalized (degree 1 on every attribute), and the table's degree is the mean over attributes
(the same mean the decomposition pours ``D`` into) of the row mean:
``Deg(view) = mean_i [(1 - f) c_{g_i} + f]`` with ``f`` the suppressed fraction. The extraction
lost the paper's table-level formula; the mean is our reading, chosen so that ``Deg`` and the
decomposition use one scale. This is *not* the degree that was requested: levels are discrete, so
``Deg(view(D)) <= D`` (never more generalization than asked), the gap is below the mean width of
the level intervals the attributes sit in, and re-decomposing ``Deg(view)`` gives a view at most
as coarse (never the same by definition). Tests check these properties against the definition.

**k-anonymity** (local recoding, then ARX-style suppression). Local recoding starts from the
values (every row at level 0, whatever the requested degree): the rows of classes smaller than
``k`` -- and only they -- rise one level on their cheapest attribute (step cost
``(P_i + min_share) * (c_{g+1} - c_g)``: low-priority attributes first), the rows are re-grouped
(a class is one (level, value) per attribute), and again, until at most ``max_suppression`` of the
rows (default 5 %) remain in small classes; those are suppressed. Each row is then released, on
each attribute, at the coarser of this level and the requested level. Classes of the recoding only
merge when levels rise (rows of one class share levels and values, so they share the coarser ones
too), hence every released class holds ``k`` rows. Because the recoding does not depend on the
degree and the requested levels fall with trust, more trust gives every row a level no higher on
every attribute, with the same rows suppressed: the view degree never rises with trust, and falls
strictly as soon as one kept row is released finer -- by construction, not measured. The price:
the suppressed rows are the same at every trust (also at low trust, where the requested view alone
might have needed fewer), and a row may be raised on an attribute that a coarse request would have
let it keep. Should the small rows all reach the root with more of them than the budget, the
smallest other classes join them at the root until they number ``k``. The ``levels_`` reported per
attribute are the coarsest any kept row gets.
"""

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject
from plpy_anon.core.hierarchy import Hierarchy
from plpy_anon.core.k_anonymity import check_k

# A degree within this distance below a level's boundary counts as reaching it: recomputing a
# view's degree and decomposing it again must not lose a level to floating-point rounding.
_BOUNDARY_TOLERANCE = 1e-9


# --- Definition 2.1 --------------------------------------------------------------------------

def level_degrees(height, weights=None, attribute=None):
    """``c_0 .. c_H``: the degree of generalizing a value to each level of its hierarchy."""
    where = f" of {attribute!r}" if attribute is not None else ""
    if height < 1:
        raise InvalidParameter(f"the hierarchy{where} needs at least one level above the values; "
                               f"got height {height}", hint="end every path with a root such as '*'")
    try:
        weights = np.ones(height) if weights is None else np.asarray(weights, dtype=float)
    except (TypeError, ValueError):
        weights = np.array([np.nan])
    if weights.shape != (height,) or not np.isfinite(weights).all() or (weights <= 0).any():
        raise InvalidParameter(
            f"level weights{where} must be {height} positive numbers (one per step); "
            f"got {weights.tolist()}",
            hint="give one weight for each step from a level to the next, or omit for equal steps",
        )
    return np.concatenate([[0.0], np.cumsum(weights) / weights.sum()])


def anonymisation_degree(from_level, to_level, degrees):
    """Definition 2.1: the degree of moving a value from ``from_level`` up to ``to_level``."""
    if not 0 <= from_level <= to_level < len(degrees):
        raise InvalidParameter(
            f"levels must satisfy 0 <= from_level <= to_level <= {len(degrees) - 1}; got "
            f"{from_level} -> {to_level}", hint="generalization only moves up the hierarchy")
    return float(degrees[to_level] - degrees[from_level])


def select_level(degree, degrees):
    """The level whose interval ``[c_g, c_{g+1})`` contains ``degree`` (array-friendly)."""
    return np.searchsorted(degrees, np.asarray(degree) + _BOUNDARY_TOLERANCE, side="right") - 1


# --- hierarchies for the data ----------------------------------------------------------------

def value_labels(values):
    """Hierarchy labels of column values: integral numbers print without a trailing ``.0``."""
    series = pd.Series(values)
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        numbers = series.to_numpy(dtype=float)
        if np.isfinite(numbers).all() and (numbers == np.round(numbers)).all():
            return series.astype("int64").astype(str).to_numpy(dtype=object)
    return series.astype(str).to_numpy(dtype=object)


def _number_text(x):
    """``30`` for integral numbers, ``0.25`` otherwise -- never exponent notation, so that a label
    ``[lo,hi)`` is also a valid PostgreSQL range literal."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _nice_width(raw):
    """Smallest 1, 2 or 5 times a power of ten that is at least ``raw`` (> 0)."""
    exponent = np.floor(np.log10(raw))
    for step in (1.0, 2.0, 5.0, 10.0):
        if step * 10.0**exponent >= raw * (1 - 1e-12):
            return step * 10.0**exponent
    return 10.0 ** (exponent + 1)


def interval_hierarchy(values, n_levels=4):
    """A hierarchy of nested intervals for a numeric column with no registered hierarchy.

    Level ``g`` (1..``n_levels``) cuts the line into intervals of width ``base * 2**(g-1)`` from a
    common origin, so each interval lies inside one interval of the next level; ``base`` is the
    smallest "nice" width (1, 2, 5 x 10^e) giving at most 2 intervals at the top level. The root
    is ``*``. Labels read ``[lo,hi)`` (a range literal).
    """
    if n_levels < 1:
        raise InvalidParameter(f"n_levels must be at least 1; got {n_levels}", hint="use e.g. 4")
    numbers = pd.Series(values).dropna().to_numpy(dtype=float)
    if numbers.size == 0:
        raise InsufficientData("cannot build an interval hierarchy without values",
                               hint="register a hierarchy for the column or add rows")
    distinct = np.unique(numbers)
    spread = distinct[-1] - distinct[0]
    base = _nice_width(spread / 2.0 ** (n_levels - 1)) if spread > 0 else 1.0
    # float8 intervals narrower than a hundred steps of float8 at the values' magnitude do not
    # nest reliably (microsecond timestamps of 1650 made a node with two parents)
    resolution = np.spacing(max(abs(distinct[0]), abs(distinct[-1])))
    if base < 100 * resolution:
        column = getattr(values, "name", None)
        raise InvalidParameter(
            f"the values of {f'column {column!r}' if column else 'a numeric column'} lie closer "
            f"together ({spread:g} apart at magnitude {max(abs(distinct[0]), abs(distinct[-1])):g}) "
            "than the default interval hierarchy can split in float8",
            hint="Round the column (e.g. timestamps to milliseconds), or register a hierarchy "
                 "for it with anon.set_hierarchy.")
    widths = base * 2.0 ** np.arange(n_levels)
    origin = np.floor(distinct[0] / widths[-1]) * widths[-1]  # a multiple of every width
    lows = origin + np.floor((distinct[:, None] - origin) / widths) * widths
    labels = value_labels(distinct)
    paths = [[leaf, *(f"[{_number_text(lo)},{_number_text(lo + w)})" for lo, w in zip(row, widths)),
              "*"]
             for leaf, row in zip(labels, lows)]
    return Hierarchy.from_paths(paths)


def flat_hierarchy(values):
    """``value -> *``: the hierarchy of a categorical column with a single value."""
    return Hierarchy.from_paths([[leaf, "*"] for leaf in pd.unique(value_labels(values))])


def _array_element(text):
    if text == "" or text.upper() == "NULL" or any(c in text for c in '{},"\\') or \
            text != text.strip() or any(c.isspace() for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def set_label(values):
    """A set of values as PostgreSQL writes a text[] (``{Female,Male}``): a label analysts can
    cast and search (``'Male' = ANY(label::text[])``)."""
    return "{" + ",".join(_array_element(v) for v in values) + "}"


def value_set_hierarchy(values):
    """Nested value sets for a categorical column with no registered hierarchy: the values in
    order of frequency (most frequent first, ties by text) are paired at level 1, the pairs paired
    at level 2, and so on up to the root ``*``; labels are the sets (``{Female,Male}``). With a
    flat ``value -> *`` hierarchy a degree below 1 left such a column as it was, so releases for
    every trust but full suppression were the same; ``ceil(log2(values))`` levels let each degree
    reach its own view. Rare values sit together, so the sets small classes need form first."""
    labels = pd.Series(value_labels(values))
    counts = labels.value_counts()
    order = sorted(counts.index, key=lambda v: (-counts[v], v))
    if len(order) < 2:
        return flat_hierarchy(values)
    paths = {leaf: [leaf] for leaf in order}
    size = 2
    while size < len(order):
        groups = [order[start:start + size] for start in range(0, len(order), size)]
        if len(groups[-1]) == 1:           # no value stays alone while the others are grouped
            groups[-2:] = [groups[-2] + groups[-1]]
        if len(groups) == 1:
            break
        for group in groups:
            for leaf in group:
                paths[leaf].append(set_label(group))
        size *= 2
    internal = {label for path in paths.values() for label in path[1:] if label != path[0]}
    if internal & (set(order) | {"*"}):
        return flat_hierarchy(values)   # a value spelled like a set label (or the root)
    return Hierarchy.from_paths([path + ["*"] for path in paths.values()])


def default_hierarchy(values, n_levels=4):
    """Interval hierarchy for numbers, nested value sets otherwise."""
    series = pd.Series(values)
    if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
        return interval_hierarchy(series, n_levels)
    return value_set_hierarchy(series)


class GeneralizationTable:
    """One column's values generalized to every level of its hierarchy, as integer codes.

    ``codes[g]`` gives each row's class at level ``g`` (row-aligned), ``labels[g]`` the label of
    each code; computing this once per column makes trying many views cheap.
    """

    def __init__(self, column, values, hierarchy):
        leaves = value_labels(values)
        row_leaf, distinct = pd.factorize(leaves)
        hierarchy.check_covers(distinct, column)
        self.column = column
        self.hierarchy = hierarchy
        self.codes, self.labels, self.leaf_counts = [], [], []
        for level in range(hierarchy.height + 1):  # loop over levels; values are vectorized
            ancestors = np.array([hierarchy.ancestor(v, level) for v in distinct], dtype=object)
            code_of_distinct, level_labels = pd.factorize(ancestors)
            self.codes.append(code_of_distinct[row_leaf])
            self.labels.append(np.asarray(level_labels, dtype=object))
            self.leaf_counts.append(np.array([hierarchy.leaf_count(x) for x in level_labels]))

        # codes of every level stacked, and an offset per level so that (level, code) pairs of
        # rows released at different levels get distinct keys
        self._stacked = np.stack(self.codes)
        sizes = np.array([len(labels) for labels in self.labels])
        self._offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def _rows(self, levels):
        levels = np.broadcast_to(np.asarray(levels, dtype=np.int64), self.codes[0].shape)
        return levels, self._stacked[levels, np.arange(levels.size)]

    def row_keys(self, levels):
        """Each row's class key on this column when row ``r`` is released at ``levels[r]`` (a
        level or one per row): equal keys mean equal level and equal generalized value."""
        levels, codes = self._rows(levels)
        return self._offsets[levels] + codes

    def row_labels(self, levels):
        """Each row's label at its level (``levels``: one level, or one per row)."""
        levels, codes = self._rows(levels)
        labels = np.empty(levels.size, dtype=object)
        for level in np.unique(levels):  # loop over the few levels in use
            at = levels == level
            labels[at] = self.labels[level][codes[at]]
        return labels

    def ncp(self, level, kept=None):
        """Normalized certainty penalty ``(leaves under label - 1) / (leaves - 1)``, row mean.

        ``level``: one level, or one per row (local recoding). Rows outside ``kept``
        (suppressed) count as fully generalized.
        """
        n_leaves = len(self.hierarchy.leaves)
        if n_leaves < 2:
            return 0.0
        levels, codes = self._rows(level)
        counts = np.concatenate(self.leaf_counts)[self._offsets[levels] + codes]
        penalty = (counts - 1) / (n_leaves - 1)
        if kept is not None:
            penalty = np.where(kept, penalty, 1.0)
        return float(penalty.mean())


# --- the decomposition -----------------------------------------------------------------------

class DegreeDecomposition:
    """Split a table degree over attributes by priority and map each share to a level.

    ``min_share`` keeps a priority-1 attribute generalizable (with 0 it is never generalized).
    After ``fit(priorities, degrees)`` -- priorities a Series in [0, 1], degrees a dict of
    ``level_degrees`` arrays per attribute -- the estimator has ``attributes_``, ``shares_`` and
    ``breakpoints_`` (the table degrees at which some attribute's level rises, sorted).
    """

    def __init__(self, min_share=0.1):
        self.min_share = min_share

    def fit(self, priorities, degrees):
        priorities = pd.Series(priorities, dtype=float)
        if not (np.isfinite(self.min_share) and self.min_share >= 0):
            raise InvalidParameter(f"min_share must be >= 0; got {self.min_share!r}",
                                   hint="use 0 to never generalize priority-1 attributes")
        if priorities.empty or not priorities.between(0, 1).all():
            raise InvalidParameter("priorities must be a non-empty set of numbers in [0, 1]",
                                   hint="derive them with MIPriorities or give them explicitly")
        missing = [name for name in priorities.index if name not in degrees]
        if missing:
            raise UndefinedObject(f"attribute {missing[0]!r} has no level degrees",
                                  hint="give a hierarchy for every prioritized attribute")
        self.attributes_ = list(priorities.index)
        self.shares_ = 1.0 - priorities + self.min_share
        self.degrees_ = {name: np.asarray(degrees[name], dtype=float) for name in self.attributes_}
        self._shares = self.shares_.to_numpy()
        self._water_grid, self._degree_grid = self._water_curve()
        self.breakpoints_ = self._breakpoints()
        return self

    def _water_curve(self):
        """Table degree as a function of the water level ``t``: piecewise linear, increasing."""
        positive = np.unique(self._shares[self._shares > 0])
        water = np.concatenate([[0.0], np.sort(1.0 / positive)])
        return water, self._mean_degree(water)

    def _mean_degree(self, water):
        water = np.atleast_1d(water)
        return np.minimum(1.0, np.outer(water, self._shares)).mean(axis=1)

    def _breakpoints(self):
        """Table degrees at which some attribute reaches one of its levels (level >= 1)."""
        needed = [self._degree_reaching(i, self.degrees_[name][1:])
                  for i, name in enumerate(self.attributes_) if self._shares[i] > 0]
        points = np.concatenate(needed) if needed else np.array([])
        return np.unique(np.clip(points, 0.0, 1.0))

    def _degree_reaching(self, i, attribute_degree):
        """The smallest table degree at which attribute ``i`` gets ``attribute_degree``."""
        return self._mean_degree(np.asarray(attribute_degree, dtype=float) / self._shares[i])

    def attribute_degrees(self, degree):
        """``d_i = min(1, t s_i)`` with ``mean_i d_i = degree`` (capped where ``D`` is unreachable)."""
        _check_degree(degree)
        water = np.interp(degree, self._degree_grid, self._water_grid)
        return pd.Series(np.minimum(1.0, water * self._shares), index=self.attributes_)

    def levels(self, degree):
        """The view for ``degree``: one hierarchy level per attribute."""
        degrees = self.attribute_degrees(degree)
        return pd.Series([int(select_level(degrees[name], self.degrees_[name]))
                          for name in self.attributes_], index=self.attributes_)

    def degree_of_view(self, levels, suppressed_fraction=0.0):
        """Definition 2.1 on the view: mean over attributes of the degree applied to the rows."""
        applied = []
        for name in self.attributes_:
            level = int(levels[name])
            degrees = self.degrees_[name]
            if not 0 <= level < len(degrees):
                raise InvalidParameter(
                    f"attribute {name!r} has levels 0..{len(degrees) - 1}; the view puts it at "
                    f"level {level}", hint="levels come from the attribute's hierarchy")
            applied.append(degrees[level])
        f = float(suppressed_fraction)
        return float(np.mean(applied) * (1.0 - f) + f)

    def degree_of_rows(self, row_levels, kept):
        """Definition 2.1 on a locally recoded view: the mean over rows and attributes of the
        degree ``c_g`` of the level each row is released at on each attribute (``row_levels``: a
        frame, rows x attributes), a suppressed row (``kept`` False) counting 1 on every one.
        With one level per attribute for every row this is ``degree_of_view``."""
        kept = np.asarray(kept, dtype=bool)
        if kept.size == 0:
            return 0.0
        applied = np.column_stack([self.degrees_[name][row_levels[name].to_numpy()]
                                   for name in self.attributes_])
        return float(np.where(kept, applied.mean(axis=1), 1.0).mean())


def _check_degree(degree):
    if not (np.isfinite(degree) and 0.0 <= degree <= 1.0):
        raise InvalidParameter(f"the degree of anonymisation must lie in [0, 1]; got {degree!r}",
                               hint="0 = release the values, 1 = suppress everything")


# --- k-anonymity after the levels ------------------------------------------------------------

def class_sizes(code_columns):
    """Size of each row's equivalence class, from row-aligned integer code columns."""
    n_rows = len(code_columns[0]) if code_columns else 0
    if not code_columns:
        return np.full(n_rows, n_rows)
    key = np.zeros(n_rows, dtype=np.int64)
    for codes in code_columns:  # loop over attributes; re-densify so the key never overflows
        key = np.unique(key * (int(codes.max()) + 1) + codes, return_inverse=True)[1]
    return np.bincount(key)[key]


class DegreeRelease:
    """The release for a degree ``D``: decompose, choose levels, then enforce ``k`` if given.

    Parameters: ``degree`` (table degree D in [0, 1]), ``priorities`` (dict/Series, attribute ->
    priority; these attributes are the quasi-identifiers), ``hierarchies`` (dict attribute ->
    Hierarchy; missing ones are built by ``default_hierarchy``), ``level_weights`` (dict attribute
    -> step weights), ``k`` (None = no k-anonymity), ``max_suppression`` (fraction of rows that may
    be suppressed once the rows of small classes are locally recoded; default 5 %),
    ``min_share``, ``n_interval_levels``.

    After ``fit(frame)``: ``tables_`` (GeneralizationTable per attribute), ``decomposition_``,
    ``requested_levels_`` (the view for ``degree``), ``row_levels_`` (frame, rows x attributes: the
    level each row is released at, after local recoding for k), ``levels_`` (per attribute, the
    coarsest level of a kept row), ``view_degree_`` (Definition 2.1 on ``row_levels_``),
    ``kept_`` (row mask), ``cost_`` (dict: rows suppressed, rows locally recoded, extra levels,
    degree requested and delivered, NCP per attribute).
    """

    def __init__(self, degree, priorities, *, hierarchies=None, level_weights=None, k=None,
                 max_suppression=0.05, min_share=0.1, n_interval_levels=4):
        self.degree = degree
        self.priorities = priorities
        self.hierarchies = hierarchies
        self.level_weights = level_weights
        self.k = k
        self.max_suppression = max_suppression
        self.min_share = min_share
        self.n_interval_levels = n_interval_levels

    def fit(self, frame):
        _check_degree(self.degree)
        priorities = pd.Series(self.priorities, dtype=float)
        self._check_k(len(frame))
        missing = [name for name in priorities.index if name not in frame.columns]
        if missing:
            raise UndefinedObject(f"priority for {missing[0]!r}, which is not a column",
                                  hint=f"use columns of the table: {', '.join(frame.columns)}")
        hierarchies = dict(self.hierarchies or {})
        weights = dict(self.level_weights or {})
        self.tables_ = {}
        for name in priorities.index:  # loop over attributes
            hierarchy = hierarchies.get(name) or default_hierarchy(frame[name],
                                                                   self.n_interval_levels)
            self.tables_[name] = GeneralizationTable(name, frame[name], hierarchy)
        unknown = [name for name in weights if name not in self.tables_]
        if unknown:
            raise UndefinedObject(f"level weights for {unknown[0]!r}, which is not a "
                                  "quasi-identifier of the release",
                                  hint=f"give weights for: {', '.join(self.tables_)}")
        degrees = {name: level_degrees(t.hierarchy.height, weights.get(name), name)
                   for name, t in self.tables_.items()}
        self.decomposition_ = DegreeDecomposition(self.min_share).fit(priorities, degrees)
        self.requested_levels_ = self.decomposition_.levels(self.degree)
        names = self.decomposition_.attributes_
        requested = self.requested_levels_[names].to_numpy(dtype=np.int64)
        if self.k is None:
            floor = np.zeros((len(frame), len(names)), dtype=np.int64)
            self.kept_ = np.ones(len(frame), dtype=bool)
        else:
            floor, self.kept_ = self._local_floor(len(frame))
        self.row_levels_ = pd.DataFrame(np.maximum(floor, requested), columns=names)
        self.levels_ = pd.Series(self.row_levels_[self.kept_].max(axis=0) if self.kept_.any()
                                 else self.requested_levels_[names], index=names).astype(int)
        self.view_degree_ = (self.decomposition_.degree_of_rows(self.row_levels_, self.kept_)
                             if len(frame) else self.decomposition_.degree_of_view(self.levels_))
        self.cost_ = self._cost(self.view_degree_)
        return self

    def _check_k(self, n_rows):
        if self.k is None:
            return
        check_k(self.k, n_rows)
        if not 0.0 <= self.max_suppression <= 1.0:
            raise InvalidParameter(
                f"max_suppression must lie in [0, 1]; got {self.max_suppression!r}",
                hint="it is the fraction of rows that may be removed to reach k")

    def _row_classes(self, levels):
        """Class id and class size of each row, row ``r`` released at ``levels[r]``."""
        keys = [self.tables_[name].row_keys(levels[:, i])
                for i, name in enumerate(self.decomposition_.attributes_)]
        key = np.zeros(levels.shape[0], dtype=np.int64)
        for codes in keys:  # loop over attributes; re-densify so the key never overflows
            key = np.unique(key * (int(codes.max()) + 1) + codes, return_inverse=True)[1]
        sizes = np.bincount(key)
        return key, sizes[key]

    def _local_floor(self, n_rows):
        """Local recoding for k, independent of the requested degree: per-row levels and the
        kept-row mask.

        From every row at its values (level 0), the rows of classes smaller than ``k`` -- and only
        they -- rise one level on their cheapest attribute (``(P_i + min_share) * (c_{g+1} -
        c_g)``: low priority first), the rows are re-grouped, and so on until at most
        ``max_suppression`` of the rows remain in small classes; those are suppressed. Should the
        small rows all reach the root of every attribute with more of them than the budget (they
        then form one class), the smallest other classes are moved, whole, to the root until that
        class holds ``k`` rows. Every class of kept rows holds ``k`` rows.
        """
        model = self.decomposition_
        names = model.attributes_
        weight = (pd.Series(self.priorities, dtype=float)[names] + model.min_share).to_numpy()
        step_costs = [max(float(w), 1e-6) * np.append(np.diff(model.degrees_[name]), np.inf)
                      for w, name in zip(weight, names)]
        tops = np.array([len(model.degrees_[name]) - 1 for name in names])
        budget = int(np.floor(self.max_suppression * n_rows))
        levels = np.zeros((n_rows, len(names)), dtype=np.int64)
        while True:  # at most sum of heights rounds: every round raises each small row a level
            _, sizes = self._row_classes(levels)
            rows = np.flatnonzero(sizes < self.k)
            if rows.size <= budget:
                break
            costs = np.column_stack([c[levels[rows, i]] for i, c in enumerate(step_costs)])
            cheapest = costs.argmin(axis=1)  # ties: the first attribute
            movable = np.isfinite(costs[np.arange(rows.size), cheapest])
            if not movable.any():  # the small rows all sit at the root: one class below k
                break
            levels[rows[movable], cheapest[movable]] += 1
        while True:  # the root residue above the budget: pull the smallest classes into it
            ids, sizes = self._row_classes(levels)
            small = sizes < self.k
            if small.sum() <= budget:
                return levels, ~small
            candidates = np.flatnonzero(~small & ~(levels == tops).all(axis=1))
            levels[ids == ids[candidates[np.argmin(sizes[candidates])]]] = tops

    def _cost(self, final_degree):
        extra_levels = self.levels_ - self.requested_levels_
        requested = self.requested_levels_[self.decomposition_.attributes_].to_numpy()
        raised = (self.row_levels_.to_numpy() > requested) & self.kept_[:, None]
        return {
            "requested_degree": float(self.degree),
            "requested_view_degree": self.decomposition_.degree_of_view(self.requested_levels_),
            "final_degree": final_degree,
            "extra_levels": {name: int(extra) for name, extra in extra_levels.items()},
            "rows_recoded": int(raised.any(axis=1).sum()),
            "rows_recoded_per_attribute": dict(zip(self.decomposition_.attributes_,
                                                   raised.sum(axis=0).tolist())),
            "rows_suppressed": int((~self.kept_).sum()),
            "suppressed_fraction": float((~self.kept_).mean()) if self.kept_.size else 0.0,
            "ncp": {name: self.tables_[name].ncp(self.row_levels_[name].to_numpy(), self.kept_)
                    for name in self.decomposition_.attributes_},
        }

    def transform(self, frame):
        """The released rows: quasi-identifiers generalized, suppressed rows removed."""
        if not hasattr(self, "levels_"):
            raise InvalidParameter("this DegreeRelease is not fitted yet",
                                   hint="call fit(frame) first")
        if len(frame) != self.kept_.size:
            raise InvalidParameter(
                f"fitted on {self.kept_.size} rows, transform got {len(frame)}",
                hint="transform the same frame the release was fitted on")
        released = frame.copy()
        for name in self.decomposition_.attributes_:  # each row at its own level (local recoding)
            released[name] = self.tables_[name].row_labels(self.row_levels_[name].to_numpy())
        return released.loc[self.kept_].reset_index(drop=True)
