"""The stable refresh's grouping on compiled kernels and vectorised numpy makes the choices of
the plain numpy versions kept below as references: the group a new row joins, the merge
partners' overlap counts and nearest candidates, the groups released with the same QIs, and a
whole refresh's grouping (against the merge as it was, on numpy), on random tables with ties
(coordinates on coarse grids, repeated distances)."""
from __future__ import annotations

import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import republication, republish
from plpy_anon.core.disjoint_sets import SmallestRootSets
from plpy_anon.core.privacy_models import Models
from plpy_anon.core.republication import GroupBoxes, _centroids, _join_nearest, _nearest


def reference_join(groups, points, ranged):
    labels = groups.copy()
    known = labels >= 0
    ids, members = np.unique(labels[known], return_inverse=True)
    members = members.ravel()
    centroids = _centroids(members, ids.size, points[known])
    sides = []
    for d in range(points.shape[1]):
        col = points[:, d]
        if ranged[d]:
            low = np.full(ids.size, np.inf)
            high = np.full(ids.size, -np.inf)
            np.minimum.at(low, members, col[known])
            np.maximum.at(high, members, col[known])
            sides.append((low, high, None))
        else:
            values, code = np.unique(col, return_inverse=True)
            held = np.zeros((ids.size, values.size), dtype=bool)
            held[members, code.ravel()[known]] = True
            sides.append((None, None, (held, code.ravel())))
    new = np.flatnonzero(~known)
    for start in range(0, new.size, 512):
        chunk = new[start:start + 512]
        outside = np.zeros((chunk.size, ids.size))
        for d, (low, high, sets) in enumerate(sides):
            if sets is None:
                x = points[chunk, d][:, None]
                outside += np.maximum(np.maximum(low[None, :] - x, x - high[None, :]), 0.0) ** 2
            else:
                outside += ~sets[0][:, sets[1][chunk]].T
        distance = ((points[chunk][:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
        labels[chunk] = ids[(outside * 1e6 + distance).argmin(axis=1)]
    return labels


def reference_same_release_keys(index, n_groups, qi_codes, ranged):
    parts = []
    for d in range(qi_codes.shape[1]):
        col = np.asarray(qi_codes[:, d], dtype=np.int64)
        if ranged[d]:
            low, high, _ = republish._group_ranges(index, n_groups, col)
            parts += [low.tolist(), high.tolist()]
        else:
            pairs = np.unique(np.column_stack([index, col]), axis=0)
            sets = [[] for _ in range(n_groups)]
            for g, c in pairs.tolist():
                sets[g].append(c)
            parts.append([tuple(x) for x in sets])
    first: dict = {}
    sets = SmallestRootSets(n_groups)
    found = False
    for g, key in enumerate(zip(*parts)):
        other = first.setdefault(key, g)
        if other != g:
            sets.union(other, g)
            found = True
    return sets.roots() if found else None


# loaded up front: below mondrian_jit.COMPILED_FROM_ROWS rows the numpy versions run until they are
KERNELS = republication._kernels()


def reference_box_tree(low, high):
    """The tree of boxes by its definition: from the root, a part's boxes sorted (stable) by
    centre on the dimension where centres spread most relative to all boxes', cut at the
    middle, down to TREE_LEAF boxes; parts in depth-first order, children after their parent."""
    n, n_dims = low.shape
    centre = 0.5 * low + 0.5 * high
    spread_all = centre.max(axis=0, initial=-np.inf) - centre.min(axis=0, initial=np.inf)
    scale = np.where(spread_all > 0, 1.0 / np.where(spread_all > 0, spread_all, 1.0), 0.0)
    order = np.arange(n)
    nodes = [[0, n, -1]]
    stack = [0]
    while stack:
        node = stack.pop()
        s, e = nodes[node][:2]
        if e - s <= KERNELS.TREE_LEAF:
            continue
        part = centre[order[s:e]]
        spread = (part.max(axis=0) - part.min(axis=0)) * scale
        best = int(np.argmax(spread))
        order[s:e] = order[s:e][np.argsort(part[:, best], kind="stable")]
        middle = s + (e - s) // 2
        nodes[node][2] = len(nodes)
        stack += [len(nodes), len(nodes) + 1]
        nodes += [[s, middle, -1], [middle, e, -1]]
    first, last, left = (np.array([x[i] for x in nodes], dtype=np.int64) for i in range(3))
    node_low = np.array([low[order[a:b]].min(axis=0, initial=np.inf) for a, b, _ in nodes])
    node_high = np.array([high[order[a:b]].max(axis=0, initial=-np.inf) for a, b, _ in nodes])
    return order, node_low.reshape(-1, n_dims), node_high.reshape(-1, n_dims), first, last, left


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 400), st.integers(1, 4), st.integers(1, 2000),
       st.sampled_from(["codes", "halves", "reals"]))
def test_the_tree_of_boxes_is_the_reference_tree(seed, n, d, grid, kind):
    rng = np.random.default_rng(seed)
    low = rng.integers(0, grid, (n, d)).astype(np.float64)
    high = low + rng.integers(0, max(1, grid // 4), (n, d))
    if kind == "halves":
        low, high = low / 2 - grid / 4, high / 2 - grid / 4
    elif kind == "reals":
        low = rng.random((n, d)) * grid
        high = np.where(rng.random((n, d)) < 0.3, low, low + rng.random((n, d)))
    got = KERNELS.box_tree(np.ascontiguousarray(low), np.ascontiguousarray(high))
    for name, a, b in zip(["order", "node_low", "node_high", "first", "last", "left"], got,
                          reference_box_tree(low, high)):
        assert np.array_equal(a, b), name


def grid_points(rng, n, d, ranged, grid):
    """Coordinates in [0, 1] on a grid of ``grid`` steps: ties between rows and distances."""
    return np.column_stack([rng.integers(0, grid, n) / max(1, grid - 1) for _ in range(d)]) \
        if d else np.zeros((n, 0))


def test_the_compiled_kernels_load():
    assert KERNELS is not None


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 7),
       st.sampled_from([2, 3, 5, 50]), st.floats(0.05, 0.9))
def test_a_new_row_joins_the_group_the_numpy_join_chooses(seed, n_groups, d, grid, new_share):
    rng = np.random.default_rng(seed)
    n = n_groups + int(rng.integers(1, 4 * n_groups + 3))
    groups = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)]) * 3
    groups[n_groups:][rng.random(n - n_groups) < new_share] = -1
    ranged = rng.random(d) < 0.5
    points = grid_points(rng, n, d, ranged, grid)
    assert np.array_equal(_join_nearest(groups, points, ranged),
                          reference_join(groups, points, ranged))


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 300), st.integers(1, 12))
def test_the_nearest_candidates_are_the_stable_sort_s_first(seed, size, count):
    rng = np.random.default_rng(seed)
    distance = rng.integers(0, 5, size).astype(np.float64)
    distance[rng.random(size) < 0.3] = np.inf
    assert np.array_equal(_nearest(distance, count),
                          np.argsort(distance, kind="stable")[:count])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 120), st.integers(1, 4),
       st.sampled_from([3, 70, 140]))
