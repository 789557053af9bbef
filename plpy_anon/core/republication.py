"""Refreshes that keep each person's candidate values across versions.

An analyst who keeps every version of a release and knows a person's quasi-identifiers
intersects, version by version, the sensitive values of the classes that could hold that person:
the true value survives every intersection, so each refresh can only narrow the set. A refresh
in the ``stable`` mode keeps that intersection at l values or more for everyone it has published:

* every person keeps the class (*group*) of the previous version: groups are never split, people
  who left are removed from theirs, new people join the group whose box (its members' ranges
  and sets of coded quasi-identifiers) they lie in or nearest to, so that the released classes
  overlap as little as they can;
* a group that is left with fewer than k rows, a sensitive column that fails the release's l
  model (distinct, entropy or recursive (c,l): core.privacy_models, as the fresh Mondrian checks
  it), or a person whose candidates (the intersection so far, ``cohort_values``) would keep
  fewer than l of its values is merged with the nearest group that holds a missing value (or the
  nearest, if none does); repeated until none is left;
* if even one group of everyone would not do, :class:`CannotKeepCandidates` (the refresh then
  publishes a version of no rows: core.republish.withdrawn).

Merging only ever adds values to a group, so a person's intersection never loses a value to a
merge; it loses values only when the last holder of a value leaves their group, which the merge
repairs. The guarantee is checked again from the released rows (db.republication): this module
builds, it does not vouch.
"""
from __future__ import annotations

import numpy as np

from plpy_anon.core.disjoint_sets import SmallestRootSets
from plpy_anon.core.errors import InsufficientData
from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.privacy_models import Models


class CannotKeepCandidates(InsufficientData):
    """No grouping of the current rows keeps every known person's l candidates."""


def stable_partition(groups: np.ndarray, points: np.ndarray, sensitive: np.ndarray | None,
                     cohorts: np.ndarray, cohort_values: list[np.ndarray], k: int,
                     l: int | None, models: Models | None = None,
                     ranged: np.ndarray | None = None, acceptable=None,
                     point_codes: list | None = None) -> np.ndarray:
    """Each current row's group: one of ``groups``' ids (a merged group keeps the smallest of its
    ids), so ids are never reused and a person who comes back finds their group's id again.

    ``groups``: each row's group in the previous version, -1 for a row seen for the first time;
    ``points``: (n, d) coordinates of the rows'
    quasi-identifiers (any scale; used for nearness only); ``sensitive``: (n, m) codes, -1 for
    NULL (no value), or None; ``cohorts``: each row's index into the candidate sets, -1 for no
    history; ``cohort_values[j]``: (C, V_j) bool, the candidate codes of each cohort in column j;
    ``models``: the l model each group's values must meet (default: distinct l); ``ranged``:
    which QIs are released as ranges (the others as sets; default: all ranges), for joining;
    ``acceptable(labels, g, c)``: whether merging groups ``g`` and ``c`` is preferred (of the
    near partners, the first it takes; core.republish.merge_keeps_an_option);
    ``point_codes``: :func:`point_codes` of ``points`` and ``ranged``, if the caller has them.
    """
    groups = np.asarray(groups, dtype=np.int64)
    n = groups.size
    if n < k:
        raise CannotKeepCandidates(f"{n} rows cannot form a class of k = {k}")
    points = np.asarray(points, dtype=np.float64).reshape(n, -1)
    labels = _join_nearest(groups, points, ranged, point_codes)
    sensitive = None if sensitive is None else np.asarray(sensitive, dtype=np.int64).reshape(n, -1)
    cohorts = np.asarray(cohorts, dtype=np.int64)
    models = models if models is not None else Models(l=l)
    while True:
        check_interrupts()
        ids, index = group_index(labels)
        counts = _value_counts(index, ids.size, sensitive, cohort_values)
        present = [c > 0 for c in counts]
        deficit = _deficits(index, ids.size, counts, cohorts, cohort_values, k, l, models)
        bad = np.flatnonzero(deficit.any(axis=1))
        if bad.size == 0:
            return labels
        if ids.size == 1:
            raise CannotKeepCandidates(
                "even one class of every row would leave someone published before with fewer than "
                f"l = {l} of the candidate values the earlier versions left them")
        labels = ids[_merge(index, ids.size, bad, points, present, deficit, ranged,
                            None if acceptable is None else
                            (lambda g, c, labels=labels, ids=ids: acceptable(labels, ids[g], ids[c])),
                            point_codes)]


