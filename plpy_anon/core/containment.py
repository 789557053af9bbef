"""Which boxes hold which points, by sorting and searching: the classes of a release whose ranges
and sets hold each person's quasi-identifiers, at a cost that does not depend on how wide the
ranges are.

Every quasi-identifier is coded as integers first: a range's values by their rank among the
values that matter (the people's and the bounds'), so that a range is a closed interval of ranks;
a set's values by a code each (NULL one of them), its bounding interval for the search and its
members for the exact test. The classes are then split like a k-d tree, every node at once: each
node cuts one quasi-identifier at the class bound that keeps its larger side smallest (classes
crossing the cut go to both sides, people to the side of their value), until a node holds a few
classes, whose people are tested against each of them. Released classes of one partition are
disjoint boxes, so the cuts rarely duplicate a class and the work is about (people + classes) x
depth.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plpy_anon.core.interrupts import check as check_interrupts

#: a node with this many classes or fewer tests its people against each of them
LEAF_CLASSES = 2
#: (person, class) pairs tested at once
PAIR_CHUNK = 1 << 22
#: a value no range reaches past (ranks are smaller)
TOP = (1 << 31) - 1
#: a person's code that every class holds on that quasi-identifier (NULL in a ranged one)
ANY = -1


@dataclass
class Axis:
    """One quasi-identifier, coded: ``points`` each person's code (``ANY``: held by every class);
    ``low``/``high`` each class's closed bounding interval of codes (empty: ``low > high``);
    ``members`` for a set, the sorted keys ``class * width + code`` of the codes each class
    holds (None: the interval is exact)."""

    points: np.ndarray
    low: np.ndarray
    high: np.ndarray
    members: np.ndarray | None = None
    width: int = 0


def set_axis(points: np.ndarray, classes: np.ndarray, codes: np.ndarray, n_classes: int,
             width: int) -> Axis:
    """A set-valued quasi-identifier: ``points`` each person's code in [0, width); ``classes`` and
    ``codes`` the (class, code) pairs the classes' sets hold (codes outside [0, width): values no
    person has, left out)."""
    keep = (codes >= 0) & (codes < width)
    classes, codes = classes[keep].astype(np.int64), codes[keep].astype(np.int64)
    low = np.full(n_classes, 1, dtype=np.int64)
    high = np.full(n_classes, 0, dtype=np.int64)
    # one sort: the distinct keys, by class then code, give each class's smallest and largest
    members = distinct(classes * width + codes)
    if members.size:
        owner = members // width
        first = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        last = np.r_[first[1:] - 1, members.size - 1]
        low[owner[first]] = members[first] % width
        high[owner[last]] = members[last] % width
    return Axis(np.asarray(points, dtype=np.int64), low, high, members, width)


def contained(axes: list[Axis], n_points: int, n_classes: int, engine: str = "auto",
              linked: tuple | None = None, near: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """Every (point, class) pair where the class holds the point on every axis, each once, as
    two arrays (in no particular order). ``engine``: "numpy" (the k-d split below), "numba" (a
    tree of the classes searched point by point, :func:`_contained_compiled`) or "auto" (numba
    where the process has the compiled kernels or the table is large enough to load them).

    Two hints make the compiled search cheaper and change nothing of its result: ``linked``,
    pairs (a, b) of classes such that any two classes holding one point that is ANY on no axis
    are a pair (the boxes that meet, say); ``near``, per point a key, points of one key likely
    held by the same classes (the group a run put them in). A point held by a class that held
    the point before it is then tested against that class's partners only."""
    if not axes:
        p, c = np.meshgrid(np.arange(n_points), np.arange(n_classes), indexing="ij")
        return p.ravel().astype(np.int64), c.ravel().astype(np.int64)
    if engine != "numpy" and n_points and n_classes:
        from plpy_anon.core.republication import _kernels
        kern = _kernels(None if engine == "numba" else n_points)
        if kern is not None:
            return _contained_compiled(kern, axes, n_points, n_classes, linked, near)
    points = np.column_stack([a.points for a in axes]).astype(np.int64)
    low = np.column_stack([a.low for a in axes]).astype(np.int64)
    high = np.column_stack([a.high for a in axes]).astype(np.int64)
    # an empty interval of a ranged axis still holds its ANY points: searched as [0, 0]
    empty = low > high
    low[empty], high[empty] = 0, 0
    any_point = points == ANY
    leaves_p, leaves_c = _leaves(points, any_point, low, high, n_points, n_classes)
    out_p, out_c = [], []
    for p, c in _pairs(leaves_p, leaves_c):
        check_interrupts()
        for axis in axes:
            v = axis.points[p]
            inside = (v >= axis.low[c]) & (v <= axis.high[c])
            if axis.members is not None:
                key = c * axis.width + v
                at = np.minimum(np.searchsorted(axis.members, key), max(axis.members.size - 1, 0))
                inside &= axis.members[at] == key if axis.members.size else False
            else:
                inside |= v == ANY
            p, c = p[inside], c[inside]
        out_p.append(p)
        out_c.append(c)
    if not out_p:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    p, c = np.concatenate(out_p), np.concatenate(out_c)
    if any_point.any():
        # a class crossing a cut meets a person of any value on both sides: once each
        key = distinct(p * max(n_classes, 1) + c)
        return key // max(n_classes, 1), key % max(n_classes, 1)
    return p, c


