"""From equivalence classes to generalized values, and the normalized spread of a code range.

The same measure serves two purposes, so it lives in one place (:class:`SpreadMeasure`):
Mondrian picks the attribute with the largest normalized spread inside a partition, and the NCP
metric averages it over released classes.

* numeric: ``(max - min) / (global max - global min)`` over non-NULL values. A set that mixes NULL
  and values scores 1 (full loss): the released cell cannot say whether the value is missing, and
  without this the algorithm would never separate NULL from a single value. A set of only NULLs
  scores 0.
* categorical, no hierarchy: ``(distinct values - 1) / (domain size - 1)``, NULL counting as a
  value; 0 for a one-value domain.
* categorical with hierarchy: ``(leaf_count(LCA) - 1) / (n_leaves - 1)``; NULL is one more leaf
  under the root (so NULL with anything generalizes to the root).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plpy_anon.core.encoding import numeric_offset


class SpreadMeasure:
    """Normalized spread of code ranges of one encoded column (precomputes per-column tables)."""

    def __init__(self, col):
        self.col = col
        self.kind = "numeric" if col.kind == "numeric" else (
            "hierarchy" if col.hierarchy is not None else "categorical")
        self.needs_distinct = self.kind == "categorical"
        if self.kind == "numeric":
            self._pos = code_positions(col)
            width = self._pos[-1] - self._pos[numeric_offset(col)] if len(col.labels) else 0.0
            self._width = float(width) if width > 0 else 0.0
        elif self.kind == "categorical":
            self._domain = len(col.labels)
        else:
            self._n_leaves = len(col.hierarchy.leaves)
            self._domain = self._n_leaves + (col.null_code is not None)

    def __call__(self, lo, hi, n_distinct=None):
        """Spread in [0, 1] of the sets whose smallest code is ``lo`` and largest is ``hi``.

        ``n_distinct`` (number of distinct codes) is needed only when ``needs_distinct``.
        """
        if self.kind == "numeric":
            return self._numeric(lo, hi)
        if self.kind == "categorical":
            if self._domain <= 1:
                return np.zeros(len(n_distinct))
            return (np.asarray(n_distinct, dtype=np.float64) - 1.0) / (self._domain - 1)
        return self._hierarchy(lo, hi)

    def leaf_counts(self, lo, hi):
        """Hierarchy columns: leaf count of the LCA of each code range (NULL = extra leaf)."""
        nodes, null_hi, null_only = self._lca(lo, hi)
        counts = self.col.hierarchy.node_leaf_counts(nodes).astype(np.int64)
        counts[null_hi] = self._domain
        counts[null_only] = 1
        return counts

    def lca_labels(self, lo, hi):
        """Hierarchy columns: LCA label of each code range; None for NULL-only ranges."""
        nodes, null_hi, null_only = self._lca(lo, hi)
        labels = self.col.hierarchy.node_labels(nodes)
        labels[null_hi] = self.col.hierarchy.root
        labels[null_only] = None
        return labels

    def _numeric(self, lo, hi):
        null = self.col.null_code
        if self._width == 0.0:
            spread = np.zeros(len(lo))
        else:
            with np.errstate(invalid="ignore"):
                spread = (self._pos[hi] - self._pos[lo]) / self._width
        if null is not None:
            has_null = lo == null
            spread = np.where(has_null, np.where(hi == null, 0.0, 1.0), spread)
        return spread

    def _hierarchy(self, lo, hi):
        if self._domain <= 1:
            return np.zeros(len(lo))
        return (self.leaf_counts(lo, hi) - 1.0) / (self._domain - 1)

    def _lca(self, lo, hi):
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        leaf_max = self._n_leaves - 1
        null_hi = hi > leaf_max                    # NULL is the code after the last leaf
        null_only = lo > leaf_max
        nodes = self.col.hierarchy.lca_nodes(np.minimum(lo, leaf_max), np.minimum(hi, leaf_max))
        return nodes, null_hi, null_only


def code_positions(col):
    """Numeric column: float64 position of every code (NaN for the NULL code)."""
    values = col.labels
    if np.issubdtype(values.dtype, np.datetime64):
        values = values.astype(np.int64)           # unit does not matter: spreads are ratios
    pos = values.astype(np.float64)
    if col.null_code == 0:
        pos = np.concatenate([[np.nan], pos])
    return pos


def value_bounds(col, lo_code, hi_code):
    """Numeric column: the values of codes ``lo_code`` and ``hi_code`` (arrays).

    NULL codes map to a missing value (NaN, or NaT for datetimes); integer columns are returned as
    float64 when that is needed to hold NaN.
    """
    lo_code = np.asarray(lo_code, dtype=np.int64)
    hi_code = np.asarray(hi_code, dtype=np.int64)
    labels = _nullable(col.labels)
    offset = numeric_offset(col)
    missing = np.array([np.nan]).astype(labels.dtype)
    table = np.concatenate([missing, labels]) if offset else labels
    return table[lo_code], table[hi_code]


@dataclass(frozen=True)
class NumericBounds:
    """Per class: tightest non-NULL interval ``[lo, hi]`` (NaN/NaT when only NULLs) and NULL flag."""

    lo: np.ndarray
    hi: np.ndarray
    has_null: np.ndarray


def class_bounds(columns, labels, n_classes, index=None):
    """Generalized value of every class on every column, keyed by column name.

    * numeric: :class:`NumericBounds` (arrays of length ``n_classes``);
    * categorical without hierarchy: object array of sorted tuples of the values present
      (``None`` = NULL, sorted last);
    * categorical with hierarchy: object array of LCA labels (``None`` when the class holds only
      NULL; the root when it mixes NULL and values).
    """
    labels = np.asarray(labels)
    index = index or ClassIndex.of(labels, n_classes)
    out = {}
    for col in columns:
        if col.kind == "numeric":
            out[col.name] = _numeric_bounds(col, labels, n_classes, index)
        elif col.hierarchy is None:
            out[col.name] = _value_sets(col, labels, n_classes)
        else:
            lo, hi = class_code_range(col.codes, labels, n_classes, index)
            out[col.name] = SpreadMeasure(col).lca_labels(lo, hi)
    return out


def class_code_pairs(codes, labels, n_classes, width=None):
    """The distinct (class, code) pairs, sorted by class then code, as ``(codes, bounds)``:
    class ``c`` holds ``codes[bounds[c]:bounds[c + 1]]`` in ascending order.

    One sort of a combined int64 key and a neighbour comparison: no hashing and no unbuffered
    ``ufunc.at``, which cost seconds at a million rows. Where every (class, code) key fits in a
    table of at most two bytes per row, the keys present are marked in it instead (no sort: a
    tenth of its time at 10M rows).
    """
    codes = np.asarray(codes, dtype=np.int64)
    if width is None:
        width = int(codes.max()) + 1 if codes.size else 1
    key = np.asarray(labels, dtype=np.int64) * width + codes
    if 0 < n_classes * width <= 2 * key.size:
        seen = np.zeros(n_classes * width, dtype=bool)
        seen[key] = True
        key = np.flatnonzero(seen)
    elif key.size:
        key = np.sort(key)
        keep = np.empty(key.size, dtype=bool)
        keep[0] = True
        np.not_equal(key[1:], key[:-1], out=keep[1:])
        key = key[keep]
    cls = key // width
    bounds = np.searchsorted(cls, np.arange(n_classes + 1))
    return key - cls * width, bounds


@dataclass(frozen=True)
class ClassIndex:
    """Rows grouped by class: class ``c`` is ``order[bounds[c]:bounds[c + 1]]``. Built once per
    release and shared by every column's bounds and metrics (segment reductions need no sort)."""

    order: np.ndarray
    bounds: np.ndarray

    @classmethod
    def of(cls, labels, n_classes):
        labels = np.asarray(labels)
        order = np.argsort(labels, kind="stable")
        return cls(order, np.searchsorted(labels[order], np.arange(n_classes + 1)))

    def reduce(self, ufunc, values, empty, *, grouped=False):
        """``ufunc`` reduced over every class of ``values`` (per row; ``grouped``: already in
        ``order``); ``empty`` for empty classes."""
        grouped = np.asarray(values) if grouped else np.asarray(values)[self.order]
        starts, ends = self.bounds[:-1], self.bounds[1:]
        out = np.full(starts.size, empty, dtype=grouped.dtype if grouped.size else np.int64)
        occupied = ends > starts
        if occupied.any():
            out[occupied] = ufunc.reduceat(grouped, starts[occupied])
        return out