def test_compiled_overlap_counts_are_the_numpy_counts(seed, n_groups, d, codes):
    rng = np.random.default_rng(seed)
    n = n_groups + int(rng.integers(0, 3 * n_groups))
    labels = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    ranged = rng.random(d) < 0.5
    points = np.column_stack([rng.integers(0, 6, n) / 5 if ranged[j] else
                              rng.integers(0, codes, n) / codes for j in range(d)])
    boxes = GroupBoxes(labels, n_groups, points, ranged)
    kern = republication._kernels()
    for _ in range(5):
        g = int(rng.integers(0, n_groups))
        near = rng.permutation(np.delete(np.arange(n_groups), g))[:8]
        assert np.array_equal(boxes._overlaps_compiled(kern, g, near), boxes._overlaps(g, near))


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60), st.integers(1, 4), st.integers(1, 6),
       st.sampled_from([1, 10**12]))
def test_groups_with_the_same_released_qis_merge_as_the_reference_merges(seed, n_groups, d, values,
                                                                         spread):
    rng = np.random.default_rng(seed)
    n = n_groups + int(rng.integers(0, 3 * n_groups))
    index = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    ranged = rng.random(d) < 0.5
    # -1: NULL; codes spread far apart: too wide a table of groups by codes, sorted instead
    qi_codes = rng.integers(-1, values, (n, d)) * spread
    got = republish._same_release_keys(index, n_groups, qi_codes, ranged)
    want = reference_same_release_keys(index, n_groups, qi_codes, ranged)
    assert (got is None) == (want is None)
    if want is not None:
        assert np.array_equal(got, want)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(-3, 8), max_size=12), st.lists(st.integers(-5, 12), max_size=20))
