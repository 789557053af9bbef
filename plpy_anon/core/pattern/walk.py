"""Random walk (coordinate hit-and-run) inside the polytope ``{x : A x <= b, lower <= x <= upper}``
(paper 002, section 4).

Each step picks a direction, computes the feasible interval ``[t_lo, t_hi]`` of ``x + t u`` and
moves to a uniform point of it.  The paper derives the interval through slack variables
``v = b - A x >= 0``; so do we: along ``u`` the slack changes by ``-t (A u)``, hence
``t * (A u)_r <= v_r`` for every row.  Bounds are handled the same way with the slacks
``upper - x`` and ``x - lower``.

Direction: a coordinate axis ``e_c`` drawn uniformly (coordinate hit-and-run, whose stationary
law is also the uniform distribution on the polytope).  ``A e_c`` is column ``c`` of ``A``: a
step costs the few rows that contain ``x_c`` instead of the whole matrix, which is what makes
the paper's 4000 steps per segment affordable on a whole table (a random-direction step reads
every row of the segment, ~100 times more).

Several independent walks run at once on a block-diagonal ``A`` (:class:`Blocks`): at every step
each block moves one of its own coordinates by its own step length; ``iterations`` counts steps
per block.
"""

from dataclasses import dataclass

import numpy as np
from scipy import sparse

# Steps are shrunk by this relative amount so float rounding never lands exactly on a facet.
_STEP_SHRINK = 1e-9
# The incrementally updated slack drifts by rounding; recompute it from x this often.
_RESYNC_EVERY = 256


@dataclass(frozen=True)
class Blocks:
    """Contiguous blocks: block ``g`` owns rows ``row_starts[g]:row_starts[g+1]`` and coordinates
    ``col_starts[g]:col_starts[g+1]`` (the last block runs to the end)."""

    row_starts: np.ndarray
    col_starts: np.ndarray

    @classmethod
    def single(cls):
        return cls(np.zeros(1, dtype=np.intp), np.zeros(1, dtype=np.intp))

    def __len__(self):
        return int(self.col_starts.size)

    def row_sizes(self, n_rows):
        return np.diff(np.append(self.row_starts, n_rows))

    def col_sizes(self, n_cols):
        return np.diff(np.append(self.col_starts, n_cols))


def polytope_violation(A, b, lower, upper, x):
    """The largest violation of ``A x <= b`` and of the bounds (<= 0 means x is inside)."""
    worst = [np.max(x - upper, initial=-np.inf), np.max(lower - x, initial=-np.inf)]
    if A.shape[0]:
        worst.append(np.max(A @ x - b))
    return float(max(worst))


def random_walk(A, b, lower, upper, start, iterations, rng, *, blocks=None):
    """Walk ``iterations`` steps (per block) from ``start``; return the end point.

    ``start`` must lie in the polytope.  The end point is checked against every constraint before
    it is returned (a violation beyond float rounding is a bug and raises ``RuntimeError``).
    """
    b = np.asarray(b, dtype=np.float64)
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    x = np.array(start, dtype=np.float64)
    blocks = Blocks.single() if blocks is None else blocks
    tolerance = _tolerance(lower, upper, b)
    if polytope_violation(A, b, lower, upper, x) > tolerance:
        raise ValueError("the random walk must start inside the polytope")
    walker = _Walker(sparse.csc_matrix(A), b, lower, upper, x, blocks)
    for step in range(int(iterations)):
        if step % _RESYNC_EVERY == 0:
            walker.resync()
        walker.step(rng)
    violation = polytope_violation(A, b, lower, upper, walker.x)
    if violation > tolerance:
        raise RuntimeError(f"random walk left the polytope by {violation:g}")
    return walker.x


def _tolerance(lower, upper, b):
    scale = max(float(np.max(np.abs(upper), initial=0.0)),
                float(np.max(np.abs(lower), initial=0.0)),
                float(np.max(np.abs(b), initial=0.0)), 1.0)
    return 1e-9 * scale


class _Walker:
    """State of the walk: the point, the constraint slack and the column layout of ``A``."""

    def __init__(self, A_csc, b, lower, upper, x, blocks):
        A_csc.sort_indices()
        self.A = A_csc
        self.b, self.lower, self.upper, self.x = b, lower, upper, x
        self.col_starts = np.asarray(blocks.col_starts, dtype=np.int64)
        self.col_sizes = blocks.col_sizes(x.size)
        if np.any(self.col_sizes <= 0):
            raise ValueError("every block needs at least one coordinate")
        self.indptr = A_csc.indptr.astype(np.int64)
        self.blocks = np.arange(self.col_starts.size)
        self.slack = np.empty(A_csc.shape[0])

    def resync(self):
        np.subtract(self.b, self.A @ self.x, out=self.slack)
        np.maximum(self.slack, 0.0, out=self.slack)

    def step(self, rng):
        n_blocks = self.col_starts.size
        c = self.col_starts + (rng.random(n_blocks) * self.col_sizes).astype(np.int64)
        begin = self.indptr[c]
        lengths = self.indptr[c + 1] - begin
        x_c = self.x[c]
        t_hi = self.upper[c] - x_c                     # bounds: lower <= x_c + t <= upper
        t_lo = self.lower[c] - x_c
        total = int(lengths.sum())
        if total:
            ends = np.cumsum(lengths)
            # entry e of block g: begin[g] + (e - first entry of g); grouped by block
            entry = np.arange(total) + np.repeat(begin - (ends - lengths), lengths)
            rows, coef = self.A.indices[entry], self.A.data[entry]
            slack = self.slack[rows]
            limit = slack / coef                        # t * coef <= slack (coef is never 0)
            has = lengths > 0
            offsets = (ends - lengths)[has]
            t_hi[has] = np.minimum(t_hi[has], np.minimum.reduceat(
                np.where(coef > 0, limit, np.inf), offsets))
            t_lo[has] = np.maximum(t_lo[has], np.maximum.reduceat(
                np.where(coef < 0, limit, -np.inf), offsets))
        t_hi = np.maximum(t_hi, 0.0) * (1.0 - _STEP_SHRINK)
        t_lo = np.minimum(t_lo, 0.0) * (1.0 - _STEP_SHRINK)
        t = t_lo + (t_hi - t_lo) * rng.random(n_blocks)
        self.x[c] = x_c + t
        if total:
            # a row holds one coordinate once and belongs to one block: no repeated index.
            # Rounding can push a slack a hair below 0; 0 then blocks moves outwards.
            self.slack[rows] = np.maximum(slack - np.repeat(t, lengths) * coef, 0.0)
