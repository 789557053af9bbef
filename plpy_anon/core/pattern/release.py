"""Whole-table driver of the pattern-preserving release: per column, sort, cut into
segments, extract and sample localities, random-walk every segment, round to a decimal grid.

Choices made where the paper is silent (each one is what the docs promise):

* Segments: the non-NULL values of a column sorted (stable, so row identity is kept), cut into
  ``max(1, n // segment)`` consecutive pieces of sizes differing by at most one -- no piece is
  smaller than ``segment`` (the remainder is spread) unless the column itself is.
* Polytope: the sampled localities of each segment, each with the paper's slack
  ``delta > 0`` (``relation * (2 x_j - x_i - x_k) <= delta``), and the column's domain bounds --
  nothing else.  No order constraint between neighbours: the order of a segment is not part of
  the pattern the paper keeps, and with ties it pinned equal values to each other (a segment of
  one repeated value had no room at all).  Segments walk independently.
* delta: ``delta_factor * max(grid, mean gap of the sorted segment)`` for the walk, plus the
  rounding margin ``2 * grid`` for the published values (see below).  Ties (``d_i = d_j``) are
  bands of width ``2 delta``, so equal values move apart and together freely.
* Start point: the original vector ``D`` itself, as in the paper: every locality holds on ``D``
  with room ``delta`` to spare.
* Grid: values with at most 9 decimals are read exactly on their grid ``10**-q``; values with
  more are first rounded to 9 decimals.  The release is on the source's grid (integers stay
  integers), capped so that exact int64 checks cannot overflow.
* Rounding: each coordinate moves by at most half a grid step and a locality row has
  coefficients summing to 4 in absolute value, so the rounded values satisfy
  ``relation * (2 z_j - z_i - z_k) <= delta_walk + 2 grid`` = the published ``delta``; checked in
  exact integers (a failure is a bug and raises).  The walk stays inside the grid-aligned bounds,
  so rounding never leaves them.
"""

import functools
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import sparse

from plpy_anon.core.errors import InsufficientData, InvalidParameter, UnsupportedType
from plpy_anon.core.pattern.localities import (
    Localities,
    check_fraction,
    constraint_matrix,
    extract_localities,
    sample_localities,
)
from plpy_anon.core.pattern.metrics import preserved_fraction
from plpy_anon.core.pattern.walk import Blocks, Walk, random_walks

MAX_DECIMALS = 9
#: largest |value| a column may reach: released values are integers on the column's grid, checked
#: exactly in int64 with coefficients (-1, 2, -1) (4 * 2^60 < 2^63)
MAX_MAGNITUDE = 2.0 ** 60
# Segments sharing one random generator (and prepared by one task); fixed so a seed gives the same
# release whatever n_jobs is.  The walk itself runs all batches fused (see random_walks).
SEGMENTS_PER_BATCH = 128


@dataclass(frozen=True)
class ColumnRelease:
    """What :func:`release_column` produced for one column."""

    values: np.ndarray          # released values, NaN where the source is NULL
    bounds: tuple               # (lower, upper) the walk stayed in
    decimals: int | None        # the grid 10**-decimals the values lie on (None: plain floats)
    localities: Localities      # the sampled localities, as row ids of the column
    slack: np.ndarray           # per sampled locality, the delta it is kept within
    n_extracted: int            # localities found by the pruned extraction, before sampling
    preserved_fraction: float   # of the sampled localities, on the released values
    strict_preserved_fraction: float   # the same kept exactly (no slack): what a reader sees