def test_the_mapping_is_the_dictionary_s(keys, queries):
    values = [3 * key + i for i, key in enumerate(keys)]      # a repeated key: the last wins
    want = dict(zip(keys, values))
    got = republish._mapping(np.array(keys, dtype=np.int64), np.array(values, dtype=np.int64))(
        np.array(queries, dtype=np.int64))
    assert got.tolist() == [want.get(q, q) for q in queries]


def reference_merge(labels, n_groups, bad, points, present, deficit, ranged=None, acceptable=None,
                    point_codes=None):
    # its own codes of the points: point_codes not read
    centroids = _centroids(labels, n_groups, points)
    boxes = GroupBoxes(labels, n_groups, points, ranged)
    held = np.hstack([np.zeros((n_groups, 1), dtype=bool)] + present)
    sets = SmallestRootSets(n_groups)
    for g in bad.tolist():
        distance = ((centroids - centroids[g]) ** 2).sum(axis=1)
        distance[g] = np.inf
        helps = (held & deficit[g]).any(axis=1)
        helps[g] = False
        sets.union(g, boxes.merge_partner(
            g, np.where(helps, distance, np.inf) if helps.any() else distance,
            None if acceptable is None else (lambda c, g=g: acceptable(g, c))))
    return sets.roots()[labels]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 6), st.integers(1, 3), st.integers(2, 8),
       st.integers(1, 4), st.sampled_from([3, 6, 40]))
def test_a_refresh_groups_rows_as_the_numpy_grouping_does(seed, k, l, n_values, d, grid):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4 * k, 400))
    groups = rng.integers(0, max(1, n // (2 * k)), n) * 2
    groups[rng.random(n) < 0.2] = -1                   # joiners
    points = grid_points(rng, n, d, None, grid)
    ranged = rng.random(d) < 0.6
    sensitive = rng.integers(-1, n_values, (n, 1))     # -1: NULL
    cohort_values = [rng.random((5, n_values)) < 0.5]
    cohorts = np.where(groups >= 0, rng.integers(-1, 5, n), -1)

    def grouping(codes=None):
        try:
            return republication.stable_partition(groups, points, sensitive, cohorts,
                                                  cohort_values, k, l, ranged=ranged,
                                                  point_codes=codes)
        except republication.CannotKeepCandidates:
            return None

    got = grouping()
    # the run's codes of the points, computed once, change nothing
    shared = grouping(republication.point_codes(points, ranged))
    assert (got is None) == (shared is None)
    assert got is None or np.array_equal(got, shared)
    kernels, merge = republication._kernels, republication._merge
    republication._kernels, republication._merge = (lambda *a: None), reference_merge
    try:
        want = grouping()
    finally:
        republication._kernels, republication._merge = kernels, merge
    assert (got is None) == (want is None)
    if want is not None:
        assert np.array_equal(got, want)


def reference_partner_ranking(boxes, g, centroids, wanted, held, within):
    """merge_partner's candidates in the order it tries them (numpy): the distances as
    republish._merge_nearest restricts them, then the ranking of merge_partner."""
    distance = ((centroids - centroids[g]) ** 2).sum(axis=1)
    distance[g] = np.inf
    if within is not None and ((within == within[g]).sum() > 1):
        distance = np.where(within == within[g], distance, np.inf)
    if wanted.any():
        helps = (held & wanted).any(axis=1)
        helps[g] = False
        if helps.any():
            distance = np.where(helps, distance, np.inf)
    tried = []
    boxes.merge_partner(g, distance, lambda c: tried.append(c) and False)
    return tried or [boxes.merge_partner(g, distance)]


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 150), st.integers(1, 5),
       st.sampled_from([2, 3, 6, 70]), st.booleans(), st.integers(1, 6))
