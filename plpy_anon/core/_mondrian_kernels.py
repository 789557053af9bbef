"""Compiled (numba) kernels of the Mondrian fit; imported only by :mod:`.mondrian_jit`, which sets
numba's cache directory first. The rules are those of :mod:`.mondrian` (and of the prioritized
variant's extension points); the numpy implementation there is the oracle the property tests
compare these kernels with.

The partitions are processed depth first, one partition at a time, in place: every attribute keeps
its row order (``orders[a]``) and codes in that order (``layouts[a]``) sorted by code inside each
partition, and a split regroups each segment by one stable pass (left rows in place, right rows
through a buffer). The smaller child is processed first, so the stack holds at most
``log2(rows)`` pending siblings beside the initial groups. :func:`run` stops after a budget of
row operations and returns; the caller calls it again (and its interrupt hook in between).

No kernel allocates (every array, work buffers included, comes from the caller) nor calls a
builtin numba implements in Python (``min``, ``int``, ``np.iinfo``): such code keeps a reference
to numba's module of that implementation, which loading it from the cache imports (numba's
array functions, and scipy with them: ~0.1 s of CPU in a fresh backend; see
:func:`.mondrian_jit.load_cached`).
"""

import math

import numpy as np
from numba import njit

# state slots shared between calls of run
(TOP, N_CLASSES, PHASE, CUR_S, CUR_SIZE, CUR_LEFT, CUR_ATTR, NEXT_B, STAMP, RG_POS, RG_LEFT,
 RG_RIGHT) = range(12)
STATE_SIZE = 12
_EPS = 1e-9                       # as privacy_models._EPS
_NUMERIC, _CATEGORICAL, _HIERARCHY = 0, 1, 2
_L_NONE, _L_ENTROPY, _L_RECURSIVE = 0, 1, 2
_INT64_MAX = np.iinfo(np.int64).max


@njit(cache=True, nogil=True, _nrt=False)
def count_codes(codes, lo, hi, start):
    """First pass of a stable counting sort, rows ``[lo, hi)``: ``start[c + 1]`` += rows of code
    ``c`` (the caller turns the counts into start positions by a cumulative sum)."""
    for i in range(lo, hi):
        start[codes[i] + 1] += 1


@njit(cache=True, nogil=True, _nrt=False)
def place_codes(codes, lo, hi, start, order, layout):
    """Second pass, rows ``[lo, hi)`` in row order: each row and its code to the next position
    of its code (ties keep row order: the sort is stable)."""
    for i in range(lo, hi):
        c = codes[i]
        p = start[c]
        order[p] = i
        layout[p] = c
        start[c] = p + 1


@njit(cache=True, nogil=True, _nrt=False)
def number_by_first_row(labels, rank):
    """Renumber classes 0..C-1 in order of their first row, in place (as
    ``mondrian._number_by_first_row``); ``rank``: C entries of -1."""
    following = 0
    for i in range(labels.size):
        c = labels[i]
        if rank[c] < 0:
            rank[c] = following
            following += 1
        labels[i] = rank[c]


@njit(cache=True, nogil=True, _nrt=False)
def write_class_sets(tokens, bounds, first, last, table, offsets, separator, out):
    """Literals ``{e,e,...}`` of classes ``first`` to ``last`` (exclusive), each after
    ``separator``, as UTF-8 bytes into ``out`` (sized by the caller); returns the bytes written.
    Class ``c``'s entries are ``tokens[bounds[c] - bounds[first]:bounds[c + 1] - bounds[first]]``,
    entry ``t`` the bytes ``table[offsets[t]:offsets[t + 1]]``."""
    p = 0
    base = bounds[first]
    for c in range(first, last):
        for b in range(separator.size):
            out[p] = separator[b]
            p += 1
        out[p] = 123                                # {
        p += 1
        for i in range(bounds[c] - base, bounds[c + 1] - base):
            if i > bounds[c] - base:
                out[p] = 44                         # ,
                p += 1
            t = tokens[i]
            for j in range(offsets[t], offsets[t + 1]):
                out[p] = table[j]
                p += 1
        out[p] = 125                                # }
        p += 1
    return p