def _join_nearest(groups: np.ndarray, points: np.ndarray, ranged: np.ndarray | None = None,
                  point_codes: list | None = None) -> np.ndarray:
    """Rows without a group join the group whose box (its members' ranges on ``ranged`` QIs,
    their sets of values on the others) they lie nearest to, inside it if one holds them, so
    that boxes grow as little as they can into each other; the nearest centroid among those
    (``point_codes``: :func:`point_codes`, if the caller has them)."""
    labels = groups.copy()
    known = labels >= 0
    if not known.any():
        raise CannotKeepCandidates("no row of the previous version is left to keep its class")
    if known.all():
        return labels
    ids, members = group_index(labels[known])
    # each QI's column of the known rows in turn (no copy of every known row's point)
    sizes = np.maximum(np.bincount(members, minlength=ids.size).astype(np.float64), 1.0)
    centroids = np.column_stack([
        np.bincount(members, weights=points[known, d], minlength=ids.size) / sizes
        for d in range(points.shape[1])])
    ranged = np.ones(points.shape[1], dtype=bool) if ranged is None else np.asarray(ranged, dtype=bool)
    sides = []
    for d in range(points.shape[1]):
        col = points[:, d]
        if ranged[d]:
            low = np.full(ids.size, np.inf)
            high = np.full(ids.size, -np.inf)
            group_min_max(members, col[known], low, high)
            sides.append((low, high, None))
        else:
            code, n_values = _value_codes(col) if point_codes is None else point_codes[d]
            held = np.zeros((ids.size, n_values), dtype=bool)
            held[members, code[known]] = True
            sides.append((None, None, (held, code)))
    new = np.flatnonzero(~known)
    kern = _kernels(points.shape[0]) if points.shape[1] < 8 and np.isfinite(points).all() else None
    if kern is not None:
        _join_compiled(kern, labels, ids, new, points, sides, centroids, ranged)
        return labels
    for start in range(0, new.size, 512):
        check_interrupts()
        chunk = new[start:start + 512]
        outside = np.zeros((chunk.size, ids.size))
        for d, (low, high, sets) in enumerate(sides):
            if sets is None:
                x = points[chunk, d][:, None]
                outside += np.maximum(np.maximum(low[None, :] - x, x - high[None, :]), 0.0) ** 2
            else:
                # a value outside a group's set widens it as much as a whole range
                outside += ~sets[0][:, sets[1][chunk]].T
        distance = _squared_distances(points[chunk], centroids)
        # how far outside first (points are scaled to [0, 1]), then the centroid's distance
        labels[chunk] = ids[(outside * 1e6 + distance).argmin(axis=1)]
    return labels


#: rows joined per kernel call (interrupts are checked between calls)
JOIN_CHUNK = 1024


