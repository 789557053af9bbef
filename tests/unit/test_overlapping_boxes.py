"""The stable check's sweep over released class boxes finds exactly the pairs that meet on every
dimension, as testing every pair does."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.db.republication import overlapping_boxes, overlapping_sets


@st.composite
def boxes(draw):
    count = draw(st.integers(0, 40))
    dims = draw(st.integers(0, 3))
    width = draw(st.sampled_from([3, 10, 1000]))
    lo = np.array(draw(st.lists(st.lists(st.integers(0, width), min_size=dims, max_size=dims),
                                min_size=count, max_size=count)), dtype=np.int64).reshape(count, dims)
    extent = np.array(draw(st.lists(st.lists(st.integers(0, width), min_size=dims, max_size=dims),
                                    min_size=count, max_size=count)), dtype=np.int64).reshape(count, dims)
    return lo, lo + extent


def every_pair(lo, hi):
    return {(a, b) for a in range(len(lo)) for b in range(a + 1, len(lo))
            if all(lo[a, d] <= hi[b, d] and lo[b, d] <= hi[a, d] for d in range(lo.shape[1]))}


def components(pairs, count):
    parent = list(range(count))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x
    for a, b in pairs:
        parent[find(a)] = find(b)
    return sorted(sorted(i for i in range(count) if find(i) == r) for r in {find(i) for i in range(count)})


@settings(max_examples=300, deadline=None)
@given(boxes(), st.sampled_from(["numpy", "numba"]))
def test_the_sweep_finds_the_pairs_every_pair_test_finds(case, engine):
    lo, hi = case
    a, b = overlapping_boxes(lo, hi, engine=engine)
    found = set(zip(a.tolist(), b.tolist()))
    if lo.shape[1] == 0:        # every box meets every other: one union, linked as a chain
        assert components(found, len(lo)) == components(every_pair(lo, hi), len(lo))
    else:
        assert found == every_pair(lo, hi)
        assert len(found) == len(a)


def test_a_partition_into_disjoint_boxes_tests_about_as_many_pairs_as_boxes():
    side = 200
    x, y = np.meshgrid(np.arange(side), np.arange(side))
    lo = np.column_stack([x.ravel() * 2, y.ravel() * 2]).astype(np.int64)
    for engine in ("numpy", "numba"):
        a, _ = overlapping_boxes(lo, lo + 1, engine=engine)
        assert a.size == 0


@st.composite
def boxes_with_sets(draw):
    lo, hi = draw(boxes())
    count = lo.shape[0]
    dims = draw(st.integers(0 if lo.shape[1] else 1, 2))
    universe = draw(st.sampled_from([["a", "b"], ["a", "b", None], [f"v{i}" for i in range(70)]]))
    sets = [[draw(st.lists(st.sampled_from(universe), min_size=1, max_size=4)) for _ in range(count)]
            for _ in range(dims)]
    return lo, hi, sets


@settings(max_examples=300, deadline=None)
@given(boxes_with_sets(), st.sampled_from(["numpy", "numba"]))
def test_boxes_with_value_sets_link_the_classes_every_pair_test_links(case, engine):
    lo, hi, sets = case
    a, b = overlapping_sets(lo, hi, sets, engine=engine)
    expected = {(x, y) for x, y in every_pair(lo, hi)
                if all(set(boxes[x]) & set(boxes[y]) for boxes in sets)}
    found = set(zip(a.tolist(), b.tolist()))
    assert all(x < y for x, y in found)
    assert components(found, len(lo)) == components(expected, len(lo))
    if lo.shape[1]:             # a range decides: every pair, and no other
        assert found == expected
    else:                       # sets alone: linked pairs that really share values
        assert found <= expected


def test_the_compiled_search_finds_every_pair_when_pairs_outnumber_its_buffer():
    # 600 wide boxes: tens of thousands of pairs, many times what a call's buffer holds
    rng = np.random.default_rng(7)
    lo = rng.integers(0, 50, (600, 3))
    hi = lo + rng.integers(0, 30, (600, 3))
    a, b = overlapping_boxes(lo, hi, engine="numba")
    meets = np.all((lo[:, None, :] <= hi[None, :, :]) & (lo[None, :, :] <= hi[:, None, :]), axis=2)
    expected = set(zip(*(x.tolist() for x in np.nonzero(np.triu(meets, 1)))))
    assert len(expected) > 20 * len(lo)
    assert set(zip(a.tolist(), b.tolist())) == expected and len(a) == len(expected)


def test_the_compiled_search_finds_the_neighbours_of_a_grid_across_its_calls():
    # 10,000 boxes of a grid, each meeting its 8 neighbours: more boxes than a call searches
    side = 100
    x, y = np.meshgrid(np.arange(side), np.arange(side))
    lo = np.column_stack([x.ravel() * 2, y.ravel() * 2]).astype(np.int64)
    a, b = overlapping_boxes(lo, lo + 2, engine="numba")
    steps = np.abs(lo[a] - lo[b]) // 2
    assert (a < b).all() and (steps.max(axis=1) == 1).all()
    assert len(set(zip(a.tolist(), b.tolist()))) == a.size == 2 * side * (side - 1) + 2 * (side - 1) ** 2
