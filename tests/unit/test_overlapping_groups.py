"""The unions of overlapping released boxes found by sort and sweep are those the test of every
pair of groups finds (the reference below), on random groups with ranges, sets and NULLs."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import republish
from plpy_anon.core.disjoint_sets import SmallestRootSets


def every_pair(index, n_groups, qi_codes, ranged):
    """The reference: every pair of groups tested on every QI."""
    tests = []
    for d in range(qi_codes.shape[1]):
        col = np.asarray(qi_codes[:, d], dtype=np.int64)
        if ranged[d]:
            valued = col >= 0
            low = np.full(n_groups, np.iinfo(np.int64).max)
            high = np.full(n_groups, -1)
            np.minimum.at(low, index[valued], col[valued])
            np.maximum.at(high, index[valued], col[valued])
            null = np.full(n_groups, bool((~valued).any()))
            tests.append(("range", low, high, null))
        else:
            _, code = np.unique(col, return_inverse=True)
            member = np.zeros((n_groups, int(code.max()) + 1), dtype=np.float32)
            member[index, code.ravel()] = 1.0
            tests.append(("set", member))
    sets = SmallestRootSets(n_groups)
    found = False
    meet = np.arange(n_groups)[None, :] < np.arange(n_groups)[:, None]
    for test in tests:
        if test[0] == "range":
            _, low, high, null = test
            meet &= ((low[:, None] <= high[None, :]) & (low[None, :] <= high[:, None])) \
                | null[:, None] | null[None, :]
        else:
            meet &= (test[1] @ test[1].T) > 0
    for g, h in zip(*np.nonzero(meet)):
        if sets.find(int(g)) != sets.find(int(h)):
            sets.union(int(g), int(h))
            found = True
    return sets.roots() if found else None


@st.composite
def grouped_rows(draw):
    n = draw(st.integers(1, 120))
    n_groups = draw(st.integers(1, min(n, 40)))
    d = draw(st.integers(1, 4))
    ranged = np.array(draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    index = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    cols = []
    for dim in range(d):
        spread = draw(st.sampled_from([2, 5, 40, 1000]))
        # groups sit around their own place, so that some boxes are apart and some overlap
        col = (index * spread // 3 + rng.integers(0, spread, n)) % (spread * n_groups)
        if draw(st.booleans()):
            col = np.where(rng.random(n) < 0.1, -1, col)  # NULLs (a range's) or one more code
        cols.append(col)
    return index, n_groups, np.column_stack(cols).astype(np.int64), ranged


@settings(max_examples=300, deadline=None)
@given(grouped_rows(), st.sampled_from([1, 3, 1 << 20]), st.sampled_from([2, 5, 32]))
def test_cuts_find_the_unions_every_pair_finds(case, chunk, leaf):
    index, n_groups, qi_codes, ranged = case
    original = republish.PAIR_CHUNK, republish.LEAF
    # small chunks: unions joined across chunks; small parts: many cuts
    republish.PAIR_CHUNK, republish.LEAF = chunk, leaf
    try:
        got = republish.overlapping_groups(index, n_groups, qi_codes, ranged)
    finally:
        republish.PAIR_CHUNK, republish.LEAF = original
    want = every_pair(index, n_groups, qi_codes, ranged)
    if want is None:
        assert got is None
    else:
        assert got is not None and np.array_equal(got, want)


def test_disjoint_boxes_cost_no_square_of_the_groups():
    """20,000 groups in a row of disjoint ranges: apart, found by testing a few pairs per group
    (parts of at most LEAF groups), not the 2e8 pairs of every two."""
    n_groups = 20_000
    index = np.repeat(np.arange(n_groups), 10)
    qi_codes = np.column_stack([np.arange(index.size), index % 7])
    tested = []
    original = republish._candidate_pairs

    def counting(tests, n):
        for a, b in original(tests, n):
            tested.append(a.size)
            yield a, b

    republish._candidate_pairs = counting
    try:
        assert republish.overlapping_groups(index, n_groups, qi_codes, np.array([True, False])) is None
    finally:
        republish._candidate_pairs = original
    assert sum(tested) < republish.LEAF * n_groups


def linked_by_rows(index, n_groups, qi_codes, ranged):
    """The reference: every row tested against every group's box; a row links the groups whose
    boxes hold it (its own included)."""
    holds = np.ones((index.size, n_groups), dtype=bool)
    for d in range(qi_codes.shape[1]):
        col = np.asarray(qi_codes[:, d], dtype=np.int64)
        if ranged[d]:
            valued = col >= 0
            low = np.full(n_groups, np.iinfo(np.int64).max)
            high = np.full(n_groups, -1)
            np.minimum.at(low, index[valued], col[valued])
            np.maximum.at(high, index[valued], col[valued])
            # a NULL lies in every range
            holds &= ~valued[:, None] | ((low[None, :] <= col[:, None]) & (col[:, None] <= high[None, :]))
        else:
            member = {(int(g), int(c)) for g, c in zip(index, col)}
            holds &= np.array([[(g, int(c)) in member for g in range(n_groups)] for c in col])
    sets = SmallestRootSets(n_groups)
    found = False
    for row in holds:
        groups = np.flatnonzero(row).tolist()
        for g in groups[1:]:
            if sets.find(g) != sets.find(groups[0]):
                sets.union(g, groups[0])
                found = True
    return sets.roots() if found else None


@settings(max_examples=300, deadline=None)
@given(grouped_rows(), st.sampled_from([1, 3, 1 << 20]), st.sampled_from([2, 5, 32]))
def test_groups_linked_by_people_are_those_some_row_lies_in_at_once(case, chunk, leaf):
    index, n_groups, qi_codes, ranged = case
    original = republish.PAIR_CHUNK, republish.LEAF
    republish.PAIR_CHUNK, republish.LEAF = chunk, leaf
    try:
        got = republish.people_linked_groups(index, n_groups, qi_codes, ranged)
    finally:
        republish.PAIR_CHUNK, republish.LEAF = original
    want = linked_by_rows(index, n_groups, qi_codes, ranged)
    if want is None:
        assert got is None
    else:
        assert got is not None and np.array_equal(got, want)