#: FNV-1a's 64-bit offset basis (as a signed int64) and prime
_FNV_BASIS, _FNV_PRIME = -3750763034362895579, 1099511628211


@njit(cache=True, nogil=True, _nrt=False)
def factorize_marked(buffer, end, n, slots, starts, ends, indices):
    """The ``n`` values of ``buffer`` (bytes), each ended by the byte ``end``, factorized in
    order of first appearance (as pyarrow's ``dictionary_encode``): ``indices[i]`` the number of
    value ``i``'s distinct value, distinct value ``d`` the bytes ``buffer[starts[d]:ends[d]]``
    (its end mark included). ``slots``: the hash table, a power of two of -1s. Returns the
    number of distinct values; -1 when ``buffer`` holds other than ``n`` values; -2 when the
    distinct values would fill half of ``slots`` (the caller calls again with a larger one)."""
    mask = slots.size - 1
    size = buffer.size
    p = 0
    count = 0
    for i in range(n):
        s = p
        h = _FNV_BASIS
        while p < size and buffer[p] != end:
            h = (h ^ buffer[p]) * _FNV_PRIME
            p += 1
        if p == size:
            return -1
        p += 1                                      # past the end mark
        j = h & mask
        while True:
            d = slots[j]
            if d < 0:
                if 2 * (count + 1) > slots.size:
                    return -2
                slots[j] = count
                starts[count] = s
                ends[count] = p
                indices[i] = count
                count += 1
                break
            if ends[d] - starts[d] == p - s:
                same = True
                for b in range(p - s):
                    if buffer[starts[d] + b] != buffer[s + b]:
                        same = False
                        break
                if same:
                    indices[i] = d
                    break
            j = (j + 1) & mask
    return count if p == size else -1


#: what a range literal of :func:`write_range_literals` is: both bounds, open above, SQL NULL
RANGE_CLOSED, RANGE_OPEN, RANGE_NULL = 0, 1, 2


@njit(cache=True, nogil=True, _nrt=False)
def write_range_literals(low, high, kinds, first, last, digits, table, offsets, separator,
                         null, out):
    """Range literals ``[lo,hi]`` (``kinds`` RANGE_CLOSED), ``[lo,)`` (RANGE_OPEN) or the NULL
    marker ``null`` (RANGE_NULL) of classes ``first`` to ``last`` (exclusive), each after
    ``separator``, as UTF-8 bytes into ``out`` (large enough); returns the bytes written. A
    bound is ``low[c]`` / ``high[c]`` in decimal digits when ``digits`` is 1, else the entry
    of that number in ``table`` (``table[offsets[t]:offsets[t + 1]]``)."""
    p = 0
    for c in range(first, last):
        for b in range(separator.size):
            out[p] = separator[b]
            p += 1
        if kinds[c] == RANGE_NULL:
            for b in range(null.size):
                out[p] = null[b]
                p += 1
            continue
        out[p] = 91                                 # [
        p += 1
        p = _write_bound(low[c], digits, table, offsets, out, p)
        out[p] = 44                                 # ,
        p += 1
        if kinds[c] == RANGE_OPEN:
            out[p] = 41                             # )
        else:
            p = _write_bound(high[c], digits, table, offsets, out, p)
            out[p] = 93                             # ]
        p += 1
    return p


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _write_bound(value, digits, table, offsets, out, p):
    """``value``'s decimal digits (``digits`` 1: as Python's ``str`` of an int64 writes them)
    or its entry of ``table`` into ``out`` at ``p``; returns the position after them."""
    if digits == 0:
        for j in range(offsets[value], offsets[value + 1]):
            out[p] = table[j]
            p += 1
        return p
    if value < 0:
        out[p] = 45                                 # -
        p += 1
    # the digits from the last, each from the remainder's magnitude: -(int64 min) overflows
    n = 0
    v = value
    while True:
        r = v % 10
        if v < 0 and r != 0:                        # numba's % follows Python's sign rule
            r = 10 - r
        v = (v - r) // 10 if v >= 0 else -((-(v + r)) // 10)
        n += 1
        if v == 0:
            break
    v = value
    for i in range(n - 1, -1, -1):
        r = v % 10
        if v < 0 and r != 0:
            r = 10 - r
        out[p + i] = 48 + r
        v = (v - r) // 10 if v >= 0 else -((-(v + r)) // 10)
    return p + n


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _smaller(a, b):
    """``min(a, b)`` without numba's ``min``, which is implemented in Python (module doc)."""
    return a if a < b else b  # noqa: FURB136 (numba's min: see the module doc)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _lower(layout, lo, hi, v):
    """First position in ``[lo, hi)`` of the sorted segment whose code is ``>= v``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if layout[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _upper(layout, lo, hi, v):
    """First position in ``[lo, hi)`` whose code is ``> v``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if layout[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, nogil=True, _nrt=False)
