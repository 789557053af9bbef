"""Frozen copy of plpy_anon/core/mondrian.py as on main before issue 14 (test reference only:
the median strategy must keep producing exactly these labels).

Strict multidimensional Mondrian (LeFevre, DeWitt & Ramakrishnan, ICDE 2006), level by level.

Rules (the reference implementation in ``tests/unit/test_mondrian.py`` follows them literally):

1. A partition of ``size >= 2k`` may split. Its attributes are ranked by normalized spread inside
   the partition (:class:`~plpy_anon.core.generalize.SpreadMeasure`), largest first, ties by
   column position (:meth:`Mondrian._attribute_order`); attributes of spread 0 are never tried.
2. On an attribute, with the partition's codes sorted and ``v`` the code at position
   ``size // 2``, the candidate cuts are ``left = {code < v}`` and ``left = {code <= v}``. A cut is
   allowable when both sides keep ``>= k`` rows (and, with ``l``, ``>= l`` distinct values in
   every sensitive column). The more balanced allowable cut wins (``|2 * n_left - size|``
   smallest, ties to ``< v``). No allowable cut -> the next attribute in the ranking.
3. A partition with no allowable cut on any attribute is an equivalence class.

Speed: the recursion is run for all partitions of a level at once. Per attribute ``a`` the row
order ``order_a`` holds the active rows grouped by partition (all layouts share the same
partition boundaries) and sorted by code inside each partition, so a partition's minimum and
maximum are the codes at its segment ends, its median is at ``start + size // 2``, distinct
counts come from change flags, and the tie counts (rows ``< v`` and ``<= v``) from either a
vectorized binary search inside the segments or ``searchsorted`` on the monotone key
``partition * width + code``, whichever is cheaper for the level. After the cuts are chosen every
``order_a`` is regrouped by two stable boolean compressions (all left children, then all right
children), which keeps each segment sorted without re-sorting; finished partitions drop out.
One stable radix argsort per attribute at the start is the only sort.

Measured on the 2-core development machine (``tests/bench/bench_partition.py``): UCI Adult
(30,162 rows, 8 QIs, k = 10) fits in ~0.035 s; 1,000,000 rows x 6 QIs in ~1.0 s with a
tracemalloc peak of ~97 MB.
"""

from __future__ import annotations

import numbers

import numpy as np

from plpy_anon.core.encoding import EncodedColumn
from plpy_anon.core.errors import InsufficientData, InvalidParameter
from plpy_anon.core.generalize import SpreadMeasure

_LEFT, _RIGHT, _DONE = 0, 1, 2