class PatternPreservingRelease:
    """Pattern-preserving release of numeric columns (localities + random walk).

    Parameters
    ----------
    segment : int >= 3, size of the sorted segments localities are extracted from.
    sample : float in (0, 1], fraction rho of the extracted localities kept as constraints.
    iterations : int >= 1, random-walk steps per segment.
    delta : float > 0, the paper's slack of a locality, in units of ``max(grid step, mean gap
        between the sorted values of the segment)`` (the published slack adds 2 grid steps).
    bounds : None, a sequence with one ``(low, high)`` or ``None`` per column, or (DataFrame input)
        a mapping column name -> ``(low, high)``.  Default: the column's observed range.
    seed : None or int >= 0.  ``None`` draws a fresh seed, recorded in ``seed_``.
    n_jobs : int >= 1, threads preparing batches of segments and walking parts of the fused
        walk in parallel (the release does not depend on it).

    Attributes (after ``fit``)
    ----------
    released_ : ndarray (n_rows, n_columns), NaN where the source is NULL.
    decimals_ : list, per column the decimal grid of the released values (0 = integers).
    localities_ : list of :class:`Localities` (row ids), the sampled constraints per column.
    slack_ : list of arrays, per column and sampled locality the delta it holds within.
    n_extracted_, n_sampled_ : lists of counts per column.
    preserved_fraction_ : ndarray, per column (1.0 for a correct release): each locality within
        its slack (delta mean gaps).
    strict_preserved_fraction_ : ndarray, per column: the sampled localities that hold exactly
        (no slack) on the released values.
    bounds_ : list of (low, high) per column.  columns_ : column names.  seed_ : the seed used.
    """

    def __init__(self, segment=100, sample=0.3, iterations=4000, bounds=None, seed=None,
                 n_jobs=1, delta=16.0):
        self.delta = delta
        self.segment = segment
        self.sample = sample
        self.iterations = iterations
        self.bounds = bounds
        self.seed = seed
        self.n_jobs = n_jobs

    def fit(self, X):
        self.check_parameters()
        matrix, columns = _as_numeric_matrix(X)
        bounds = _resolve_bounds(self.bounds, matrix, columns)
        self.seed_ = _draw_seed() if self.seed is None else int(self.seed)
        plans = [_plan_column(matrix[:, c], *bounds[c], segment=self.segment,
                              sample=self.sample, iterations=self.iterations,
                              delta=float(self.delta), seed=(self.seed_, c), name=columns[c])
                 for c in range(matrix.shape[1])]
        # every batch of every column walks in one fused walk (batches of the same scan period
        # stacked): threads stay busy across columns
        outcomes = _run_tasks([task for plan in plans for task in plan.tasks], self.iterations,
                              self.n_jobs)
        results, used = [], 0
        for plan in plans:
            results.append(plan.assemble(outcomes[used:used + len(plan.tasks)]))
            used += len(plan.tasks)
        self.columns_ = columns
        self.bounds_ = [r.bounds for r in results]
        self.released_ = np.column_stack([r.values for r in results])
        self.decimals_ = [r.decimals for r in results]
        self.localities_ = [r.localities for r in results]
        self.slack_ = [r.slack for r in results]
        self.n_extracted_ = [r.n_extracted for r in results]
        self.n_sampled_ = [len(r.localities) for r in results]
        self.preserved_fraction_ = np.array([r.preserved_fraction for r in results])
        self.strict_preserved_fraction_ = np.array([r.strict_preserved_fraction for r in results])
        return self

    def fit_transform(self, X):
        """Fit, then return the released values (a DataFrame for DataFrame input)."""
        released = self.fit(X).released_
        if isinstance(X, pd.DataFrame):
            return pd.DataFrame(released, index=X.index, columns=self.columns_)
        return released

    def check_parameters(self):
        """Raise :class:`InvalidParameter` for a parameter outside its domain; return self."""
        _check_int("segment", self.segment, minimum=3,
                   hint="segments need at least 3 values to hold a locality; 100 is typical")
        _check_int("iterations", self.iterations, minimum=1,
                   hint="the paper walks 4000 steps per segment")
        _check_int("n_jobs", self.n_jobs, minimum=1, hint="use 1 to walk in this thread only")
        check_fraction(self.sample)
        if (isinstance(self.delta, bool) or not isinstance(self.delta, (int, float, np.integer,
                                                                         np.floating))
                or not np.isfinite(self.delta) or self.delta <= 0):
            raise InvalidParameter(f"delta must be a positive number, got {self.delta!r}",
                                   hint="delta => 1 lets each locality bend by one mean gap "
                                        "between sorted values; larger values move more")
        if self.seed is not None:
            _check_int("seed", self.seed, minimum=0, hint="pass a non-negative integer or NULL")
        return self


def release_column(values, lower=None, upper=None, *, segment, sample, iterations, seed,
                   n_jobs=1, name="column", delta=16.0):
    """Release one column (NaN = NULL).  ``seed``: anything ``np.random.default_rng`` takes as a
    list of integers -- batch ``g`` walks with ``default_rng([*seed, g])``."""
    plan = _plan_column(values, lower, upper, segment=segment, sample=sample,
                        iterations=iterations, seed=seed, name=name, delta=delta)
    return plan.assemble(_run_tasks(plan.tasks, iterations, n_jobs))


@dataclass(frozen=True)
class _ColumnPlan:
    n_rows: int
    rows: np.ndarray
    bounds: tuple
    decimals: int
    tasks: list                 # callables preparing one batch of segments each

    def assemble(self, outcomes):
        return _assemble(self.n_rows, self.rows, outcomes, self.bounds, self.decimals)


