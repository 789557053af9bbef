"""Random walk (coordinate hit-and-run) inside the polytope ``{x : A x <= b, lower <= x <= upper}``
(the pattern-preserving paper, section 4).

Each step picks a direction, computes the feasible interval ``[t_lo, t_hi]`` of ``x + t u`` and
moves to a uniform point of it.  The paper derives the interval through slack variables
``v = b - A x >= 0``; so do we: along ``u`` the slack changes by ``-t (A u)``, hence
``t * (A u)_r <= v_r`` for every row.  Bounds are handled the same way with the slacks
``upper - x`` and ``x - lower``.

Direction: a coordinate axis ``e_c``, scanned systematically (coordinate hit-and-run, whose
stationary law is also the uniform distribution on the polytope).  ``A e_c`` is column ``c`` of ``A``: a
step costs the few rows that contain ``x_c`` instead of the whole matrix, which is what makes
the paper's 4000 steps per segment affordable on a whole table (a random-direction step reads
every row of the segment, ~100 times more).

Two implementations of the same chain (same scan, same random draws): a generic one for any
sparse ``A`` (it keeps the slack vector ``b - A x`` up to date), and the one the release uses
when every row is a locality ``s (2 x_j - x_i - x_k) <= delta`` with one ``delta`` per block
(:class:`_LocalityWalker`): there the interval of the moved value ``y`` is read straight off the
row's two other values (``y <= (x_i + x_k + delta) / 2`` for a middle with ``s = +1``, ...), so a
step gathers two ``int32`` indices per row and keeps no slack to scatter back -- a quarter of
the memory traffic, which is what bounds the walk's speed.

Several independent walks run at once on a block-diagonal ``A`` (:class:`Blocks`): at every step
each block moves one of its own coordinates by its own step length; ``iterations`` counts steps
per block.  :func:`random_walks` goes one further and stacks whole walks (each with its own
generator) into one, so a Python-level step advances all of them -- same chain, same draws.
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


def random_walk(A, b, lower, upper, start, iterations, rng, *, blocks=None, offset=0):
    """Walk ``iterations`` steps (per block) from ``start``; return the end point.  ``offset``:
    the scan position of the first step (to continue a walk step by step).

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
    walker = _LocalityWalker.of(A, b, lower, upper, x, blocks, offset)
    if walker is not None:
        for step in range(int(iterations)):
            walker.step(rng.random(walker.size_at(step)), step)
    else:
        walker = _Walker(sparse.csc_matrix(A), b, lower, upper, x, blocks, offset)
        for step in range(int(iterations)):
            if step % _RESYNC_EVERY == 0:
                walker.resync()
            walker.step(rng, step)
    violation = polytope_violation(A, b, lower, upper, walker.x)
    if violation > tolerance:
        raise RuntimeError(f"random walk left the polytope by {violation:g}")
    return walker.x


def _tolerance(lower, upper, b):
    scale = max(float(np.max(np.abs(upper), initial=0.0)),
                float(np.max(np.abs(lower), initial=0.0)),
                float(np.max(np.abs(b), initial=0.0)), 1.0)
    return 1e-9 * scale


@dataclass(frozen=True)
class _Side:
    """Entries of one sign of the columns moved at one scan position: ``t * coef <= slack``
    bounds ``t`` from above (positive coefficients) or below (negative ones)."""

    rows: np.ndarray            # constraint rows, grouped by moved column
    coef: np.ndarray
    inverse: np.ndarray         # 1 / coef
    owner: np.ndarray           # index of the moved column (into the position's columns)
    offsets: np.ndarray         # start of each group, for reduceat
    has: np.ndarray             # moved columns having at least one entry of this sign


@dataclass(frozen=True)
class _Position:
    columns: np.ndarray         # coordinate ``position`` of every block long enough
    sides: tuple


def _scan_plan(A_csc, col_starts, col_sizes):
    """Per scan position ``p``: the coordinates ``col_starts + p`` and their entries of ``A`` by
    sign -- a reordering of ``A``'s columns, built once, so a step gathers nothing but slacks."""
    n_cols = A_csc.shape[1]
    position = np.arange(n_cols) - np.repeat(col_starts, col_sizes)
    column = np.repeat(np.arange(n_cols), np.diff(A_csc.indptr))
    sign = np.where(A_csc.data > 0, 0, np.where(A_csc.data < 0, 1, 2))
    order = np.lexsort((column, sign, position[column]))
    key = position[column][order] * 3 + sign[order]
    plan = []
    for p in range(int(col_sizes.max())):
        columns = np.flatnonzero(position == p)
        sides = []
        for which in (0, 1):
            lo = np.searchsorted(key, p * 3 + which, side="left")
            hi = np.searchsorted(key, p * 3 + which, side="right")
            picked = order[lo:hi]
            owner = np.searchsorted(columns, column[picked])
            starts = np.flatnonzero(np.diff(owner, prepend=-1)) if owner.size else owner
            coef = A_csc.data[picked]
            sides.append(_Side(A_csc.indices[picked], coef, 1.0 / coef, owner, starts,
                               owner[starts]))
        plan.append(_Position(columns, tuple(sides)))
    return plan