class Mondrian:
    """k-anonymous (optionally distinct l-diverse) strict multidimensional partitioning.

    Parameters
    ----------
    k : int, >= 2
        Minimum equivalence-class size.
    l : int or None
        Distinct l-diversity: every class holds ``>= l`` distinct values in each sensitive column.

    Attributes
    ----------
    labels_ : ndarray of int32, shape (n,)
        Equivalence-class id of every row, numbered by first appearance (row order).
    n_classes_ : int
    """

    def __init__(self, k=5, l=None):
        self.k = k
        self.l = l

    # ------------------------------------------------------------------ public
    def fit(self, columns, sensitive=None):
        """Partition the rows described by ``columns`` (list of :class:`EncodedColumn`)."""
        n_rows = self._validate(columns, sensitive)
        self._k = int(self.k)
        self._l = None if self.l is None or int(self.l) <= 1 else int(self.l)
        self._measures = [SpreadMeasure(c) for c in columns]
        self._codes = [_narrow(c.codes, c.n_codes) for c in columns]
        self._sensitive = _dense_sensitive(sensitive) if self._l else None
        self._key_width = max(c.n_codes for c in columns)
        try:
            labels = self._partition(n_rows)
        finally:
            # row-sized working state must not outlive fit (the estimator may be kept around)
            del self._codes, self._sensitive, self._measures
        self.labels_, self.n_classes_ = _number_by_first_row(labels)
        return self

    # ------------------------------------------------------------------ extension point
    def _attribute_order(self, spread):
        """Ranking of attributes per partition: ``(P, A)`` column indices, best first.

        ``spread`` is the ``(P, A)`` normalized-spread matrix. Plain Mondrian ranks by spread
        (stable, so ties go to the earlier column); a prioritized variant can replace this with
        ``O_i = sum_j w_j metric_j(i) / sum_j w_j`` without touching the partitioning loop.
        """
        return np.argsort(-spread, axis=1, kind="stable")

    # ------------------------------------------------------------------ level loop
    def _partition(self, n_rows):
        orders = [_stable_argsort(codes) for codes in self._codes]
        sizes = np.array([n_rows], dtype=np.int64)
        labels = np.empty(n_rows, dtype=np.int32)
        side_of_row = np.empty(n_rows, dtype=np.int8)
        n_classes = 0
        while sizes.size:
            level = _Level(orders, sizes, self._codes, self._key_width)
            n_left, attr = self._choose_cuts(level)
            n_classes = self._retire(orders[0], level.starts, sizes, attr < 0, labels, n_classes)
            orders, sizes = self._regroup(orders, level.starts, sizes, n_left, attr, side_of_row)
        return labels

    def _choose_cuts(self, level):
        """Per partition: rows going left and the attribute cut (-1 = the partition is final)."""
        sizes = level.sizes
        n_left = np.zeros(sizes.size, dtype=np.int64)
        attr = np.full(sizes.size, -1, dtype=np.int64)
        cand = np.flatnonzero(sizes >= 2 * self._k)
        if cand.size == 0:
            return n_left, attr
        spread = self._spread_matrix(level, cand)
        ranking = self._attribute_order(spread)
        pending = np.arange(cand.size)             # rows of `spread` still without a cut
        for rank in range(ranking.shape[1]):
            tried = ranking[pending, rank]
            splittable = spread[pending, tried] > 0
            pending, tried = pending[splittable], tried[splittable]
            for a in np.unique(tried):
                parts = cand[pending[tried == a]]
                cut = self._median_cut(level, a, parts)
                n_left[parts[cut > 0]] = cut[cut > 0]
                attr[parts[cut > 0]] = a
            pending = pending[attr[cand[pending]] < 0]
            if pending.size == 0:
                break
        return n_left, attr

    def _spread_matrix(self, level, cand):
        """``(len(cand), A)`` normalized spread of candidate partitions on every attribute."""
        first = level.starts[cand]
        last = first + level.sizes[cand] - 1
        spread = np.empty((cand.size, len(self._codes)))
        for a, measure in enumerate(self._measures):
            order, codes = level.orders[a], self._codes[a]
            distinct = level.distinct(a)[cand] if measure.needs_distinct else None
            spread[:, a] = measure(codes[order[first]], codes[order[last]], distinct)
        return spread

    def _median_cut(self, level, a, parts):
        """Rows left of the best allowable tie-aware median cut on attribute ``a`` (0 = none)."""
        starts, sizes = level.starts[parts], level.sizes[parts]
        n_lt, n_le = level.tie_counts(a, parts)
        ok_lt = self._allowable(level, a, starts, sizes, n_lt)
        ok_le = self._allowable(level, a, starts, sizes, n_le)
        lt_balanced = np.abs(2 * n_lt - sizes) <= np.abs(2 * n_le - sizes)
        return np.where(ok_lt & (lt_balanced | ~ok_le), n_lt, np.where(ok_le, n_le, 0))

    def _allowable(self, level, a, starts, sizes, n_left):
        """Cuts keeping >= k rows (and >= l distinct sensitive values) on both sides."""
        ok = (n_left >= self._k) & (sizes - n_left >= self._k)
        if self._l is None or not ok.any():
            return ok
        idx = np.flatnonzero(ok)
        s, cut, end = starts[idx], starts[idx] + n_left[idx], starts[idx] + sizes[idx]
        for j, values in enumerate(self._sensitive):
            if values.dtype.kind == "u":           # one bit per value: distinct = popcount(OR)
                left, right = _distinct_by_bitmask(level.sensitive_in_layout(a, j, values),
                                                   s, cut, end)
            else:
                distinct = _distinct_in_ranges(values, level.orders[a],
                                               np.concatenate([s, cut]), np.concatenate([cut, end]))
                left, right = distinct[: idx.size], distinct[idx.size:]
            ok[idx] &= (left >= self._l) & (right >= self._l)
        return ok

    @staticmethod
    def _retire(order, starts, sizes, final, labels, n_classes):
        """Give the rows of final partitions their class id; returns the new class count.

        ``order`` may be any attribute's layout: all layouts hold the same rows per segment.
        """
        if not final.any():
            return n_classes
        class_id = np.full(sizes.size, -1, dtype=np.int32)
        class_id[final] = n_classes + np.arange(np.count_nonzero(final), dtype=np.int32)
        per_position = np.repeat(class_id, sizes)
        done = per_position >= 0
        labels[order[done]] = per_position[done]
        return n_classes + int(np.count_nonzero(final))

    @staticmethod
    def _regroup(orders, starts, sizes, n_left, attr, side_of_row):
        """New layouts: left children of split partitions, then right children; final ones drop."""
        split = attr >= 0
        if not split.any():
            return [], np.zeros(0, dtype=np.int64)
        # side of every position, in any layout (all share partition boundaries)
        offset = np.arange(orders[0].size, dtype=np.int64) - np.repeat(starts, sizes)
        side = (offset >= np.repeat(np.where(split, n_left, sizes), sizes)).astype(np.int8)
        side += np.repeat(np.where(split, 0, _DONE).astype(np.int8), sizes)
        # translate positions to rows through the layout of the attribute each partition cut
        via_attr = np.where(split, attr, 0)
        used = np.unique(via_attr)
        if used.size == 1:
            side_of_row[orders[used[0]]] = side
        else:
            via = np.repeat(via_attr, sizes)
            for a in used:
                here = via == a
                side_of_row[orders[a][here]] = side[here]
        total_left = int(n_left[split].sum())
        total_right = int((sizes - n_left)[split].sum())
        # the layout every partition cut along already has its sides by position: no gather
        known = int(used[0]) if used.size == 1 else -1
        new_orders = [_stable_split(o, side if a == known else side_of_row[o],
                                    total_left, total_right) for a, o in enumerate(orders)]
        new_sizes = np.concatenate([n_left[split], (sizes - n_left)[split]])
        return new_orders, new_sizes

    # ------------------------------------------------------------------ validation
    def _validate(self, columns, sensitive):
        _check_int(self.k, "k", 2)
        if self.l is not None:
            _check_int(self.l, "l", 1)
        if not columns:
            raise InvalidParameter("no quasi-identifier columns given",
                                   hint="pass at least one EncodedColumn")
        for col in columns:
            if not isinstance(col, EncodedColumn):
                raise InvalidParameter(f"expected EncodedColumn, got {type(col).__name__}",
                                       hint="encode columns with encode_numeric/encode_categorical")
        n_rows = len(columns[0].codes)
        for col in columns:
            if len(col.codes) != n_rows:
                raise InvalidParameter(
                    f"column {col.name!r} has {len(col.codes)} rows, {columns[0].name!r} {n_rows}",
                    hint="encode all quasi-identifiers from the same rows")
        if n_rows == 0:
            raise InsufficientData("the table is empty: nothing to anonymize",
                                   hint="load rows before building a release")
        if self.k > n_rows:
            raise InsufficientData(f"k = {self.k} exceeds the number of rows ({n_rows})",
                                   hint=f"choose k <= {n_rows}")
        if self.l is not None and self.l > 1:
            self._validate_sensitive(sensitive, n_rows)
        return n_rows

    def _validate_sensitive(self, sensitive, n_rows):
        if sensitive is None:
            raise InvalidParameter(f"l = {self.l} needs the sensitive column(s)",
                                   hint="pass sensitive= integer codes, or leave l unset")
        values = np.asarray(sensitive)
        if values.ndim not in (1, 2) or values.shape[0] != n_rows:
            raise InvalidParameter(
                f"sensitive has shape {values.shape}; expected ({n_rows},) or ({n_rows}, s)",
                hint="one row of sensitive codes per table row")
        if not np.issubdtype(values.dtype, np.integer):
            raise InvalidParameter(f"sensitive codes must be integers, got {values.dtype}",
                                   hint="encode the sensitive column(s) as integer codes")
        for j, column in enumerate(values.reshape(n_rows, -1).T):
            distinct = np.unique(column).size
            if distinct < self.l:
                raise InsufficientData(
                    f"sensitive column {j} has {distinct} distinct values; l = {self.l} "
                    "cannot be reached",
                    hint=f"choose l <= {distinct}")


