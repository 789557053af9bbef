"""MDAV microaggregation: k-anonymity for numeric attributes by replacing records with group means.

MDAV (Maximum Distance to Average Vector; Domingo-Ferrer & Mateo-Sanz 2002, Domingo-Ferrer &
Torra 2005) is the microaggregation heuristic the FRED paper (seed 004) uses as its basic
k-anonymization. On the standardized attributes, with R the records not yet grouped:

* while |R| >= 3k: take the centroid c of R, the record r farthest from c and the record s
  farthest from r; form a group of r and its k-1 nearest neighbours in R, remove it, then a
  group of s and its k-1 nearest neighbours among what is left, remove it;
* after the loop |R| < 3k. If |R| >= 2k, form one more group around the record farthest from
  the centroid of R, and the k..2k-1 records left form the last group; otherwise R itself
  (k..2k-1 records, since n >= k and groups are removed k at a time) is the last group.

So every group has exactly k records except the last, which has k..2k-1 -- the property the
tests check. Replacing each record's attributes by its group's mean makes the release
k-anonymous on those attributes.

The loop over groups is inherent to MDAV (each group depends on the previous removals); each
step is a vectorized distance computation over the remaining records, so the cost is
O(n^2 p / k).
"""

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType


def standardize(values):
    """Z-scores per column (population std); a constant column becomes all zeros.

    Returns ``(z, mean, scale)``. A constant column gets scale 1 so it contributes nothing to
    distances instead of dividing by zero.
    """
    mean = values.mean(axis=0)
    scale = values.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return (values - mean) / scale, mean, scale


def _squared_distances(points, anchor):
    return np.einsum("ij,ij->i", points - anchor, points - anchor)


def _nearest(points, anchor, count):
    """Positions of the ``count`` points nearest to ``anchor`` (the anchor itself included)."""
    distances = _squared_distances(points, anchor)
    if count >= len(points):
        return np.arange(len(points))
    return np.argpartition(distances, count - 1)[:count]


def mdav_labels(z, k):
    """Group label of every row of the standardized matrix ``z``; groups numbered in MDAV order.

    Group 0 is the group formed around the record farthest from the overall centroid.
    """
    n_rows = len(z)
    labels = np.empty(n_rows, dtype=np.int64)
    remaining = np.arange(n_rows)
    next_label = 0

    def take_group_around(anchor):
        # The anchor is a vector, not a row: in the >= 3k loop the record s was chosen before
        # r's group was removed, and its neighbourhood is taken among what is left afterwards.
        nonlocal remaining, next_label
        chosen = _nearest(z[remaining], anchor, k)
        labels[remaining[chosen]] = next_label
        next_label += 1
        remaining = np.delete(remaining, chosen)

    while len(remaining) >= 3 * k:
        points = z[remaining]
        centroid = points.mean(axis=0)
        farthest_from_centroid = points[np.argmax(_squared_distances(points, centroid))]
        farthest_from_that = points[np.argmax(_squared_distances(points, farthest_from_centroid))]
        take_group_around(farthest_from_centroid)
        take_group_around(farthest_from_that)
    if len(remaining) >= 2 * k:
        points = z[remaining]
        centroid = points.mean(axis=0)
        take_group_around(points[np.argmax(_squared_distances(points, centroid))])
    labels[remaining] = next_label
    return labels


def _as_numeric_matrix(X):
    frame = pd.DataFrame(X)
    non_numeric = [str(c) for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if non_numeric:
        raise UnsupportedType(
            f"MDAV microaggregates numeric attributes only; not numeric: {', '.join(non_numeric)}",
            hint="Pass only numeric columns, or cast them (e.g. ranks or codes) before anonymizing.",
        )
    values = frame.to_numpy(dtype=float)
    if not np.isfinite(values).all():
        raise InsufficientData(
            "MDAV needs a value in every attribute of every row; found NULL/NaN or infinite values",
            hint="Filter or impute the missing values before anonymizing.",
        )
    return values


class MDAV:
    """MDAV microaggregation estimator (scikit-learn style).

    Parameters
    ----------
    k : int
        Minimum group size (>= 2).

    Attributes set by ``fit``
    -------------------------
    labels_ : ndarray of int, group of each row (0 = first group formed).
    group_sizes_ : ndarray of int, size of each group, indexed by label.
    centroids_ : ndarray (n_groups, n_attributes), group means in the original units.
    mean_, scale_ : the standardization used for distances.
    """

    def __init__(self, k=2):
        self.k = k

    def fit(self, X):
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)) or self.k < 2:
            raise InvalidParameter(
                f"k must be an integer >= 2, got {self.k!r}",
                hint="k is the minimum group size; k = 1 would release the data unchanged.",
            )
        values = _as_numeric_matrix(X)
        if len(values) < self.k:
            raise InsufficientData(
                f"k = {self.k} exceeds the {len(values)} rows to anonymize",
                hint=f"Use k <= {len(values)}, or anonymize a larger table.",
            )
        z, self.mean_, self.scale_ = standardize(values)
        self.labels_ = mdav_labels(z, int(self.k))
        self.group_sizes_ = np.bincount(self.labels_)
        sums = np.zeros((len(self.group_sizes_), values.shape[1]))
        np.add.at(sums, self.labels_, values)
        self.centroids_ = sums / self.group_sizes_[:, None]
        return self

    def fit_transform(self, X):
        """Each row's attributes replaced by its group's mean; a DataFrame stays a DataFrame."""
        self.fit(X)
        aggregated = self.centroids_[self.labels_]
        if isinstance(X, pd.DataFrame):
            return pd.DataFrame(aggregated, index=X.index, columns=X.columns)
        return aggregated


def microaggregate(X, k):
    """Shorthand for ``MDAV(k).fit_transform(X)``."""
    return MDAV(k=k).fit_transform(X)