class _Walker:
    """State of the walk: the point, the constraint slack and the scan plan of ``A``.

    Systematic scan: step ``s`` moves coordinate ``s mod max_size`` of every block (blocks
    shorter than that rest), so ``iterations`` steps move each value ``iterations / size``
    times.  Each coordinate update is a hit-and-run step along an axis, which leaves the
    uniform distribution on the polytope invariant, and so does their composition."""

    def __init__(self, A_csc, b, lower, upper, x, blocks, offset=0):
        self.A = A_csc
        self.b, self.lower, self.upper, self.x = b, lower, upper, x
        col_starts = np.asarray(blocks.col_starts, dtype=np.int64)
        col_sizes = blocks.col_sizes(x.size)
        if np.any(col_sizes <= 0):
            raise ValueError("every block needs at least one coordinate")
        self.plan = _scan_plan(A_csc, col_starts, col_sizes)
        self.offset = int(offset)
        self.slack = np.empty(A_csc.shape[0])

    def resync(self):
        np.subtract(self.b, self.A @ self.x, out=self.slack)
        np.maximum(self.slack, 0.0, out=self.slack)

    def step(self, rng, step):
        at = self.plan[(self.offset + step) % len(self.plan)]
        c = at.columns
        x_c = self.x[c]
        t_hi = self.upper[c] - x_c                     # bounds: lower <= x_c + t <= upper
        t_lo = self.lower[c] - x_c
        positive, negative = at.sides
        slacks = []
        for side, limit, reduce in ((positive, t_hi, np.minimum), (negative, t_lo, np.maximum)):
            slack = self.slack[side.rows]
            slacks.append(slack)
            if side.rows.size:
                limit[side.has] = reduce(limit[side.has],
                                         reduce.reduceat(slack * side.inverse, side.offsets))
        t_hi = np.maximum(t_hi, 0.0) * (1.0 - _STEP_SHRINK)
        t_lo = np.minimum(t_lo, 0.0) * (1.0 - _STEP_SHRINK)
        t = t_lo + (t_hi - t_lo) * rng.random(c.size)
        self.x[c] = x_c + t
        for side, slack in zip(at.sides, slacks):
            if side.rows.size:
                # a row holds one coordinate once and belongs to one block: no repeated index.
                # Rounding can push a slack a hair below 0; 0 then blocks moves outwards.
                self.slack[side.rows] = np.maximum(slack - t[side.owner] * side.coef, 0.0)


