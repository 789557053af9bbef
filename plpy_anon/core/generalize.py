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
                return np.zeros(len(lo))
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


def class_bounds(columns, labels, n_classes):
    """Generalized value of every class on every column, keyed by column name.

    * numeric: :class:`NumericBounds` (arrays of length ``n_classes``);
    * categorical without hierarchy: object array of sorted tuples of the values present
      (``None`` = NULL, sorted last);
    * categorical with hierarchy: object array of LCA labels (``None`` when the class holds only
      NULL; the root when it mixes NULL and values).
    """
    labels = np.asarray(labels)
    out = {}
    for col in columns:
        if col.kind == "numeric":
            out[col.name] = _numeric_bounds(col, labels, n_classes)
        elif col.hierarchy is None:
            out[col.name] = _value_sets(col, labels, n_classes)
        else:
            lo, hi = class_code_range(col.codes, labels, n_classes)
            out[col.name] = SpreadMeasure(col).lca_labels(lo, hi)
    return out


def class_code_range(codes, labels, n_classes):
    """Smallest and largest code of every class."""
    lo = np.full(n_classes, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n_classes, -1, dtype=np.int64)
    np.minimum.at(lo, labels, codes)
    np.maximum.at(hi, labels, codes)
    return lo, hi


def class_distinct_codes(codes, labels, n_classes):
    """Number of distinct codes in every class."""
    pairs = np.unique(labels.astype(np.int64) * (int(codes.max()) + 1) + codes)
    return np.bincount(pairs // (int(codes.max()) + 1), minlength=n_classes)


def _numeric_bounds(col, labels, n_classes):
    offset = numeric_offset(col)
    present = col.codes >= offset                  # NULL has code 0 when offset is 1
    lo, hi = class_code_range(col.codes[present], labels[present], n_classes)
    only_null = hi < 0
    lo[only_null] = 0                              # code 0 is NULL when only_null can happen
    hi[only_null] = 0
    lo_val, hi_val = value_bounds(col, lo, hi)
    has_null = np.zeros(n_classes, dtype=bool)
    if col.null_code is not None:
        has_null[np.unique(labels[~present])] = True
    return NumericBounds(lo_val, hi_val, has_null)


def _value_sets(col, labels, n_classes):
    # rank codes in output order (strings ascending, NULL last) so one sort of (class, rank)
    # pairs yields every class's tuple already sorted
    by_label = sorted(range(len(col.labels)),
                      key=lambda c: (col.labels[c] is None, col.labels[c] or ""))
    rank = np.empty(len(col.labels), dtype=np.int64)
    rank[by_label] = np.arange(len(col.labels))
    width = len(col.labels)
    pairs = np.unique(labels.astype(np.int64) * width + rank[col.codes])
    values = col.labels[np.asarray(by_label, dtype=np.int64)[pairs % width]]
    bounds = np.searchsorted(pairs // width, np.arange(1, n_classes))
    sets = np.empty(n_classes, dtype=object)
    for c, group in enumerate(np.split(values, bounds)):   # element-wise: tuples must not
        sets[c] = tuple(group)                              # be broadcast into a 2-D array
    return sets


def _nullable(values):
    """An array type able to hold a missing value (ints become float64)."""
    if np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_:
        return values.astype(np.float64)
    return values
