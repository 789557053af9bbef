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
def _merged_box_meets(lo, hi, union, i, low, high, words, h, word_offsets):
    """Candidate ``i``'s merged box (ranges ``lo``/``hi`` (N, R), set bit words ``union``
    (N, W)) meets group ``h``'s (``low``/``high`` (G, R), ``words`` (G, W); set s from
    ``word_offsets[s]``)."""
    for r in range(low.shape[1]):
        if not (lo[i, r] <= high[h, r] and low[h, r] <= hi[i, r]):
            return False
    for s in range(word_offsets.size - 1):
        common = False
        for w in range(word_offsets[s], word_offsets[s + 1]):
            if union[i, w] & words[h, w]:
                common = True
                break
        if not common:
            return False
    return True


@njit(cache=True, nogil=True)
def overlap_counts(g, near, lo, hi, low, high, union, words, word_offsets, out):
    """For each candidate ``near[i]``: how many groups (other than ``g`` and itself) the box of
    ``g`` merged with it meets: on every ranged dimension its range [``lo[i, r]``,
    ``hi[i, r]``] meets the group's (``low``/``high`` (G, R)), on every set dimension s its
    set's bit words (``union[i]``, from ``word_offsets[s]``) share a bit with the group's
    (``words`` (G, W)). Group by group, each tested against every candidate."""
    n_groups = words.shape[0]
    out[:] = 0
    for h in range(n_groups):
        if h == g:
            continue
        for i in range(near.size):
            if h == near[i]:
                continue
            if _merged_box_meets(lo, hi, union, i, low, high, words, h, word_offsets):
                out[i] += 1


#: boxes at most in a leaf of :func:`box_tree`
TREE_LEAF = 8


