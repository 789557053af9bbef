"""Compiled (numba) kernels of the stable refresh's grouping; imported only through
:func:`plpy_anon.core.republication._kernels`, which points numba's cache where the Mondrian
kernels' is (:mod:`.mondrian_jit`). Each does the numpy version's arithmetic in the same order,
so its floats, and the choices made from them, are the same (tests/unit/test_republication_kernels.py
compares them)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _join_key(px, codes, ranged, low, high, held, offsets, centroids, i, h):
    """Row i's key for group h: ``outside * 1e6 + distance``, summed in the numpy version's
    order."""
    outside = 0.0
    for d in range(px.shape[1]):
        if ranged[d]:
            x = px[i, d]
            v = max(max(low[d, h] - x, x - high[d, h]), 0.0)
            outside += v * v
        elif not held[offsets[d] + codes[i, d], h]:
            outside += 1.0
    distance = 0.0
    for d in range(px.shape[1]):
        v = px[i, d] - centroids[h, d]
        distance += v * v
    return outside * 1e6 + distance


@njit(cache=True, nogil=True)
def join_nearest(px, codes, ranged, low, high, held, offsets, centroids, out):
    """For each row of ``px`` (m, D): the group (of G) minimizing ``outside * 1e6 + distance``,
    the first on ties (numpy's argmin): ``outside`` sums, per dimension, the squared distance
    outside the group's range (``low``/``high`` (D, G), ``ranged``) or 1 when the row's value
    (``codes`` (m, D)) is not in the group's set (``held`` (sum V, G), dimension d's values
    from ``offsets[d]``); ``distance``, the squared distance to the group's centroid
    (``centroids`` (G, D)). ``out`` holds on entry the group to try first for row 0; after it,
    each row's group is tried first for the next (rows come sorted, so it is near).

    A group is left as soon as part of its outside exceeds the best key so far: every term is
    >= 0, so a sum of a subset of them, in their order, is no larger in floats either, and the
    key could only be larger. The sets first (a value not in the group's set adds 1, the most
    a term adds), then the ranges."""
    m = px.shape[0]
    n_groups = centroids.shape[0]
    sets = np.flatnonzero(~ranged)
    ranges = np.flatnonzero(ranged)
    missing = np.empty(n_groups, dtype=np.int64)
    seed = out[0]
    for i in range(m):
        best = _join_key(px, codes, ranged, low, high, held, offsets, centroids, i, seed)
        arg = seed
        # the values each group's sets miss, for all groups at once (one row of held per set)
        missing[:] = 0
        for j in range(sets.size):
            row = held[offsets[sets[j]] + codes[i, sets[j]]]
            for h in range(n_groups):
                missing[h] += 1 - row[h]
        for h in range(n_groups):
            if h == seed or missing[h] * 1e6 > best:
                continue
            pruned = False
            outside = 0.0
            for j in range(ranges.size):
                d = ranges[j]
                x = px[i, d]
                v = max(max(low[d, h] - x, x - high[d, h]), 0.0)
                outside += v * v
                if outside * 1e6 > best:
                    pruned = True
                    break
            if pruned:
                continue
            key = _join_key(px, codes, ranged, low, high, held, offsets, centroids, i, h)
            if key < best or (key == best and h < arg):
                best = key
                arg = h
        out[i] = arg
        seed = arg


@njit(cache=True, nogil=True)
def overlap_counts(g, near, lo, hi, low, high, union, words, word_offsets, out):
    """For each candidate ``near[i]``: how many groups (other than ``g`` and itself) the box of
    ``g`` merged with it meets: on every ranged dimension its range [``lo[i, r]``,
    ``hi[i, r]``] meets the group's (``low``/``high`` (G, R)), on every set dimension s its
    set's bit words (``union[i]``, from ``word_offsets[s]``) share a bit with the group's
    (``words`` (G, W)). Group by group, each tested against every candidate."""
    n_groups = words.shape[0]
    n_ranged = low.shape[1]
    n_sets = word_offsets.size - 1
    out[:] = 0
    for h in range(n_groups):
        if h == g:
            continue
        for i in range(near.size):
            if h == near[i]:
                continue
            meets = True
            for r in range(n_ranged):
                if not (lo[i, r] <= high[h, r] and low[h, r] <= hi[i, r]):
                    meets = False
                    break
            if meets:
                for s in range(n_sets):
                    common = False
                    for w in range(word_offsets[s], word_offsets[s + 1]):
                        if union[i, w] & words[h, w]:
                            common = True
                            break
                    if not common:
                        meets = False
                        break
            if meets:
                out[i] += 1