def _join_compiled(kern, labels, ids, new, points, sides, centroids, ranged) -> None:
    """:func:`_join_nearest`'s choice for the rows ``new`` on the compiled kernel (the same
    keys, in the same float arithmetic, below 8 dimensions), into ``labels``."""
    n_dims, n_groups = points.shape[1], ids.size
    low = np.zeros((n_dims, n_groups))
    high = np.zeros((n_dims, n_groups))
    # in lexicographic order: each row's group is a near first guess for the next one's
    new = new[np.lexsort(points[new].T[::-1])]
    # the set QIs' codes of the joining rows only
    codes = np.zeros((new.size, n_dims), dtype=np.int64)
    held, offsets = [np.zeros((n_groups, 0), dtype=bool)], np.zeros(n_dims, dtype=np.int64)
    width = 0
    for d, (lo, hi, sets) in enumerate(sides):
        if sets is None:
            low[d], high[d] = lo, hi
        else:
            held.append(sets[0])
            codes[:, d] = sets[1][new]
            offsets[d] = width
            width += sets[0].shape[1]
    # by value, then group: a row's value is looked up for every group in turn (a tree's
    # parts are bounded group by group, from the groups' rows)
    by_group = np.hstack(held).view(np.uint8)
    held = np.ascontiguousarray(by_group.T)
    centroids = np.ascontiguousarray(centroids)
    # a tree of the groups by their centroids, with each part's bounds
    tree = kern.box_tree(centroids, centroids)
    order, _, _, first, last, left = tree
    bounds = kern.join_bounds(ranged, low, high, by_group, first, last, left, order)
    out = np.zeros(new.size, dtype=np.int64)
    for start in range(0, new.size, JOIN_CHUNK):
        check_interrupts()
        chunk = new[start:start + JOIN_CHUNK]
        if start:
            out[start] = out[start - 1]
        kern.join_tree(np.ascontiguousarray(points[chunk]), codes[start:start + JOIN_CHUNK],
                       ranged, low, high, held, offsets, centroids, *tree, *bounds,
                       out[start:start + JOIN_CHUNK])
    labels[new] = ids[out]


def _kernels(n_rows: int | None = None):
    """The compiled kernels (core._republication_kernels), or None (the numpy versions then
    run) without numba, or for ``n_rows`` rows too few to be worth loading numba for
    (core.mondrian_jit.loaded)."""
    from plpy_anon.core import mondrian_jit
    return mondrian_jit.loaded("_republication_kernels", n_rows)


def _grouping_kernels(n_rows: int | None = None):
    """The compiled per-group reductions (core._grouping_kernels), or None as :func:`_kernels`."""
    from plpy_anon.core import mondrian_jit
    return mondrian_jit.loaded("_grouping_kernels", n_rows)