class _LocalityWalker:
    """The walk when every row of ``A`` is a locality ``s (2 x_j - x_i - x_k) <= delta_g``
    (coefficients ``(-s, 2 s, -s)`` on ``i < j < k`` of one block ``g``, ``s = +-1``) with one
    ``delta`` per block.  For the moved value ``y = x_c + t`` each row containing ``c`` is a bound
    read off its two other values ``p, q``:

    * ``c`` middle, ``s = +1``:  ``2 y <= x_i + x_k + delta``      (upper, "mid")
    * ``c`` middle, ``s = -1``:  ``2 y >= x_i + x_k - delta``      (lower, "mid")
    * ``c`` an end, ``s = -1``:  ``y <= 2 x_j - x_other + delta``  (upper, "end")
    * ``c`` an end, ``s = +1``:  ``y >= 2 x_j - x_other - delta``  (lower, "end")

    Per scan position the entries are stored by kind, grouped by moved coordinate: a step is
    ``take`` + ``take`` + ``reduceat`` per kind over all blocks at once."""

    KINDS = (("mid", "upper"), ("mid", "lower"), ("end", "upper"), ("end", "lower"))

    def __init__(self, plan, lower, upper, x, offset):
        self.plan, self.lower, self.upper, self.x = plan, lower, upper, x
        self.offset = int(offset)

    @classmethod
    def of(cls, A, b, lower, upper, x, blocks, offset=0):
        """The walker, or None when ``A``/``b`` are not of that form (the generic one walks)."""
        layout = cls.layout(A, b, blocks)
        if layout is None:
            return None
        index, sign, col_starts, col_sizes, column_delta = layout
        return cls(_locality_plan(index, sign, col_starts, col_sizes, column_delta),
                   lower, upper, x, offset)

    @staticmethod
    def layout(A, b, blocks):
        """``A``'s rows as (indices, sign) and the blocks' layout, or None when ``A``/``b`` are
        not locality rows with one delta per block."""
        A = sparse.csr_matrix(A, copy=True)
        A.sort_indices()
        b = np.asarray(b, dtype=np.float64)
        n_rows, n_cols = A.shape
        if n_rows == 0 or A.nnz != 3 * n_rows or np.any(np.diff(A.indptr) != 3):
            return None
        data = A.data.reshape(n_rows, 3)
        sign = data[:, 1] / 2.0
        if not (np.all(np.abs(sign) == 1.0) and np.all(data[:, 0] == -sign)
                and np.all(data[:, 2] == -sign)):
            return None
        col_starts = np.asarray(blocks.col_starts, dtype=np.int64)
        col_sizes = blocks.col_sizes(n_cols)
        row_starts = np.asarray(blocks.row_starts, dtype=np.int64)
        row_sizes = blocks.row_sizes(n_rows)
        if np.any(col_sizes <= 0) or np.any(row_sizes < 0):
            return None
        block_delta = np.where(row_sizes > 0, b[np.minimum(row_starts, n_rows - 1)], 0.0)
        if not np.array_equal(np.repeat(block_delta, row_sizes), b):
            return None
        index = A.indices.reshape(n_rows, 3).astype(np.int64)
        row_block = np.repeat(np.arange(len(blocks)), row_sizes)
        col_block = np.repeat(np.arange(len(blocks)), col_sizes)
        if np.any(col_block[index] != row_block[:, None]):
            return None                                 # a row reaching into another block
        return index, sign, col_starts, col_sizes, block_delta[col_block]

    def size_at(self, step):
        """How many coordinates step ``step`` moves (= the uniforms it consumes)."""
        return self.plan[(self.offset + step) % len(self.plan)].columns.size

    def step(self, uniforms, step):
        """One step; ``uniforms``: one draw in [0, 1) per coordinate moved, in column order."""
        at = self.plan[(self.offset + step) % len(self.plan)]
        c = at.columns
        x = self.x
        # ndarray.take, not x[index]: fancy indexing with int32 indices is about twice as slow
        x_c = x.take(c)
        y_hi = self.upper.take(c)
        y_lo = self.lower.take(c)
        for kind in at.kinds:
            gathered = x.take(kind.p)
            if kind.middle:
                gathered += x.take(kind.q)            # x_i + x_k
            else:
                gathered *= 2.0
                gathered -= x.take(kind.q)            # 2 x_j - x_other
            if kind.upper:
                bound = np.minimum.reduceat(gathered, kind.starts)
                bound += kind.delta
                if kind.middle:
                    bound *= 0.5
                y_hi[kind.owner] = np.minimum(y_hi.take(kind.owner), bound)
            else:
                bound = np.maximum.reduceat(gathered, kind.starts)
                bound -= kind.delta
                if kind.middle:
                    bound *= 0.5
                y_lo[kind.owner] = np.maximum(y_lo.take(kind.owner), bound)
        x[c] = _move(x_c, y_lo, y_hi, uniforms)


def _move(x_c, y_lo, y_hi, uniforms):
    """``x_c`` moved to a uniform point of ``[y_lo, y_hi]`` (the feasible interval)."""
    # the current point is inside: a bound a hair on its wrong side is rounding, 0 then
    # blocks the move that way
    t_hi = np.maximum(y_hi - x_c, 0.0) * (1.0 - _STEP_SHRINK)
    t_lo = np.minimum(y_lo - x_c, 0.0) * (1.0 - _STEP_SHRINK)
    t = t_lo + (t_hi - t_lo) * uniforms
    return x_c + t


@dataclass(frozen=True)
class Walk:
    """One :func:`random_walk` to run among others in :func:`random_walks`."""

    A: object
    b: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    start: np.ndarray
    rng: np.random.Generator
    blocks: Blocks


