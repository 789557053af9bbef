"""Random walk (hit-and-run) inside the polytope ``{x : A x <= b, lower <= x <= upper}`` (paper 002,
section 4).

Each step draws a random direction ``u``, computes the feasible interval ``[t_lo, t_hi]`` of
``x + t u`` and moves to a uniform point of it.  The paper derives the interval through slack
variables ``v = b - A x >= 0``; so do we: along ``u`` the slack changes by ``-t (A u)``, hence
``t * (A u)_r <= v_r`` for every row -- one matrix-vector product ``A u`` per step, the rest is
elementwise numpy.  Bounds are handled the same way with the slacks ``upper - x`` and ``x - lower``.

Several independent walks can run at once on a block-diagonal ``A`` (:class:`Blocks`): each block
draws its own step length from its own interval, which is how the release driver walks many
segments in one vectorized loop.  The direction is a standard normal vector: its normalization
does not matter, because ``t`` is drawn on the chord whatever the length of ``u``.
"""

from dataclasses import dataclass

import numpy as np

# Steps are shrunk by this relative amount so float rounding never lands exactly on a facet.
_STEP_SHRINK = 1e-9
# The incrementally updated slack drifts by rounding; recompute it from x this often.
_RESYNC_EVERY = 64


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
    """Walk ``iterations`` hit-and-run steps from ``start``; return the end point.

    ``start`` must lie in the polytope.  The end point is checked against every constraint before
    it is returned (a violation beyond float rounding is a bug and raises ``RuntimeError``).
    """
    b = np.asarray(b, dtype=np.float64)
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    x = np.array(start, dtype=np.float64)
    blocks = Blocks.single() if blocks is None else blocks
    tolerance = _tolerance(lower, upper)
    if polytope_violation(A, b, lower, upper, x) > tolerance:
        raise ValueError("the random walk must start inside the polytope")
    walker = _Walker(A, b, lower, upper, x, blocks)
    for step in range(int(iterations)):
        if step % _RESYNC_EVERY == 0:
            walker.resync()
        walker.step(rng)
    violation = polytope_violation(A, b, lower, upper, walker.x)
    if violation > tolerance:
        raise RuntimeError(f"random walk left the polytope by {violation:g}")
    return walker.x


def _tolerance(lower, upper):
    scale = max(float(np.max(np.abs(upper), initial=0.0)),
                float(np.max(np.abs(lower), initial=0.0)), 1.0)
    return 1e-9 * scale


class _Walker:
    """State of the walk: the point, the constraint slack and reusable buffers."""

    def __init__(self, A, b, lower, upper, x, blocks):
        self.A = A.tocsr()
        self.b, self.lower, self.upper, self.x = b, lower, upper, x
        n_rows, n_cols = self.A.shape
        self.row_starts = blocks.row_starts
        self.col_starts = blocks.col_starts
        self.row_sizes = blocks.row_sizes(n_rows)
        self.col_sizes = blocks.col_sizes(n_cols)
        if np.any(self.col_sizes <= 0):
            raise ValueError("every block needs at least one coordinate")
        # q[r] = (A u)_r / slack_r; one trailing NaN lets reduceat handle blocks without rows
        self.q = np.full(n_rows + 1, np.nan)
        self.empty_row_block = self.row_sizes == 0
        self.slack = np.empty(n_rows)

    def resync(self):
        np.subtract(self.b, self.A @ self.x, out=self.slack)
        np.maximum(self.slack, 0.0, out=self.slack)

    def step(self, rng):
        u = rng.standard_normal(self.x.size)
        w = self.A @ u                                   # the one matrix-vector product
        q_max, q_min = self._constraint_ratios(w)
        bound_max, bound_min = self._bound_ratios(u)
        q_max = np.fmax(q_max, bound_max)                # largest  u-rate / slack  per block
        q_min = np.fmin(q_min, bound_min)                # most negative one
        with np.errstate(divide="ignore"):
            t_hi = np.where(q_max > 0, 1.0 / q_max, 0.0) * (1.0 - _STEP_SHRINK)
            t_lo = np.where(q_min < 0, 1.0 / q_min, 0.0) * (1.0 - _STEP_SHRINK)
        t = t_lo + (t_hi - t_lo) * rng.random(t_hi.size)
        self.x += np.repeat(t, self.col_sizes) * u
        self.slack -= np.repeat(t, self.row_sizes) * w
        # rounding can push a slack a hair below 0; 0 then blocks moves outwards, as it should
        np.maximum(self.slack, 0.0, out=self.slack)

    def _constraint_ratios(self, w):
        n_blocks = self.col_starts.size
        if self.slack.size == 0:
            nan = np.full(n_blocks, np.nan)
            return nan, nan
        q = self.q
        with np.errstate(divide="ignore", invalid="ignore"):
            np.divide(w, self.slack, out=q[:-1])         # 0/0 -> NaN, ignored by fmax/fmin
        q_max = np.fmax.reduceat(q, self.row_starts)
        q_min = np.fmin.reduceat(q, self.row_starts)
        q_max[self.empty_row_block] = np.nan
        q_min[self.empty_row_block] = np.nan
        return q_max, q_min

    def _bound_ratios(self, u):
        with np.errstate(divide="ignore", invalid="ignore"):
            # rows u t <= upper - x and -u t <= x - lower; a slack rounded below 0 counts as 0
            up = u / np.maximum(self.upper - self.x, 0.0)
            down = -u / np.maximum(self.x - self.lower, 0.0)
        both_max = np.fmax(up, down)
        both_min = np.fmin(up, down)
        return (np.fmax.reduceat(both_max, self.col_starts),
                np.fmin.reduceat(both_min, self.col_starts))
