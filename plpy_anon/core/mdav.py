"""MDAV microaggregation: k-anonymity for numeric attributes by replacing records with group means.

MDAV (Maximum Distance to Average Vector; Domingo-Ferrer & Mateo-Sanz 2002, Domingo-Ferrer &
Torra 2005) is the microaggregation heuristic the FRED paper (Kumar, Jaiswal & Gupta) uses as its basic
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

from plpy_anon.core.errors import InsufficientData, UnsupportedType
from plpy_anon.core.k_anonymity import check_k


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
    """Squared distances summed column by column: elementwise operations only, so every machine
    rounds them alike (einsum's reduction order follows the CPU's vector width)."""
    diff = points[:, 0] - anchor[0]
    total = diff * diff
    for column in range(1, points.shape[1]):
        diff = points[:, column] - anchor[column]
        total += diff * diff
    return total


def _nearest(distances, count):
    """Positions of the ``count`` smallest distances (the anchor itself, at 0, included); ties at
    the boundary go to the lowest positions. argpartition alone breaks them by its selection
    algorithm, which numpy picks by CPU (AVX-512 or not): the same seed grouped other rows."""
    if count >= len(distances):
        return np.arange(len(distances))
    boundary = np.partition(distances, count - 1)[count - 1]
    below = np.flatnonzero(distances < boundary)
    tied = np.flatnonzero(distances == boundary)
    return np.concatenate([below, tied[: count - len(below)]])


def mdav_labels(z, k):
    """Group label of every row of the standardized matrix ``z``; groups numbered in MDAV order.

    Group 0 is the group formed around the record farthest from the overall centroid. The
    records not yet grouped are kept compacted (their rows and original positions), and the
    distances to r serve twice: to find s and to pick r's nearest neighbours.
    """
    labels = np.empty(len(z), dtype=np.int64)
    positions, points = np.arange(len(z)), z
    next_label = 0

    def take(chosen):
        nonlocal positions, points, next_label
        labels[positions[chosen]] = next_label
        next_label += 1
        keep = np.ones(len(positions), dtype=bool)
        keep[chosen] = False
        positions, points = positions[keep], points[keep]

    def farthest_from_centroid():
        return points[np.argmax(_squared_distances(points, points.mean(axis=0)))]

    while len(positions) >= 3 * k:
        r = farthest_from_centroid()
        to_r = _squared_distances(points, r)
        # s is chosen before r's group leaves; its group is taken among what is left after.
        s = points[np.argmax(to_r)]
        take(_nearest(to_r, k))
        take(_nearest(_squared_distances(points, s), k))
    if len(positions) >= 2 * k:
        take(_nearest(_squared_distances(points, farthest_from_centroid()), k))
    labels[positions] = next_label
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
        values = _as_numeric_matrix(X)
        check_k(self.k, len(values))
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