def _distinct_sorted(layout, s, e, lo, hi):
    """Distinct codes of the sorted segment ``[s, e)`` (codes ``lo`` .. ``hi``). Few codes in a
    long segment: one galloping search per code (O(d log(n / d))); else one compare per row."""
    if (hi - lo + 1) * 8 >= e - s:
        distinct = 1
        for i in range(s + 1, e):
            distinct += layout[i] != layout[i - 1]
        return distinct
    distinct = 0
    i = s
    while i < e:
        distinct += 1
        v = layout[i]
        last, step = i, 1                  # layout[last] == v
        while last + step < e and layout[last + step] == v:
            last += step
            step *= 2
        i = _upper(layout, last + 1, _smaller(last + step, e), v)
    return distinct


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _spread(a, layout, s, e, kind, pos, width, null_code, domain, anc, anc_off, height, leaf_count,
            leaf_off, n_leaves):
    """SpreadMeasure of attribute ``a`` on the sorted segment ``[s, e)``."""
    lo = np.int64(layout[s])
    hi = np.int64(layout[e - 1])
    if kind[a] == _NUMERIC:
        value = 0.0
        if width[a] != 0.0:
            value = (pos[a, hi] - pos[a, lo]) / width[a]
        if null_code[a] >= 0 and lo == null_code[a]:
            value = 0.0 if hi == null_code[a] else 1.0
        return value
    if domain[a] <= 1:
        return 0.0
    if kind[a] == _CATEGORICAL:
        distinct = _distinct_sorted(layout, s, e, lo, hi)
        return (distinct - 1.0) / (domain[a] - 1)
    leaf_max = n_leaves[a] - 1
    if lo > leaf_max:
        count = 1
    elif hi > leaf_max:
        count = domain[a]
    else:
        h = height[a]
        base = anc_off[a]
        level = 0
        for j in range(h):
            if anc[base + lo * h + j] == anc[base + hi * h + j]:
                level = j
                break
        count = leaf_count[leaf_off[a] + anc[base + lo * h + level]]
    return (count - 1.0) / (domain[a] - 1)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _sift_down(values, root, end):
    """Restore the max-heap property of ``values[root:end]`` below ``root``."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and values[child] < values[child + 1]:
            child += 1
        if not values[root] < values[child]:
            return
        values[root], values[child] = values[child], values[root]
        root = child


@njit(cache=True, nogil=True, _nrt=False)
def _sort_in_place(values, m):
    """Sort ``values[:m]`` ascending in place (heapsort: no work array)."""
    for root in range(m // 2 - 1, -1, -1):
        _sift_down(values, root, m)
    for end in range(m - 1, 0, -1):
        values[0], values[end] = values[end], values[0]
        _sift_down(values, 0, end)


@njit(cache=True, nogil=True, _nrt=False)
def _model_ok(hist, j, m, lmode, l, c, t, q, ordered, sortbuf):
    """Models.satisfied of one side's histogram ``hist[j, :m]`` (missing values left out). The
    sums run in value order where numpy's are pairwise: entropies and distances may differ in
    their last bits, which the 1e-9 slack of both comparisons absorbs."""
    total = 0.0
    for v in range(m):
        total += hist[j, v]
    if lmode[j] == _L_ENTROPY:
        h = 0.0
        if total > 0:
            for v in range(m):
                if hist[j, v] > 0:
                    p = hist[j, v] / total
                    h -= p * math.log(p)
        if not h + 0.0 >= math.log(l[j]) - _EPS:
            return False
    elif lmode[j] == _L_RECURSIVE:
        for v in range(m):
            sortbuf[v] = hist[j, v]
        _sort_in_place(sortbuf, m)             # ascending: the largest count last
        li = np.int64(l[j])
        tail = 0.0
        for v in range(m - li, -1, -1):        # all but the l - 1 largest
            tail += sortbuf[v]
        if not sortbuf[m - 1] < c[j] * tail:
            return False
    if t[j] >= 0:
        emd = 0.0
        if ordered[j]:
            if m > 1:
                cum = 0.0
                for v in range(m - 1):
                    p = hist[j, v] / total if total > 0 else 0.0
                    cum += p - q[j, v]
                    emd += abs(cum)
                emd /= m - 1
        else:
            for v in range(m):
                p = hist[j, v] / total if total > 0 else 0.0
                emd += abs(p - q[j, v])
            emd *= 0.5
        if not emd <= t[j] + _EPS:
            return False
    return True


@njit(cache=True, nogil=True, _nrt=False)
def _allowable(order, s, size, n_left, k, dist_codes, dist_l, seen, state, mod_codes, mod_m,
               mod_lmode, mod_l, mod_c, mod_t, mod_q, mod_ordered, hist_l, hist_r, sortbuf):
    """Mondrian._allowable for one cut: k and every asked model on both sides."""
    if n_left < k or size - n_left < k:
        return False
    cut, e = s + n_left, s + size
    for j in range(mod_codes.shape[0]):
        m = mod_m[j]
        for v in range(m + 1):
            hist_l[j, v] = 0
            hist_r[j, v] = 0
        for i in range(s, cut):
            hist_l[j, mod_codes[j, order[i]]] += 1
        for i in range(cut, e):
            hist_r[j, mod_codes[j, order[i]]] += 1
        if not _model_ok(hist_l, j, m, mod_lmode, mod_l, mod_c, mod_t, mod_q, mod_ordered, sortbuf):
            return False
        if not _model_ok(hist_r, j, m, mod_lmode, mod_l, mod_c, mod_t, mod_q, mod_ordered, sortbuf):
            return False
    for j in range(dist_codes.shape[0]):
        for lo, hi in ((s, cut), (cut, e)):
            state[STAMP] += 1
            stamp = state[STAMP]
            distinct = 0
            for i in range(lo, hi):
                v = dist_codes[j, order[i]]
                if v >= 0 and seen[j, v] != stamp:
                    seen[j, v] = stamp
                    distinct += 1
            if distinct < dist_l:
                return False
    return True


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _decide(orders, layouts, s, size, k, spread_args, rank_args, bnd_args, model_args, state,
            spread, ranking, key):
    """The cut of partition ``[s, s + size)``: (attribute, rows left), attribute -1 if final."""
    if size < 2 * k:
        return -1, 0
    (kind, pos, width, null_code, domain, anc, anc_off, height, leaf_count, leaf_off,
     n_leaves) = spread_args
    rank_mode, prio_metric, w_spread, w_prio, w_sum = rank_args
    bnd, bnd_start, bnd_end, tol2 = bnd_args
    (dist_codes, dist_l, seen, mod_codes, mod_m, mod_lmode, mod_l, mod_c, mod_t, mod_q,
     mod_ordered, hist_l, hist_r, sortbuf) = model_args
    n_attrs = layouts.shape[0]
    models = dist_codes.shape[0] + mod_codes.shape[0] > 0
    e = s + size
    for a in range(n_attrs):
        spread[a] = _spread(a, layouts[a], s, e, kind, pos, width, null_code, domain, anc,
                            anc_off, height, leaf_count, leaf_off, n_leaves)
        if rank_mode == 0:
            # a NaN spread (a range over infinities or floats whose span overflows) ranks last,
            # as argsort(-spread) ranks it, and is never cut on: NaN compares false both ways
            key[a] = spread[a] if spread[a] == spread[a] else -np.inf
        else:
            score = (w_spread * spread[a] + w_prio * prio_metric[a]) / w_sum
            key[a] = score if spread[a] > 0 else -np.inf
    # stable descending ranking (ties: the earlier column), as argsort(-key, kind="stable")
    for a in range(n_attrs):
        ranking[a] = a
    for r in range(1, n_attrs):
        a = ranking[r]
        i = r
        while i > 0 and key[ranking[i - 1]] < key[a]:
            ranking[i] = ranking[i - 1]
            i -= 1
        ranking[i] = a
    for r in range(n_attrs):
        a = ranking[r]
        if not spread[a] > 0:
            break
        layout, order = layouts[a], orders[a]
        mid = s + size // 2
        v = layout[mid]
        n_lt = _lower(layout, s, mid, v) - s
        n_le = _upper(layout, mid + 1, e, v) - s
        # k alone: decided here (a call passing the model arrays costs more than the check)
        ok_lt = n_lt >= k and size - n_lt >= k and (not models or _allowable(
            order, s, size, n_lt, k, dist_codes, dist_l, seen, state, mod_codes, mod_m, mod_lmode,
            mod_l, mod_c, mod_t, mod_q, mod_ordered, hist_l, hist_r, sortbuf))
        ok_le = n_le >= k and size - n_le >= k and (not models or _allowable(
            order, s, size, n_le, k, dist_codes, dist_l, seen, state, mod_codes, mod_m, mod_lmode,
            mod_l, mod_c, mod_t, mod_q, mod_ordered, hist_l, hist_r, sortbuf))
        cut = 0
        if ok_lt and (abs(2 * n_lt - size) <= abs(2 * n_le - size) or not ok_le):
            cut = n_lt
        elif ok_le:
            cut = n_le
        b0, b1 = bnd_start[a], bnd_end[a]
        if b1 > b0:                # workload cut points: the nearest boundary below / above v
            above = _lower(bnd, b0, b1, np.int64(v))
            best_left = 0
            best_gap = _INT64_MAX
            for index in (above - 1, above):
                if index < b0 or index >= b1:
                    continue
                n_left = _upper(layout, s, e, bnd[index]) - s
                if n_left <= 0 or n_left >= size:
                    continue
                if not _allowable(order, s, size, n_left, k, dist_codes, dist_l, seen, state,
                                  mod_codes, mod_m, mod_lmode, mod_l, mod_c, mod_t, mod_q,
                                  mod_ordered, hist_l, hist_r, sortbuf):
                    continue
                gap = abs(2 * n_left - size)
                if gap < best_gap:
                    best_left, best_gap = n_left, gap
            if best_gap <= tol2 * size:
                cut = best_left
        if cut > 0:
            return a, cut
    return -1, 0


@njit(cache=True, nogil=True, _nrt=False)
def run(orders, layouts, side, buf_o, buf_c, labels, stack, state, k, spread_args, rank_args,
        bnd_args, model_args, work, budget):
    """Process partitions until the stack is empty (returns True) or about ``budget`` row
    operations are done (returns False; call again with the same arrays). ``work``: (spread,
    key, ranking) buffers of one entry per attribute."""
    n_attrs = layouts.shape[0]
    spread, key, ranking = work
    while budget > 0:
        if state[PHASE] == 1:                  # regrouping attribute NEXT_B of the split partition
            b = state[NEXT_B]
            s, size, n_left, attr = state[CUR_S], state[CUR_SIZE], state[CUR_LEFT], state[CUR_ATTR]
            if b < n_attrs:
                order, layout = orders[b], layouts[b]
                e = s + size
                i = state[RG_POS]
                if i < 0:                      # attribute b not started
                    # nothing to move: the cut attribute (its sides are its halves), an attribute
                    # of one code here (its layout is right for any subset; its row order is never
                    # read again in this subtree: no cut on it, and labels read the parent's cut
                    # attribute), or two children that are final already (labelled through the
                    # cut attribute)
                    if b == attr or layout[s] == layout[e - 1] or (
                            n_left < 2 * k and size - n_left < 2 * k):
                        state[NEXT_B] = b + 1
                        continue
                    i, left, right = s, s, 0
                else:                          # resumed: a large partition is moved in pieces
                    left, right = state[RG_LEFT], state[RG_RIGHT]
                stop = _smaller(i + budget, e)
                for j in range(i, stop):
                    # branch-free (the side of a row is a coin toss to the branch predictor): each
                    # row is written to both destinations and only its own pointer advances; the
                    # left slot is <= j, already read, and overwritten later if it was not ours
                    row = order[j]
                    code = layout[j]
                    right_side = np.intp((side[row >> 3] >> (row & 7)) & 1)
                    order[left] = row
                    layout[left] = code
                    buf_o[right] = row
                    buf_c[right] = code
                    left += 1 - right_side
                    right += right_side
                budget -= stop - i
                if stop < e:
                    state[RG_POS], state[RG_LEFT], state[RG_RIGHT] = stop, left, right
                    continue
                for j in range(right):
                    order[left + j] = buf_o[j]
                    layout[left + j] = buf_c[j]
                state[RG_POS] = -1
                state[NEXT_B] = b + 1
                continue
            # both children on the stack, the larger first (the smaller is processed next)
            top = state[TOP]
            small_first = n_left <= size - n_left
            if small_first:
                stack[top, 0], stack[top, 1] = s + n_left, size - n_left
                stack[top + 1, 0], stack[top + 1, 1] = s, n_left
            else:
                stack[top, 0], stack[top, 1] = s, n_left
                stack[top + 1, 0], stack[top + 1, 1] = s + n_left, size - n_left
            stack[top, 2] = stack[top + 1, 2] = attr     # an attribute whose row order is right
            state[TOP] = top + 2
            state[PHASE] = 0
            continue
        top = state[TOP]
        if top == 0:
            return True
        s, size, ordered_by = stack[top - 1, 0], stack[top - 1, 1], stack[top - 1, 2]
        state[TOP] = top - 1
        attr, n_left = _decide(orders, layouts, s, size, k, spread_args, rank_args, bnd_args,
                               model_args, state, spread, ranking, key)
        budget -= size
        if attr < 0:
            class_id = state[N_CLASSES]
            order = orders[ordered_by]
            for i in range(s, s + size):
                labels[order[i]] = class_id
            state[N_CLASSES] = class_id + 1
            continue
        order = orders[attr]
        # one bit per row (1: right): at 10M rows 1.25 MB, which the random lookups of the
        # regrouping find in cache far more often than a byte per row
        for i in range(s, s + n_left):
            row = order[i]
            side[row >> 3] &= ~np.uint8(1 << (row & 7))
        for i in range(s + n_left, s + size):
            row = order[i]
            side[row >> 3] |= np.uint8(1 << (row & 7))
        state[PHASE], state[NEXT_B], state[RG_POS] = 1, 0, -1
        state[CUR_S], state[CUR_SIZE], state[CUR_LEFT], state[CUR_ATTR] = s, size, n_left, attr
    return state[TOP] == 0 and state[PHASE] == 0
