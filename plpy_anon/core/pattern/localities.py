"""Locality properties of a sorted segment (the pattern-preserving paper, section 3) and their sampling.

A *locality* of the triple ``i < j < k`` of a sorted segment ``d`` (so ``d_i <= d_j <= d_k``) says
which of the two neighbours of ``d_j`` is closer::

    relation +1:  |d_i - d_j| <= |d_j - d_k|      (i is not farther from j than k)
    relation -1:  |d_i - d_j| >= |d_j - d_k|      (strictly: the "+1" comparison is false)

Reading chosen where the paper's text is lost: every triple gets the relation that holds; an
exact tie (``|d_i - d_j| == |d_j - d_k|``, e.g. three equal values) gets both, i.e. "equally
far".  With ``i < j < k`` in sorted order the distances are ``d_j - d_i`` and ``d_k - d_j``, and a
locality is the linear constraint ``relation * (2 x_j - x_i - x_k) <= delta`` -- the paper's
locality with its slack ``delta > 0`` (see :mod:`.release`), read on signed distances.  With
``delta > 0`` a tie is a band of width ``2 delta``, never an equality that pins equal values to
each other.

Pruning (the paper's two rules, its "circle around d_j"): for a pair ``i < j`` the breakpoint
``beta = 2 d_j - d_i`` splits the values after ``j``: every ``k`` with ``d_k >= beta`` gets ``+1``
and every ``k`` with ``d_k < beta`` gets ``-1``.  Only the two neighbours of the breakpoint are
kept -- ``k+`` (first index with ``d_k >= beta``) and ``k-`` (last index with ``d_k <= beta``:
values equal to ``beta`` are exact ties and hold both relations) -- because together with the
order they imply all the others:

    k >= k+:  x_j - x_i <= x_{k+} - x_j <= x_k - x_j
    k <= k-:  x_k - x_j <= x_{k-} - x_j <= x_j - x_i

(These implications use the order; the release does not impose the order -- its polytope is the
sampled localities and the domain bounds only -- so pruning is a choice of which localities to
keep, not a loss-free compression, there.)
So a segment of size ``s`` yields at most ``2 * C(s-1, 2)`` localities (plus one per exact tie) instead of ``C(s, 3)``,
computed with one vectorized ``searchsorted`` over the ``O(s^2)`` pairs (``O(s^2 log s)``
comparisons in C, no Python loop).  Relations are decided in float64 arithmetic, which is exact
for integers below 2**52 -- the release driver only calls this on values where that holds or where
ties have been broken by a margin far above rounding error.
"""

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from plpy_anon.core.errors import InvalidParameter

NOT_FARTHER = np.int8(1)
NOT_CLOSER = np.int8(-1)


@dataclass(frozen=True)
class Localities:
    """Parallel arrays: ``relation[r] * (2 x[middle[r]] - x[first[r]] - x[last[r]]) <= 0``."""

    first: np.ndarray
    middle: np.ndarray
    last: np.ndarray
    relation: np.ndarray

    def __len__(self):
        return int(self.first.size)

    def take(self, index):
        """The localities at positions ``index`` (an integer array or a boolean mask)."""
        return Localities(self.first[index], self.middle[index], self.last[index],
                          self.relation[index])

    def relabel(self, labels):
        """The same localities with every position ``p`` renamed ``labels[p]`` (e.g. row ids)."""
        labels = np.asarray(labels)
        return Localities(labels[self.first], labels[self.middle], labels[self.last],
                          self.relation)

    @classmethod
    def concatenate(cls, parts):
        parts = list(parts)
        if not parts:
            return empty_localities()
        return cls(*(np.concatenate([getattr(p, name) for p in parts])
                     for name in ("first", "middle", "last", "relation")))


def empty_localities(dtype=np.intp):
    none = np.empty(0, dtype=dtype)
    return Localities(none, none, none, np.empty(0, dtype=np.int8))