def test_compiled_merge_candidates_are_ranked_as_merge_partner_ranks_them(seed, n_groups, d, grid,
                                                                          unions, n_values):
    rng = np.random.default_rng(seed)
    n = n_groups + int(rng.integers(0, 3 * n_groups))
    labels = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    ranged = rng.random(d) < 0.5
    points = np.column_stack([rng.integers(0, grid, n) / max(1, grid - 1) for _ in range(d)])
    boxes = GroupBoxes(labels, n_groups, points, ranged)
    centroids = _centroids(labels, n_groups, points)
    held = rng.random((n_groups, n_values)) < 0.3
    within = rng.integers(0, max(1, n_groups // 3), n_groups) if unions else None
    bad = rng.permutation(n_groups)[:int(rng.integers(1, n_groups + 1))]
    wanted = rng.random((bad.size, n_values)) < 0.2
    ranked, n_near = boxes.ranked_partners(KERNELS, bad, centroids, wanted, held, within)
    for i, g in enumerate(bad.tolist()):
        want = reference_partner_ranking(boxes, g, centroids, wanted[i], held, within)
        got = ranked[i, :max(1, n_near[i])].tolist()
        assert got == want, (g, got, want)



@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 400), st.integers(1, 5),
       st.sampled_from([2, 3, 6, 70]), st.booleans(), st.integers(1, 70))
def test_merge_candidates_searched_in_the_tree_of_centroids_are_the_scanned_ones(
        seed, n_groups, d, grid, unions, n_values):
    # few grid steps: many centroids at equal distances, ties broken by index in both
    rng = np.random.default_rng(seed)
    n = n_groups + int(rng.integers(0, 3 * n_groups))
    labels = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    ranged = rng.random(d) < 0.5
    points = np.column_stack([rng.integers(0, grid, n) / max(1, grid - 1) for _ in range(d)])
    centroids = _centroids(labels, n_groups, points)
    held = rng.random((n_groups, n_values)) < rng.choice([0.02, 0.3])
    within = rng.integers(0, max(1, n_groups // 3), n_groups) if unions else None
    bad = rng.permutation(n_groups)[:int(rng.integers(1, n_groups + 1))]
    wanted = rng.random((bad.size, n_values)) < 0.2
    scanned = GroupBoxes(labels, n_groups, points, ranged).ranked_partners(
        KERNELS, bad, centroids, wanted, held, within)
    searched = GroupBoxes(labels, n_groups, points, ranged).ranked_partners(
        KERNELS, bad, centroids, wanted, held, within, searched=republication.CENTROID_TREE_FROM)
    assert (searched[1] == scanned[1]).all()
    for row, got, want in zip(scanned[1].tolist(), searched[0].tolist(), scanned[0].tolist()):
        assert got[:max(1, row)] == want[:max(1, row)]

def table_of_boxes(rng, n_groups, d, values, nulls):
    n = n_groups + int(rng.integers(0, 4 * n_groups))
    index = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    ranged = rng.random(d) < 0.5
    # groups near each other in codes (as a partition's), some spread: boxes that meet and not
    centre = rng.integers(0, values, (n_groups, d))
    qi_codes = np.clip(centre[index] + rng.integers(-1, 2, (n, d)), 0, values - 1)
    qi_codes[rng.random((n, d)) < nulls] = -1        # NULL: -1 in ranges, a code of its own in sets
    qi_codes[:, ~ranged] += 1
    return index, qi_codes, ranged


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 200), st.integers(1, 5),
       st.sampled_from([2, 5, 30]), st.sampled_from([0.0, 0.02, 0.3]))
def test_compiled_unions_of_boxes_and_of_people_are_the_numpy_ones(seed, n_groups, d, values, nulls):
    rng = np.random.default_rng(seed)
    index, qi_codes, ranged = table_of_boxes(rng, n_groups, d, values, nulls)
    got = republish.box_unions(index, n_groups, qi_codes, ranged)
    alone = (republish.overlapping_groups(index, n_groups, qi_codes, ranged),
             republish.people_linked_groups(index, n_groups, qi_codes, ranged))
    kernels = republish._kernels
    republish._kernels = lambda *a: None
    try:
        want = (republish.overlapping_groups(index, n_groups, qi_codes, ranged),
                republish.people_linked_groups(index, n_groups, qi_codes, ranged))
    finally:
        republish._kernels = kernels
    # without an overlap, nobody links groups either
    assert got[1] is None or got[0] is not None
    for g, w in zip(got + alone, (want[0], want[1] if want[0] is not None else None) + want):
        assert (g is None) == (w is None)
        if w is not None:
            assert np.array_equal(g, w)



@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 300), st.integers(1, 5),
       st.sampled_from([2, 5, 30]), st.sampled_from([0.0, 0.02, 0.3]), st.integers(1, 20))
