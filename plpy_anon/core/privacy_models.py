"""Privacy models on a class's sensitive-attribute (SA) histogram, as pure numpy functions.

Shared by the partitioner (:class:`~plpy_anon.core.mondrian.Mondrian` checks both sides of every
candidate cut with :func:`satisfied`), the release verification (``plpy_anon.db.verify``, from the
released rows' class x value counts) and the tests (brute force). Every function takes a count
matrix ``counts`` of shape ``(n_classes, m)`` (a 1-D vector is one class): ``counts[i, v]`` rows
of class ``i`` with SA value ``v``; for ordered (numeric) SAs the columns are in value order.

Definitions (Machanavajjhala et al., "l-diversity", TKDD 2007; Li, Li & Venkatasubramanian,
"t-closeness", ICDE 2007; as in ARX):

* distinct l: ``>= l`` distinct SA values in the class (:func:`distinct_values`);
* entropy l: ``H(class) = -sum p_v ln p_v >= ln(l)`` -- natural logarithm (the base only rescales
  both sides) (:func:`entropy`);
* recursive (c, l): counts sorted ``r_1 >= r_2 >= ... >= r_m``: ``r_1 < c (r_l + ... + r_m)``
  (missing values count 0, so a class with fewer than l values fails) (:func:`recursive_cl`);
* t-closeness: ``EMD(class, table) <= t``; equal ground distance for categorical SAs,
  ``EMD = 1/2 sum |p_v - q_v|`` (:func:`emd_equal`); ordered distance for numeric SAs (values
  sorted, neighbours ``1/(m-1)`` apart), ``EMD = 1/(m-1) sum_i |sum_{j<=i} (p_j - q_j)|``
  (:func:`emd_ordered`).

All four are preserved by merging two classes that satisfy them (entropy is concave; recursive
(c,l): Machanavajjhala et al. Lemma; EMD to a fixed table distribution is convex in the class
distribution, which is Li et al.'s generalization property). Mondrian does not need this for
correctness -- it only makes cuts whose both sides satisfy every model, starting from a table that
does -- but it is why a table that fails a model cannot be helped by any partition, and is refused.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.risk import (
    RANGE_PAIRS,
    SensitiveRanges,
    class_entropy,
    class_ranges,
    recursive_classes,
)

L_DIVERSITY = ("distinct", "entropy", "recursive")
_EPS = 1e-9      # float slack on the >= / <= comparisons (entropy, EMD)


def _2d(counts):
    counts = np.asarray(counts, dtype=np.float64)
    return counts.reshape(1, -1) if counts.ndim == 1 else counts


def distribution(counts) -> np.ndarray:
    """Row-normalized ``counts`` (rows of zero total stay zero)."""
    counts = _2d(counts)
    total = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)


def distinct_values(counts) -> np.ndarray:
    """Distinct SA values per class."""
    return np.count_nonzero(_2d(counts), axis=1)


def entropy(counts) -> np.ndarray:
    """Natural-log entropy of each class's SA distribution."""
    p = distribution(counts)
    logp = np.log(p, out=np.zeros_like(p), where=p > 0)
    return -(p * logp).sum(axis=1) + 0.0


def entropy_l(counts, l) -> np.ndarray:
    """Entropy l-diversity per class: ``H >= ln(l)`` (:meth:`Models.holds`)."""
    return Models(l=l, l_diversity="entropy").satisfied(counts)


def recursive_cl(counts, c, l) -> np.ndarray:
    """Recursive (c, l)-diversity per class: ``r_1 < c (r_l + ... + r_m)``."""
    r = -np.sort(-_2d(counts), axis=1)           # descending
    l = int(l)
    tail = r[:, l - 1:].sum(axis=1) if l - 1 < r.shape[1] else np.zeros(r.shape[0])
    return r[:, 0] < c * tail


def emd_equal(p, q) -> np.ndarray:
    """Equal-distance EMD between each row of ``p`` and the distribution ``q``."""
    return 0.5 * np.abs(_2d(p) - np.asarray(q, dtype=np.float64)).sum(axis=1)


def emd_ordered(p, q) -> np.ndarray:
    """Ordered-distance EMD (columns in value order) between each row of ``p`` and ``q``."""
    diff = _2d(p) - np.asarray(q, dtype=np.float64)
    m = diff.shape[1]
    if m <= 1:
        return np.zeros(diff.shape[0])
    return np.abs(np.cumsum(diff, axis=1)[:, :-1]).sum(axis=1) / (m - 1)


