"""Workload-aware utility of a release: query precision/recall and weighted discernibility.

Pure numpy/pandas. A *workload query* is the quasi-identifier part of an analyst's WHERE clause,
given as a small predicate tree (:class:`Condition`, :class:`AllOf`, :class:`AnyOf`), usually
produced by :mod:`plpy_anon.querylog` from SQL text.

Semantics of a release (Xiong & Rangachari, section 4.3, "precision of the relevant subpopulation"):

* the **true answer** of a query is the set of original rows whose values satisfy it;
* the **released answer** is the set of rows whose *equivalence class may satisfy it*: the class's
  released value of a numeric column is the interval ``[min, max]`` of its rows (range-overlap
  semantics), of a categorical column the set of values its rows hold (set-intersection
  semantics). These are the tight regions strict Mondrian publishes; a release that publishes
  wider regions (hierarchy nodes) can pass its own regions through :class:`ClassRegions`.
* ``precision = |true ∩ released| / |released|`` and ``recall = |true ∩ released| / |true|``.
  With the semantics above every true row is released (recall 1); recall is still measured, not
  assumed, so that a release whose regions do not cover its rows shows up.

Weighted discernibility (Xiong & Rangachari, eq. 4.2): ``C_WDM = Σ_i weight_i · Σ_m |E_m^{X_i}|²``, with
``E_m^{X_i}`` "the m-th equivalence class with respect to X_i". Reading implemented: every row is
charged, per attribute X_i, the number of rows of the table whose *original* value of X_i lies in
the region the row's class releases on X_i, ``C_WDM = Σ_i weight_i · Σ_rows |{r' : x_{r'}^{X_i} ∈
region_i(r)}|``. When the released regions of X_i partition the rows into groups this is exactly
the paper's ``Σ_m |E_m^{X_i}|²``; in general it grows with generalization: an exact release (each
class holds one value of X_i) scores the floor ``Σ_v n_v²`` and widening a region never lowers it.
(Grouping rows by identical released value instead -- the earlier reading -- gives an exactly
released attribute, split into many small classes of the same value, the *largest* penalty.)
The weights are normalized to sum to 1 first, so that C_WDM is on the scale of C_DM and releases
scored with the same weights are comparable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np
import pandas as pd

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UndefinedObject

#: comparison operators a :class:`Condition` may carry, with their arity.
COMPARISONS = ("<", "<=", ">", ">=", "=", "<>")
OPERATORS = COMPARISONS + ("between", "in", "prefix")


# --------------------------------------------------------------------------------------------
# predicate trees
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Condition:
    """``column <op> values``: one atomic predicate on one column.

    ``values`` holds one constant for comparisons and ``prefix`` (``LIKE 'ab%'``), two for
    ``between`` (low, high, inclusive) and one or more for ``in``.
    """

    column: str
    op: str
    values: tuple

    def __post_init__(self):
        if self.op not in OPERATORS:
            raise InvalidParameter(
                f"unknown predicate operator {self.op!r}",
                hint=f"use one of {', '.join(OPERATORS)}",
            )
        expected = {"between": 2}.get(self.op, 1)
        if (self.op == "in" and len(self.values) < 1) or (
            self.op != "in" and len(self.values) != expected
        ):
            raise InvalidParameter(
                f"operator {self.op!r} on {self.column!r} got {len(self.values)} value(s)",
                hint="between takes (low, high), in takes one or more values, the others one",
            )

    @property
    def columns(self) -> frozenset:
        return frozenset([self.column])


@dataclass(frozen=True)
class AllOf:
    """Conjunction of predicates (SQL ``AND``)."""

    parts: tuple = field(default_factory=tuple)

    @property
    def columns(self) -> frozenset:
        return frozenset().union(*(p.columns for p in self.parts))


@dataclass(frozen=True)
class AnyOf:
    """Disjunction of predicates (SQL ``OR``)."""

    parts: tuple = field(default_factory=tuple)

    @property
    def columns(self) -> frozenset:
        return frozenset().union(*(p.columns for p in self.parts))


def is_number(value) -> bool:
    """A predicate constant that is a number (a bool is not one)."""
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def restrict_predicate(predicate, columns):
    """The part of ``predicate`` that only involves ``columns`` (e.g. the quasi-identifiers).

    A conjunct on another column is dropped (it restricts true and released answers alike); a
    disjunction with a branch on another column cannot be bounded by the QIs and becomes ``None``
    (no restriction). Returns ``None`` when nothing remains.
    """
    columns = frozenset(columns)
    if isinstance(predicate, Condition):
        return predicate if predicate.column in columns else None
    parts = [restrict_predicate(p, columns) for p in predicate.parts]
    if isinstance(predicate, AllOf):
        kept = tuple(p for p in parts if p is not None)
        if not kept:
            return None
        return kept[0] if len(kept) == 1 else AllOf(kept)
    if any(p is None for p in parts) or not parts:
        return None
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


# --------------------------------------------------------------------------------------------
# released regions of equivalence classes
# --------------------------------------------------------------------------------------------
@dataclass
class ClassRegions:
    """What each equivalence class publishes, per column, in array form.

    ``low[c]``/``high[c]``: arrays (n_classes,) for numeric column c; ``members[c]``: boolean
    matrix (n_classes, n_categories) with ``categories[c]`` naming its columns.
    ``codes`` maps each row to its class index (0..n_classes-1).
    """

    codes: np.ndarray
    low: dict
    high: dict
    members: dict
    categories: dict

    @property
    def n_classes(self) -> int:
        return int(self.codes.max()) + 1 if self.codes.size else 0

    @classmethod
    def from_rows(cls, data: pd.DataFrame, labels) -> ClassRegions:
        """Tight regions: the [min, max] of numeric columns and the value sets of the others."""
        codes = _class_codes(data, labels)
        n_classes = int(codes.max()) + 1
        low, high, members, categories = {}, {}, {}, {}
        for column in data.columns:
            values = data[column]
            if _is_numeric(values):
                numbers = values.to_numpy(dtype=float)
                low[column] = np.full(n_classes, np.inf)
                high[column] = np.full(n_classes, -np.inf)
                np.minimum.at(low[column], codes, numbers)
                np.maximum.at(high[column], codes, numbers)
            else:
                # NULL is a category of its own, as GROUP BY and the release's sets keep it
                category_codes, uniques = pd.factorize(values.astype(str), sort=True,
                                                       use_na_sentinel=False)
                matrix = np.zeros((n_classes, len(uniques)), dtype=bool)
                matrix[codes, category_codes] = True
                members[column] = matrix
                categories[column] = np.asarray(uniques, dtype=object)
        return cls(codes=codes, low=low, high=high, members=members, categories=categories)


def _is_numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def _class_codes(data: pd.DataFrame, labels) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.shape != (len(data),):
        raise InvalidParameter(
            f"got {labels.shape[0] if labels.ndim else 0} class labels for {len(data)} rows",
            hint="pass one equivalence-class label per row of the data, in the same order",
        )
    if len(data) == 0:
        raise InsufficientData(
            "the release has no rows", hint="measure a release of a non-empty table"
        )
    codes, _ = pd.factorize(labels)
    return codes.astype(np.int64)


# --------------------------------------------------------------------------------------------
# evaluation: rows (true answers) and classes (released answers)
# --------------------------------------------------------------------------------------------
def evaluate_rows(predicate, data: pd.DataFrame) -> np.ndarray:
    """Boolean mask of the rows of ``data`` that satisfy ``predicate`` (original values)."""
    if isinstance(predicate, Condition):
        return _condition_on_rows(predicate, data)
    masks = [evaluate_rows(p, data) for p in predicate.parts]
    combine = np.logical_and if isinstance(predicate, AllOf) else np.logical_or
    initial = np.full(len(data), isinstance(predicate, AllOf))
    return combine.reduce([initial, *masks]) if masks else initial


def _require_column(column, available):
    if column not in available:
        raise UndefinedObject(
            f"workload predicate uses column {column!r}, which the data does not have",
            hint=f"restrict the workload to the columns {sorted(map(str, available))}",
        )


def _condition_on_rows(cond: Condition, data: pd.DataFrame) -> np.ndarray:
    _require_column(cond.column, data.columns)
    values = data[cond.column]
    if _is_numeric(values):
        x = values.to_numpy(dtype=float)
        consts = _as_numbers(cond)
        if consts is None:  # a string constant on a numeric column: never equal
            return np.zeros(len(x), dtype=bool) if cond.op != "<>" else np.ones(len(x), bool)
    else:
        x = values.astype(str).to_numpy(dtype=object)
        consts = tuple(str(v) for v in cond.values)
    op = cond.op
    if op == "between":
        return (x >= consts[0]) & (x <= consts[1])
    if op == "in":
        return np.isin(x, np.asarray(consts, dtype=x.dtype))
    if op == "prefix":
        return np.char.startswith(x.astype(str), str(cond.values[0]))
    return _compare(x, op, consts[0])


def _compare(x, op, c):
    return {
        "<": lambda: x < c,
        "<=": lambda: x <= c,
        ">": lambda: x > c,
        ">=": lambda: x >= c,
        "=": lambda: x == c,
        "<>": lambda: x != c,
    }[op]()


def _as_numbers(cond: Condition):
    try:
        return tuple(float(v) for v in cond.values)
    except (TypeError, ValueError):
        return None


def evaluate_classes(predicate, regions: ClassRegions) -> np.ndarray:
    """Boolean mask of the classes whose released region MAY satisfy ``predicate``."""
    if isinstance(predicate, Condition):
        return _condition_on_classes(predicate, regions)
    masks = [evaluate_classes(p, regions) for p in predicate.parts]
    combine = np.logical_and if isinstance(predicate, AllOf) else np.logical_or
    initial = np.full(regions.n_classes, isinstance(predicate, AllOf))
    return combine.reduce([initial, *masks]) if masks else initial


def _condition_on_classes(cond: Condition, regions: ClassRegions) -> np.ndarray:
    column = cond.column
    if column in regions.low:
        return _range_may_satisfy(cond, regions.low[column], regions.high[column])
    _require_column(column, set(regions.members))
    members, categories = regions.members[column], regions.categories[column]
    satisfied_categories = _condition_on_rows(
        cond, pd.DataFrame({column: pd.Series(categories, dtype=object)})
    )
    # set intersection: the class may satisfy the predicate iff one of its values does
    return members[:, satisfied_categories].any(axis=1)


def _range_may_satisfy(cond: Condition, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    consts = _as_numbers(cond)
    if consts is None:
        return np.zeros(low.shape, bool) if cond.op != "<>" else np.ones(low.shape, bool)
    op = cond.op
    if op == "between":
        return (high >= consts[0]) & (low <= consts[1])
    if op == "in":
        points = np.asarray(consts)
        return ((low[:, None] <= points) & (points <= high[:, None])).any(axis=1)
    if op == "prefix":  # a LIKE on a numeric column: cannot be bounded by a range
        return np.ones(low.shape, bool)
    c = consts[0]
    return {
        "<": lambda: low < c,
        "<=": lambda: low <= c,
        ">": lambda: high > c,
        ">=": lambda: high >= c,
        "=": lambda: (low <= c) & (c <= high),
        "<>": lambda: ~((low == c) & (high == c)),
    }[op]()


# --------------------------------------------------------------------------------------------
# workload precision
# --------------------------------------------------------------------------------------------
@dataclass
class WorkloadPrecision:
    """Per-query answer sizes and their averages (plain and frequency-weighted)."""

    per_query: pd.DataFrame
    mean_precision: float
    mean_recall: float
    weighted_precision: float
    weighted_recall: float

    def as_dict(self) -> dict:
        return {
            "queries": len(self.per_query),
            "mean_precision": self.mean_precision,
            "mean_recall": self.mean_recall,
            "weighted_precision": self.weighted_precision,
            "weighted_recall": self.weighted_recall,
        }


def workload_precision(
    data: pd.DataFrame,
    labels,
    queries: Sequence,
    frequencies: Sequence[float] | None = None,
    *,
    regions: ClassRegions | None = None,
) -> WorkloadPrecision:
    """Precision and recall of the released answers of each query of the workload.

    ``data``: the original quasi-identifier columns; ``labels``: the equivalence class of each
    row; ``queries``: predicate trees (already restricted to the QIs, see
    :func:`restrict_predicate`); ``frequencies``: how often each query ran (default 1).
    Precision of a query whose released answer is empty is 1 (nothing returned, nothing wrong);
    recall of a query whose true answer is empty is 1 (nothing to find).
    """
    if len(queries) == 0:
        raise InsufficientData(
            "the workload has no query with a predicate on the quasi-identifiers",
            hint="load queries with anon.learn_priorities or the load-queries client command",
        )
    frequencies = _check_frequencies(frequencies, len(queries))
    regions = regions if regions is not None else ClassRegions.from_rows(data, labels)
    rows = []
    for predicate in queries:  # one pass per query; each pass is vectorized over rows/classes
        true_rows = evaluate_rows(predicate, data)
        released_rows = evaluate_classes(predicate, regions)[regions.codes]
        hits = int(np.count_nonzero(true_rows & released_rows))
        n_true, n_released = int(true_rows.sum()), int(released_rows.sum())
        rows.append(
            {
                "query": predicate,
                "true_rows": n_true,
                "released_rows": n_released,
                "precision": hits / n_released if n_released else 1.0,
                "recall": hits / n_true if n_true else 1.0,
            }
        )
    per_query = pd.DataFrame(rows)
    per_query["frequency"] = frequencies
    return WorkloadPrecision(
        per_query=per_query,
        mean_precision=float(per_query["precision"].mean()),
        mean_recall=float(per_query["recall"].mean()),
        weighted_precision=float(np.average(per_query["precision"], weights=frequencies)),
        weighted_recall=float(np.average(per_query["recall"], weights=frequencies)),
    )


def _check_frequencies(frequencies, n):
    if frequencies is None:
        return np.ones(n)
    freq = np.asarray(frequencies, dtype=float)
    if freq.shape != (n,) or not np.all(np.isfinite(freq)) or np.any(freq <= 0):
        raise InvalidParameter(
            "query frequencies must be one positive number per query",
            hint="pass None for equal frequencies, or the call counts of the queries",
        )
    return freq


# --------------------------------------------------------------------------------------------
# weights and discernibility
# --------------------------------------------------------------------------------------------
def number_value(value) -> float | None:
    """A JSON number as a float, ±inf past double precision (jsonb keeps ``1e400`` exactly, and
    PL/Python hands it over as a 401-digit int, which ``float()`` refuses); None for what is not
    a number (null, a boolean, a string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal, np.number)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def normalize_weights(weights: Mapping[str, float], columns: Sequence[str]) -> dict:
    """Validate attribute priority weights against ``columns`` and scale them to sum to 1.

    Columns of ``columns`` missing from ``weights`` get weight 0. Raises
    :class:`UndefinedObject` for a weight on an unknown column and :class:`InvalidParameter` for a
    negative, non-finite or non-numeric weight, or when all weights are zero.
    """
    columns = list(columns)
    unknown = sorted(set(weights) - set(columns))
    if unknown:
        raise UndefinedObject(
            f"priority weight for unknown column(s) {', '.join(map(repr, unknown))}",
            hint=f"give weights for the quasi-identifiers only: {', '.join(columns)}",
        )
    cleaned = {}
    for column, weight in weights.items():
        value = number_value(weight)
        if value is None:
            raise InvalidParameter(
                f"priority weight of {column!r} is {'null' if weight is None else repr(weight)}, "
                "not a number",
                hint='write weights as JSON numbers, e.g. {"age": 1, "sex": 0.5}',
            )
        if not math.isfinite(value) or value < 0:
            raise InvalidParameter(
                f"priority weight of {column!r} is {value:g}; weights must be finite (within "
                "double precision) and >= 0",
                hint="use 0 for a column that does not matter and larger numbers for more "
                "important ones",
            )
        cleaned[column] = value
    total = sum(cleaned.values())
    if total <= 0:
        raise InvalidParameter(
            "all priority weights are zero",
            hint="give at least one quasi-identifier a positive weight, or omit priorities "
            "for plain Mondrian",
        )
    return {column: cleaned.get(column, 0.0) / total for column in columns}