def test_the_walk_of_pairs_of_parts_lists_each_pair_of_meeting_boxes_once(seed, n_groups, d,
                                                                          values, nulls, budget):
    rng = np.random.default_rng(seed)
    index, qi_codes, ranged = table_of_boxes(rng, n_groups, d, values, nulls)
    boxes = republish._compiled_box_tests(
        republish._box_tests(index, n_groups, qi_codes, ranged), n_groups)
    # every pair tested, as the release's check tests boxes
    want = {(a, b) for a in range(n_groups) for b in range(a + 1, n_groups)
            if KERNELS._boxes_meet(a, b, boxes["low"], boxes["high"], boxes["words"],
                                   boxes["offsets"])}
    # a small output and budget: the walk stops and goes on many times
    out_a, out_b = np.empty(64, dtype=np.int64), np.empty(64, dtype=np.int64)
    stack_a, stack_b = np.zeros(200, dtype=np.int64), np.zeros(200, dtype=np.int64)
    got, top = [], 1
    while top:
        count, top = KERNELS.meeting_pairs_walk(
            stack_a, stack_b, top, budget, boxes["span_low"], boxes["span_high"],
            *boxes["index"], boxes["low"], boxes["high"], boxes["words"], boxes["offsets"],
            out_a, out_b)
        got += list(zip(out_a[:count].tolist(), out_b[:count].tolist()))
    assert len(got) == len(set(got))
    assert set(got) == want
    assert {pair for a, b in republish._meeting_pairs_compiled(KERNELS, boxes)
            for pair in zip(a.tolist(), b.tolist())} == want

def reference_safe_against(models, options, version, roots_of, ids):
    """safe_against group by group: every option against every set of the group's ancestors."""
    n_groups, n_options, width = options.shape
    root = roots_of(version.ids)
    at = np.searchsorted(ids, root)
    inside = (at < ids.size) & (ids[np.minimum(at, ids.size - 1)] == root)
    full = np.zeros((n_groups, width), dtype=np.int64)
    np.add.at(full, at[inside], version.counts[inside])
    ok = republish.difference_safe(models, options.reshape(-1, width),
                                   np.repeat(full, n_options, axis=0)).reshape(n_groups, n_options)
    ancestors = np.bincount(at[inside], minlength=n_groups)
    rows = np.flatnonzero(inside)
    for g in np.flatnonzero(ancestors > 1).tolist():
        parts = version.counts[rows[at[inside] == g]]
        sums = republish._ancestor_sets(parts.shape[0]) @ parts
        mine = republish.difference_safe(models, np.repeat(options[g], sums.shape[0], axis=0),
                                         np.tile(sums, (n_options, 1))).reshape(n_options, -1)
        ok[g] &= mine.all(axis=1)
    return ok


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 3), st.integers(2, 5),
       st.sampled_from(["distinct", "entropy", "recursive"]))
def test_options_are_safe_against_a_version_as_group_by_group(seed, n_groups, l, n_values, kind):
    rng = np.random.default_rng(seed)
    models = Models(l=l, l_diversity=kind, c=2.0 if kind == "recursive" else None)
    # earlier groups, up to 14 merged into one group now (more than every set of them is checked)
    n_old = int(rng.integers(1, 15 * n_groups))
    old_ids = np.sort(rng.choice(10 * n_old + 10, n_old, replace=False))
    now = rng.integers(0, n_groups + 2, n_old) * 5         # some held by no group now
    version = republish.Version(old_ids, rng.integers(0, 3, (n_old, n_values + 1)))
    ids = np.arange(n_groups) * 5
    options = rng.integers(0, 4, (n_groups, 5, n_values + 1))
    roots_of = republish._mapping(old_ids, now)
    assert np.array_equal(republish.safe_against(models, options, version, roots_of, ids),
                          reference_safe_against(models, options, version, roots_of, ids))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-2**40, 2**40), max_size=60), st.integers(1, 5))
def test_distinct_values_are_numpy_s_unique(values, repeat):
    values = np.array(values * repeat, dtype=np.int64)
    assert np.array_equal(republication._distinct(values), np.unique(values))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.25, 1 / 3, 0.5, 1.0, 7.0, np.inf, np.nan]),
                max_size=40))
