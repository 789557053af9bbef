"""Utility metrics of a pattern-preserving release (the pattern-preserving paper, section 5).

* :func:`distortion` -- ``Dst``, the mean relative error per entry,
  ``Dst = 1/|E| * sum_{(r,c) in E} |t_rc - t'_rc| / |t_rc|``.  Reading chosen (the formula is lost
  in the extracted text): ``E`` is the set of non-NULL entries whose original value is not 0
  (the relative error of a 0 is undefined); NULLs stay NULL in every release we compare.
* :func:`rank_correlation` -- Spearman's rho between original and released column: how much of
  the order survives, next to ``Dst`` which says how much of the value does.
* :func:`unchanged_fraction` -- per column, the share of non-NULL entries released exactly as
  they were: the walk can move values by less than the source's precision, and then rounding
  gives the original back; a release refuses above ``max_unchanged``.
* :func:`preserved_fraction` -- the fraction of (sampled) localities that hold on the released
  values within their slack ``delta`` (``relation * (2 x_j - x_i - x_k) <= delta``, the form the
  walk keeps), in exact integer arithmetic when the values lie on a decimal grid.  A correct
  release scores 1.0.
"""

import numpy as np
from scipy import stats

from plpy_anon.core.errors import InvalidParameter


def _as_2d(values):
    array = np.asarray(values, dtype=np.float64)
    return array[:, None] if array.ndim == 1 else array


def _check_same_shape(original, released):
    if original.shape != released.shape:
        raise InvalidParameter(f"original {original.shape} and released {released.shape} "
                               "differ in shape", hint="compare a release with its own source")


def distortion_per_column(original, released):
    """``Dst`` of every column (NaN for a column with no non-zero, non-NULL entry)."""
    original, released = _as_2d(original), _as_2d(released)
    _check_same_shape(original, released)
    usable = ~np.isnan(original) & ~np.isnan(released) & (original != 0)
    error = np.zeros_like(original)
    np.divide(np.abs(original - released), np.abs(original), out=error, where=usable)
    counts = usable.sum(axis=0)
    with np.errstate(invalid="ignore"):
        return error.sum(axis=0) / counts


def distortion(original, released):
    """``Dst`` over all usable entries of all columns (the paper's single number)."""
    original, released = _as_2d(original), _as_2d(released)
    _check_same_shape(original, released)
    usable = ~np.isnan(original) & ~np.isnan(released) & (original != 0)
    if not usable.any():
        return float("nan")
    relative = np.abs(original[usable] - released[usable]) / np.abs(original[usable])
    return float(relative.mean())


def unchanged_fraction(original, released):
    """Per column, the fraction of non-NULL entries whose released value equals the original."""
    original, released = _as_2d(original), _as_2d(released)
    _check_same_shape(original, released)
    present = ~np.isnan(original)
    with np.errstate(invalid="ignore"):
        return (present & (original == released)).sum(axis=0) / present.sum(axis=0)


def rank_correlation(original, released):
    """Spearman's rank correlation of every column over its rows with both values present."""
    original, released = _as_2d(original), _as_2d(released)
    _check_same_shape(original, released)
    result = np.full(original.shape[1], np.nan)
    for column in range(original.shape[1]):   # a handful of columns: the loop is cheap
        both = ~np.isnan(original[:, column]) & ~np.isnan(released[:, column])
        if both.sum() >= 2:
            result[column] = stats.spearmanr(original[both, column],
                                             released[both, column]).statistic
    return result


def preserved_fraction(released, localities, decimals=None, slack=0.0):
    """Fraction of ``localities`` (positions into ``released``) that hold on ``released`` within
    ``slack`` (a number or one per locality): ``relation * (2 x_j - x_i - x_k) <= slack``.

    ``decimals``: when the values lie on the grid ``10**-decimals`` they are compared as exact
    integers ``round(value * 10**decimals)``; ``None`` compares the float values directly.
    """
    if len(localities) == 0:
        return 1.0
    values = np.asarray(released, dtype=np.float64)
    slack = np.broadcast_to(np.asarray(slack, dtype=np.float64), (len(localities),))

    def exact(picked):
        if decimals is None:
            return picked
        return np.rint(picked * 10.0 ** decimals).astype(np.int64)

    first, middle, last = (exact(values[p]) for p in (localities.first, localities.middle,
                                                      localities.last))
    bound = slack if decimals is None else np.floor(slack * 10.0 ** decimals + 1e-6)
    signed = localities.relation.astype(np.int64) * (2 * middle - first - last)
    return float(np.mean(signed <= bound))