# ---------------------------------------------------------------------- one level
class _Level:
    """The active partitions of one level: layouts, boundaries, and per-attribute caches."""

    # Rough costs (seconds) of numpy work, used only to pick the cheaper of two exact methods.
    _CALL, _PER_ELEMENT = 25e-6, 8e-9

    def __init__(self, orders, sizes, codes, key_width):
        self.orders, self.sizes, self._codes = orders, sizes, codes
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._sorted, self._keys, self._segment_base = {}, {}, None
        self._sensitive_cache = {}
        self._key_width = key_width                # > every code: keys stay monotone

    def sensitive_in_layout(self, a, j, values):
        """Sensitive column ``j`` (bitmask form) in the layout of attribute ``a``, plus a zero
        sentinel so that a partition ending at the last position is a valid reduceat index."""
        if (a, j) not in self._sensitive_cache:
            order = self.orders[a]
            padded = np.zeros(order.size + 1, dtype=values.dtype)
            np.take(values, order, out=padded[:-1])
            self._sensitive_cache[a, j] = padded
        return self._sensitive_cache[a, j]

    def sorted_codes(self, a):
        """Codes of attribute ``a`` in its layout (sorted inside each partition)."""
        if a not in self._sorted:
            self._sorted[a] = self._codes[a][self.orders[a]]
        return self._sorted[a]

    def distinct(self, a):
        """Distinct codes of attribute ``a`` per partition."""
        return _distinct_per_segment(self.sorted_codes(a), self.starts)

    def tie_counts(self, a, parts):
        """Rows ``< v`` and ``<= v`` of each partition in ``parts``, ``v`` its median code on a.

        Two exact methods: a binary search inside the segments (cost ~ parts * log(size), good
        when few partitions are large) or one ``searchsorted`` on the monotone key
        ``partition * width + code`` (one pass over the level, good when partitions are many).
        """
        starts, sizes = self.starts[parts], self.sizes[parts]
        mid = starts + sizes // 2
        order, codes = self.orders[a], self._codes[a]
        v = codes[order[mid]]
        if self._prefer_segment_search(a, sizes):
            lt = _segment_bound(order, codes, starts, mid, v, strict=True)
            le = _segment_bound(order, codes, mid + 1, starts + sizes, v, strict=False)
        else:
            keys = self._partition_keys(a)
            query = parts * self._key_width + v
            lt = np.searchsorted(keys, query, side="left")
            le = np.searchsorted(keys, query, side="right")
        return lt - starts, le - starts

    def _prefer_segment_search(self, a, sizes):
        steps = int(sizes.max()).bit_length()
        search_cost = steps * (10 * self._CALL + sizes.size * 5 * self._PER_ELEMENT)
        key_cost = 0 if a in self._keys else 3 * self.orders[a].size * self._PER_ELEMENT
        return search_cost < key_cost

    def _partition_keys(self, a):
        if self._segment_base is None:
            ids = np.arange(self.sizes.size, dtype=np.int64) * self._key_width
            self._segment_base = np.repeat(ids, self.sizes)
        if a not in self._keys:
            self._keys[a] = self._segment_base + self.sorted_codes(a)
        return self._keys[a]


