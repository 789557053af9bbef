"""Re-identification and attribute-disclosure risk of a relation, from compact counts.

The database layer counts in SQL (``plpy_anon/db/risk.py``); this module only turns the counts
into figures, so it never sees a row:

* the *class-size histogram* ``sizes[i]`` (a class size) x ``classes[i]`` (how many classes have
  it) gives rows, classes, the smallest class (k), records in small classes and the prosecutor,
  journalist and marketer risks;
* the *class x value table* of one sensitive column, ``(class_id, value_id, count)`` with value
  ids ranked in the column's order (0 .. m-1), gives distinct / entropy / recursive (c,l)
  diversity and t-closeness.

Definitions (docs/risk.md has them with a worked example):

* prosecutor risk of a record = 1 / |its class| (the attacker knows the target is in the data);
  max = 1/k, average = classes / rows (El Emam & Dankar, JAMIA 2008; ARX).
* journalist and marketer (the relation is a sample of a population of ``population`` = N
  records): the population size of class j is estimated by scaling the sample,
  F_j ~ f_j * N / n (uniform random sample assumed). Journalist risk of a record = 1 / F_j;
  marketer risk = (1/n) sum_j f_j / F_j (El Emam & Dankar 2008), = classes / N under that
  estimator. This is NOT a population-uniqueness model (Pitman, Zayatz, SNB as in ARX): a sample
  unique may well be unique in the population, so the prosecutor figures stay the upper bound.
* distinct l = min over classes of the number of distinct values; entropy l = exp(min over
  classes of the entropy -sum p ln p); recursive (c,l): a class is (c,l)-diverse when
  r_1 < c (r_l + ... + r_m) with r_1 >= r_2 >= ... its value counts -- reported as the largest l
  for which every class is (Machanavajjhala et al. 2007).
* t-closeness = max over classes of the Earth Mover's Distance between the class's distribution
  p and the relation's q (Li, Li & Venkatasubramanian 2007, as in ARX): equal distance for
  categories, EMD = 1/2 sum |p_i - q_i|; ordered distance for numbers and dates,
  EMD = 1/(m-1) sum_i |sum_{j<=i} (p_j - q_j)| over the m distinct values in order.
"""
from __future__ import annotations

import numpy as np

from plpy_anon.core.errors import InvalidParameter
from plpy_anon.core.interrupts import check as check_interrupts

SMALL_CLASS_LIMITS = (2, 5, 10)
#: pairs of the class x value table computed at once: ~100 bytes of temporaries a pair, so ~7 MB
#: a range; larger ranges are no faster (a million pairs: 0.26 s CPU in ranges of 65,536 pairs,
#: 0.48 s in ranges of 1,048,576)
RANGE_PAIRS = 1 << 16


def class_figures(sizes, classes, *, risk_threshold: float = 0.2,
                  population: int | None = None) -> dict:
    """Figures of the class-size histogram (``sizes`` distinct class sizes, ``classes`` how many
    classes have each). An empty relation gives rows = classes = 0 and None elsewhere."""
    sizes = np.asarray(sizes, dtype=np.int64)
    classes = np.asarray(classes, dtype=np.int64)
    rows = int((sizes * classes).sum())
    n_classes = int(classes.sum())
    out: dict = {"rows": rows, "classes": n_classes}
    if population is not None and population < rows:
        raise InvalidParameter(
            f"population {population} is smaller than the relation's {rows} rows",
            hint="population is the number of records in the population the relation is a "
                 "sample of (at least its row count); omit it when the relation is the population.")
    if rows == 0:
        out.update(smallest_class=None, prosecutor_risk_max=None, prosecutor_risk_avg=None,
                   prosecutor_records_at_risk=None,
                   **{f"records_in_classes_below_{x}": None for x in SMALL_CLASS_LIMITS})
        if population is not None:
            out.update(journalist_risk_max=None, journalist_records_at_risk=None, marketer_risk=None)
        return out
    k = int(sizes[classes > 0].min())
    out["smallest_class"] = k
    for x in SMALL_CLASS_LIMITS:
        out[f"records_in_classes_below_{x}"] = int((sizes * classes)[sizes < x].sum())
    out["prosecutor_risk_max"] = 1.0 / k
    out["prosecutor_risk_avg"] = n_classes / rows
    out["prosecutor_records_at_risk"] = int((sizes * classes)[1.0 / sizes > risk_threshold].sum())
    if population is not None:
        scale = population / rows
        estimated = sizes * scale                           # F_j ~ f_j N / n
        out["journalist_risk_max"] = float(1.0 / (k * scale))
        out["journalist_records_at_risk"] = int((sizes * classes)[1.0 / estimated > risk_threshold].sum())
        out["marketer_risk"] = float((classes * sizes / estimated).sum() / rows)
    return out


