"""GroupBoxes.merge_partner (sets of codes as 64-bit words) chooses the partner the test by a
product of 0/1 matrices chooses (the reference below), on random groups, boxes and distances."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core.republication import MERGE_CANDIDATES, GroupBoxes, _squared_distances


def reference_partner(labels, n_groups, points, ranged, g, distance):
    dims = []
    for d in range(points.shape[1]):
        col = points[:, d]
        if ranged[d]:
            low = np.full(n_groups, np.inf)
            high = np.full(n_groups, -np.inf)
            np.minimum.at(low, labels, col)
            np.maximum.at(high, labels, col)
            dims.append((low, high))
        else:
            _, code = np.unique(col, return_inverse=True)
            member = np.zeros((n_groups, int(code.max()) + 1), dtype=bool)
            member[labels, code.ravel()] = True
            dims.append((member,))
    near = np.argsort(distance, kind="stable")[:MERGE_CANDIDATES]
    near = near[np.isfinite(distance[near])]
    if near.size <= 1:
        return int(near[0]) if near.size else int(np.argmin(distance))
    meet = np.ones((near.size, n_groups), dtype=bool)
    for dim in dims:
        if len(dim) == 2:
            low, high = dim
            lo, hi = np.minimum(low[g], low[near]), np.maximum(high[g], high[near])
            meet &= (lo[:, None] <= high[None, :]) & (low[None, :] <= hi[:, None])
        else:
            member = dim[0]
            union = member[g][None, :] | member[near]
            meet &= (union.astype(np.float32) @ member.T.astype(np.float32)) > 0
    meet[:, g] = False
    meet[np.arange(near.size), near] = False
    return int(near[np.lexsort((distance[near], meet.sum(axis=1)))[0]])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 60), st.integers(1, 4),
       st.sampled_from([3, 30, 70, 140]))
def test_merge_partner_is_the_reference_choice(seed, n_groups, d, codes):
    rng = np.random.default_rng(seed)
    n = n_groups + int(rng.integers(0, 3 * n_groups))
    labels = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    ranged = rng.random(d) < 0.5
    # sets up to 140 codes: more than one 64-bit word
    points = np.column_stack([rng.random(n) if ranged[j] else rng.integers(0, codes, n) / codes
                              for j in range(d)])
    boxes = GroupBoxes(labels, n_groups, points, ranged)
    for _ in range(5):
        g = int(rng.integers(0, n_groups))
        distance = rng.random(n_groups).round(1)  # ties
        distance[g] = np.inf
        distance[rng.random(n_groups) < 0.3] = np.inf
        assert boxes.merge_partner(g, distance) == reference_partner(
            labels, n_groups, points, ranged, g, distance)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 40), st.integers(1, 10))
def test_squared_distances_are_the_floats_of_the_broadcast_sum(seed, rows, groups, d):
    """Summed dimension by dimension, the same floats (so the same nearest group, ties
    included) as the (rows, groups, d) array summed on its last axis."""
    rng = np.random.default_rng(seed)
    points = rng.random((rows, d))
    centroids = np.concatenate([rng.random((groups, d)), points[:1]])  # a tie at distance 0
    want = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
    assert np.array_equal(_squared_distances(points, centroids), want)