# ---------------------------------------------------------------------- vectorized helpers
def _segment_bound(order, codes, lo, hi, v, strict):
    """First position in ``[lo, hi)`` whose code is ``>= v`` (strict) or ``> v``; ``hi`` if none.

    Codes are sorted inside each segment, so this is a binary search run for all segments at
    once (about log2(segment size) vectorized steps).
    """
    lo, hi = lo.copy(), hi.copy()
    open_ = np.flatnonzero(lo < hi)
    while open_.size:
        l_, h_ = lo[open_], hi[open_]
        mid = (l_ + h_) // 2
        c = codes[order[mid]]
        below = c < v[open_] if strict else c <= v[open_]
        lo[open_] = np.where(below, mid + 1, l_)
        hi[open_] = np.where(below, h_, mid)
        open_ = open_[lo[open_] < hi[open_]]
    return lo


def _distinct_per_segment(sorted_codes, starts):
    """Distinct codes per segment of an array sorted inside each segment."""
    change = np.empty(sorted_codes.size, dtype=bool)
    change[0] = True
    np.not_equal(sorted_codes[1:], sorted_codes[:-1], out=change[1:])
    change[starts] = True
    return np.add.reduceat(change, starts, dtype=np.int64)


def _distinct_by_bitmask(bits, starts, cuts, ends):
    """Distinct values in ``[start, cut)`` and ``[cut, end)``: popcount of the OR of the bits.

    The three boundaries of every partition go to one ``bitwise_or.reduceat`` (increasing
    indices; the slots between partitions are computed and ignored). ``bits`` ends with a zero
    sentinel, so ``end`` may be the last real position + 1.
    """
    bounds = np.stack([starts, cuts, ends], axis=1).ravel()
    ors = np.bitwise_or.reduceat(bits, bounds).reshape(-1, 3)
    return np.bitwise_count(ors[:, 0]), np.bitwise_count(ors[:, 1])