def sensitive_figures(class_ids, value_ids, counts, *, ordered: bool, c: float = 3.0,
                      chunk_cells: int = RANGE_PAIRS, n_classes: int | None = None) -> dict:
    """Diversity and t-closeness of one sensitive column from its class x value table.
    ``class_ids`` 0..C-1 and ``value_ids`` 0..m-1 (in the column's order when ``ordered``) need
    not be sorted; each (class, value) pair appears once with its ``count`` > 0. ``n_classes``
    (default: the largest class id + 1) counts the classes without a pair too (all their values
    NULL): 0 distinct values, and no mass where the relation's distribution has all of it (their
    EMD, as the release check computes it). Every figure is computed from the pairs alone, in
    O(pairs log pairs), never from a class x value matrix; the classes are taken a range of about
    ``chunk_cells`` pairs at a time (a class's pairs never split), so what is held besides the
    table is one range's temporaries, and a cancel is honoured between ranges."""
    class_ids = np.asarray(class_ids)
    value_ids = np.asarray(value_ids)
    counts = np.asarray(counts)
    if len(counts) == 0:
        return SensitiveRanges.empty(n_classes or 0)
    if (class_ids[1:] < class_ids[:-1]).any():      # the release check reads them in class order
        order = np.argsort(class_ids, kind="stable")
        class_ids, value_ids, counts = class_ids[order], value_ids[order], counts[order]
        del order
    n_classes = max(int(class_ids[-1]) + 1, n_classes or 0)
    n_values = int(value_ids.max()) + 1
    step = max(1, chunk_cells)
    q = np.zeros(n_values)
    for a in range(0, len(counts), step):
        check_interrupts()
        q += np.bincount(value_ids[a:a + step], weights=counts[a:a + step].astype(np.float64),
                         minlength=n_values)
    ranges = SensitiveRanges(q, ordered=ordered, c=c, chunk_cells=chunk_cells)
    ranges.add(class_ids, value_ids, counts, n_classes)
    return ranges.figures()


