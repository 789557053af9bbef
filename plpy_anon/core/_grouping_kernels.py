"""Compiled (numba) per-group reductions of the stable refresh's grouping and publication, in
one pass over the rows where numpy's ``ufunc.at`` goes through a slow generic loop; imported
only through :func:`plpy_anon.core.republication._grouping_kernels`. Each gives numpy's result
exactly (tests/unit/test_grouping_kernels.py)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def group_min_max(labels, values, low, high):
    """``np.minimum.at(low, labels, values)`` and ``np.maximum.at(high, labels, values)``: a NaN
    stays, as numpy's minimum and maximum keep it."""
    for i in range(labels.size):
        g = labels[i]
        x = values[i]
        if not np.isnan(low[g]) and (x < low[g] or np.isnan(x)):
            low[g] = x
        if not np.isnan(high[g]) and (x > high[g] or np.isnan(x)):
            high[g] = x


@njit(cache=True, nogil=True)
def add_rows(out, at, rows):
    """``np.add.at(out, at, rows)`` of 2-d integer ``out`` and ``rows``."""
    for i in range(at.size):
        g = at[i]
        for j in range(rows.shape[1]):
            out[g, j] += rows[i, j]


@njit(cache=True, nogil=True)
def counting_order(keys, n_keys):
    """``np.argsort(keys, kind="stable")`` of integers in [0, n_keys): by counting."""
    starts = np.zeros(n_keys + 1, dtype=np.int64)
    for i in range(keys.size):
        starts[keys[i] + 1] += 1
    for k in range(n_keys):
        starts[k + 1] += starts[k]
    order = np.empty(keys.size, dtype=np.int64)
    for i in range(keys.size):
        k = keys[i]
        order[starts[k]] = i
        starts[k] += 1
    return order