def discernibility(labels) -> int:
    """C_DM = Σ_m |E_m|²: the sum of squared equivalence-class sizes."""
    _, sizes = np.unique(np.asarray(labels), return_counts=True)
    return int(np.sum(sizes.astype(np.int64) ** 2))


def region_row_counts(data: pd.DataFrame, regions: ClassRegions, column) -> np.ndarray:
    """``(n_classes,)``: how many rows of ``data`` hold, on ``column``, an original value lying in
    each class's released region (numeric ``[low, high]``, categorical value set)."""
    _require_column(column, data.columns)
    values = data[column]
    if column in regions.low:
        ordered = np.sort(values.to_numpy(dtype=float))
        return (np.searchsorted(ordered, regions.high[column], side="right")
                - np.searchsorted(ordered, regions.low[column], side="left")).astype(np.int64)
    _require_column(column, set(regions.members))
    categories = regions.categories[column]
    index = pd.Index(categories).get_indexer(values.astype(str).to_numpy(dtype=object))
    per_value = np.bincount(index[index >= 0], minlength=len(categories)).astype(np.int64)
    return regions.members[column].astype(np.int64) @ per_value


def attribute_discernibility(data: pd.DataFrame, labels, column, *,
                             regions: ClassRegions | None = None) -> int:
    """``Σ_rows |{r' : x_{r'} ∈ region(r)}|`` on one column: every row is charged the number of
    rows whose original value lies in the region its class releases (module docstring)."""
    regions = regions if regions is not None else ClassRegions.from_rows(data, labels)
    counts = region_row_counts(data, regions, column)
    return int(np.bincount(regions.codes, minlength=regions.n_classes) @ counts)