def random_walks(walks, iterations, *, n_jobs=1, executor=None):
    """The end points of ``random_walk(w.A, w.b, w.lower, w.upper, w.start, iterations, w.rng,
    blocks=w.blocks)`` for every walk ``w`` -- the same chain with the same draws, hence the same
    end points, bit for bit -- but fused: walks whose scans have the same period (their longest
    block) are stacked into one block-diagonal walk, so one Python-level step advances all of
    them (per-call overhead amortized over larger arrays, which also release the GIL long enough
    for ``n_jobs`` threads to overlap).

    Each walk still draws from its own generator, in its own order: over one scan period a walk
    moves each of its coordinates once, so its draws for the period are one ``rng.random(n)``,
    permuted once into the fused step order (``Generator.random`` yields the same stream whether
    asked for ``n`` numbers at once or in pieces).  Walks that are not locality polytopes (see
    :class:`_LocalityWalker`) walk one by one through :func:`random_walk`.
    """
    walks = list(walks)
    run = executor.map if executor is not None else map
    plans = list(run(_plan_of, walks))
    ends = [None] * len(walks)
    groups = {}
    for index, (w, plan) in enumerate(zip(walks, plans)):
        if plan is None:
            ends[index] = random_walk(w.A, w.b, w.lower, w.upper, w.start, iterations, w.rng,
                                      blocks=w.blocks)
        else:
            groups.setdefault(len(plan), []).append(index)
    pieces = _balance(list(groups.values()), walks, n_jobs)
    results = list(run(lambda piece: _fused_walk([walks[i] for i in piece],
                                                 [plans[i] for i in piece], iterations),
                       pieces))
    for piece, piece_ends in zip(pieces, results):
        for index, end in zip(piece, piece_ends):
            ends[index] = end
    return ends


def _plan_of(walk):
    """The walk's locality scan plan, or None when it needs the generic walker."""
    layout = _LocalityWalker.layout(walk.A, walk.b, walk.blocks)
    return None if layout is None else _locality_plan(*layout)


def _balance(groups, walks, n_jobs):
    """Split the largest groups (by coordinates) in halves until there are ``n_jobs`` pieces."""
    def weight(piece):
        return sum(np.asarray(walks[i].start).size for i in piece)
    pieces = [g for g in groups if g]
    while len(pieces) < n_jobs:
        largest = max(range(len(pieces)), key=lambda i: weight(pieces[i]), default=None)
        if largest is None or len(pieces[largest]) < 2:
            break
        piece = pieces.pop(largest)
        half = len(piece) // 2
        pieces += [piece[:half], piece[half:]]
    return pieces


def _fuse_plans(plans, sizes):
    """One scan plan for walks of the same period laid end to end (coordinates of walk g shifted
    by the sizes of the walks before it): per position, the walks' columns and entries in walk
    order -- what :func:`_locality_plan` gives for their block-diagonal stack, built piecewise so
    each piece stays in cache."""
    col_offsets = np.cumsum([0] + list(sizes[:-1]))
    idx_type = np.int32 if sum(sizes) < 2 ** 31 else np.int64
    fused = []
    for at in range(len(plans[0])):
        positions = [plan[at] for plan in plans]
        widths = np.cumsum([0] + [pos.columns.size for pos in positions[:-1]])
        columns = np.concatenate([pos.columns + off for pos, off in zip(positions, col_offsets)])
        kinds = []
        for role, side in _LocalityWalker.KINDS:
            middle, upper = role == "mid", side == "upper"
            parts = [(kind, off, width) for pos, off, width in zip(positions, col_offsets, widths)
                     for kind in pos.kinds if kind.middle == middle and kind.upper == upper]
            if not parts:
                continue
            entries = np.cumsum([0] + [kind.p.size for kind, _, _ in parts[:-1]])
            kinds.append(_Kind(
                middle, upper,
                np.concatenate([kind.p + off for kind, off, _ in parts]).astype(idx_type),
                np.concatenate([kind.q + off for kind, off, _ in parts]).astype(idx_type),
                np.concatenate([kind.starts + e for (kind, _, _), e in zip(parts, entries)]),
                np.concatenate([kind.owner + width for kind, _, width in parts]),
                np.concatenate([kind.delta for kind, _, _ in parts])))
        fused.append(_LocalityPosition(columns, tuple(kinds)))
    return fused