def class_code_range(codes, labels, n_classes, index=None):
    """Smallest and largest code of every class (``int64 max`` and ``-1`` for an empty class)."""
    index = index or ClassIndex.of(labels, n_classes)
    grouped = np.asarray(codes)[index.order].astype(np.int64)     # gathered once for both
    return (index.reduce(np.minimum, grouped, np.iinfo(np.int64).max, grouped=True),
            index.reduce(np.maximum, grouped, -1, grouped=True))


def class_distinct_codes(codes, labels, n_classes):
    """Number of distinct codes in every class."""
    _, bounds = class_code_pairs(codes, labels, n_classes)
    return np.diff(bounds)


def _numeric_bounds(col, labels, n_classes, index):
    offset = numeric_offset(col)
    present = col.codes >= offset                  # NULL has code 0 when offset is 1
    codes = col.codes.astype(np.int64)
    lo = index.reduce(np.minimum, np.where(present, codes, np.iinfo(np.int64).max), np.iinfo(np.int64).max)
    hi = index.reduce(np.maximum, np.where(present, codes, -1), -1)
    only_null = hi < 0
    lo[only_null] = 0                              # code 0 is NULL when only_null can happen
    hi[only_null] = 0
    lo_val, hi_val = value_bounds(col, lo, hi)
    has_null = np.zeros(n_classes, dtype=bool)
    if col.null_code is not None:
        has_null[labels[~present]] = True
    return NumericBounds(lo_val, hi_val, has_null)


def class_value_ranks(col, labels, n_classes):
    """Categorical column without hierarchy: ``(by_rank, ranks, bounds)``, the values present in
    every class in output order (strings ascending, NULL last): class ``c`` holds the codes
    ``by_rank[ranks[bounds[c]:bounds[c + 1]]]``. Codes are ranked in that order first, so one
    sort of (class, rank) pairs yields every class's values already sorted."""
    by_label = np.asarray(sorted(range(len(col.labels)),
                                 key=lambda c: (col.labels[c] is None, col.labels[c] or "")),
                          dtype=np.int64)
    rank = np.empty(len(col.labels), dtype=np.int64)
    rank[by_label] = np.arange(len(col.labels))
    ranks, bounds = class_code_pairs(rank[col.codes], labels, n_classes, len(col.labels))
    return by_label, ranks, bounds


def _value_sets(col, labels, n_classes):
    by_label, ranks, bounds = class_value_ranks(col, labels, n_classes)
    values = col.labels[by_label[ranks]].tolist()
    sets = np.empty(n_classes, dtype=object)
    for c in range(n_classes):                  # element-wise: tuples must not be broadcast
        sets[c] = tuple(values[bounds[c]:bounds[c + 1]])   # into a 2-D array
    return sets


def _nullable(values):
    """An array type able to hold a missing value (ints become float64)."""
    if np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_:
        return values.astype(np.float64)
    return values
