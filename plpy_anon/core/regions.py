"""The top cuts of an out-of-core Mondrian, chosen from per-region aggregates.

A table too large to fit a build's memory is first cut into regions by the same rules as the
in-memory fit (:mod:`plpy_anon.core.mondrian`, LeFevre, DeWitt & Ramakrishnan, "Mondrian
Multidimensional K-Anonymity", ICDE 2006), from figures the database computes over the source
for all regions of a level at once: each region's rows, and per QI its non-NULL count and
spread; then the median of the ranked QIs; then the exact sizes (and, with l, distinct
sensitive counts) of both sides of each candidate cut. Every region that fits the budget (or
cannot be cut) is then fitted in memory by the ordinary estimator, one region at a time.

Rules, as in the in-memory fit:

* a region of ``rows >= 2k`` may be cut; its QIs are ranked by normalized spread (numeric: the
  region's range over the table's, 1 when it holds NULL and values; categorical: distinct
  values, NULL counted, minus one over the table's), largest first, ties by position; spread 0
  is never tried;
* on a QI, with NULL ordered lowest and ``v`` the value at position ``rows // 2``, the
  candidates are ``left = {x < v}`` and ``left = {x <= v}`` (NULL always left; when ``v`` is
  NULL, the one candidate is ``left = {x IS NULL}``); a candidate is allowable when both sides
  keep ``k`` rows (and ``l`` distinct values of every sensitive column); the more balanced
  allowable one wins, ties to ``<``; none -> the next QI.

The whole top of the tree may also be chosen at once on a sample of the source by the same rules
(:func:`sample_tree`, on the sample's ranks), then kept cut by cut where the exact counts of its
leaves allow it (:func:`counted_regions`).

Every count is exact, so k (and distinct l) hold whatever the medians: a region's cut is made
only when both sides, counted over the whole source, keep them. A categorical QI is cut in
the order the in-memory fit codes it (by frequency, its values' positions:
:func:`frequency_order`) when the table's counts of its values are read, else in its type's
order: the releases differ, the guarantees do not. Hierarchy
columns and QIs of a type without an order are not cut here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from plpy_anon.core.encoding import EncodedColumn, numeric_offset
from plpy_anon.core.generalize import code_positions
from plpy_anon.core.privacy_models import Models


@dataclass(frozen=True)
class Bound:
    """One side of a cut on QI ``qi``: ``left`` is the side of values below ``value`` (``strict``)
    or up to it, NULL included; ``value`` None: the cut puts NULL left and every value right."""

    qi: int
    value: str | None
    strict: bool
    left: bool


@dataclass
class Region:
    bounds: tuple[Bound, ...]
    rows: int
    counts: list | None = None     # its rows per sensitive value (counted_regions with models)


@dataclass
class QIStats:
    """A region's figures on one QI: non-NULL rows, and its spread's inputs (numeric: lowest
    and highest value read as a number, an int of an integer type (exact near +-2^63, where
    float rounds); categorical: distinct values, NULL counted)."""

    non_null: int
    low: float | int | None = None
    high: float | int | None = None
    distinct: int | None = None
    #: categorical, the table's: its values' texts (None: NULL) in the in-memory fit's code
    #: order (:func:`frequency_order`), or None when not read
    order: list | None = None
    #: numeric: whether the region holds NULL too (its spread is then 1 if it holds a value)
    has_null: bool = False


def spread(stats: QIStats, whole: QIStats, numeric: bool) -> float:
    """Normalized spread in [0, 1] of a region on one QI, ``whole`` being the table's figures.
    A numeric QI's NULL and values together spread 1, as the in-memory fit measures them
    (core.generalize.SpreadMeasure), which so cuts NULL apart first."""
    if numeric:
        if stats.has_null and stats.non_null > 0:
            return 1.0
        if stats.low is None or stats.high is None or not stats.high > stats.low:
            return 0.0
        width = float(whole.high - whole.low) if whole.low is not None else 0.0
        if not math.isfinite(width) or width <= 0:
            return 1.0                 # infinite values: ranked first, the counts decide
        return min(1.0, float(stats.high - stats.low) / width)
    if not stats.distinct or stats.distinct <= 1 or not whole.distinct or whole.distinct <= 1:
        return 0.0
    return (stats.distinct - 1) / (whole.distinct - 1)


def ranking(spreads: list[float]) -> list[int]:
    """QIs of spread > 0, largest first, ties by position."""
    return sorted((a for a, s in enumerate(spreads) if s > 0), key=lambda a: (-spreads[a], a))


def weighted_ranking(priority: list[float], spread_weight: float, priority_weight: float,
                     weight_sum: float):
    """The ranking of prioritized Mondrian (Xiong & Rangachari, "Towards application-oriented
    data anonymization", 2008) as its in-memory fit makes it: QIs of spread > 0 by
    ``(spread_weight * spread + priority_weight * priority) / weight_sum``, largest first, ties by
    position (``priority``: each QI's weight over the largest)."""
    def rank(spreads: list[float]) -> list[int]:
        score = [(spread_weight * s + priority_weight * p) / weight_sum
                 for s, p in zip(spreads, priority)]
        return sorted((a for a, s in enumerate(spreads) if s > 0), key=lambda a: (-score[a], a))
    return rank


def median_fraction(rows: int, non_null: int) -> float | None:
    """The ``percentile_disc`` fraction of the non-NULL values giving the value at position
    ``rows // 2`` with NULL ordered lowest, or None when that position holds NULL. The half
    step keeps ``ceil(fraction * non_null)`` on the right value whatever float8 rounds."""
    nulls = rows - non_null
    position = rows // 2
    if position < nulls or non_null == 0:
        return None
    return (position - nulls + 0.5) / non_null


def median_index(rows: int, non_null: int) -> int:
    """The 0-based index among the ordered non-NULL values of the value at position
    ``rows // 2`` with NULL ordered lowest (when :func:`median_fraction` is not None)."""
    return rows // 2 - (rows - non_null)


def value_at(counts: list[tuple], index: int):
    """The value at 0-based ``index`` of the rows whose values and counts ``counts`` lists in
    the values' order, or None when there are fewer rows."""
    seen = 0
    for value, n in counts:
        seen += n
        if index < seen:
            return value
    return None


@dataclass
class Candidate:
    """The figures of one candidate cut: rows left, and with l the distinct sensitive values of
    each side per sensitive column."""

    left_rows: int
    left_distinct: tuple[int, ...] = ()
    right_distinct: tuple[int, ...] = ()

    def allowable(self, rows: int, k: int, l: int | None) -> bool:
        if self.left_rows < k or rows - self.left_rows < k:
            return False
        if l:
            return min(self.left_distinct + self.right_distinct, default=l) >= l
        return True


def choose(rows: int, k: int, l: int | None, strict: Candidate | None,
           inclusive: Candidate | None) -> bool | None:
    """Which candidate cut of a QI is made: True (``<``), False (``<=``) or None (neither is
    allowable). The more balanced wins, ties to ``<``."""
    ok = [(abs(2 * c.left_rows - rows), not is_strict)
          for is_strict, c in ((True, strict), (False, inclusive))
          if c is not None and c.allowable(rows, k, l)]
    if not ok:
        return None
    return not min(ok)[1]


def held_by(models, left: list, counts: list) -> bool:
    """Whether both sides of a cut hold ``models`` (``models(counts)``: entropy or recursive l,
    t-closeness; :func:`side_holds`), ``left`` being its left side's rows per sensitive value
    and ``counts`` its region's (an array per sensitive column each)."""
    return side_holds(models, left) and side_holds(models, [c - x for c, x in zip(counts, left)])


def side_holds(models, counts: list) -> bool:
    """Whether a side whose rows per sensitive value are ``counts`` holds ``models`` and a value
    of every sensitive column: a region whose values of a column are all NULL has no
    distribution, which its fit refuses (as the in-memory fit refuses such a table)."""
    return all(int(c.sum()) > 0 for c in counts) and bool(models(counts))


def fits(rows: int, bytes_per_row: int, budget: int) -> bool:
    """Whether a region's rows, read and fitted in memory, fit the budget (an estimate)."""
    return rows * bytes_per_row <= budget


def leaf_budget(budget: int, resident: int) -> int:
    """The bytes a region's read and fit may take (:func:`fits`): the budget less the backend's own
    resident memory before the regions (its private memory and the libraries it maps: what the
    budget bounds beside the regions' rows; the shared buffers it touches are the server's), and
    at least half of it."""
    return max(budget // 2, budget - resident)


def row_bytes(n_columns: int) -> int:
    """Estimated peak bytes per row of the in-memory read and fit of ``n_columns`` columns
    (QIs and sensitive columns): measured ~200 MiB per million rows at 6 QIs and 1 sensitive
    column (docs/scaling.md), the codes, orders and layouts of each column and the row's ctid."""
    return 32 + 24 * n_columns


class ReleaseFigures:
    """A release's metrics (core.metrics.release_metrics) merged from its regions' fits. Each
    region's fit measures spreads against its own encoding (its range, its distinct values);
    they are rescaled to the table's here: numeric by the region's width over the table's,
    categorical by (the region's distinct values - 1) over the table's; hierarchies measure
    against the whole hierarchy already."""

    def __init__(self):
        self.rows = 0
        self.achieved_k = None
        self.n_classes = 0
        self.c_dm = 0
        self.parts = []                 # per region: (rows, {name: ncp %}, {name: scale input})
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}
        self.labels: dict[str, set] = {}

    def add(self, encoded: list, metrics: dict, rows: int) -> None:
        self.rows += rows
        k = metrics["achieved_k"]
        self.achieved_k = k if self.achieved_k is None else min(self.achieved_k, k)
        self.n_classes += metrics["n_classes"]
        self.c_dm += metrics["c_dm"]
        inputs = {}
        for enc in encoded:
            if enc.kind == "numeric":
                pos = code_positions(enc)[numeric_offset(enc):]
                if pos.size:
                    lo, hi = float(pos[0]), float(pos[-1])
                    self.low[enc.name] = min(self.low.get(enc.name, lo), lo)
                    self.high[enc.name] = max(self.high.get(enc.name, hi), hi)
                    inputs[enc.name] = ("width", hi - lo)
            elif enc.hierarchy is None:
                self.labels.setdefault(enc.name, set()).update(
                    v for v in enc.labels.tolist() if not (isinstance(v, str) and v.startswith(PHANTOM)))
                inputs[enc.name] = ("domain", len(enc.labels))
        self.parts.append((rows, dict(metrics["ncp_per_attribute"]), inputs))

    def metrics(self, k: int) -> dict:
        ncp = {}
        for rows, per_attribute, inputs in self.parts:
            for name, value in per_attribute.items():
                kind, size = inputs.get(name, ("same", None))
                if kind == "width":
                    whole = self.high[name] - self.low[name]
                    scale = size / whole if whole > 0 else 0.0
                elif kind == "domain":
                    whole = len(self.labels[name])
                    scale = (size - 1) / (whole - 1) if whole > 1 else 0.0
                else:
                    scale = 1.0
                ncp[name] = ncp.get(name, 0.0) + rows * value * scale / self.rows
        return {
            "achieved_k": self.achieved_k,
            "n_classes": self.n_classes,
            "c_dm": self.c_dm,
            "c_avg": self.rows / (self.n_classes * k),
            "ncp_percent": sum(ncp.values()) / len(ncp) if ncp else 0.0,
            "ncp_per_attribute": ncp,
        }


#: a categorical label no value can be (PostgreSQL text holds no NUL): a value of the table's
#: domain that a region does not hold
PHANTOM = "\x00"


def widened(enc, whole: QIStats | None):
    """``(column, shift)``: a region's encoded QI whose spreads measure against the table's
    domain (``whole``: the table's figures), as in the in-memory fit of the whole table, so a
    region's fit ranks and cuts its QIs as that fit would. Numeric: the table's lowest and
    highest value added to the labels (codes of values move up by ``shift``, 0 or 1);
    categorical: with the table's values in the whole-table fit's order (``whole.order``), the
    region's codes in that order (:func:`in_table_order`), else labels that no code uses
    (PHANTOM) up to the table's distinct values.
    Unchanged (shift 0) without figures, for hierarchies, and for non-finite extremes."""
    if whole is None or enc.hierarchy is not None:
        return enc, 0
    if enc.kind == "numeric":
        labels = enc.labels
        if (labels.size == 0 or whole.low is None or not math.isfinite(whole.low)
                or not math.isfinite(whole.high) or labels.dtype.kind not in "if"):
            return enc, 0
        low, high = as_label(whole.low, labels.dtype), as_label(whole.high, labels.dtype)
        shift = int(low < labels[0])
        parts = ([low.reshape(1)] if shift else []) + [labels] + \
            ([high.reshape(1)] if high > labels[-1] else [])
        if len(parts) == 1:
            return enc, 0
        codes = enc.codes
        if shift:
            codes = codes + np.int32(1)
            if enc.null_code is not None:
                codes[enc.codes == enc.null_code] = enc.null_code
        return EncodedColumn(enc.name, enc.kind, codes.astype(np.int32, copy=False), np.concatenate(parts),
                             enc.null_code), shift
    if whole.order is not None:
        recoded = in_table_order(enc, whole.order)
        if recoded is not None:
            return recoded, 0
    if whole.distinct is None or whole.distinct <= len(enc.labels):
        return enc, 0
    # PHANTOM and a number: one short label each (a label of i + 1 PHANTOMs per value made the
    # labels of a QI of d distinct values hold d^2 / 2 characters: 1.25e9 at 50,000)
    extra = np.array([PHANTOM + str(i) for i in range(whole.distinct - len(enc.labels))], dtype=object)
    return EncodedColumn(enc.name, enc.kind, enc.codes, np.concatenate([enc.labels, extra]),
                         enc.null_code), 0


def as_label(value, dtype: np.dtype) -> np.ndarray:
    """``value`` (a table's extreme) as a 0-d array of a numeric QI's label ``dtype``: an
    integer exactly, a float beyond an integer type's range (2^63 - 1 read as float rounds up to
    2^63, whose cast wraps to -2^63) as the type's limit, which the column's values cannot pass."""
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        bounded = min(max(value, info.min), info.max)
        return np.asarray(int(bounded), dtype=dtype)
    return np.asarray(value).astype(dtype)


def frequency_order(counts) -> list:
    """The texts of a categorical QI (None: NULL) in the order the in-memory fit codes them
    (core.encoding: most frequent first, ties by text, NULL after texts of equal frequency),
    from ``counts``: (text, rows) pairs of the whole table, a text possibly more than once."""
    rows: dict = {}
    for text, n in counts:
        rows[text] = rows.get(text, 0) + int(n)
    return sorted(rows, key=lambda t: (-rows[t], 1, "") if t is None else (-rows[t], 0, t))


def in_table_order(enc, order: list):
    """A region's categorical QI coded as the whole table's fit codes it: code i is ``order[i]``
    (the table's values in that fit's order, :func:`frequency_order`), a value the region does
    not hold a label no code uses (PHANTOM). Its median cuts then split the region's values as
    the whole-table fit splits them: coded by the region's own frequencies, they follow the
    region's sampling noise (NCP 4.7 % worse at 1M rows, 5 QIs, 8 regions). None when the
    region holds a value ``order`` does not."""
    position = {text: i for i, text in enumerate(order)}
    try:
        remap = np.fromiter((position[text] for text in enc.labels.tolist()), dtype=np.int32,
                            count=len(enc.labels))
    except KeyError:
        return None
    held = np.zeros(len(order), dtype=bool)
    held[remap] = True
    labels = np.array([text if held[i] else PHANTOM + str(i) for i, text in enumerate(order)],
                      dtype=object)
    null_code = None if enc.null_code is None else int(remap[enc.null_code])
    return EncodedColumn(enc.name, enc.kind, remap[enc.codes], labels, null_code)


@dataclass
class SampleColumn:
    """A QI's values in a sample of the source as ranks in its type's order: ``ranks`` (1-based;
    NULL, lowest, is rank 1 when ``has_null``), ``labels`` the non-NULL values' texts in order,
    ``values`` their numbers (numeric QIs, for the spread; None for categorical ones)."""

    ranks: np.ndarray
    has_null: bool
    labels: list
    values: np.ndarray | None = None

    def label(self, rank: int) -> str | None:
        """The text of a rank (None: NULL)."""
        if self.has_null:
            return None if rank == 1 else self.labels[rank - 2]
        return self.labels[rank - 1]

    def stats(self, ranks: np.ndarray) -> QIStats:
        """The figures of the rows holding ``ranks`` (as :class:`QIStats` of a region)."""
        nulls = int(np.count_nonzero(ranks == 1)) if self.has_null else 0
        if self.values is None:
            return QIStats(ranks.size - nulls, distinct=distinct_ranks(ranks))
        if ranks.size == nulls:
            return QIStats(0)
        low = int(ranks[ranks > 1].min()) if nulls else int(ranks.min())
        shift = 2 if self.has_null else 1
        return QIStats(ranks.size - nulls, float(self.values[low - shift]),
                       float(self.values[int(ranks.max()) - shift]), has_null=nulls > 0)


def distinct_ranks(ranks: np.ndarray, skip_zero: bool = False) -> int:
    """Distinct values of non-negative ranks (0 not counted with ``skip_zero``)."""
    if ranks.size == 0:
        return 0
    seen = np.bincount(ranks) > 0
    return int(np.count_nonzero(seen[1:] if skip_zero else seen))


@dataclass
class SampleNode:
    """A region of the tree chosen on a sample: ``sampled`` sample rows; cut into ``children``
    (left, right) or a leaf numbered ``leaf`` (depth first, left first)."""

    bounds: tuple[Bound, ...]
    sampled: int
    children: tuple | None = None
    leaf: int | None = None


#: with l, the best utility cuts per QI checked for l in turn (as the in-memory fit's)
UTILITY_ROUNDS = 8


def _prefix_spreads(col: SampleColumn, whole: QIStats, ranks: np.ndarray) -> tuple:
    """(left, right): the normalized spread of rows ``[:p]`` and ``[p:]`` of ``ranks`` (one QI's
    ranks in some order) at every ``p`` in 1..n-1, as :func:`spread` measures a region."""
    n = ranks.size
    if col.values is None:
        if not whole.distinct or whole.distinct <= 1:
            return np.zeros(n - 1), np.zeros(n - 1)
        first = np.zeros(n, dtype=np.int64)
        first[np.unique(ranks, return_index=True)[1]] = 1
        last = np.zeros(n, dtype=np.int64)
        last[n - 1 - np.unique(ranks[::-1], return_index=True)[1]] = 1
        left = np.cumsum(first)[:-1]
        right = np.cumsum(last[::-1])[::-1][1:]
        scale = whole.distinct - 1
        return np.maximum(left - 1, 0) / scale, np.maximum(right - 1, 0) / scale
    width = float(whole.high - whole.low) if whole.low is not None else 0.0
    shift = 2 if col.has_null else 1
    present = ranks >= shift
    if not math.isfinite(width) or width <= 0:
        left, right = np.zeros(n - 1), np.zeros(n - 1)
    else:
        x = np.full(n, np.nan)
        x[present] = col.values[ranks[present] - shift]
        with np.errstate(invalid="ignore"):
            lo, hi = np.fmin.accumulate(x), np.fmax.accumulate(x)
            lo_r, hi_r = np.fmin.accumulate(x[::-1])[::-1], np.fmax.accumulate(x[::-1])[::-1]
        left = np.nan_to_num(np.minimum((hi - lo) / width, 1.0))[:-1]
        right = np.nan_to_num(np.minimum((hi_r - lo_r) / width, 1.0))[1:]
    if col.has_null:          # NULL and values together spread 1
        null = ~present
        both = np.logical_or.accumulate(null) & np.logical_or.accumulate(present)
        both_r = (np.logical_or.accumulate(null[::-1]) & np.logical_or.accumulate(present[::-1]))[::-1]
        left[both[:-1]] = 1.0
        right[both_r[1:]] = 1.0
    return left, right


def utility_choice(columns: list, whole: list, sensitive: list, rows: np.ndarray, spreads: list,
                   k: int, l: int | None):
    """The utility split's cut of a sample region (Xu et al., "Utility-based anonymization
    using local recoding", KDD 2006, as the in-memory fit's ``split="utility"`` makes it): on
    every QI of spread > 0, every boundary between values leaving k rows on both sides, scored
    by the size-weighted spread of both sides summed over the QIs; the lowest score, ties to the
    more balanced cut, then the lower position, then the earlier QI. With l, the 8 best per QI
    are checked for l in turn, then the median rule's cut. ``(qi, rank of the last value left,
    left mask over rows)`` or None."""
    n = rows.size
    best = None
    for a in (a for a, s in enumerate(spreads) if s > 0):
        ra = columns[a].ranks[rows]
        order = np.argsort(ra, kind="stable")
        ordered = ra[order]
        penalty = np.zeros(n - 1)
        for b, col in enumerate(columns):
            if col is None:
                continue
            left, right = _prefix_spreads(col, whole[b], col.ranks[rows][order])
            p = np.arange(1, n)
            penalty += p * left + (n - p) * right
        penalty /= n
        p = np.arange(1, n)
        candidate = (p >= k) & (n - p >= k) & (ordered[:-1] != ordered[1:])
        cuts = np.flatnonzero(candidate) + 1
        gaps = np.abs(2 * cuts - n)
        ranked = cuts[np.lexsort((cuts, gaps, penalty[cuts - 1]))]
        chosen = None
        for cut in (ranked[:UTILITY_ROUNDS] if l else ranked[:1]):
            left = ra <= ordered[cut - 1]
            if not l or Candidate(int(cut), *_distinct_sides(sensitive, rows, left)).allowable(n, k, l):
                chosen = int(cut)
                break
        if chosen is None and l:
            chosen = _median_left(columns[a], ra, sensitive, rows, k, l)
        if chosen is None:
            continue
        key = (penalty[chosen - 1], abs(2 * chosen - n), a)
        if best is None or key < best[0]:
            best = (key, a, int(ordered[chosen - 1]))
    if best is None:
        return None
    _, a, last = best
    return a, last, columns[a].ranks[rows] <= last


def _distinct_sides(sensitive: list, rows: np.ndarray, left: np.ndarray) -> tuple:
    return (tuple(distinct_ranks(s[rows[left]], True) for s in sensitive),
            tuple(distinct_ranks(s[rows[~left]], True) for s in sensitive))


def _median_left(col: SampleColumn, ranks: np.ndarray, sensitive: list, rows: np.ndarray, k: int,
                 l: int | None) -> int | None:
    """Rows left of the median rule's cut of one QI (None: neither candidate is allowable)."""
    v = int(np.partition(ranks, rows.size // 2)[rows.size // 2])
    null_cut = col.has_null and v == 1
    options = []
    for strict in ((False,) if null_cut else (True, False)):
        left = (ranks == 1) if null_cut else (ranks < v if strict else ranks <= v)
        candidate = Candidate(int(np.count_nonzero(left)), *_distinct_sides(sensitive, rows, left))
        if candidate.allowable(rows.size, k, l):
            options.append((abs(2 * candidate.left_rows - rows.size), not strict, candidate.left_rows))
    return min(options)[2] if options else None


def sample_tree(columns: list, sensitive: list, k: int, l: int | None, stop, max_depth: int,
                rank=ranking, models=None, split: str = "median"):
    """The top cuts chosen on a sample of the source by the in-memory fit's rules (spreads, the
    value at position ``rows // 2`` with NULL lowest, the more balanced allowable candidate,
    ties to ``<``), the whole tree at once. ``columns``: a :class:`SampleColumn` per QI, None for
    a QI not cut at the top; ``sensitive``: per sensitive column its sample's ranks (0: NULL),
    with l; ``stop(sampled rows)``: whether a region is a leaf; ``rank(spreads)``: the QIs in
    the order they are tried (:func:`ranking`, or the release's own: :func:`weighted_ranking`);
    ``models(counts)``: whether a side whose sensitive values' counts (one array per column) are
    ``counts`` holds the release's other models (entropy or recursive l: on the sample, a guide
    only; the exact counts decide, :func:`counted_regions`). A candidate is allowable when
    both sides hold k sample rows (and l distinct sensitive values): the sample is a part of
    the source, so its sides hold at least as many (the cut is still checked on exact counts:
    :func:`counted_regions`). Returns the root :class:`SampleNode`."""
    n = next((c.ranks.size for c in columns if c is not None), 0)
    whole = [None if c is None else c.stats(c.ranks) for c in columns]
    widths = [int(s.max()) + 1 if s.size else 1 for s in sensitive]
    root = SampleNode((), n)
    todo = [(root, np.arange(n))]
    while todo:
        node, rows = todo.pop()
        if len(node.bounds) >= max_depth or rows.size < 2 * k or stop(rows.size):
            continue
        stats = [None if c is None else c.stats(c.ranks[rows]) for c in columns]
        spreads = [0.0 if s is None else spread(s, whole[a], columns[a].values is not None)
                   for a, s in enumerate(stats)]
        if split == "utility":
            chosen = utility_choice(columns, whole, sensitive, rows, spreads, k, l)
            if chosen is not None:
                a, last, left = chosen
                value = columns[a].label(last)
                sides = (rows[left], rows[~left])
                node.children = tuple(SampleNode(node.bounds + (Bound(a, value, False, is_left),),
                                                 side.size)
                                      for is_left, side in zip((True, False), sides))
                todo.append((node.children[1], sides[1]))
                todo.append((node.children[0], sides[0]))
            continue
        for a in rank(spreads):
            col = columns[a]
            ranks = col.ranks[rows]
            v = int(np.partition(ranks, rows.size // 2)[rows.size // 2])
            null_cut = col.has_null and v == 1
            options = []
            for strict in ((False,) if null_cut else (True, False)):
                left = (ranks == 1) if null_cut else (ranks < v if strict else ranks <= v)
                candidate = Candidate(int(np.count_nonzero(left)))
                if l:
                    candidate.left_distinct = tuple(distinct_ranks(s[rows[left]], True) for s in sensitive)
                    candidate.right_distinct = tuple(distinct_ranks(s[rows[~left]], True) for s in sensitive)
                if candidate.allowable(rows.size, k, l) and (models is None or all(
                        models([np.bincount(s[side], minlength=width)[1:]
                                for s, width in zip(sensitive, widths)])
                        for side in (rows[left], rows[~left]))):
                    options.append((abs(2 * candidate.left_rows - rows.size), not strict, left))
            if not options:
                continue
            _, inclusive, left = min(options, key=lambda o: o[:2])
            value = col.label(v)
            sides = (rows[left], rows[~left])
            node.children = tuple(SampleNode(node.bounds + (Bound(a, value, not inclusive, is_left),),
                                             side.size)
                                  for is_left, side in zip((True, False), sides))
            todo.append((node.children[1], sides[1]))
            todo.append((node.children[0], sides[0]))
            break
    for number, leaf in enumerate(sample_leaves(root)):
        leaf.leaf = number
    return root


def sample_leaves(node: SampleNode) -> list[SampleNode]:
    """The leaves under ``node``, depth first, left first."""
    if node.children is None:
        return [node]
    return sample_leaves(node.children[0]) + sample_leaves(node.children[1])


def counted_regions(root: SampleNode, rows: dict, distinct: dict, k: int, l: int | None,
                    sensitive: int = 0, counts: dict | None = None, models=None):
    """(regions, cuts undone) of a sampled tree once its leaves are counted exactly over the
    source (``rows``: {leaf: rows}; ``distinct``: {leaf: distinct values of each of the
    ``sensitive`` columns}, none where absent):
    a cut stays when each side holds k rows (and, with l, a leaf of l distinct values of every
    sensitive column: a side holds at least its leaves' values), else its region is one region
    of its leaves' rows. So every cut kept is allowable by the exact counts. With ``models``
    (entropy or recursive l), ``counts``: {leaf: its rows per sensitive value, an array per
    column, the same values in the same order for every leaf}; a cut stays only when each
    side's counts (its leaves' sums) satisfy ``models(counts)`` too."""
    undone = 0

    def walk(node):
        nonlocal undone
        if node.children is None:
            n = int(rows.get(node.leaf, 0))
            held = counts.get(node.leaf) if counts is not None else None
            return ([Region(node.bounds, n, held)], n,
                    tuple(distinct.get(node.leaf, (0,) * sensitive)), held)
        (left, n_left, d_left, c_left), (right, n_right, d_right, c_right) = (
            walk(c) for c in node.children)
        n = n_left + n_right
        best = tuple(max(x, y) for x, y in zip(d_left, d_right))
        both = None
        if models is not None:
            both = [x + y for x, y in zip(c_left, c_right)] if c_left is not None and \
                c_right is not None else (c_left if c_right is None else c_right)
        if Candidate(n_left, d_left, d_right).allowable(n, k, l) and (
                models is None or (c_left is not None and c_right is not None
                                   and side_holds(models, c_left) and side_holds(models, c_right))):
            return left + right, n, best, both
        undone += 1
        return [Region(node.bounds, n, both)], n, best, both

    regions = walk(root)[0]
    return regions, undone


#: the slack of the fit's own EMD comparison (core.privacy_models: ``emd <= t + 1e-9``), taken
#: off a region's t so that its bound below holds with it
FIT_SLACK = 1e-9


def region_t(table: np.ndarray, counts: np.ndarray, t: float, ordered: bool,
             margin: float = 0.0, rows: int | None = None) -> tuple[float, bool]:
    """(t, ordered) a region is fitted with on one sensitive column, its rows per table value
    ``counts`` (``rows``: all its rows, NULLs too), so that each class its fit keeps within that
    t of the region (as the fit measures EMD: against the region's rows, over the region's own
    values) is within ``t`` of the table (``table``: its rows per value).

    The distances are metrics, so EMD(class, table) <= EMD(class, region) + EMD(region, table).
    The equal ground distance does not depend on which values are counted: the region's fit
    measures EMD(class, region) as the table's would. The ordered distance of the region's fit
    puts its m_r values 1/(m_r - 1) apart, the table's m values 1/(m - 1): over the table's
    values a class's distance to its region is the region's own times the gaps between the
    region's consecutive values (in table positions) over (m - 1) / (m_r - 1), so at most
    ``G (m_r - 1) / (m - 1)`` times it, G the widest gap. A class of NULLs only (no mass, which
    the check measures against the table's distribution as it is) is not bounded so: where the
    table finds it farther than t, the region's t stays below its distance to the region. A
    region of one value has no ordered distance (every class is at 0): it is measured by the
    equal distance (a class with values at 0, one of NULLs at 1/2). ``margin``: kept below t
    besides."""
    model = Models(t=1.0, table=table / max(table.sum(), 1), ordered=ordered)
    room = t - float(model.emd(counts)[0]) - margin
    present = np.flatnonzero(counts)
    if not ordered:
        return room - FIT_SLACK, False
    nulls = rows is None or rows > counts.sum()
    if present.size <= 1:
        return (min(room, 0.5 - margin) if nulls else room) - FIT_SLACK, False
    if table.size > 1:
        room = room * (table.size - 1) / (int(np.diff(present).max()) * (present.size - 1))
    if nulls and float(model.emd(np.zeros(table.size))[0]) > t:
        own = Models(t=1.0, table=counts[present] / counts.sum(), ordered=True)
        room = min(room, float(own.emd(np.zeros(present.size))[0]) - margin)
    return room - FIT_SLACK, True