@dataclass(frozen=True)
class Models:
    """The privacy models asked of every class (besides k), on one SA column.

    ``l`` (None or <= 1: no l-diversity), ``l_diversity`` one of :data:`L_DIVERSITY`, ``c`` for
    recursive, ``t`` (None: no t-closeness) with ``table`` the whole table's SA distribution and
    ``ordered`` whether the SA is numeric (ordered-distance EMD)."""

    l: float | None = None
    l_diversity: str = "distinct"
    c: float | None = None
    t: float | None = None
    table: np.ndarray | None = None
    ordered: bool = False

    def emd(self, counts) -> np.ndarray:
        p = distribution(counts)
        return (emd_ordered if self.ordered else emd_equal)(p, self.table)

    def satisfied(self, counts) -> np.ndarray:
        """Per class: every asked model holds."""
        counts = _2d(counts)
        return self.holds(counts.shape[0], distinct=lambda: distinct_values(counts),
                          entropies=lambda: entropy(counts),
                          recursive=lambda: recursive_cl(counts, self.c, self.l),
                          emd=lambda: self.emd(counts))

    def holds(self, n: int, *, distinct, entropies, recursive, emd) -> np.ndarray:
        """Per class of ``n``: every asked model holds, from the figures only the asked models
        need (each a callable giving one per class: distinct values, natural-log entropy,
        whether recursive (c, l) holds, EMD to the table), however they were computed."""
        ok = np.ones(n, dtype=bool)
        if self.l is not None and self.l > 1:
            if self.l_diversity == "distinct":
                ok &= distinct() >= self.l
            elif self.l_diversity == "entropy":
                ok &= entropies() >= math.log(self.l) - _EPS
            else:
                ok &= recursive()
        if self.t is not None:
            ok &= emd() <= self.t + _EPS
        return ok

    def failures(self, counts, column: str) -> list[str]:
        """Why the classes of ``counts`` fail (worst figure per model), for messages."""
        counts = _2d(counts)
        out = []
        if self.l is not None and self.l > 1:
            if self.l_diversity == "distinct":
                d = int(distinct_values(counts).min())
                if d < self.l:
                    out.append(f"{column} has {d} distinct value(s) < l = {_num(self.l)}")
            elif self.l_diversity == "entropy":
                h = float(entropy(counts).min())
                if h < math.log(self.l) - _EPS:
                    out.append(f"{column} entropy is {h:.4g} < ln({_num(self.l)}) = "
                               f"{math.log(self.l):.4g}")
            else:
                bad = ~recursive_cl(counts, self.c, self.l)
                if bad.any():
                    r = -np.sort(-counts[np.flatnonzero(bad)[0]])
                    tail = r[int(self.l) - 1:].sum()
                    out.append(f"{column} fails recursive ({_num(self.c)}, {_num(self.l)}): most "
                               f"frequent value {int(r[0])} rows, not < {_num(self.c)} x "
                               f"{int(tail)} (the rows of its values from the "
                               f"{_ordinal(int(self.l))} most frequent on)")
        if self.t is not None:
            e = float(self.emd(counts).max())
            if e > self.t + _EPS:
                out.append(f"{column} is at EMD {e:.4g} > t = {_num(self.t)} from the table")
        return out


def _num(x) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def check_models(l, l_diversity, c, t) -> None:
    """Validate the model parameters (InvalidParameter, SQLSTATE 22023, hint naming the fix)."""
    from plpy_anon.core.errors import InvalidParameter
    if l_diversity not in L_DIVERSITY:
        raise InvalidParameter(
            f"l_diversity must be one of {', '.join(L_DIVERSITY)}, got {l_diversity!r}",
            hint="Use l_diversity => 'distinct' (the default), 'entropy' or 'recursive'.")
    for name, value in (("l", l), ("c", c), ("t", t)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float,
                                                                                   np.number))
                                  or not math.isfinite(value)):
            raise InvalidParameter(f"{name} must be a finite number, got {value!r}",
                                   hint=f"Pass a number for {name}, or omit it.")
    if l is not None and l < 1:
        raise InvalidParameter(f"l must be at least 1, got {l}", hint="Pass l => 2 or more, or omit it.")
    if l_diversity == "distinct" and l is not None and float(l) != int(l):
        raise InvalidParameter(f"distinct l-diversity needs an integer l, got {l}",
                               hint="Pass an integer l, or l_diversity => 'entropy'.")
    if l_diversity != "distinct" and l is None:
        raise InvalidParameter(f"{l_diversity} l-diversity needs l",
                               hint="Pass l => 2 or more, or leave l_diversity 'distinct'.")
    if l_diversity == "recursive":
        if c is None:
            raise InvalidParameter("recursive (c,l)-diversity needs c",
                                   hint="Pass c => a number > 0, e.g. c => 3.")
        if c <= 0:
            raise InvalidParameter(f"c must be greater than 0, got {c}",
                                   hint="Pass c => a number > 0, e.g. c => 3.")
        if float(l) != int(l):
            raise InvalidParameter(f"recursive (c,l)-diversity needs an integer l, got {l}",
                                   hint="Pass an integer l >= 2.")
    elif c is not None:
        raise InvalidParameter("c applies to recursive (c,l)-diversity only",
                               hint="Pass l_diversity => 'recursive', or omit c.")
    if t is not None and not 0 < t <= 1:
        raise InvalidParameter(f"t must be in (0, 1], got {t}",
                               hint="Pass t => a number in (0, 1], e.g. t => 0.2, or omit it.")