@njit(cache=True, nogil=True)
def box_tree(low, high):
    """A tree of boxes (``low``/``high`` (G, D): each box's span per dimension) for
    :func:`_boxes_meeting`: parts of the boxes cut at the median of their centres on the
    dimension where those spread most (relative to all boxes' centres), down to TREE_LEAF
    boxes; each node keeps the bounds of
    its boxes (``node_low``/``node_high``) and its run of ``order`` (``first``, ``last``), its
    children (``left``, -1 in a leaf; right: ``left + 1``). Nodes in depth-first order from the
    root, 0. A node's boxes are ordered by centre, ties kept in their parent's order (a stable
    sort; by each centre's rank among all, :func:`_sort_run`)."""
    n, n_dims = low.shape
    order = np.arange(n)
    centre = np.empty((n, n_dims))
    for t in range(n):
        for d in range(n_dims):
            centre[t, d] = 0.5 * low[t, d] + 0.5 * high[t, d]
    rank = _centre_ranks(centre)
    n_nodes = 2 * (n // TREE_LEAF + 1) * 2 + 1
    node_low = np.empty((n_nodes, n_dims))
    node_high = np.empty((n_nodes, n_dims))
    first = np.empty(n_nodes, dtype=np.int64)
    last = np.empty(n_nodes, dtype=np.int64)
    left = np.full(n_nodes, -1, dtype=np.int64)
    stack = np.empty(n_nodes, dtype=np.int64)
    scale = np.zeros(n_dims)
    for d in range(n_dims):
        lo, hi = np.inf, -np.inf
        for t in range(n):
            lo = min(lo, centre[t, d])
            hi = max(hi, centre[t, d])
        if hi > lo:
            scale[d] = 1.0 / (hi - lo)
    spare = np.empty(n, dtype=np.int64)
    count = np.empty(max(RADIX, n) + 2, dtype=np.int64)
    lo_d, hi_d = np.empty(n_dims), np.empty(n_dims)
    first[0], last[0] = 0, n
    used = 1
    stack[0] = 0
    top = 1
    while top:
        top -= 1
        node = stack[top]
        s, e = first[node], last[node]
        if e - s <= TREE_LEAF:
            for d in range(n_dims):
                node_low[node, d], node_high[node, d] = np.inf, -np.inf
            for t in range(s, e):
                for d in range(n_dims):
                    node_low[node, d] = min(node_low[node, d], low[order[t], d])
                    node_high[node, d] = max(node_high[node, d], high[order[t], d])
            continue
        for d in range(n_dims):
            lo_d[d], hi_d[d] = np.inf, -np.inf
        for t in range(s, e):
            box = order[t]
            for d in range(n_dims):
                lo_d[d] = min(lo_d[d], centre[box, d])
                hi_d[d] = max(hi_d[d], centre[box, d])
        best, spread = 0, -1.0
        for d in range(n_dims):
            # relative to the whole table's spread there (dimensions have their own scales)
            if (hi_d[d] - lo_d[d]) * scale[d] > spread:
                best, spread = d, (hi_d[d] - lo_d[d]) * scale[d]
        _sort_run(order, s, e, rank[:, best], spare, count)
        middle = s + (e - s) // 2
        left[node] = used
        first[used], last[used] = s, middle
        first[used + 1], last[used + 1] = middle, e
        stack[top], stack[top + 1] = used, used + 1
        top += 2
        used += 2
    # a part's bounds: its children's, which come after it
    for node in range(used - 1, -1, -1):
        if left[node] >= 0:
            for d in range(n_dims):
                node_low[node, d] = min(node_low[left[node], d], node_low[left[node] + 1, d])
                node_high[node, d] = max(node_high[left[node], d], node_high[left[node] + 1, d])
    return order, node_low[:used].copy(), node_high[:used].copy(), first[:used].copy(), \
        last[:used].copy(), left[:used].copy()


#: buckets of a pass of :func:`_sort_run`'s radix sort
RADIX = 256
#: runs at most this long are sorted by insertion
INSERTION_RUN = 32


@njit(cache=True, nogil=True)
def _centre_ranks(centre):
    """Per column of ``centre``, each value's rank among the column's distinct values (equal
    values, NaNs among them, one rank): sorting by rank orders as sorting by value. Columns of
    half-integers in a range of at most 4 n (centres of integer codes) are ranked by counting."""
    n, n_dims = centre.shape
    rank = np.empty((n, n_dims), dtype=np.int64)
    for d in range(n_dims):
        column = centre[:, d].copy()
        lo, hi, whole = np.inf, -np.inf, True
        for t in range(n):
            twice = 2.0 * column[t]
            if not np.isfinite(twice) or twice != np.floor(twice):
                whole = False
                break
            lo, hi = min(lo, twice), max(hi, twice)
        if whole and n and hi - lo < 4.0 * n:
            seen = np.zeros(int(hi - lo) + 2, dtype=np.int64)
            for t in range(n):
                seen[int(2.0 * column[t] - lo) + 1] = 1
            for v in range(seen.size - 1):
                seen[v + 1] += seen[v]
            for t in range(n):
                rank[t, d] = seen[int(2.0 * column[t] - lo) + 1] - 1
            continue
        by_value = np.argsort(column)
        r = -1
        for i in range(n):
            v = column[by_value[i]]
            if i == 0:
                r = 0
            else:
                u = column[by_value[i - 1]]
                if not (v == u or (np.isnan(v) and np.isnan(u))):
                    r += 1
            rank[by_value[i], d] = r
    return rank


@njit(cache=True, nogil=True)
def _sort_run(order, s, e, key, spare, count):
    """Sorts ``order[s:e]`` by ``key`` of its entries (ranks, below ``count.size``), ties kept
    in their order (stable): by insertion for short runs, else by counting on the keys' range
    when it is at most 4 times the run, else by radix passes of RADIX buckets."""
    m = e - s
    if m <= INSERTION_RUN:
        for i in range(s + 1, e):
            box = order[i]
            k = key[box]
            j = i
            while j > s and key[order[j - 1]] > k:
                order[j] = order[j - 1]
                j -= 1
            order[j] = box
        return
    lo, hi = key[order[s]], key[order[s]]
    for t in range(s, e):
        lo = min(lo, key[order[t]])
        hi = max(hi, key[order[t]])
    if hi - lo < 4 * m:
        buckets, bits = hi - lo + 1, 62
    else:
        buckets, bits = RADIX, 8
    src, dst = order[s:e], spare[:m]
    in_order = True
    shift = 0
    while shift < 63 and ((hi - lo) >> shift) > 0:
        count[:buckets + 1] = 0
        for t in range(m):
            count[((key[src[t]] - lo) >> shift) % buckets + 1] += 1
        for b in range(buckets):
            count[b + 1] += count[b]
        for t in range(m):
            b = ((key[src[t]] - lo) >> shift) % buckets
            dst[count[b]] = src[t]
            count[b] += 1
        src, dst = dst, src
        in_order = not in_order
        shift += bits
    if not in_order:
        order[s:e] = src


@njit(cache=True, nogil=True)
def _boxes_meeting(low, high, order, node_low, node_high, first, last, left, lo, hi, out):
    """Writes to ``out`` the boxes (of :func:`box_tree`'s tree) whose span meets [``lo``,
    ``hi``] on every dimension; returns how many."""
    return _boxes_meeting_on(low, high, order, node_low, node_high, first, last, left, lo, hi,
                             out, np.empty(256, dtype=np.int64))


@njit(cache=True, nogil=True)
def _boxes_meeting_on(low, high, order, node_low, node_high, first, last, left, lo, hi, out,
                      stack):
    """:func:`_boxes_meeting` on the caller's ``stack`` (a walk a point, one stack for all)."""
    n_dims = lo.size
    stack[0] = 0
    top = 1
    count = 0
    while top:
        top -= 1
        node = stack[top]
        meets = True
        for d in range(n_dims):
            if node_high[node, d] < lo[d] or node_low[node, d] > hi[d]:
                meets = False
                break
        if not meets:
            continue
        if left[node] < 0:
            for t in range(first[node], last[node]):
                box = order[t]
                inside = True
                for d in range(n_dims):
                    if high[box, d] < lo[d] or low[box, d] > hi[d]:
                        inside = False
                        break
                if inside:
                    out[count] = box
                    count += 1
            continue
        stack[top] = left[node]
        stack[top + 1] = left[node] + 1
        top += 2
    return count


@njit(cache=True, nogil=True)
def merge_ranking(bad, centroids, within, union_size, held, wanted, low, high, words,
                  word_offsets, span_low, span_high, order, node_low, node_high, first, last, left,
                  ranked, n_near):
    """For each group ``bad[b]`` (g): its merge candidates as core.republication.GroupBoxes.
    merge_partner ranks them, into ``ranked[b]`` (``n_near[b]`` of them; with none, the first
    group, numpy's argmin of a distance that is inf everywhere).

    The distance to g's centroid (``centroids`` (G, D), summed in dimension order), inf for g,
    for groups of another union than g's (``within``) when g's holds others (``union_size``),
    and, when some group other than g holds a value g wants (bit sets ``held`` (G, W) and
    ``wanted[b]``), for the groups that hold none; the MERGE_CANDIDATES nearest of the finite
    ones (first index on ties); each ranked by how many other groups (neither g nor it) its
    box merged with g's meets (as :func:`overlap_counts`: ranges ``low``/``high`` (G, R), set
    words ``words`` (G, W') from ``word_offsets``), then distance, then index. The groups
    tested are those whose spans meet the bounds of every merged box (``span_low``/
    ``span_high`` (G, R + S): ranges, then each set's smallest and largest code; in
    :func:`box_tree`'s tree)."""
    n_groups = centroids.shape[0]
    count = ranked.shape[1]
    distance = np.empty(n_groups)
    near = np.empty(count, dtype=np.int64)
    near_distance = np.empty(count)
    work = _ranking_work(count, low.shape[1], words.shape[1], span_low.shape[1], n_groups)
    for b in range(bad.size):
        g = bad[b]
        n = _nearest_scan(g, wanted[b], centroids, within, union_size, held, distance, near,
                          near_distance)
        _rank_candidates(b, g, n, near, near_distance, low, high, words, word_offsets, span_low,
                         span_high, order, node_low, node_high, first, last, left, work, ranked,
                         n_near)


@njit(cache=True, nogil=True)
def _nearest_scan(g, wanted, centroids, within, union_size, held, distance, near, near_distance):
    """:func:`merge_ranking`'s candidates of group g by a scan of every group: into ``near``
    (their distances into ``near_distance``), the ``near.size`` nearest of the groups allowed,
    by (distance, index); returns how many."""
    n_groups, n_dims = centroids.shape
    n_words = held.shape[1]
    count = near.size
    restrict = union_size[within[g]] > 1
    helped = False
    for h in range(n_groups):
        total = 0.0
        for d in range(n_dims):
            v = centroids[h, d] - centroids[g, d]
            total += v * v
        distance[h] = total
        if h != g and not helped:
            for w in range(n_words):
                if held[h, w] & wanted[w]:
                    helped = True
                    break
    distance[g] = np.inf
    if restrict:
        for h in range(n_groups):
            if within[h] != within[g]:
                distance[h] = np.inf
    if helped:
        for h in range(n_groups):
            helps = False
            if h != g:
                for w in range(n_words):
                    if held[h, w] & wanted[w]:
                        helps = True
                        break
            if not helps:
                distance[h] = np.inf
    # the nearest finite ones, by (distance, index)
    n = 0
    for h in range(n_groups):
        x = distance[h]
        if not x < np.inf:
            continue
        if n == count and not x < distance[near[n - 1]]:
            continue
        j = n if n < count else count - 1
        while j > 0 and distance[near[j - 1]] > x:
            near[j] = near[j - 1]
            j -= 1
        near[j] = h
        if n < count:
            n += 1
    for i in range(n):
        near_distance[i] = distance[near[i]]
    return n


@njit(cache=True, nogil=True)
def _ranking_work(count, n_ranged, n_words, n_spans, n_groups):
    """The scratch arrays of :func:`_rank_candidates`, made once per kernel call."""
    return (np.zeros(count, dtype=np.int64), np.zeros(count, dtype=np.int64),
            np.empty(count), np.empty((count, n_ranged)), np.empty((count, n_ranged)),
            np.empty((count, n_words), dtype=np.uint64), np.empty(n_spans), np.empty(n_spans),
            np.empty(n_groups, dtype=np.int64))


@njit(cache=True, nogil=True)
def _rank_candidates(b, g, n, near, near_distance, low, high, words, word_offsets, span_low,
                     span_high, order, node_low, node_high, first, last, left, work, ranked,
                     n_near):
    """Row ``b`` of :func:`merge_ranking`'s output for group g from its ``n`` candidates
    (``near``, by (distance, index)): ranked by how many other groups their box merged with
    g's meets, then distance, then index."""
    overlaps, overlaps_of, ranked_distance, box_lo, box_hi, union, outer_lo, outer_hi, found = work
    n_ranged = low.shape[1]
    n_spans = span_low.shape[1]
    n_near[b] = n
    if n == 0:
        ranked[b, 0] = 0
        return
    if n == 1:
        ranked[b, 0] = near[0]
        return
    for i in range(n):
        c = near[i]
        for r in range(n_ranged):
            box_lo[i, r] = min(low[g, r], low[c, r])
            box_hi[i, r] = max(high[g, r], high[c, r])
        for w in range(words.shape[1]):
            union[i, w] = words[g, w] | words[c, w]
    for s in range(n_spans):
        lo, hi = span_low[g, s], span_high[g, s]
        for i in range(n):
            lo = min(lo, span_low[near[i], s])
            hi = max(hi, span_high[near[i], s])
        outer_lo[s], outer_hi[s] = lo, hi
    m = _boxes_meeting(span_low, span_high, order, node_low, node_high, first, last, left,
                       outer_lo, outer_hi, found)
    overlaps[:n] = 0
    for t in range(m):
        h = found[t]
        if h == g:
            continue
        for i in range(n):
            if h == near[i]:
                continue
            if _merged_box_meets(box_lo, box_hi, union, i, low, high, words, h, word_offsets):
                overlaps[i] += 1
    # ranked by (overlaps, distance, index): an insertion sort of the few
    for i in range(n):
        c, key, x = near[i], overlaps[i], near_distance[i]
        j = i
        while j > 0:
            p = ranked[b, j - 1]
            above = overlaps_of[j - 1]
            if above > key or (above == key and (ranked_distance[j - 1] > x or
                                                 (ranked_distance[j - 1] == x and p > c))):
                ranked[b, j] = p
                overlaps_of[j] = above
                ranked_distance[j] = ranked_distance[j - 1]
                j -= 1
            else:
                break
        ranked[b, j] = c
        overlaps_of[j] = key
        ranked_distance[j] = x


@njit(cache=True, nogil=True)
def _boxes_meet(a, b, low, high, words, word_offsets):
    """Boxes ``a`` and ``b`` meet: on every range (``low``/``high`` (G, R)) their ranges meet,
    on every set (bit words ``words`` (G, W), set s from ``word_offsets[s]``) they share a
    bit."""
    return _merged_box_meets(low, high, words, a, low, high, words, b, word_offsets)


@njit(cache=True, nogil=True)
def meeting_pairs(leaf, at, stop, span_low, span_high, order, node_low, node_high, first, last,
                  left, leaves, low, high, words, word_offsets, out_a, out_b):
    """The pairs (a, b), a < b, of boxes that meet (:func:`_boxes_meet`), into ``out_a``/
    ``out_b``, for the boxes a of the leaves ``leaves[leaf:stop]`` of :func:`box_tree`'s tree
    (from position ``at`` of ``order``, in the first): returns (how many, the leaf and position
    to go on from: ``stop`` when done). Stops early when ``out_a`` could not hold every pair of
    one more a. Each leaf's partners are looked for once, among the boxes whose spans meet the
    leaf's bounds (``span_low``/``span_high`` (G, D): the ranges, then each set's smallest and
    largest code)."""
    n_groups = span_low.shape[0]
    found = np.empty(n_groups, dtype=np.int64)
    count = 0
    while leaf < stop:
        node = leaves[leaf]
        m = _boxes_meeting(span_low, span_high, order, node_low, node_high, first, last, left,
                           node_low[node], node_high[node], found)
        for t in range(max(at, first[node]), last[node]):
            if count + m > out_a.size:
                return count, leaf, t
            a = order[t]
            for j in range(m):
                b = found[j]
                if b > a and _boxes_meet(a, b, low, high, words, word_offsets):
                    out_a[count] = a
                    out_b[count] = b
                    count += 1
        at = 0
        leaf += 1
    return count, stop, 0


@njit(cache=True, nogil=True)
def _rows_inside(own, box, order, starts, codes, ranged, low, high, words, word_offsets, sets):
    """Some row of group ``own`` (``order[starts[own]:starts[own + 1]]``) lies in the box of
    group ``box``: on every range (QIs ``ranged``, ``low``/``high`` (G, R)) its code is NULL
    (< 0) or within, on every set (QIs ``sets``) its code (``codes`` (n, D)) is one the box
    holds (bit words ``words``)."""
    for t in range(starts[own], starts[own + 1]):
        row = order[t]
        inside = True
        for r in range(ranged.size):
            x = codes[row, ranged[r]]
            if x >= 0 and not low[box, r] <= x <= high[box, r]:
                inside = False
                break
        if inside:
            for s in range(sets.size):
                c = codes[row, sets[s]]
                w = word_offsets[s] + (c >> 6)
                if not (words[box, w] >> np.uint64(c & 63)) & np.uint64(1):
                    inside = False
                    break
        if inside:
            return True
    return False


@njit(cache=True, nogil=True)
def people_link(a, b, order, starts, codes, ranged, low, high, words, word_offsets, sets, out):
    """For each pair (``a[i]``, ``b[i]``): a row of b lies in a's box or a row of a in b's
    (:func:`_rows_inside`), into ``out``."""
    for i in range(a.size):
        out[i] = _rows_inside(b[i], a[i], order, starts, codes, ranged, low, high, words,
                              word_offsets, sets) or \
            _rows_inside(a[i], b[i], order, starts, codes, ranged, low, high, words,
                         word_offsets, sets)


@njit(cache=True, nogil=True)
def join_bounds(ranged, low, high, held, first, last, left, order):
    """Per node of :func:`box_tree`'s tree of the groups' centroids, for :func:`join_tree`: the
    bounds of its groups' ranges (``low``/``high`` (D, G), dimensions ``ranged``) and which
    values some group of it holds (``held`` (G, sum V): a group's values side by side),
    children before parents."""
    n_nodes, n_dims = first.size, ranged.size
    node_low = np.full((n_nodes, n_dims), np.inf)
    node_high = np.full((n_nodes, n_dims), -np.inf)
    node_held = np.zeros((n_nodes, held.shape[1]), dtype=np.uint8)
    for node in range(n_nodes - 1, -1, -1):
        if left[node] < 0:
            for t in range(first[node], last[node]):
                h = order[t]
                for d in range(n_dims):
                    if ranged[d]:
                        node_low[node, d] = min(node_low[node, d], low[d, h])
                        node_high[node, d] = max(node_high[node, d], high[d, h])
                for v in range(held.shape[1]):
                    node_held[node, v] |= held[h, v]
        else:
            for child in (left[node], left[node] + 1):
                for d in range(n_dims):
                    node_low[node, d] = min(node_low[node, d], node_low[child, d])
                    node_high[node, d] = max(node_high[node, d], node_high[child, d])
                for v in range(held.shape[1]):
                    node_held[node, v] |= node_held[child, v]
    return node_low, node_high, node_held


@njit(cache=True, nogil=True)
def _join_bound(px, codes, ranged, offsets, node_low, node_high, node_held, centre_low,
                centre_high, i, node):
    """No group of ``node`` has a smaller key for row i (:func:`_join_key`) than this: each term
    taken to the node's bounds (its ranges', values' and centroids'), no larger in floats, summed
    in the same order."""
    outside = 0.0
    for d in range(px.shape[1]):
        if ranged[d]:
            x = px[i, d]
            v = max(max(node_low[node, d] - x, x - node_high[node, d]), 0.0)
            outside += v * v
        elif not node_held[node, offsets[d] + codes[i, d]]:
            outside += 1.0
    distance = 0.0
    for d in range(px.shape[1]):
        x = px[i, d]
        v = max(max(centre_low[node, d] - x, x - centre_high[node, d]), 0.0)
        distance += v * v
    return outside * 1e6 + distance


@njit(cache=True, nogil=True)
def join_tree(px, codes, ranged, low, high, held, offsets, centroids, order, centre_low,
              centre_high, first, last, left, node_low, node_high, node_held, out):
    """For each row of ``px`` (m, D): the group (of G) minimizing ``outside * 1e6 + distance``
    (:func:`_join_key`; the first on ties, numpy's argmin), as core.republication._join_nearest
    chooses it, found in a tree of the groups (:func:`box_tree` of their centroids, :func:`join_bounds`): a part is
    passed over when its bound (:func:`_join_bound`) exceeds the best key so far, so every
    group whose key could equal it is still compared. ``out`` holds on entry the group to try
    first for row 0; after it, each row's group is tried first for the next."""
    stack = np.empty(256, dtype=np.int64)
    bounds = np.empty(256)
    seed = out[0]
    for i in range(px.shape[0]):
        best = _join_key(px, codes, ranged, low, high, held, offsets, centroids, i, seed)
        arg = seed
        stack[0], bounds[0] = 0, 0.0
        top = 1
        while top:
            top -= 1
            node = stack[top]
            if bounds[top] > best:
                continue
            if left[node] < 0:
                for t in range(first[node], last[node]):
                    h = order[t]
                    key = _join_key(px, codes, ranged, low, high, held, offsets, centroids, i, h)
                    if key < best or (key == best and h < arg):
                        best = key
                        arg = h
                continue
            a, b = left[node], left[node] + 1
            bound_a = _join_bound(px, codes, ranged, offsets, node_low, node_high, node_held,
                                  centre_low, centre_high, i, a)
            bound_b = _join_bound(px, codes, ranged, offsets, node_low, node_high, node_held,
                                  centre_low, centre_high, i, b)
            # the nearer part last, so visited first
            if bound_a < bound_b:
                a, b, bound_a, bound_b = b, a, bound_b, bound_a
            if bound_a <= best:
                stack[top], bounds[top] = a, bound_a
                top += 1
            if bound_b <= best:
                stack[top], bounds[top] = b, bound_b
                top += 1
        out[i] = arg
        seed = arg


@njit(cache=True, nogil=True)
def _holds(c, i, points, low, high, is_set, members, offsets, widths, bits, word_start):
    """Class ``c`` holds point ``i`` on every axis (:func:`points_in_boxes`' exact test)."""
    for j in range(points.shape[1]):
        v = points[i, j]
        if is_set[j]:
            if v < low[c, j] or v > high[c, j]:
                return False
            if word_start[j] >= 0:
                if not (bits[c, word_start[j] + (v >> 6)] >> np.uint64(v & 63)) & np.uint64(1):
                    return False
                continue
            key = c * widths[j] + v
            a, b = offsets[j], offsets[j + 1]
            while a < b:
                mid = (a + b) >> 1
                if members[mid] < key:
                    a = mid + 1
                else:
                    b = mid
            if a == offsets[j + 1] or members[a] != key:
                return False
        elif v != -1 and (v < low[c, j] or v > high[c, j]):
            return False
    return True


@njit(cache=True, nogil=True)
def points_in_boxes(start, points, low, high, is_set, members, offsets, widths, bits, word_start,
                    span_low, span_high, order, node_low, node_high, first, last, left,
                    linked_start, linked, found, out_p, out_c):
    """The (point, class) pairs where the class holds the point on every axis, for the points
    from ``start`` on, into ``out_p``/``out_c``: core.containment.contained's test. Each point's
    candidates are the classes of :func:`box_tree`'s tree of their spans (``span_low``/
    ``span_high`` (C, q), floats) that meet its query box (the point's code, and on a range
    where it is ANY (-1) every value: every class meets it there); each candidate then tested
    exactly: ``low``/``high`` (C, q) the classes' closed intervals of codes, a point coded ANY
    on a range held by every class, on a set (``is_set``) its key ``class * widths[j] + code``
    among the sorted ``members`` (axis j's from ``offsets[j]`` to ``offsets[j + 1]``), or where
    ``word_start[j] >= 0`` the code's bit in the class's row of ``bits`` (C, W) from that word
    on. With ``linked`` (class c's partners ``linked[linked_start[c]:linked_start[c + 1]]``:
    every class that can hold a point with c; none when ``linked_start`` is empty), a point ANY
    on no range held by a class the point before was held by is tested against that class's
    partners only, no search. Returns (how many, the point to go on from: ``points.shape[0]``
    when done); stops before a point whose candidates might not fit."""
    n_points, q = points.shape
    count = 0
    stack = np.empty(256, dtype=np.int64)
    query_low, query_high = np.empty(q), np.empty(q)
    partners = linked_start.size > 0
    hit = -1                        # a class holding the point before
    for i in range(start, n_points):
        if count + found.size > out_p.size:
            return count, i
        plain = partners
        for j in range(q):
            v = points[i, j]
            if v == -1 and not is_set[j]:
                query_low[j], query_high[j] = -np.inf, np.inf
                plain = False
            else:
                query_low[j] = query_high[j] = v
        if plain and hit >= 0 and \
                _holds(hit, i, points, low, high, is_set, members, offsets, widths, bits,
                       word_start):
            out_p[count] = i
            out_c[count] = hit
            count += 1
            for t in range(linked_start[hit], linked_start[hit + 1]):
                c = linked[t]
                if _holds(c, i, points, low, high, is_set, members, offsets, widths, bits,
                          word_start):
                    out_p[count] = i
                    out_c[count] = c
                    count += 1
            continue
        m = _boxes_meeting_on(span_low, span_high, order, node_low, node_high, first, last,
                              left, query_low, query_high, found, stack)
        hit = -1
        for t in range(m):
            c = found[t]
            if _holds(c, i, points, low, high, is_set, members, offsets, widths, bits,
                      word_start):
                out_p[count] = i
                out_c[count] = c
                count += 1
                if plain:
                    hit = c
    return count, n_points


@njit(cache=True, nogil=True)
def options_safe(options, earlier, l, out):
    """core.republish.safe_against's test for distinct l: ``out[g, o]`` (true on entry where
    still to test) stays true when, against every ``earlier[g, s]`` ((G, S, V) multisets), the
    values ``options[g, o]`` ((G, O, V)) adds are none or at least ``l`` distinct non-NULL ones
    (the last code is NULL), and so are those it removes."""
    n_groups, n_options, width = options.shape
    for g in range(n_groups):
        for o in range(n_options):
            if not out[g, o]:
                continue
            for s in range(earlier.shape[1]):
                added = removed = False
                added_values = removed_values = 0
                for v in range(width):
                    d = options[g, o, v] - earlier[g, s, v]
                    if d > 0:
                        added = True
                        if v < width - 1:
                            added_values += 1
                    elif d < 0:
                        removed = True
                        if v < width - 1:
                            removed_values += 1
                if (added and added_values < l) or (removed and removed_values < l):
                    out[g, o] = False
                    break


# -- the stable check's kernels (core.containment: the released classes that meet)


@njit(cache=True, nogil=True)
def pairs_after(start, stop, span_low, span_high, node_low, node_high, first, last, left, low,
                high, words, word_offsets, out_a, out_b):
    """The pairs (a, b), a < b, of boxes that meet (:func:`_boxes_meet`) into ``out_a``/
    ``out_b``, for the boxes a from ``start`` to ``stop``. The boxes are numbered in the order
    of :func:`box_tree`'s tree (``span_low``/``span_high``, ``low``/``high``, ``words``
    reordered so), so that a node's run ``first[node]``..``last[node]`` is a run of box numbers:
    each box's own span is searched in the tree among the boxes after it only (a node whose run
    ends at or before it is passed over), each box found tested exactly. Returns (how many, the
    box to go on from: ``stop`` when done); stops before a box whose pairs might not fit."""
    n, n_dims = span_low.shape
    stack = np.empty(256, dtype=np.int64)
    count = 0
    for a in range(start, stop):
        if count + n - a > out_a.size:
            return count, a
        stack[0] = 0
        top = 1
        while top:
            top -= 1
            node = stack[top]
            if last[node] <= a + 1:
                continue
            meets = True
            for d in range(n_dims):
                if node_high[node, d] < span_low[a, d] or node_low[node, d] > span_high[a, d]:
                    meets = False
                    break
            if not meets:
                continue
            if left[node] >= 0:
                stack[top] = left[node]
                stack[top + 1] = left[node] + 1
                top += 2
                continue
            for b in range(max(first[node], a + 1), last[node]):
                inside = True
                for d in range(n_dims):
                    if span_high[b, d] < span_low[a, d] or span_low[b, d] > span_high[a, d]:
                        inside = False
                        break
                if inside and _boxes_meet(a, b, low, high, words, word_offsets):
                    out_a[count] = a
                    out_b[count] = b
                    count += 1
    return count, stop


# --- the grouping's merge candidates found in a tree of the groups ---


@njit(cache=True, nogil=True)
def _centroid_bound(centroids, g, centre_low, centre_high, node):
    """No group of ``node`` (its centroids within ``centre_low``/``centre_high``) is nearer g
    than this: each dimension's term taken to the node's bounds, no larger in floats (rounding
    is monotone), summed in the same order as :func:`_nearest_scan`'s distance."""
    total = 0.0
    for d in range(centroids.shape[1]):
        x = centroids[g, d]
        v = max(max(centre_low[node, d] - x, x - centre_high[node, d]), 0.0)
        total += v * v
    return total


@njit(cache=True, nogil=True)
def _nearest_tree(g, wanted, centroids, holders, held, c_order, centre_low, centre_high,
                  c_first, c_last, c_left, near, near_distance, stack, bounds):
    """:func:`_nearest_scan`'s candidates of group g (whose union holds no other group), found
    in a tree of the groups whose parts bound their centroids: a part is passed over when its
    bound exceeds
    the farthest of a full list, so every group that could tie with it is still compared, and
    the list is kept by (distance, index) as the scan keeps it. ``holders[v]``: how many groups
    hold value bit v (``held``'s bit order), so whether another group helps g is known before
    the search."""
    n_words = held.shape[1]
    count = near.size
    helped = False
    for w in range(n_words):
        bits = wanted[w]
        if bits == 0:
            continue
        for bit in range(64):
            if (bits >> np.uint64(bit)) & np.uint64(1):
                own = (held[g, w] >> np.uint64(bit)) & np.uint64(1)
                if holders[w * 64 + bit] - np.int64(own) > 0:
                    helped = True
                    break
        if helped:
            break
    n = 0
    stack[0], bounds[0] = 0, 0.0
    top = 1
    while top:
        top -= 1
        node = stack[top]
        if n == count and bounds[top] > near_distance[n - 1]:
            continue
        if c_left[node] < 0:
            for t in range(c_first[node], c_last[node]):
                h = c_order[t]
                if h == g:
                    continue
                if helped:
                    helps = False
                    for w in range(n_words):
                        if held[h, w] & wanted[w]:
                            helps = True
                            break
                    if not helps:
                        continue
                x = 0.0
                for d in range(centroids.shape[1]):
                    v = centroids[h, d] - centroids[g, d]
                    x += v * v
                if n == count and (x > near_distance[n - 1] or
                                   (x == near_distance[n - 1] and h > near[n - 1])):
                    continue
                j = n if n < count else count - 1
                while j > 0 and (near_distance[j - 1] > x or
                                 (near_distance[j - 1] == x and near[j - 1] > h)):
                    near[j] = near[j - 1]
                    near_distance[j] = near_distance[j - 1]
                    j -= 1
                near[j] = h
                near_distance[j] = x
                if n < count:
                    n += 1
            continue
        a, b = c_left[node], c_left[node] + 1
        bound_a = _centroid_bound(centroids, g, centre_low, centre_high, a)
        bound_b = _centroid_bound(centroids, g, centre_low, centre_high, b)
        # the nearer part last, so visited first
        if bound_a < bound_b:
            a, b, bound_a, bound_b = b, a, bound_b, bound_a
        if n < count or bound_a <= near_distance[n - 1]:
            stack[top], bounds[top] = a, bound_a
            top += 1
        if n < count or bound_b <= near_distance[n - 1]:
            stack[top], bounds[top] = b, bound_b
            top += 1
    return n


@njit(cache=True, nogil=True)
def merge_ranking_tree(bad, centroids, within, union_size, held, wanted, holders, low, high,
                       words, word_offsets, span_low, span_high, order, node_low, node_high,
                       first, last, left, c_order, centre_low, centre_high, c_first, c_last,
                       c_left, ranked, n_near):
    """:func:`merge_ranking`'s output, the candidates of each group whose union holds no other
    found in a tree of the groups (``c_*``: a :func:`box_tree` tree, ``centre_low``/
    ``centre_high`` bounding each part's centroids: :func:`part_bounds`) instead of by a scan
    of every group; ``holders``: :func:`_nearest_tree`'s."""
    n_groups = centroids.shape[0]
    count = ranked.shape[1]
    distance = np.empty(n_groups)
    near = np.empty(count, dtype=np.int64)
    near_distance = np.empty(count)
    stack = np.empty(256, dtype=np.int64)
    bounds = np.empty(256)
    work = _ranking_work(count, low.shape[1], words.shape[1], span_low.shape[1], n_groups)
    for b in range(bad.size):
        g = bad[b]
        if union_size[within[g]] > 1:
            n = _nearest_scan(g, wanted[b], centroids, within, union_size, held, distance, near,
                              near_distance)
        else:
            n = _nearest_tree(g, wanted[b], centroids, holders, held, c_order, centre_low,
                              centre_high, c_first, c_last, c_left, near, near_distance, stack,
                              bounds)
        _rank_candidates(b, g, n, near, near_distance, low, high, words, word_offsets, span_low,
                         span_high, order, node_low, node_high, first, last, left, work, ranked,
                         n_near)


# --- the pairs of boxes that meet, by a walk of pairs of the tree's parts ---


@njit(cache=True, nogil=True)
def _spans_meet(span_low, span_high, a, b):
    for d in range(span_low.shape[1]):
        if span_high[a, d] < span_low[b, d] or span_high[b, d] < span_low[a, d]:
            return False
    return True


@njit(cache=True, nogil=True)
def meeting_pairs_walk(stack_a, stack_b, top, budget, span_low, span_high, order, node_low,
                       node_high, first, last, left, low, high, words, word_offsets, out_a,
                       out_b):
    """:func:`meeting_pairs`' pairs (a, b), a < b, of boxes that meet (:func:`_boxes_meet`),
    found by walking pairs of parts of :func:`box_tree`'s tree whose bounds meet (a part with
    itself, then its children's pairs; two parts, then the larger's children with the other),
    so each box's partners are not searched from the root. The walk's pending pairs of parts are
    ``stack_a``/``stack_b`` (``top`` of them; start with (0, 0)): returns (pairs written,
    pending pairs), stopping when ``out_a`` could not hold one more pair of leaves' pairs or
    after ``budget`` pairs of parts, to go on from there."""
    count = 0
    while top and budget > 0:
        budget -= 1
        top -= 1
        a_node, b_node = stack_a[top], stack_b[top]
        meets = True
        for d in range(node_low.shape[1]):
            if node_high[a_node, d] < node_low[b_node, d] or \
                    node_high[b_node, d] < node_low[a_node, d]:
                meets = False
                break
        if not meets:
            continue
        leaf_a, leaf_b = left[a_node] < 0, left[b_node] < 0
        if leaf_a and leaf_b:
            if count + (last[a_node] - first[a_node]) * (last[b_node] - first[b_node]) > out_a.size:
                top += 1
                return count, top
            for s in range(first[a_node], last[a_node]):
                for t in range(s + 1 if a_node == b_node else first[b_node], last[b_node]):
                    a, b = order[s], order[t]
                    if a > b:
                        a, b = b, a
                    if _spans_meet(span_low, span_high, a, b) and \
                            _boxes_meet(a, b, low, high, words, word_offsets):
                        out_a[count] = a
                        out_b[count] = b
                        count += 1
            continue
        if a_node == b_node:
            child = left[a_node]
            stack_a[top], stack_b[top] = child, child
            stack_a[top + 1], stack_b[top + 1] = child, child + 1
            stack_a[top + 2], stack_b[top + 2] = child + 1, child + 1
            top += 3
        elif leaf_a or (not leaf_b and last[b_node] - first[b_node] > last[a_node] - first[a_node]):
            stack_a[top], stack_b[top] = a_node, left[b_node]
            stack_a[top + 1], stack_b[top + 1] = a_node, left[b_node] + 1
            top += 2
        else:
            stack_a[top], stack_b[top] = left[a_node], b_node
            stack_a[top + 1], stack_b[top + 1] = left[a_node] + 1, b_node
            top += 2
    return count, top


@njit(cache=True, nogil=True)
def part_bounds(points, order, first, last, left):
    """Per part of a :func:`box_tree` tree (of any boxes of the same groups): the bounds of
    ``points`` (G, D) of its groups, children before parents, so that a search by those points
    (:func:`_nearest_tree`) needs no tree of its own."""
    n_nodes, n_dims = first.size, points.shape[1]
    low = np.full((n_nodes, n_dims), np.inf)
    high = np.full((n_nodes, n_dims), -np.inf)
    for node in range(n_nodes - 1, -1, -1):
        if left[node] < 0:
            for t in range(first[node], last[node]):
                h = order[t]
                for d in range(n_dims):
                    low[node, d] = min(low[node, d], points[h, d])
                    high[node, d] = max(high[node, d], points[h, d])
        else:
            for child in (left[node], left[node] + 1):
                for d in range(n_dims):
                    low[node, d] = min(low[node, d], low[child, d])
                    high[node, d] = max(high[node, d], high[child, d])
    return low, high