#: (point, class) pairs found per kernel call (interrupts are checked between calls)
FOUND_CHUNK = 1 << 20


#: points searched a call of the compiled kernel, between two checks of a pending cancel
POINTS_A_CALL = 1 << 16


def _contained_compiled(kern, axes: list[Axis], n_points: int, n_classes: int, linked=None,
                        near=None):
    """:func:`contained` on the compiled kernel (core._republication_kernels.points_in_boxes):
    the classes' boxes in a tree, each point's query box searched in it, its candidates tested
    exactly (a set's members by binary search); with ``linked``, a point held by a class that
    held the point before is tested against that class's partners only."""
    # near points one after the other: they walk the same parts of the tree (in the order the
    # points come in, a search waits on memory several times longer), and the points of one
    # key (``near``) are likely held by the classes that held the one before
    if near is None:
        visit = _near_first(np.column_stack([a.points for a in axes]).astype(np.int64))
    else:
        from plpy_anon.core.republication import stable_order
        visit = stable_order(np.asarray(near, dtype=np.int64))
    points = np.empty((n_points, len(axes)), dtype=np.int64)
    for j, axis in enumerate(axes):
        points[:, j] = axis.points[visit]
    low = np.ascontiguousarray(np.column_stack([a.low for a in axes]).astype(np.int64))
    high = np.ascontiguousarray(np.column_stack([a.high for a in axes]).astype(np.int64))
    is_set = np.array([a.members is not None for a in axes])
    # the tree holds each class's interval as floats (exact: codes are below 2**31); an empty
    # one as [0, 0], which only the exact test then tells apart
    empty = low > high
    span_low = np.where(empty, 0, low).astype(np.float64)
    span_high = np.where(empty, 0, high).astype(np.float64)
    bits, word_start = _member_bits(axes, n_classes)
    # the sets tested by bits need no members
    members = [a.members if a.members is not None and word_start[j] < 0 else
               np.empty(0, np.int64) for j, a in enumerate(axes)]
    offsets = np.r_[0, np.cumsum([m.size for m in members])].astype(np.int64)
    members = np.concatenate(members).astype(np.int64)
    widths = np.array([a.width for a in axes], dtype=np.int64)
    linked_start, partners = _partners(linked, n_classes)
    tree = kern.box_tree(span_low, span_high)
    found = np.empty(n_classes, dtype=np.int64)
    size = max(FOUND_CHUNK, n_classes)
    out_p, out_c = [], []
    start = 0
    while start < n_points:
        check_interrupts()
        buf_p, buf_c = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
        end = min(n_points, start + POINTS_A_CALL)           # the points' rows up to ``end``
        count, start = kern.points_in_boxes(start, points[:end], low, high, is_set, members,
                                            offsets, widths, bits, word_start, span_low,
                                            span_high, *tree, linked_start, partners, found,
                                            buf_p, buf_c)
        out_p.append(visit[buf_p[:count]])
        out_c.append(buf_c[:count])
    return np.concatenate(out_p), np.concatenate(out_c)


#: boxes a call of the compiled pair search starts from, between two checks of a pending cancel
BOXES_A_CALL = 1 << 13
#: pairs the compiled pair search's buffers hold at least
PAIRS_BUFFER = 1 << 20