def _fused_walk(walks, plans, iterations):
    starts = [np.array(w.start, dtype=np.float64) for w in walks]
    checks = []
    for w, start in zip(walks, starts):
        b = np.asarray(w.b, dtype=np.float64)
        lower = np.asarray(w.lower, dtype=np.float64)
        upper = np.asarray(w.upper, dtype=np.float64)
        checks.append((w.A, b, lower, upper, _tolerance(lower, upper, b)))
        if polytope_violation(w.A, b, lower, upper, start) > checks[-1][-1]:
            raise ValueError("the random walk must start inside the polytope")
    sizes = [start.size for start in starts]
    col_offsets = np.cumsum([0] + sizes[:-1])
    x = np.concatenate(starts)
    walker = _LocalityWalker(_fuse_plans(plans, sizes), np.concatenate([c[2] for c in checks]),
                             np.concatenate([c[3] for c in checks]), x, 0)
    period = len(walker.plan)
    # the fused step moves the coordinates of every walk at its scan position, walk after walk;
    # walk g's draws for one period are its coordinates ordered by (position, index)
    walk_of = np.repeat(np.arange(len(walks)), sizes)
    position = np.empty(x.size, dtype=np.intp)
    for at, pos in enumerate(walker.plan):
        position[pos.columns] = at
    coordinate = np.arange(x.size)
    draw = np.empty(x.size, dtype=np.intp)
    draw[np.lexsort((coordinate, position, walk_of))] = coordinate
    permutation = draw[np.concatenate([pos.columns for pos in walker.plan])]
    bounds = np.cumsum([0] + [pos.columns.size for pos in walker.plan])
    # draws of walk g in the first r steps of a period: its coordinates at positions < r
    prefix = np.zeros((len(walks), period + 1), dtype=np.intp)
    np.add.at(prefix, (walk_of, position + 1), 1)
    prefix = np.cumsum(prefix, axis=1)
    buffer = np.zeros(x.size)
    offsets = np.append(col_offsets, x.size)
    iterations = int(iterations)
    for first in range(0, iterations, period):
        steps = min(period, iterations - first)
        for g, w in enumerate(walks):
            w.rng.random(out=buffer[offsets[g]:offsets[g] + prefix[g, steps]])
        uniforms = buffer[permutation]
        for s in range(steps):
            walker.step(uniforms[bounds[s]:bounds[s + 1]], first + s)
    ends = np.split(walker.x, col_offsets[1:])
    for (A, b, lower, upper, tolerance), end in zip(checks, ends):
        violation = polytope_violation(A, b, lower, upper, end)
        if violation > tolerance:
            raise RuntimeError(f"random walk left the polytope by {violation:g}")
    return ends


@dataclass(frozen=True)
class _Kind:
    middle: bool
    upper: bool
    p: np.ndarray               # int32: x_i (mid) or x_j (end)
    q: np.ndarray               # int32: x_k (mid) or the other end (end)
    starts: np.ndarray          # start of each moved coordinate's group, for reduceat
    owner: np.ndarray           # that coordinate, as an index into the position's columns
    delta: np.ndarray           # its block's delta


@dataclass(frozen=True)
class _LocalityPosition:
    columns: np.ndarray
    kinds: tuple


def _locality_plan(index, sign, col_starts, col_sizes, column_delta):
    i, j, k = index[:, 0], index[:, 1], index[:, 2]
    plus = sign > 0
    # entries (moved coordinate, p, q, kind), in row order -- rows are ordered by block, and a
    # block has one coordinate per position, so once sorted (stably) by (position, kind) the
    # entries of one moved coordinate are contiguous: no sort by coordinate is needed
    moved = np.concatenate([j, np.column_stack([i, k]).ravel()])
    p = np.concatenate([i, np.repeat(j, 2)])
    q = np.concatenate([k, np.column_stack([k, i]).ravel()])
    kind = np.concatenate([np.where(plus, 0, 1), np.repeat(np.where(plus, 3, 2), 2)])
    n_cols = column_delta.size
    position = np.arange(n_cols) - np.repeat(col_starts, col_sizes)
    n_positions = int(col_sizes.max())
    key = position[moved] * 4 + kind
    # 16-bit keys sort by radix in linear time
    order = np.argsort(key.astype(np.uint16) if 4 * n_positions <= 2 ** 16 else key,
                       kind="stable")
    key, moved, p, q = key[order], moved[order], p[order], q[order]
    cuts = np.searchsorted(key, np.arange(4 * n_positions + 1))
    idx_type = np.int32 if n_cols < 2 ** 31 else np.int64
    plan = []
    for at in range(n_positions):
        columns = np.flatnonzero(position == at)
        kinds = []
        for code, (role, side) in enumerate(_LocalityWalker.KINDS):
            lo, hi = cuts[4 * at + code], cuts[4 * at + code + 1]
            if lo == hi:
                continue
            mine = moved[lo:hi]
            starts = np.flatnonzero(np.diff(mine, prepend=-1))
            group = mine[starts]
            kinds.append(_Kind(role == "mid", side == "upper", p[lo:hi].astype(idx_type),
                               q[lo:hi].astype(idx_type), starts,
                               np.searchsorted(columns, group), column_delta[group]))
        plan.append(_LocalityPosition(columns, tuple(kinds)))
    return plan