class SensitiveRanges:
    """:func:`sensitive_figures` of a class x value table given a range of classes at a time
    (each range's pairs in class order, class ids from 0 within it), the table's distribution
    known first (``q``: rows per value id, NULL rows left out): what is held is one range's
    pairs and their temporaries, whatever the number of classes or of values. The figures are
    per class, min or max over them, so they do not depend on how the classes are split into
    ranges."""

    def __init__(self, q, *, ordered: bool, c: float = 3.0, chunk_cells: int = RANGE_PAIRS):
        q = np.asarray(q, dtype=np.float64)
        self.n_values = max(1, q.size)
        self.q = q / q.sum() if q.size and q.sum() > 0 else np.zeros(self.n_values)
        self.ordered, self.c = ordered, c
        self.step = max(1, chunk_cells)                 # pairs per slice of a range
        # the ordered EMD sums |P_i - Q_i| over runs of i where a class's P_i is constant:
        # Q's cumulative shares and their prefix sums give each run's sum in O(log m)
        self.cum_q = np.cumsum(self.q)
        self.prefix_cum_q = np.r_[0.0, np.cumsum(self.cum_q)]
        self.q_mass = float(self.q.sum())               # 1, or 0 without a known value
        self.classes = self.pairs = 0
        self.distinct_l, self.entropy_min, self.recursive_l, self.t = None, np.inf, None, 0.0

    @staticmethod
    def empty(n_classes: int) -> dict:
        """The figures of a table without pairs (``n_classes`` classes, all their values NULL)."""
        if n_classes:
            return {"distinct_l": 0, "entropy_l": 1.0, "recursive_cl_l": 0, "t_closeness": None}
        return {"distinct_l": None, "entropy_l": None, "recursive_cl_l": None, "t_closeness": None}

    def add(self, class_ids, value_ids, counts, n: int) -> None:
        """The pairs of ``n`` classes (``class_ids`` 0..n-1, in order), a slice of about
        :attr:`step` pairs at a time (a class's pairs never split), a cancel honoured between
        slices."""
        class_ids = np.asarray(class_ids, dtype=np.int64)
        self.classes += n
        self.pairs += len(class_ids)
        if len(class_ids) <= self.step:
            self._range(class_ids, value_ids, counts, n)
            return
        for lo, hi, a, b in class_ranges(class_ids, n, self.step):
            check_interrupts()
            self._range(class_ids[a:b] - lo, value_ids[a:b], counts[a:b], hi - lo)

    def _range(self, cid, value_ids, counts, n: int) -> None:
        vid = np.asarray(value_ids).astype(np.int64)
        cnt = np.asarray(counts).astype(np.float64)
        size = np.bincount(cid, weights=cnt, minlength=n)
        distinct = int(np.bincount(cid, minlength=n).min())
        self.distinct_l = distinct if self.distinct_l is None else min(self.distinct_l, distinct)
        self.entropy_min = min(self.entropy_min, float(class_entropy(cid, cnt, size, n).min()))
        recursive = int(recursive_classes(cid, cnt, size, self.c, n).min())
        self.recursive_l = recursive if self.recursive_l is None else min(self.recursive_l, recursive)
        self.t = max(self.t, float(self.class_emd(cid, vid, cnt, size, n).max()))

    def class_emd(self, cid, vid, cnt, size, n: int) -> np.ndarray:
        """Each class's EMD to ``q`` from its pairs alone; a class without a pair (its values
        NULL) has no mass: 1/2 sum q unordered, sum_i Q_i / (m-1) ordered."""
        m = self.n_values
        if self.ordered and m == 1:
            return np.zeros(n)
        massless = (0.5 * self.q_mass if not self.ordered
                    else self.prefix_cum_q[m] / (m - 1))
        emd = np.full(n, massless)
        if cnt.size == 0:
            return emd
        held = np.zeros(n, dtype=bool)
        held[cid] = True
        if not self.ordered:
            # 1/2 sum_v |p_v - q_v| = 1/2 (sum q + sum over the class's values of |p_v - q_v| - q_v)
            qv = self.q[vid]
            gap = np.bincount(cid, weights=np.abs(cnt / size[cid] - qv) - qv, minlength=n)
            emd[held] = 0.5 * (self.q_mass + gap[held])
            return emd
        order = np.lexsort((vid, cid))
        cls, val, num = cid[order], vid[order], cnt[order]
        del order
        first = np.r_[True, cls[1:] != cls[:-1]]
        last = np.r_[first[1:], True]
        runs = np.diff(np.r_[np.flatnonzero(first), len(cls)])
        ahead = np.cumsum(num)
        share = (ahead - np.repeat((ahead - num)[first], runs)) / size[cls]   # P from val on
        del ahead, runs
        stop = np.r_[val[1:], m]                        # P holds on [val, stop)
        stop[last] = m
        cq = self.prefix_cum_q
        cross = np.clip(np.searchsorted(self.cum_q, share, side="left"), val, stop)  # Q < P before
        run = (share * (cross - val) - (cq[cross] - cq[val])
               + (cq[stop] - cq[cross]) - share * (stop - cross))
        # before a class's first value P = 0: the run's sum is that of Q
        total = (np.bincount(cls, weights=run, minlength=n)
                 + np.bincount(cls[first], weights=cq[val[first]], minlength=n))
        emd[held] = total[held] / (m - 1)
        return emd

    def figures(self) -> dict:
        if self.pairs == 0:
            return self.empty(self.classes)
        return {"distinct_l": self.distinct_l, "entropy_l": float(np.exp(self.entropy_min)),
                "recursive_cl_l": self.recursive_l, "t_closeness": self.t}


def class_ranges(class_ids: np.ndarray, n: int, step: int):
    """(lo, hi, a, b) per range of classes lo..hi-1 whose pairs are ``class_ids[a:b]`` (class ids
    0..n-1 in order), about ``step`` pairs each, a class's pairs never split."""
    bounds = np.unique(np.r_[0, class_ids[step::step], n])
    ends = np.searchsorted(class_ids, bounds)
    for lo, hi, a, b in zip(bounds[:-1], bounds[1:], ends[:-1], ends[1:]):
        yield int(lo), int(hi), int(a), int(b)


def class_entropy(cid, cnt, size, n: int) -> np.ndarray:
    """Per class (0..n-1), the natural-log entropy of its values from its pairs (class ``cid``,
    rows ``cnt`` > 0; ``size`` rows per class); 0 for a class without a pair."""
    if cnt.size == 0:
        return np.zeros(n)
    p = cnt / size[cid]
    return np.bincount(cid, weights=-p * np.log(p), minlength=n)


def recursive_classes(cid, cnt, size, c: float, n: int) -> np.ndarray:
    """Per class (0..n-1), the largest l for which r_1 < c (r_l + ... + r_m) holds, its value
    counts ``cnt`` sorted in decreasing order (0 for a class without a pair)."""
    if cnt.size == 0:
        return np.zeros(n)
    order = np.lexsort((-cnt, cid))
    cls, r = cid[order], cnt[order]
    starts = np.flatnonzero(np.r_[True, cls[1:] != cls[:-1]])
    runs = np.diff(np.r_[starts, len(r)])
    first = np.repeat(r[starts], runs)
    total = np.repeat(size[cls[starts]], runs)
    before = np.cumsum(r) - r
    tail = total - (before - np.repeat(before[starts], runs))
    return np.bincount(cls, weights=first < c * tail, minlength=n)