def _distinct_in_ranges(values, order, range_starts, range_ends):
    """Distinct ``values[order[p]]`` for p in each range ``[start, end)`` (ranges may overlap)."""
    lengths = range_ends - range_starts
    range_id = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    first_of_range = np.repeat(np.cumsum(lengths) - lengths, lengths)
    positions = np.arange(range_id.size) - first_of_range + np.repeat(range_starts, lengths)
    width = int(values.max()) + 1
    pairs = np.unique(range_id * width + values[order[positions]])
    return np.bincount(pairs // width, minlength=lengths.size)


def _stable_split(order, side, n_left, n_right):
    """Left rows then right rows, each in their previous relative order; DONE rows dropped."""
    out = np.empty(n_left + n_right, dtype=order.dtype)
    np.compress(side == _LEFT, order, out=out[:n_left])
    np.compress(side == _RIGHT, order, out=out[n_left:])
    return out


def _stable_argsort(codes):
    """Stable argsort as int32 by 16-bit radix passes (numpy radix-sorts 16-bit keys, and two
    passes over int32 codes beat its merge sort by ~2.5x)."""
    if codes.dtype == np.uint16:
        return np.argsort(codes, kind="stable").astype(np.int32)
    order = np.argsort((codes & 0xFFFF).astype(np.uint16), kind="stable")
    high = (codes >> 16).astype(np.uint16)
    return order[np.argsort(high[order], kind="stable")].astype(np.int32)


def _narrow(codes, n_codes):
    # uint16 makes numpy's stable argsort a radix sort and halves gather traffic
    return codes.astype(np.uint16 if n_codes <= 1 << 16 else np.int32, copy=False)


def _dense_sensitive(sensitive):
    """Sensitive columns as dense codes; as one-bit masks when they have <= 64 values (in the
    narrowest unsigned type that fits, to keep the per-level gathers small)."""
    values = np.asarray(sensitive)
    values = values.reshape(values.shape[0], -1)
    dense = [np.unique(col, return_inverse=True)[1].astype(np.int64) for col in values.T]
    return [_one_bit_masks(c) if c.max() < 64 else c for c in dense]


def _one_bit_masks(codes):
    dtype = next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64)
                 if codes.max() < np.iinfo(t).bits)
    return np.left_shift(dtype(1), codes.astype(dtype))


def _number_by_first_row(labels):
    """Renumber classes 0..C-1 in order of their first row (canonical, order-independent ids)."""
    n_classes = int(labels.max()) + 1
    first_row = np.full(n_classes, labels.size, dtype=np.int64)
    np.minimum.at(first_row, labels, np.arange(labels.size))
    rank = np.empty(n_classes, dtype=np.int32)
    rank[np.argsort(first_row)] = np.arange(n_classes, dtype=np.int32)
    return rank[labels], n_classes


def _check_int(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidParameter(f"{name} must be an integer, got {value!r}",
                               hint=f"pass an integer {name} >= {minimum}")
    if value < minimum:
        raise InvalidParameter(f"{name} = {value} is too small: it must be >= {minimum}",
                               hint=f"pass {name} >= {minimum}")