def test_value_codes_are_numpy_s_unique_inverse(values):
    col = np.array(values, dtype=np.float64)
    values, inverse = np.unique(col, return_inverse=True)
    assert republication._value_codes(col)[0].tolist() == inverse.ravel().tolist()
    assert republication._value_codes(col)[1] == values.size


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, 2.0, 5.0, 40.0, 1100.0]), min_size=1, max_size=40))
def test_small_whole_value_codes_are_numpy_s_unique_inverse(values):
    """Codes of a set QI (small non-negative whole numbers, -0.0 among them) by the table of
    the values present: numpy's unique inverse."""
    col = np.array(values, dtype=np.float64)
    values, inverse = np.unique(col, return_inverse=True)
    assert republication._value_codes(col)[0].tolist() == inverse.ravel().tolist()
    assert republication._value_codes(col)[1] == values.size


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-3, 2**40), max_size=40))
def test_integer_value_codes_are_numpy_s_unique_inverse(values):
    col = np.array(values, dtype=np.int64)
    values, inverse = np.unique(col, return_inverse=True)
    assert republication._value_codes(col)[0].tolist() == inverse.ravel().tolist()
    assert republication._value_codes(col)[1] == values.size


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_compiled_difference_check_keeps_the_options_numpy_keeps(data):
    """safe_against on the compiled kernel and on numpy's difference_safe: the same options
    pass against every set of ancestors (groups with one ancestor, several, none; NULL last)."""
    n_groups, n_options = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 5))
    width, n_earlier = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 16))
    counts = st.integers(0, 3)
    options = np.array(data.draw(st.lists(counts, min_size=n_groups * n_options * width,
                                          max_size=n_groups * n_options * width)),
                       dtype=np.int64).reshape(n_groups, n_options, width)
    earlier = np.array(data.draw(st.lists(counts, min_size=n_earlier * width,
                                          max_size=n_earlier * width)),
                       dtype=np.int64).reshape(n_earlier, width)
    ids = np.arange(n_groups, dtype=np.int64) * 2
    # each earlier group followed to a group now, or to one that has none (an odd id)
    roots = np.array(data.draw(st.lists(st.integers(0, 2 * n_groups), min_size=n_earlier,
                                        max_size=n_earlier)), dtype=np.int64)
    version = republish.Version(np.arange(n_earlier, dtype=np.int64) + 100, earlier)

    def roots_of(group_ids):
        return roots[np.asarray(group_ids) - 100]
    models = Models(l=data.draw(st.sampled_from([None, 1, 2, 3])))
    republication._kernels()
    assert republish._compiled_safe(models, 1) is not None
    compiled = republish.safe_against(models, options, version, roots_of, ids)
    original = republish._compiled_safe
    republish._compiled_safe = lambda models, size: None
    try:
        expected = republish.safe_against(models, options, version, roots_of, ids)
    finally:
        republish._compiled_safe = original
    assert compiled.tolist() == expected.tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 40), st.integers(1, 3), st.integers(1, 5))
def test_sets_sharing_a_key_are_still_told_apart_code_by_code(seed, n_groups, d, values):
    # every code mixed to 0: sets of one size share a key, so only the comparison code by code
    # (or the padded table after it) can tell them apart
    rng = np.random.default_rng(seed)
    n = n_groups + int(rng.integers(0, 3 * n_groups))
    index = np.concatenate([np.arange(n_groups), rng.integers(0, n_groups, n - n_groups)])
    ranged = np.zeros(d, dtype=bool)
    qi_codes = rng.integers(-1, values, (n, d))
    mixed = republish._mixed
    republish._mixed = lambda codes: np.zeros(codes.size, dtype=np.uint64)
    try:
        got = republish._same_release_keys(index, n_groups, qi_codes, ranged)
    finally:
        republish._mixed = mixed
    want = reference_same_release_keys(index, n_groups, qi_codes, ranged)
    assert (got is None) == (want is None)
    if want is not None:
        assert np.array_equal(got, want)


def test_numbering_sets_holds_memory_of_the_rows_not_of_groups_times_the_largest_set():
    # one group holding 5,000 codes among 5,000 groups of one: a table of groups by their
    # largest set would be 5,001 x 5,000 int64s (200 MB); the rows are 10,000
    n_groups, wide = 5_001, 5_000
    index = np.concatenate([np.zeros(wide, dtype=np.int64), np.arange(1, n_groups)])
    codes = np.concatenate([np.arange(wide), np.arange(n_groups - 1) % 7]) * 1_000_003
    tracemalloc.start()
    try:
        ids = republish._set_ids(index, n_groups, codes)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    # the wide group's set is its own; the others' sets are their one code
    pairs = np.unique(np.column_stack([np.arange(n_groups - 1) % 7, ids[1:]]), axis=0)
    assert pairs.shape[0] == np.unique(ids[1:]).size == 7
    assert ids[0] not in set(ids[1:].tolist())