def meeting_pairs(kern, lo: np.ndarray, hi: np.ndarray,
                  words: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (a < b as positions) of boxes ``lo[i] <= x <= hi[i]`` (integer codes, one column
    a dimension) that meet on every dimension and, with ``words`` ((bit words (count, W), each
    set's first word and the end)), share a bit of every set, on the compiled kernel
    (core._republication_kernels.pairs_after): the boxes in a tree of their spans, each box's
    span searched among the boxes after it, every pair found tested exactly in integers."""
    count = lo.shape[0]
    low, high = np.ascontiguousarray(lo, dtype=np.int64), np.ascontiguousarray(hi, dtype=np.int64)
    # the tree's spans as floats: rounding keeps their order, so no pair that meets is pruned
    span_low, span_high = low.astype(np.float64), high.astype(np.float64)
    order, node_low, node_high, first, last, left = kern.box_tree(span_low, span_high)
    words, offsets = (np.zeros((count, 0), dtype=np.uint64), np.zeros(1, dtype=np.int64)) \
        if words is None else (np.ascontiguousarray(words[0], dtype=np.uint64),
                               np.asarray(words[1], dtype=np.int64))
    # the boxes renumbered in the tree's order: a node's run of the tree is then a run of box
    # numbers, and the boxes one search meets lie a few runs apart in memory
    low, high, words = low[order], high[order], words[order]
    span_low, span_high = span_low[order], span_high[order]
    size = max(PAIRS_BUFFER, 2 * count)
    out_a, out_b = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    found_a, found_b = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    at = 0
    while at < count:
        check_interrupts()
        n, at = kern.pairs_after(at, min(count, at + BOXES_A_CALL), span_low, span_high,
                                 node_low, node_high, first, last, left, low, high, words,
                                 offsets, out_a, out_b)
        found_a.append(out_a[:n].copy())
        found_b.append(out_b[:n].copy())
    a, b = order[np.concatenate(found_a)], order[np.concatenate(found_b)]
    return np.minimum(a, b), np.maximum(a, b)


#: bytes the compiled search's bitmasks of the classes' sets may take (a set past it is
#: searched among its members)
MEMBER_BITS_BYTES = 32 << 20


def _member_bits(axes: list[Axis], n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The classes' sets as bits for the compiled search, the narrowest sets first while they
    fit in MEMBER_BITS_BYTES: (bits (classes, words), each axis's first word, -1 for an axis
    whose members are searched instead). A bit test costs one load where the search of the
    sorted members costs a load per halving (2x the search's time at 80,000 classes)."""
    word_start = np.full(len(axes), -1, dtype=np.int64)
    words = 0
    for j in sorted(range(len(axes)), key=lambda j: axes[j].width):
        if axes[j].members is None:
            continue
        need = (axes[j].width + 63) // 64
        if (words + need) * n_classes * 8 > MEMBER_BITS_BYTES:
            break
        word_start[j], words = words, words + need
    bits = np.zeros(n_classes * words, dtype=np.uint64)
    for j in np.flatnonzero(word_start >= 0).tolist():
        width = axes[j].width
        klass, code = axes[j].members // width, axes[j].members % width
        # members are distinct (class, code) keys: each bit set once, so adding is ORing
        np.add.at(bits, klass * words + word_start[j] + code // 64,
                  np.left_shift(np.uint64(1), (code % 64).astype(np.uint64)))
    return bits.reshape(n_classes, words), word_start


def _partners(linked, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Each class's partners in the pairs ``linked`` (both ways, each once, none itself) as
    (starts, partners): class c's are ``partners[starts[c]:starts[c + 1]]``; (empty, empty)
    without pairs."""
    if linked is None:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    a, b = (np.asarray(x, dtype=np.int64) for x in linked)
    other = a != b
    a, b = a[other], b[other]
    keys = distinct(np.concatenate([a * n_classes + b, b * n_classes + a]))
    owner = keys // max(n_classes, 1)
    starts = np.searchsorted(owner, np.arange(n_classes + 1)).astype(np.int64)
    return starts, keys % max(n_classes, 1)


def _near_first(points: np.ndarray) -> np.ndarray:
    """An order of the rows of ``points`` (n, q) that puts near ones together: lexicographic on
    each column scaled to 62 // q bits (one integer sort)."""
    n, q = points.shape
    bits = min(62 // max(q, 1), 31)
    key = np.zeros(n, dtype=np.int64)
    for j in range(q):
        column = points[:, j]
        low, high = (int(column.min()), int(column.max())) if n else (0, 0)
        scaled = (column - low) * ((1 << bits) - 1) // max(high - low, 1)
        key = (key << bits) | scaled
    return np.argsort(key)


def _leaves(points, any_point, low, high, n_points, n_classes):
    """Split the classes (k-d, every node of a level at once) until each node holds at most
    LEAF_CLASSES or no cut helps; returns (leaf, person) and (leaf, class) entries."""
    q = points.shape[1]
    has_any = any_point.any(axis=0)
    flat = points.ravel()
    p_id, p_node = np.arange(n_points, dtype=np.int64), np.zeros(n_points, dtype=np.int64)
    c_id, c_node = np.arange(n_classes, dtype=np.int64), np.zeros(n_classes, dtype=np.int64)
    nodes, next_leaf = 1, 0
    leaf_p, leaf_c = [], []
    while p_id.size and c_id.size:
        check_interrupts()
        c_count = np.bincount(c_node, minlength=nodes)
        p_count = np.bincount(p_node, minlength=nodes)
        best_score = np.full(nodes, np.inf)
        best_axis = np.zeros(nodes, dtype=np.int64)
        best_cut = np.zeros(nodes, dtype=np.int64)
        splittable = (c_count > LEAF_CLASSES) & (p_count > 0)
        if splittable.any():
            start = np.r_[0, np.cumsum(c_count)[:-1]]
            for j in range(q):
                check_interrupts()
                lo, hi = low[c_id, j], high[c_id, j]
                key_lo = np.sort((c_node << 32) | (lo + 1))
                key_hi = np.sort((c_node << 32) | (hi + 1))
                node = key_lo >> 32
                # cut at each class's lower bound x: the left side holds classes starting below x,
                # the right side those ending at or past x
                left = np.searchsorted(key_lo, key_lo, "left") - start[node]
                right = c_count[node] - (np.searchsorted(key_hi, key_lo, "left") - start[node])
                larger = np.maximum(left, right)
                score = larger / c_count[node]
                if has_any[j]:
                    # people of any value go both ways: a cut through many of them costs their share
                    score += (np.bincount(p_node, weights=any_point[p_id, j], minlength=nodes)
                              / np.maximum(p_count, 1))[node]
                score[(left == 0) | (larger >= c_count[node])] = np.inf
                # each node's best cut (entries are grouped by node): its first smallest score
                begins = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
                smallest = np.minimum.reduceat(score, begins)
                ties = np.flatnonzero(score == np.repeat(smallest, np.diff(np.r_[begins, node.size])))
                first = ties[np.r_[True, node[ties][1:] != node[ties][:-1]]]
                at, s = node[first], score[first]
                better = s < best_score[at]
                best_score[at[better]] = s[better]
                best_axis[at[better]] = j
                best_cut[at[better]] = (key_lo[first[better]] & 0xFFFFFFFF) - 1
        split = splittable & np.isfinite(best_score)
        # nodes that stop become leaves
        done_c, done_p = ~split[c_node], ~split[p_node]
        leaf_id = np.cumsum(~split) - 1 + next_leaf
        next_leaf += int((~split).sum())
        leaf_p.append(np.column_stack([leaf_id[p_node[done_p]], p_id[done_p]]))
        leaf_c.append(np.column_stack([leaf_id[c_node[done_c]], c_id[done_c]]))
        p_id, p_node = p_id[~done_p], p_node[~done_p]
        c_id, c_node = c_id[~done_c], c_node[~done_c]
        child = np.cumsum(split) - 1          # each split node's rank: children 2r, 2r + 1
        nodes = 2 * int(split.sum())
        cut, axis = best_cut[c_node], best_axis[c_node]
        lo, hi = low[c_id, axis], high[c_id, axis]
        to_left, to_right = lo < cut, hi >= cut
        c_id = np.r_[c_id[to_left], c_id[to_right]]
        c_node = np.r_[2 * child[c_node[to_left]], 2 * child[c_node[to_right]] + 1]
        cut, axis = best_cut[p_node], best_axis[p_node]
        v = flat[p_id * q + axis]
        to_left, to_right = v < cut, v >= cut
        if has_any.any():
            free = v == ANY
            free &= has_any[axis]
            to_left |= free
            to_right |= free
        p_id = np.r_[p_id[to_left], p_id[to_right]]
        p_node = np.r_[2 * child[p_node[to_left]], 2 * child[p_node[to_right]] + 1]
    empty = np.empty((0, 2), dtype=np.int64)
    return np.concatenate(leaf_p or [empty]), np.concatenate(leaf_c or [empty])


def _pairs(leaf_p: np.ndarray, leaf_c: np.ndarray):
    """Each leaf's people times its classes, PAIR_CHUNK pairs at a time (about)."""
    if not leaf_p.size or not leaf_c.size:
        return
    leaf_c = leaf_c[np.argsort(leaf_c[:, 0], kind="stable")]
    n_leaves = int(max(leaf_p[:, 0].max(), leaf_c[:, 0].max())) + 1
    c_count = np.bincount(leaf_c[:, 0], minlength=n_leaves)
    c_start = np.r_[0, np.cumsum(c_count)[:-1]]
    per_person = c_count[leaf_p[:, 0]]
    ends = np.cumsum(per_person)
    begin = 0
    while begin < leaf_p.shape[0]:
        stop = int(np.searchsorted(ends, (ends[begin - 1] if begin else 0) + PAIR_CHUNK, "right"))
        stop = max(stop, begin + 1)
        chunk = leaf_p[begin:stop]
        counts = per_person[begin:stop]
        total = int(counts.sum())
        p = np.repeat(chunk[:, 1], counts)
        offset = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        c = leaf_c[np.repeat(c_start[chunk[:, 0]], counts) + offset, 1]
        yield p, c
        begin = stop



def distinct(keys: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an integer array (a sort: numpy's hashed unique is slower
    on these)."""
    keys = np.sort(keys)
    return keys[np.r_[True, keys[1:] != keys[:-1]]] if keys.size else keys