class ClassCheck:
    """:meth:`Models.satisfied` of every class of a class x value table given a range of classes
    at a time (``add``: each range's (class, value, rows) pairs, each pair once with rows > 0,
    class ids from 0 within it): the classes failing, the smallest entropy and distinct count,
    the largest EMD and the first failing class's counts, for its message. Each class is decided
    from its own pairs and the table's distribution (``model.table``, over ``n_values`` values),
    in O(pairs log pairs) and never from a class x value matrix (core.risk's per-class figures),
    about ``range_pairs`` pairs at a time with a cancel honoured between them, so the figures do
    not depend on how the classes are split and a table of one value per row stays linear."""

    def __init__(self, model: Models, n_values: int, range_pairs: int | None = None):
        self.model, self.n_values = model, max(1, int(n_values))
        self.step = max(1, range_pairs or RANGE_PAIRS)
        self.failing, self.first_failing = 0, None
        self.low_entropy, self.low_distinct, self.high_emd = np.inf, np.inf, 0.0
        self.distances = self.massless_emd = None
        if model.t is not None:
            self.distances = SensitiveRanges(model.table, ordered=model.ordered)
            # a class without a value (all NULL): its EMD as the definition gives it on zeros
            self.massless_emd = float(model.emd(np.zeros(self.n_values))[0])

    def add(self, class_ids, value_ids, rows, n_classes: int) -> None:
        class_ids = np.asarray(class_ids, dtype=np.int64)
        value_ids = np.asarray(value_ids, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.float64)
        if (class_ids[1:] < class_ids[:-1]).any():
            order = np.argsort(class_ids, kind="stable")
            class_ids, value_ids, rows = class_ids[order], value_ids[order], rows[order]
        for lo, hi, a, b in class_ranges(class_ids, n_classes, self.step):
            check_interrupts()
            self._range(class_ids[a:b] - lo, value_ids[a:b], rows[a:b], hi - lo)

    def _range(self, cid, vid, cnt, n: int) -> None:
        model = self.model
        size = np.bincount(cid, weights=cnt, minlength=n)
        distinct = np.bincount(cid, minlength=n)
        entropies = class_entropy(cid, cnt, size, n)
        emd = None
        if self.distances is not None:
            emd = self.distances.class_emd(cid, vid, cnt, size, n)
            emd[size == 0] = self.massless_emd
            self.high_emd = max(self.high_emd, float(emd.max()))
        # recursive: the largest l each class is recursive (c, l)-diverse for, against l
        ok = model.holds(n, distinct=lambda: distinct, entropies=lambda: entropies,
                         recursive=lambda: recursive_classes(cid, cnt, size, model.c, n)
                         >= int(model.l),
                         emd=lambda: emd)
        if self.first_failing is None and not ok.all():
            first = np.flatnonzero(~ok)[0]
            held = cid == first
            self.first_failing = np.zeros(self.n_values)
            np.add.at(self.first_failing, vid[held], cnt[held])
        self.failing += int((~ok).sum())
        self.low_entropy = min(self.low_entropy, float(entropies.min()))
        self.low_distinct = min(self.low_distinct, int(distinct.min()))

    def figures(self) -> dict:
        out = {"failing_classes": self.failing, "min_entropy": round(self.low_entropy, 6),
               "min_distinct": self.low_distinct}
        if self.model.t is not None:
            out["max_emd"] = round(self.high_emd, 6)
        return out

    def failures(self, column: str) -> list[str]:
        """The message of the failing classes, naming the first one's figures (none: [])."""
        if not self.failing:
            return []
        why = self.model.failures(self.first_failing, f'"{column}" in a class')
        return [f"{self.failing} class(es) fail the privacy model asked: " + "; ".join(why)]