def weighted_discernibility(data: pd.DataFrame, labels, weights: Mapping[str, float], *,
                            regions: ClassRegions | None = None) -> float:
    """C_WDM = Σ_i weight_i · Σ_rows |{r' : x_{r'}^{X_i} ∈ region_i(r)}|, weights normalized to
    sum to 1 (module docstring).

    ``data``: the original quasi-identifier columns; ``labels``: each row's class; ``regions``:
    what each class releases (default: the tight regions of :meth:`ClassRegions.from_rows`; a
    release publishing wider regions passes its own).
    """
    normalized = normalize_weights(dict(weights), list(data.columns))
    regions = regions if regions is not None else ClassRegions.from_rows(data, labels)
    return float(sum(
        weight * attribute_discernibility(data, labels, column, regions=regions)
        for column, weight in normalized.items() if weight > 0
    ))


def minimum_weighted_discernibility(data: pd.DataFrame, weights: Mapping[str, float]) -> float:
    """The C_WDM of an exact release (every class one original value per column): the floor no
    release of ``data`` goes below, ``Σ_i weight_i · Σ_v n_v²`` over the values v of X_i."""
    normalized = normalize_weights(dict(weights), list(data.columns))
    total = 0.0
    for column, weight in normalized.items():
        if weight > 0:
            sizes = data[column].value_counts(dropna=False).to_numpy(dtype=np.int64)
            total += weight * int(np.sum(sizes ** 2))
    return total


def column_precision(per_query: pd.DataFrame) -> pd.Series:
    """Frequency-weighted mean precision of the queries that use each column, from the
    ``per_query`` frame of :func:`workload_precision` (a query of several columns counts for each
    of them); indexed by column name, sorted."""
    totals, weights = {}, {}
    for predicate, precision, frequency in zip(per_query["query"], per_query["precision"],
                                               per_query["frequency"]):
        for column in predicate.columns:
            totals[column] = totals.get(column, 0.0) + precision * frequency
            weights[column] = weights.get(column, 0.0) + frequency
    return pd.Series({c: totals[c] / weights[c] for c in sorted(totals)}, dtype=float,
                     name="precision")