def group_min_max(labels: np.ndarray, values: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
    """``np.minimum.at(low, labels, values)`` and ``np.maximum.at(high, labels, values)``, in
    one compiled pass where the kernels are loaded."""
    kern = _grouping_kernels(labels.size)
    values = np.asarray(values)
    # which zero numpy keeps of 0.0 and -0.0 is its own: negative floats left to it
    if kern is None or low.dtype != high.dtype or low.dtype not in (np.float64, np.int64) or \
            values.dtype.kind == "f" and np.signbit(values).any():
        np.minimum.at(low, labels, values)
        np.maximum.at(high, labels, values)
        return
    kern.group_min_max(_plain(labels, np.int64), _plain(values, low.dtype), low, high)


def stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of non-negative integers: by counting where they are
    dense and the kernels are loaded."""
    keys = np.asarray(keys)
    kern = _grouping_kernels(keys.size)
    if kern is None or keys.size == 0 or keys.dtype.kind not in "iu" or int(keys.min()) < 0 \
            or int(keys.max()) >= 4 * keys.size:
        return np.argsort(keys, kind="stable")
    return kern.counting_order(_plain(keys, np.int64), int(keys.max()) + 1)


def _plain(array, dtype) -> np.ndarray:
    """``array`` as the kernels were compiled for: contiguous and writeable (numba compiles a
    read-only array apart, which the install does not warm)."""
    return np.require(array, dtype=dtype, requirements=["C", "W"])


def _squared_distances(points: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """(rows, groups) squared distances, summed dimension by dimension (no (rows, groups, d)
    array); numpy sums fewer than 8 terms in order, so below 8 dimensions these are the
    same floats as ``((p[:, None] - c[None]) ** 2).sum(axis=2)``, ties broken alike."""
    if points.shape[1] >= 8:
        return ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(axis=2)
    out = np.zeros((points.shape[0], centroids.shape[0]))
    for d in range(points.shape[1]):
        out += (points[:, d, None] - centroids[None, :, d]) ** 2
    return out


def _centroids(labels: np.ndarray, n_groups: int, points: np.ndarray) -> np.ndarray:
    sizes = np.bincount(labels, minlength=n_groups).astype(np.float64)
    out = np.zeros((n_groups, points.shape[1]))
    for dim in range(points.shape[1]):
        out[:, dim] = np.bincount(labels, weights=points[:, dim], minlength=n_groups)
    return out / np.maximum(sizes, 1.0)[:, None]


def _value_counts(labels, n_groups, sensitive, cohort_values) -> list[np.ndarray]:
    """Per sensitive column, (G, V): the rows of each value in each group (NULL is no value)."""
    if sensitive is None:
        return []
    out = []
    for j in range(sensitive.shape[1]):
        codes = sensitive[:, j]
        width = max(int(codes.max()) + 1 if codes.size else 0,
                    cohort_values[j].shape[1] if j < len(cohort_values) else 0)
        held = codes >= 0
        counts = np.bincount(labels[held] * width + codes[held], minlength=n_groups * width)
        out.append(counts.reshape(n_groups, width))
    return out


def _deficits(labels, n_groups, counts, cohorts, cohort_values, k, l, models) -> np.ndarray:
    """(G, 1 + Σ V_j) bool: column 0, the group breaks k or the l model itself; then, per
    sensitive column, the values some person of the group would lose below l candidates."""
    small = np.bincount(labels, minlength=n_groups) < k
    blocks = [small[:, None]]
    for j, column in enumerate(counts):
        held = column > 0
        missing = np.zeros_like(held)
        if l is not None:
            blocks[0] = blocks[0] | ~models.satisfied(column)[:, None]
            known = cohorts >= 0
            if known.any() and j < len(cohort_values):
                # the (group, cohort) pairs, sorted (np.unique(..., axis=0)) as one integer each
                width = int(cohorts.max()) + 1
                pairs = _distinct(labels[known] * width + cohorts[known])
                pairs = np.column_stack([pairs // width, pairs % width])
                wanted = cohort_values[j][pairs[:, 1]]
                width = held.shape[1]
                wanted = np.pad(wanted, ((0, 0), (0, max(0, width - wanted.shape[1]))))[:, :width]
                kept = (wanted & held[pairs[:, 0]]).sum(axis=1)
                short = kept < l
                if short.any():
                    # the values those people could get back from another group
                    np.logical_or.at(missing, pairs[short, 0], wanted[short] & ~held[pairs[short, 0]])
                    blocks[0][pairs[short, 0]] = True
        blocks.append(missing)
    return np.hstack(blocks)


def _value_codes(col: np.ndarray) -> tuple[np.ndarray, int]:
    """(each value's rank among the distinct values of ``col``, how many there are): numpy's
    ``np.unique(col, return_inverse=True)``, by a table of the values present when they are
    small non-negative integers (a set QI's codes), in one pass instead of a sort."""
    if col.size:
        low, high = col.min(), col.max()
        if np.isfinite(high) and low >= 0 and high < 4 * col.size + 1024:
            whole = col.astype(np.int64)
            if (whole == col).all():
                present = np.zeros(int(high) + 1, dtype=np.int64)
                present[whole] = 1
                rank = np.cumsum(present) - 1
                return rank[whole], int(present.sum())
    values, code = np.unique(col, return_inverse=True)
    return code.ravel().astype(np.int64), int(values.size)


def point_codes(points: np.ndarray, ranged: np.ndarray | None) -> list:
    """Per column of ``points`` (n, d): None where ``ranged``, else its :func:`_value_codes`
    (each row's rank among the column's values, how many there are), for the joins and merges
    of one run to share (default ``ranged``: every column)."""
    ranged = np.ones(points.shape[1], dtype=bool) if ranged is None else np.asarray(ranged, dtype=bool)
    return [None if ranged[d] else _value_codes(points[:, d]) for d in range(points.shape[1])]


def group_index(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(labels, return_inverse=True)`` of non-negative integer labels (the ids, each
    label's position among them), by counting when the ids are dense enough (no sort of the
    rows)."""
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size == 0 or int(labels.min()) < 0 or int(labels.max()) >= 4 * labels.size:
        ids, index = np.unique(labels, return_inverse=True)
        return ids, index.ravel()
    held = np.bincount(labels) > 0
    rank = np.cumsum(held) - 1
    return np.flatnonzero(held), rank[labels]


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of integers by a sort (numpy's hashing is many times slower when
    most values differ)."""
    ordered = np.sort(values)
    return ordered[np.concatenate([[True], ordered[1:] != ordered[:-1]])] if ordered.size else ordered


def _merge(labels, n_groups, bad, points, present, deficit, ranged=None, acceptable=None,
           point_codes=None) -> np.ndarray:
    """Each bad group merged with a near group holding a value it misses (else a near one), the
    one whose merged box overlaps the fewest other groups' (:func:`merge_partner`); one pass,
    merges chained (the smallest index is the merged group's)."""
    centroids = _centroids(labels, n_groups, points)
    boxes = GroupBoxes(labels, n_groups, points, ranged, point_codes)
    held = np.hstack([np.zeros((n_groups, 1), dtype=bool)] + present)
    sets = SmallestRootSets(n_groups)
    kern = _kernels(labels.size) if points.shape[1] < 8 and np.isfinite(points).all() else None
    if kern is not None:
        for start in range(0, bad.size, MERGE_CHUNK):
            check_interrupts()
            chunk = bad[start:start + MERGE_CHUNK]
            ranked, n_near = boxes.ranked_partners(kern, chunk, centroids, deficit[chunk], held,
                                                   searched=bad.size)
            for g, row, n in zip(chunk.tolist(), ranked.tolist(), n_near.tolist()):
                sets.union(g, first_acceptable(row, n, None if acceptable is None else
                                               (lambda c, g=g: acceptable(g, c))))
        return sets.roots()[labels]
    for g in bad.tolist():
        check_interrupts()
        distance = ((centroids - centroids[g]) ** 2).sum(axis=1)
        distance[g] = np.inf
        # (held & deficit[g]).any(axis=1), over the few values g misses only
        helps = held[:, np.flatnonzero(deficit[g])].any(axis=1)
        helps[g] = False
        sets.union(g, boxes.merge_partner(g, np.where(helps, distance, np.inf) if helps.any() else distance,
                                          None if acceptable is None else (lambda c, g=g: acceptable(g, c))))
    return sets.roots()[labels]


#: the nearest groups among which a merge partner is chosen by the overlaps it would make
MERGE_CANDIDATES = 8
#: groups whose merge candidates are ranked per kernel call (interrupts are checked between calls)
MERGE_CHUNK = 64
#: groups to rank from which their candidates are searched in a tree (GroupBoxes.
#: ranked_partners): bounding each part's centroids and counting each value's holders cost about
#: as much as that many scans of every group
CENTROID_TREE_FROM = 16


def first_acceptable(ranked: list, n: int, acceptable=None) -> int:
    """:meth:`GroupBoxes.merge_partner`'s choice among its ``n`` ranked candidates (a row of
    :meth:`GroupBoxes.ranked_partners`): the first that ``acceptable`` takes, else the first
    (a lone candidate is taken as it is)."""
    if n > 1 and acceptable is not None:
        for c in ranked[:n]:
            if acceptable(c):
                return c
    return ranked[0]


class GroupBoxes:
    """Each group's box in ``points``: the range of its members on ``ranged`` dimensions, the set
    of their values on the others (default: all ranged), so that a merge can be chosen that
    makes the released classes overlap least (an analyst subtracts overlapping classes as one);
    ``point_codes``: :func:`point_codes` of ``points`` and ``ranged``, if the caller has them."""

    def __init__(self, labels, n_groups, points, ranged=None, point_codes=None):
        self.n_groups = n_groups
        self.n_rows = len(labels)
        self._flat = None
        self._index = None
        self._centroid_tree = None
        ranged = np.ones(points.shape[1], dtype=bool) if ranged is None else np.asarray(ranged, dtype=bool)
        self.dims = []
        for d in range(points.shape[1]):
            col = points[:, d]
            if ranged[d]:
                low = np.full(n_groups, np.inf)
                high = np.full(n_groups, -np.inf)
                group_min_max(labels, col, low, high)
                self.dims.append((low, high))
            else:
                code, n_values = _value_codes(col) if point_codes is None else point_codes[d]
                member = np.zeros((n_groups, n_values), dtype=bool)
                member[labels, code] = True
                self.dims.append((member, _words(member)))

    def merge_partner(self, g: int, distance: np.ndarray, acceptable=None) -> int:
        """Among the MERGE_CANDIDATES groups nearest ``g`` (``distance``: inf where not
        allowed), the one whose box merged with ``g``'s overlaps the fewest other groups (the
        first that ``acceptable`` takes, if given and it takes one)."""
        near = _nearest(distance, MERGE_CANDIDATES)
        near = near[np.isfinite(distance[near])]
        if near.size <= 1:
            return int(near[0]) if near.size else int(np.argmin(distance))
        kern = _kernels(self.n_rows)
        if kern is not None:
            overlaps = self._overlaps_compiled(kern, g, near)
        else:
            overlaps = self._overlaps(g, near)
        ranked = near[np.lexsort((distance[near], overlaps))]
        if acceptable is not None:
            for c in ranked.tolist():
                if acceptable(c):
                    return c
        return int(ranked[0])

    def _overlaps_compiled(self, kern, g: int, near: np.ndarray) -> np.ndarray:
        """:meth:`_overlaps` on the compiled kernel."""
        low, high, words, offsets = self._compiled_boxes()
        lo = np.minimum(low[g][None, :], low[near])
        hi = np.maximum(high[g][None, :], high[near])
        union = [_words(dim[0][g][None, :] | dim[0][near]) for dim in self.dims
                 if dim[0].dtype == bool]
        union = np.ascontiguousarray(np.hstack([np.zeros((near.size, 0), dtype=np.uint64)] + union))
        out = np.zeros(near.size, dtype=np.int64)
        kern.overlap_counts(g, near.astype(np.int64), np.ascontiguousarray(lo),
                            np.ascontiguousarray(hi), low, high, union, words, offsets, out)
        return out

    def _compiled_boxes(self):
        """The boxes as the kernels read them: (ranges' low, high (G, R), sets' bit words
        (G, W), each set's first word (S + 1,))."""
        if self._flat is None:
            ranged = [dim for dim in self.dims if dim[0].dtype != bool]
            words = [dim[1] for dim in self.dims if dim[0].dtype == bool]
            offsets = np.cumsum([0] + [w.shape[1] for w in words]).astype(np.int64)
            # by group: the kernel reads each group's box once for all candidates
            self._flat = (
                np.array([d[0] for d in ranged], dtype=np.float64).reshape(len(ranged), -1).T.copy()
                if ranged else np.zeros((self.n_groups, 0)),
                np.array([d[1] for d in ranged], dtype=np.float64).reshape(len(ranged), -1).T.copy()
                if ranged else np.zeros((self.n_groups, 0)),
                np.ascontiguousarray(np.hstack([np.zeros((self.n_groups, 0), dtype=np.uint64)]
                                               + words)),
                offsets)
        return self._flat

    def ranked_partners(self, kern, bad: np.ndarray, centroids: np.ndarray, wanted: np.ndarray,
                        held: np.ndarray, within: np.ndarray | None = None,
                        searched: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """For each group of ``bad``, :meth:`merge_partner`'s candidates in the order it tries
        them, on the compiled kernel: (``ranked`` (len(bad), MERGE_CANDIDATES), how many of each
        row are candidates). The distance is to the group's centroid (``centroids``), among the
        groups of its union (``within``: each group's) if it has others, among those holding a
        value it wants (``wanted`` (len(bad), V) and ``held`` (G, V) bool) if any does.
        ``searched``: how many groups the caller ranks with these centroids in all; from
        CENTROID_TREE_FROM of them the candidates are searched in the boxes' tree, each of its
        parts bounding its groups' centroids (the same candidates as a scan of every group)."""
        low, high, words, offsets = self._compiled_boxes()
        if self._index is None:
            spans = [dim for dim in self.dims if dim[0].dtype != bool]
            for dim in self.dims:
                if dim[0].dtype == bool:
                    member = dim[0]
                    # each set's smallest and largest code (a set that shares a code meets it)
                    first = member.argmax(axis=1)
                    last = member.shape[1] - 1 - member[:, ::-1].argmax(axis=1)
                    spans.append((first.astype(np.float64), last.astype(np.float64)))
            span_low = np.ascontiguousarray(
                np.array([d[0] for d in spans], dtype=np.float64).reshape(len(spans), -1).T)
            span_high = np.ascontiguousarray(
                np.array([d[1] for d in spans], dtype=np.float64).reshape(len(spans), -1).T)
            self._index = (span_low, span_high, *kern.box_tree(span_low, span_high))
        if within is None:
            within = np.arange(self.n_groups, dtype=np.int64)
        within = np.asarray(within, dtype=np.int64)
        union_size = np.bincount(within, minlength=self.n_groups)
        ranked = np.zeros((bad.size, MERGE_CANDIDATES), dtype=np.int64)
        n_near = np.zeros(bad.size, dtype=np.int64)
        centroids = np.ascontiguousarray(centroids)
        held_words = _words(held)
        if max(searched, bad.size) >= CENTROID_TREE_FROM:
            if self._centroid_tree is None or self._centroid_tree[0] is not centroids \
                    or self._centroid_tree[1] is not held:
                # how many groups hold each bit of ``held_words`` (a uint64's bit b: b)
                holders = np.unpackbits(held_words.view(np.uint8), axis=1, bitorder="little")
                # the boxes' tree, each part bounding its groups' centroids: near boxes, near
                # centroids
                order, _, _, first, last, left = self._index[2:]
                tree = (order, *kern.part_bounds(centroids, order, first, last, left), first,
                        last, left)
                self._centroid_tree = (centroids, held, holders.sum(axis=0, dtype=np.int64), tree)
            *_, holders, tree = self._centroid_tree
            kern.merge_ranking_tree(np.asarray(bad, dtype=np.int64), centroids, within,
                                    union_size, held_words, _words(wanted), holders, low, high,
                                    words, offsets, *self._index, *tree, ranked, n_near)
            return ranked, n_near
        kern.merge_ranking(np.asarray(bad, dtype=np.int64), centroids,
                           within, union_size, held_words, _words(wanted), low, high, words,
                           offsets, *self._index, ranked, n_near)
        return ranked, n_near

    def _overlaps(self, g: int, near: np.ndarray) -> np.ndarray:
        """For each group of ``near``: how many other groups the box of it merged with ``g``
        meets."""
        meet = np.ones((near.size, self.n_groups), dtype=bool)
        for dim in self.dims:
            if dim[0].dtype != bool:
                low, high = dim
                lo, hi = np.minimum(low[g], low[near]), np.maximum(high[g], high[near])
                meet &= (lo[:, None] <= high[None, :]) & (low[None, :] <= hi[:, None])
            else:
                member, words = dim
                # the merged set shares a code with a group's set: a common bit in some word
                union = _words(member[g][None, :] | member[near])
                meet &= ((union[:, None, :] & words[None, :, :]) != 0).any(axis=2)
        meet[:, g] = False
        meet[np.arange(near.size), near] = False
        return meet.sum(axis=1)


def _nearest(distance: np.ndarray, count: int) -> np.ndarray:
    """``np.argsort(distance, kind="stable")[:count]`` without sorting all of ``distance``: the
    entries up to the count-th smallest value, in index order, sorted stably."""
    if distance.size <= 4 * count or np.isnan(distance).any():
        return np.argsort(distance, kind="stable")[:count]
    kth = np.partition(distance, count - 1)[count - 1]
    within = np.flatnonzero(distance <= kth)
    return within[np.argsort(distance[within], kind="stable")[:count]]


def _words(member: np.ndarray) -> np.ndarray:
    """(n, V) bool as (n, ceil(V / 64)) uint64 bit sets."""
    packed = np.packbits(member, axis=1)
    packed = np.pad(packed, ((0, 0), (0, -packed.shape[1] % 8)))
    return np.ascontiguousarray(packed).view(np.uint64)


def warm_kernels():
    """Compile (or load) the kernels once, on a small table of every argument type they take
    (core.mondrian_warm, at install), so that no refresh pays for compilation."""
    kern = _kernels()
    if kern is None:
        return
    rng = np.random.default_rng(0)
    # the per-group reductions, on every argument type they take
    grouping = _grouping_kernels()
    labels = rng.integers(0, 4, 50)
    for dtype in (np.float64, np.int64):
        low, high = np.zeros(4, dtype=dtype), np.zeros(4, dtype=dtype)
        grouping.group_min_max(labels, rng.integers(0, 9, 50).astype(dtype), low, high)
    grouping.add_rows(np.zeros((4, 3), dtype=np.int64), labels, np.ones((50, 3), dtype=np.int64))
    grouping.counting_order(labels, 4)
    groups = np.concatenate([np.arange(20), np.full(10, -1), rng.integers(0, 20, 70)])
    points = rng.integers(0, 5, (100, 2)) / 4
    _join_nearest(groups, points, np.array([True, False]))
    boxes = GroupBoxes(np.maximum(groups, 0), 20, points, np.array([True, False]))
    boxes._overlaps_compiled(kern, 0, np.arange(1, 9))
    centroids = _centroids(np.maximum(groups, 0), 20, points)
    held = rng.random((20, 3)) < 0.5
    boxes.ranked_partners(kern, np.arange(4), centroids, held[:4], held)
    boxes.ranked_partners(kern, np.arange(4), centroids, held[:4], held, np.arange(20) // 5)
    boxes.ranked_partners(kern, np.arange(4), centroids, held[:4], held, np.arange(20) // 5,
                          searched=CENTROID_TREE_FROM)
    # the unions of boxes and of people (core.republish), a range with NULLs (-1) and a set
    from plpy_anon.core import republish
    qi_codes = np.column_stack([rng.integers(-1, 5, 100), rng.integers(0, 3, 100)])
    for ranged in (np.array([True, False]), np.array([False, True])):
        republish.overlapping_groups(np.maximum(groups, 0), 20, qi_codes, ranged)
        republish.people_linked_groups(np.maximum(groups, 0), 20, qi_codes, ranged)
    # the check's search of the classes holding each person (core.containment): a range with
    # NULLs and a set
    from plpy_anon.core import containment
    axes = [containment.Axis(qi_codes[:, 0], np.arange(20) % 4, np.arange(20) % 4 + 1),
            containment.set_axis(qi_codes[:, 1], np.arange(20), np.arange(20) % 3, 20, 3)]
    containment.contained(axes, 100, 20, engine="numba")
    # and its pairs of classes that meet, with a set's bits
    box_low = np.column_stack([np.arange(20) % 4, np.arange(20) % 3])
    containment.meeting_pairs(kern, box_low, box_low + 1,
                              (np.ones((20, 1), dtype=np.uint64), np.array([0, 1])))
    # the test of each group's options against the versions before (core.republish)
    counts = rng.integers(0, 3, (4, 3))
    republish.safe_against(Models(l=2), counts[:, None, :], republish.Version(np.arange(4), counts),
                           lambda ids: np.asarray(ids) // 2 * 2, np.arange(4))