def _run_tasks(tasks, iterations, n_jobs):
    """Prepare every batch, walk them all (fused, see :func:`random_walks`), round them."""
    if n_jobs > 1 and len(tasks) > 1:
        with ThreadPoolExecutor(max_workers=n_jobs) as pool:
            prepared = list(pool.map(lambda task: task(), tasks))
            ends = random_walks([p.walk for p in prepared], iterations, n_jobs=n_jobs,
                                executor=pool)
    else:
        prepared = [task() for task in tasks]
        ends = random_walks([p.walk for p in prepared], iterations)
    return [p.finish(end) for p, end in zip(prepared, ends)]


def _plan_column(values, lower, upper, *, segment, sample, iterations, seed, name, delta):
    values = np.asarray(values, dtype=np.float64)
    rows = np.flatnonzero(~np.isnan(values))
    input_decimals = _grid_decimals(values[rows])
    present = np.round(values[rows], input_decimals)
    lower, upper = _column_bounds(present, lower, upper, name)
    decimals = min(input_decimals, _output_decimals_cap(lower, upper))
    order = np.argsort(present, kind="stable")
    segments = np.array_split(order, max(1, order.size // segment))
    # batches of equal size (at most SEGMENTS_PER_BATCH segments), fixed by the data alone so a
    # seed gives the same release whatever n_jobs is
    n_batches = -(-len(segments) // SEGMENTS_PER_BATCH)
    cuts = np.linspace(0, len(segments), n_batches + 1).round().astype(int)
    batches = [segments[cuts[g]:cuts[g + 1]] for g in range(n_batches)]
    seed = [int(part) for part in np.atleast_1d(seed)]
    scale = 10.0 ** decimals
    context = _BatchContext(present, math.ceil(lower * scale - 1e-9),
                            math.floor(upper * scale + 1e-9), decimals, sample, iterations,
                            float(delta), str(name))
    tasks = [functools.partial(context.prepare, batch, np.random.default_rng([*seed, index]))
             for index, batch in enumerate(batches)]
    return _ColumnPlan(values.size, rows, (lower, upper), decimals, tasks)


def _assemble(n_rows, rows, outcomes, bounds, decimals):
    released = np.full(n_rows, np.nan)
    for outcome in outcomes:
        released[rows[outcome.positions]] = outcome.values
    # row ids as int32 when they fit: a million-row column samples ~21 M localities
    ids = rows.astype(np.int32) if n_rows < 2 ** 31 else rows
    localities = Localities.concatenate(o.localities for o in outcomes).relabel(ids)
    return ColumnRelease(
        values=released, bounds=bounds, decimals=decimals, localities=localities,
        slack=np.concatenate([o.slack for o in outcomes]) if outcomes else np.empty(0),
        n_extracted=sum(o.n_extracted for o in outcomes),
        preserved_fraction=sum(o.n_holding for o in outcomes) / max(1, len(localities)),
        strict_preserved_fraction=preserved_fraction(released, localities, decimals))


@dataclass(frozen=True)
class _BatchOutcome:
    positions: np.ndarray       # indices into the column's non-NULL values
    values: np.ndarray          # their released values
    localities: Localities      # sampled, as indices into the non-NULL values
    slack: np.ndarray           # the published delta of each sampled locality
    n_extracted: int
    n_holding: int              # sampled localities that hold on the released values


@dataclass(frozen=True)
class _BatchContext:
    values: np.ndarray          # the column's non-NULL values (on their grid)
    low: int                    # bounds in grid units (10**-decimals)
    high: int
    decimals: int
    sample: float
    iterations: int
    delta: float                # delta factor
    name: str = "column"        # for errors

    def prepare(self, segments, rng):
        """Extract and sample the segments of one batch: the walk to run (in grid units, so the
        exact check after rounding is an integer one) and how to finish it."""
        scale = 10.0 ** self.decimals
        prepared = [self._prepare(positions, rng, scale) for positions in segments]
        A, blocks = _stack_constraints(prepared)
        start = np.clip(np.concatenate([p.start for p in prepared]), self.low, self.high)
        walk_slack = np.concatenate([np.full(len(p.sampled), p.delta) for p in prepared])
        walk = Walk(A, walk_slack, np.full(start.size, float(self.low)),
                    np.full(start.size, float(self.high)), start, rng, blocks)
        return _PreparedBatch(self, prepared, walk)

    def _prepare(self, positions, rng, scale):
        start = np.rint(self.values[positions] * scale)          # sorted: positions are
        extracted = extract_localities(start)
        mean_gap = (start[-1] - start[0]) / max(1, start.size - 1)
        return _Segment(positions, start, sample_localities(extracted, self.sample, rng),
                        len(extracted), self.delta * max(1.0, mean_gap))


@dataclass(frozen=True)
class _PreparedBatch:
    context: _BatchContext
    segments: list
    walk: Walk

    def finish(self, walked):
        """Round the walked values of the batch and check every locality exactly."""
        context, prepared, A = self.context, self.segments, self.walk.A
        scale = 10.0 ** context.decimals
        positions = np.concatenate([p.positions for p in prepared])
        # |rounding| <= 1/2 per value, row coefficients (-1, 2, -1): A z <= A x + 2
        z = np.clip(np.rint(walked), context.low, context.high).astype(np.int64)
        allowed = np.floor(self.walk.b + 2.0 + 1e-9).astype(np.int64)
        A_int = sparse.csr_matrix((A.data.astype(np.int64), A.indices, A.indptr), shape=A.shape)
        holding = int(np.sum(A_int @ z <= allowed))
        if holding != A.shape[0]:
            # the walk is in float64: beyond 2^53 grid units its values are no longer integers
            # exactly, and rounding them may break what the walk kept (checked exactly here)
            magnitude = max(abs(context.low), abs(context.high))
            raise InvalidParameter(
                f"column {context.name!r}: {A.shape[0] - holding} of {A.shape[0]} localities would "
                f"break when the perturbed values are rounded to the column's grid (10^-"
                f"{context.decimals}); its values reach {magnitude:.3g} grid units, and above "
                f"2^53 ({2.0 ** 53:.3g}) the walk cannot keep every locality exactly",
                hint="Release a rescaled column (a view dividing it by a power of ten) or a "
                     "smaller range; nothing was released.")
        sampled = Localities.concatenate(p.sampled.relabel(p.positions) for p in prepared)
        return _BatchOutcome(positions, z / scale, sampled, allowed / scale,
                             sum(p.n_extracted for p in prepared), holding)


@dataclass(frozen=True)
class _Segment:
    positions: np.ndarray
    start: np.ndarray           # D, in grid units
    sampled: Localities         # positions into this segment
    n_extracted: int
    delta: float                # the walk's slack, grid units


def _stack_constraints(segments):
    """The block-diagonal constraint matrix of a batch (one block per segment: its sampled
    locality rows) and the block layout the walk needs.  Stacked CSR by CSR (the blocks' arrays
    concatenated, column indices shifted): ``sparse.block_diag`` goes through COO and costs
    about 10 times more."""
    matrices = [sparse.csr_matrix(constraint_matrix(segment.sampled, segment.start.size))
                for segment in segments]
    row_sizes = [m.shape[0] for m in matrices]
    col_sizes = [m.shape[1] for m in matrices]
    row_starts = np.cumsum([0] + row_sizes[:-1])
    col_starts = np.cumsum([0] + col_sizes[:-1])
    nnz_starts = np.cumsum([0] + [m.nnz for m in matrices[:-1]])
    indptr = np.concatenate([[0]] + [m.indptr[1:] + nnz for m, nnz in zip(matrices, nnz_starts)])
    A = sparse.csr_matrix((np.concatenate([m.data for m in matrices]),
                           np.concatenate([m.indices + off for m, off in zip(matrices, col_starts)]),
                           indptr), shape=(sum(row_sizes), sum(col_sizes)))
    return A, Blocks(row_starts, col_starts)


def _output_decimals_cap(lower, upper):
    """Largest p with ``4 * max|value| * 10**p`` safely inside int64 (and at most 9)."""
    magnitude = max(abs(lower), abs(upper), 1.0)
    return int(max(0, min(MAX_DECIMALS, math.floor(math.log10(2.0 ** 60 / magnitude)))))


def _grid_decimals(values):
    """Smallest q <= 9 such that every value is a multiple of 10**-q (9 if none is)."""
    for q in range(MAX_DECIMALS + 1):
        scaled = values * 10.0 ** q
        # a value on the grid is off an integer by float rounding only (a few ulps of scaled)
        slack = np.maximum(1e-6, 8 * np.finfo(np.float64).eps * np.abs(scaled))
        if np.all(np.abs(scaled - np.rint(scaled)) <= slack):
            return q
    return MAX_DECIMALS


def _column_bounds(present, lower, upper, name):
    if present.size == 0:
        return column_bounds(name, 0, None, None, lower, upper)
    return column_bounds(name, present.size, float(present.min()), float(present.max()),
                         lower, upper)


def column_bounds(name, count, observed_low, observed_high, lower=None, upper=None):
    """The walk's bounds for a column with ``count`` non-NULL values in
    ``[observed_low, observed_high]``: the given ones (checked to contain the data) or the observed
    range.  Raises for a column there is nothing to release from (also usable on SQL aggregates,
    before any value is read)."""
    if count < 3:
        raise InsufficientData(f"column {name!r} has {count} non-NULL values; a pattern "
                               "release needs at least 3", hint="choose a column with more data")
    if observed_low == observed_high:
        raise InsufficientData(f"column {name!r} is constant ({observed_low:g}): there is no "
                               "pattern to keep and no room to move",
                               hint="leave the column out of columns => ...")
    lower = observed_low if lower is None else float(lower)
    upper = observed_high if upper is None else float(upper)
    if max(abs(lower), abs(upper)) >= MAX_MAGNITUDE:
        raise InvalidParameter(
            f"column {name!r} reaches {max(abs(lower), abs(upper)):.3g} in magnitude; the pattern "
            f"release perturbs values below 2^60 ({MAX_MAGNITUDE:.3g}), where its exact integer "
            "checks cannot overflow",
            hint="Release a rescaled column (a view dividing it by a power of ten).")
    if not (np.isfinite(lower) and np.isfinite(upper)) or lower > observed_low \
            or upper < observed_high:
        raise InvalidParameter(
            f"bounds ({lower:g}, {upper:g}) of column {name!r} do not contain its values "
            f"({observed_low:g} .. {observed_high:g})",
            hint="give finite bounds with low <= the smallest and high >= the largest value")
    return lower, upper


def _resolve_bounds(bounds, matrix, columns):
    n_columns = matrix.shape[1]
    if bounds is None:
        return [(None, None)] * n_columns
    if isinstance(bounds, dict):
        unknown = set(bounds) - set(columns)
        if unknown:
            raise InvalidParameter(f"bounds name unknown columns {sorted(map(str, unknown))}",
                                   hint=f"use names among {list(columns)}")
        listed = [bounds.get(name) for name in columns]
    else:
        listed = list(bounds)
        if len(listed) != n_columns:
            raise InvalidParameter(f"bounds has {len(listed)} entries for {n_columns} columns",
                                   hint="give one (low, high) or None per column")
    resolved = []
    for name, pair in zip(columns, listed):
        if pair is None:
            resolved.append((None, None))
            continue
        try:
            low, high = pair
        except (TypeError, ValueError):
            raise InvalidParameter(f"bounds of {name!r} must be a (low, high) pair, got {pair!r}",
                                   hint="e.g. {'age': (1, 120)}") from None
        resolved.append((low, high))
    return resolved


def _as_numeric_matrix(X):
    """A float matrix (NaN = NULL) and the column names; non-numeric input is refused."""
    if isinstance(X, pd.DataFrame):
        columns = [str(c) for c in X.columns]
        for name in X.columns:
            dtype = X[name].dtype
            if pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype):
                raise UnsupportedType(f"column {name!r} has type {dtype}; a pattern release "
                                      "needs numbers", hint="release only numeric columns")
        matrix = X.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        array = np.asarray(X)
        if array.ndim == 1:
            array = array[:, None]
        if array.ndim != 2:
            raise InvalidParameter(f"expected a 2-D table, got shape {array.shape}",
                                   hint="pass rows x columns")
        if array.dtype.kind not in "iuf" and not (array.dtype.kind == "O"
                                                 and _all_numbers(array)):
            raise UnsupportedType(f"values of type {array.dtype} are not numeric",
                                  hint="release only numeric columns")
        matrix = np.array(array.tolist() if array.dtype.kind == "O" else array, dtype=np.float64)
        columns = [f"column_{c}" for c in range(matrix.shape[1])]
    if matrix.shape[1] == 0:
        raise InvalidParameter("no column to release", hint="name at least one numeric column")
    if np.isinf(matrix).any():
        raise InvalidParameter("infinite values cannot be released",
                               hint="replace them by NULL or finite values")
    return matrix, columns


def _all_numbers(array):
    return all(v is None or (isinstance(v, (int, float, np.integer, np.floating))
                             and not isinstance(v, bool)) for v in array.ravel())


def _check_int(name, value, *, minimum, hint):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidParameter(f"{name} must be an integer, got {value!r}", hint=hint)
    if value < minimum:
        raise InvalidParameter(f"{name} must be at least {minimum}, got {value}", hint=hint)


def _draw_seed():
    return int(np.random.SeedSequence().entropy % (2 ** 63))