def extract_localities(values):
    """The pruned localities of a sorted (non-decreasing) 1-D segment, as positions into it."""
    d = np.asarray(values, dtype=np.float64)
    if d.ndim != 1:
        raise InvalidParameter(f"a segment must be one-dimensional, got shape {d.shape}",
                               hint="pass one column's sorted values")
    if np.any(np.diff(d) < 0) or np.isnan(d).any():
        raise InvalidParameter("locality extraction needs the segment sorted in non-decreasing "
                               "order without NaN", hint="sort the values (np.sort) first")
    size = d.size
    if size < 3:
        return empty_localities()
    # pairs i < j with at least one k after j, i.e. j <= size - 2
    first, middle = np.triu_indices(size - 1, k=1)
    breakpoint_ = 2.0 * d[middle] - d[first]
    # side="left": the first value >= beta; ties with beta count as "+1" (<=).  When d_i == d_j
    # the breakpoint is d_j itself and searchsorted may land at or before j: clamp to j + 1.
    k_plus = np.maximum(np.searchsorted(d, breakpoint_, side="left"), middle + 1)
    # "-1" holds for every k with d_k <= beta (an exact tie holds both ways): keep the last one
    k_minus = np.searchsorted(d, breakpoint_, side="right") - 1
    has_plus = k_plus < size
    has_minus = k_minus > middle
    plus = Localities(first[has_plus], middle[has_plus], k_plus[has_plus],
                      np.full(int(has_plus.sum()), NOT_FARTHER))
    minus = Localities(first[has_minus], middle[has_minus], k_minus[has_minus],
                       np.full(int(has_minus.sum()), NOT_CLOSER))
    return Localities.concatenate([plus, minus])


def check_fraction(sample):
    """Validate the sampling fraction rho in (0, 1]."""
    if isinstance(sample, bool) or not isinstance(sample, (int, float, np.integer, np.floating)):
        raise InvalidParameter(f"sample must be a number in (0, 1], got {sample!r}",
                               hint="e.g. sample => 0.3 keeps 30% of the localities")
    if not 0.0 < float(sample) <= 1.0:
        raise InvalidParameter(f"sample must be in (0, 1], got {sample}",
                               hint="e.g. sample => 0.3 keeps 30% of the localities; 1 keeps all")
    return float(sample)


def sample_localities(localities, sample, rng):
    """A uniform random subset of ``ceil(sample * len)`` localities (without replacement).

    The subset keeps the input order, so the same ``rng`` state always yields the same rows.
    """
    sample = check_fraction(sample)
    total = len(localities)
    count = min(total, int(np.ceil(sample * total - 1e-9)))
    if count == total:
        return localities
    chosen = np.sort(rng.choice(total, size=count, replace=False))
    return localities.take(chosen)


def order_rows(size):
    """The order constraints ``x_t - x_{t+1} <= 0`` of a segment, as (positions, positions+1)."""
    lower = np.arange(size - 1)
    return lower, lower + 1


def constraint_matrix(localities, size, order=False):
    """``A`` (CSR) with ``A x <= 0`` iff ``x`` keeps the localities (in their signed form) and,
    with ``order=True``, the segment's order.

    Rows: first the ``size - 1`` order constraints (``order=True`` only), then one row per
    locality.  The release walks with ``order=False``: localities and bounds only.
    """
    below, above = order_rows(size if order else 1)
    n_order, n_loc = below.size, len(localities)
    rows = np.concatenate([np.repeat(np.arange(n_order), 2),
                           n_order + np.repeat(np.arange(n_loc), 3)])
    cols = np.concatenate([np.column_stack([below, above]).ravel(),
                           np.column_stack([localities.first, localities.middle,
                                            localities.last]).ravel()])
    sign = localities.relation.astype(np.float64)
    coef = np.concatenate([np.tile([1.0, -1.0], n_order),
                           np.column_stack([-sign, 2.0 * sign, -sign]).ravel()])
    return sparse.csr_matrix((coef, (rows, cols)), shape=(n_order + n_loc, size))
