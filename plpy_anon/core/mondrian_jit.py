"""The Mondrian fit on compiled kernels (numba), with the partitions of the numpy fit.

:func:`partition` runs :meth:`Mondrian._partition <plpy_anon.core.mondrian.Mondrian._partition>`'s
work in :mod:`._mondrian_kernels` when :func:`kernels` can load them; the numpy fit in
:mod:`.mondrian` stays the oracle (``tests/unit/test_mondrian_compiled.py`` compares the labels)
and the fallback: without numba every fit runs on numpy, with one log line saying so.

Machine code is cached on disk (``@njit(cache=True)``) so that no fit pays for compilation: in
``plpy_anon/_jit_cache`` beside the installed package when that directory belongs to the
process's OS user (``make install`` creates it for the database's OS user and compiles the kernels
there once, :mod:`.mondrian_warm`), else where numba caches by default. numba recompiles on its own when the
kernels' source changes (its cache index records the source file's stamp). ``make install`` also
writes the fit's kernels there as one object file, which :func:`kernels` loads without importing
numba (:mod:`.kernel_objects`) when it is current.

Interrupts: the kernels return after about :data:`CHUNK_ROWS` row operations (milliseconds of
CPU); between two kernel calls (the sorts by code, then the partitioning) :func:`partition` calls
the model's ``check_interrupt`` (a callable, or None), the hook point where a caller raises to
cancel the fit.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import stat
import sys
from pathlib import Path

import numpy as np

from plpy_anon.core.interrupts import check as check_interrupts
from plpy_anon.core.stable_sort import stable_argsort

log = logging.getLogger("plpy_anon")

#: row operations per kernel call (a partition's decision counts its rows, a regrouping the
#: positions it moved: a large partition is moved in pieces)
CHUNK_ROWS = 1 << 20
CACHE_DIR = Path(__file__).resolve().parent.parent / "_jit_cache"

#: below this many rows, a process that has not loaded the kernels yet fits on numpy: such a fit
#: (~20 ms of CPU at 50,000 rows) costs less than loading the kernels' machine code (~0.04 s
#: from their object file, ~0.3 s through numba), which a fresh backend's first release would
#: otherwise pay
COMPILED_FROM_ROWS = 50_000

_kernels = None
_unavailable = False


def kernels_loaded() -> bool:
    """Whether this process has loaded the fit's kernels (:func:`kernels`)."""
    return _kernels is not None


def worth_loading(n_rows: int) -> bool:
    """Whether an ``engine="auto"`` fit of ``n_rows`` rows runs on the kernels: always once they
    are loaded in this process, else from :data:`COMPILED_FROM_ROWS` rows."""
    return _kernels is not None or n_rows >= COMPILED_FROM_ROWS


def _use_cache_dir():
    """Point numba's cache at :data:`CACHE_DIR` when this OS user owns it and everything in it
    and nobody else can write them (:func:`_owned_tree`): the cache holds machine code this
    process would run, and pickles its index."""
    if "NUMBA_CACHE_DIR" in os.environ or not _owned_tree(CACHE_DIR):
        return
    os.environ["NUMBA_CACHE_DIR"] = str(CACHE_DIR)
    if "numba" in sys.modules:           # imported before us: its config has read the environment
        sys.modules["numba"].config.CACHE_DIR = str(CACHE_DIR)


def _owned_tree(directory: Path) -> bool:
    """Whether ``directory``, its subdirectories and files (no symlink among them) belong to this
    OS user and nobody else can write them (~200 entries after make install: ~1 ms)."""
    uid = os.geteuid()
    try:
        st = directory.stat()
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
            return False
        for root, dirs, files in os.walk(directory, onerror=_raise):
            for name in dirs + files:
                st = os.lstat(os.path.join(root, name))
                if stat.S_ISLNK(st.st_mode) or st.st_uid != uid or st.st_mode & 0o022:
                    return False
    except OSError:
        return False
    return True


def _raise(error: OSError):
    raise error


#: whether :func:`kernels` may load the fit's machine code without numba (:mod:`.kernel_objects`);
#: the warm-up sets it False to fill numba's own cache
OBJECT_CODE = True
_numba_module = None
_objects_failed = False


def kernels():
    """The fit's kernels: loaded from :data:`CACHE_DIR`'s object file without numba where it is
    there and current (:mod:`.kernel_objects`), else the numba-compiled module; None when numba
    cannot be imported either (logged once)."""
    global _kernels
    if _kernels is None and not _unavailable:
        _use_cache_dir()
        _kernels = _object_kernels() or numba_kernels()
    return _kernels


def _object_kernels():
    """The fit's kernels from their object file, or None (missing, stale, not this OS user's, or
    llvmlite not loadable: logged once, then numba loads them)."""
    global _objects_failed
    if not OBJECT_CODE or _objects_failed:
        return None
    from plpy_anon.core import kernel_objects

    source = Path(__file__).resolve().parent / "_mondrian_kernels.py"
    try:
        return kernel_objects.load("plpy_anon.core._mondrian_kernels", source, CACHE_DIR,
                                   numba_kernels)
    except (ImportError, OSError, ValueError, KeyError, TypeError, AttributeError,
            RuntimeError) as exc:
        _objects_failed = True
        log.warning("plpy_anon: the fit's kernels do not load from %s (%s: %s); numba loads "
                    "them", CACHE_DIR, type(exc).__name__, exc)
        return None


def numba_kernels():
    """The numba-compiled kernel module, or None when numba cannot be imported (logged once)."""
    global _numba_module, _unavailable
    if _numba_module is None and not _unavailable:
        try:
            _use_cache_dir()
            with _hidden_from_numba():
                from plpy_anon.core import _mondrian_kernels
                check_interrupts()       # ~0.1 s of CPU, not interruptible
                load_cached(_mondrian_kernels)
        except (ImportError, OSError) as exc:   # no numba, or an llvmlite that fails to load
            _unavailable = True
            log.warning("plpy_anon: numba cannot be imported (%s: %s); the Mondrian fit runs on "
                        "numpy, several times slower. Install the [server] extra.",
                        type(exc).__name__, exc)
        except RuntimeError as exc:             # numba: no cache directory this user can write
            _unavailable = True
            log.warning("plpy_anon: the compiled Mondrian kernels have no machine-code cache "
                        "(%s); the fit runs on numpy. Run 'make install' as root to create %s "
                        "for the database's OS user.", exc, CACHE_DIR)
        else:
            _numba_module = _mondrian_kernels
    return _numba_module


#: the other kernel modules loaded (:func:`loaded`), by name
_loaded: dict = {}


def loaded(name: str, n_rows: int | None = None):
    """The kernel module ``plpy_anon.core.<name>``, loaded once from the machine-code cache
    (:func:`load_cached`) after numba is set up (:func:`kernels`); None without numba, or for
    ``n_rows`` rows too few to be worth loading numba for (:func:`worth_loading`)."""
    module = _loaded.get(name)
    if module is None:
        if n_rows is not None and not worth_loading(n_rows):
            return None
        if kernels() is None or numba_kernels() is None:
            return None
        with _hidden_from_numba():
            module = importlib.import_module(f"plpy_anon.core.{name}")
        load_cached(module)
        _loaded[name] = module
    return module


def load_cached(module) -> None:
    """Have the kernels of ``module`` (its numba dispatchers) load their machine code from the
    cache without first loading numba's typing and lowering registries, which only a
    compilation uses: numba refreshes them before every cache look-up, ~0.1 s of CPU (and an
    import of scipy) in a fresh backend. The loaded code needs numba's runtime (its array
    arguments are unboxed through it), initialized here instead. A look-up that misses compiles
    as usual (the compiler loads the registries itself), as does every kernel where numba's
    internals are not the ones expected. A kernel compiled without the runtime (``_nrt=False``:
    it allocates nothing, its arrays are borrowed) skips its initialization, which compiles
    the runtime's functions (~0.04 s of CPU in a fresh backend)."""
    from numba.core.dispatcher import Dispatcher
    from numba.core.runtime import rtsys

    for kernel in vars(module).values():
        cache = getattr(kernel, "_cache", None) if isinstance(kernel, Dispatcher) else None
        if cache is None or not all(hasattr(cache, a) for a in
                                    ("_load_overload", "_guard_against_spurious_io_errors")):
            continue
        runtime = kernel.targetoptions.get("_nrt", True)

        def load_overload(sig, target_context, cache=cache, usual=cache.load_overload,
                          runtime=runtime):
            try:
                if runtime:
                    rtsys.initialize(target_context)
                with cache._guard_against_spurious_io_errors():
                    return cache._load_overload(sig, target_context)
                # None when the guard swallowed an I/O error: compiled then
            except (TypeError, AttributeError):   # another numba's internals: the usual look-up
                return usual(sig, target_context)

        cache.load_overload = load_overload


#: what numba imports only if present, for work the kernels never ask of it: scipy.linalg, to find
#: BLAS for ``np.dot`` and ``np.linalg`` in compiled code (a third of what a fresh backend pays
#: for numba, ~0.1-0.3 s of CPU), and yaml, to read a ``.numba_config.yaml`` from the working
#: directory (a backend's data directory: no place for numba settings; ~0.01 s of CPU)
HIDDEN_FROM_NUMBA = ("scipy", "yaml")


@contextlib.contextmanager
def _hidden_from_numba():
    """Keep :data:`HIDDEN_FROM_NUMBA` from being imported while numba loads (``import scipy``
    raises ImportError: numba then does without, as when they are not installed). A module a
    caller imported already is found as usual."""
    hidden = [name for name in HIDDEN_FROM_NUMBA if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, ...) is None:
                del sys.modules[name]


def partition(model, n_rows):
    """``(labels, n_classes)`` of the fit ``model`` is running (classes numbered by first row),
    or None when the kernels are unavailable. ``model``: a :class:`Mondrian` inside ``fit``."""
    kern = kernels()
    if kern is None:
        return None
    codes = model._codes
    groups = model._initial_groups(n_rows)
    dtype = np.uint16 if all(c.dtype == np.uint16 for c in codes) else np.int32
    n_attrs = len(codes)
    orders = np.empty((n_attrs, n_rows), dtype=np.int32)
    layouts = np.empty((n_attrs, n_rows), dtype=dtype)
    # the model's own hook, else the caller's cancels (core.interrupts: a backend installs one)
    check = getattr(model, "check_interrupt", None) or check_interrupts
    for a, col in enumerate(codes):
        _sort_by_code(kern, np.ascontiguousarray(col, dtype=dtype), int(model._columns_width[a]),
                      orders[a], layouts[a], check)
        if groups is not None:       # by group, then by code: each group a partition of its own
            orders[a] = orders[a][stable_argsort(groups[orders[a]])]
            layouts[a] = col[orders[a]]
    if groups is None:
        sizes = np.array([n_rows], dtype=np.int64)
    else:
        sizes = np.bincount(groups).astype(np.int64)
        del groups
    starts = np.cumsum(sizes) - sizes
    # the smaller child first: at most log2(n) pending siblings beside the initial groups
    # (start, size, an attribute whose row order is right in the partition), root: any
    stack = np.zeros((sizes.size + 2 * 64, 3), dtype=np.int64)
    stack[:sizes.size, 0] = starts[::-1]
    stack[:sizes.size, 1] = sizes[::-1]
    state = np.zeros(kern.STATE_SIZE, dtype=np.int64)
    state[kern.TOP] = sizes.size
    largest = int(sizes.max())
    buf_o = np.empty(largest, dtype=np.int32)
    buf_c = np.empty(largest, dtype=dtype)
    side = np.zeros((n_rows + 7) // 8, dtype=np.uint8)        # a bit per row
    labels = np.empty(n_rows, dtype=np.int32)
    args = (_spread_args(model._measures), _rank_args(model, n_attrs),
            _boundary_args(model._compiled_boundaries(), n_attrs), _model_args(model, n_rows),
            (np.empty(n_attrs), np.empty(n_attrs), np.empty(n_attrs, dtype=np.int64)))
    while not kern.run(orders, layouts, side, buf_o, buf_c, labels, stack, state, int(model._k),
                       *args, CHUNK_ROWS):
        check()
    n_classes = int(state[kern.N_CLASSES])
    kern.number_by_first_row(labels, np.full(n_classes, -1, dtype=np.int32))
    return labels, n_classes


def _sort_by_code(kern, codes, n_codes, order, layout, check):
    """Stable counting sort of ``codes`` into ``order`` (rows) and ``layout`` (their codes), in
    pieces of :data:`CHUNK_ROWS` rows with ``check`` between them."""
    start = np.zeros(n_codes + 1, dtype=np.int64)
    for lo in range(0, codes.size, CHUNK_ROWS):
        check()
        kern.count_codes(codes, lo, min(codes.size, lo + CHUNK_ROWS), start)
    np.cumsum(start, out=start)
    for lo in range(0, codes.size, CHUNK_ROWS):
        check()
        kern.place_codes(codes, lo, min(codes.size, lo + CHUNK_ROWS), start, order, layout)


def grouped_order(codes: np.ndarray, n_codes: int) -> np.ndarray | None:
    """The rows of ``codes`` (int32, each in ``[0, n_codes)``) grouped by code, rows of a code in
    their order (a stable counting sort), or None when the kernels are not loaded."""
    kern = _kernels
    if kern is None:
        return None
    order = np.empty(codes.size, dtype=np.int32)
    _sort_by_code(kern, np.ascontiguousarray(codes, dtype=np.int32), n_codes, order,
                  np.empty(codes.size, dtype=np.int32), check_interrupts)
    return order


#: the first hash table of :func:`factorized_marked` (slots), grown eightfold while it is small
FIRST_SLOTS = 4096


def factorized_marked(buffer: bytes, end: int, n: int):
    """``buffer``'s ``n`` values, each ended by the byte ``end``, factorized by the compiled
    kernel (as pyarrow's ``dictionary_encode`` of them, which it replaces): (the distinct values
    as bytes, each with its end mark, in order of first appearance, or None when ``buffer``
    holds other than ``n`` values; each value's index into them, int32). None when the kernels
    are neither loaded nor worth loading for ``n`` values (:func:`worth_loading`)."""
    kern = kernels() if worth_loading(n) else None
    if kern is None:
        return None
    marked = np.frombuffer(buffer, dtype=np.uint8)
    starts, ends = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    indices = np.empty(n, dtype=np.int32)
    size = FIRST_SLOTS
    while True:
        check_interrupts()
        count = kern.factorize_marked(marked, end, n, np.full(size, -1, dtype=np.int32), starts,
                                      ends, indices)
        if count != -2:
            break
        size *= 8
    if count < 0:
        return None, indices
    return [buffer[s:e] for s, e in zip(starts[:count].tolist(), ends[:count].tolist())], indices


def _spread_args(measures):
    """SpreadMeasure tables of every attribute as flat arrays (kind, numeric positions and width,
    NULL code, domain, hierarchy ancestors and leaf counts)."""
    n_attrs = len(measures)
    kind = np.zeros(n_attrs, dtype=np.int64)
    width = np.zeros(n_attrs)
    null_code = np.full(n_attrs, -1, dtype=np.int64)
    domain = np.zeros(n_attrs, dtype=np.int64)
    n_leaves = np.zeros(n_attrs, dtype=np.int64)
    height = np.ones(n_attrs, dtype=np.int64)
    anc_off = np.zeros(n_attrs, dtype=np.int64)
    leaf_off = np.zeros(n_attrs, dtype=np.int64)
    ancestors, leaf_counts = [], []
    n_pos = max([m._pos.size for m in measures if m.kind == "numeric"], default=1)
    pos = np.zeros((n_attrs, n_pos))
    anc_size = leaf_size = 0
    for a, m in enumerate(measures):
        if m.col.null_code is not None:
            null_code[a] = m.col.null_code
        if m.kind == "numeric":
            pos[a, :m._pos.size] = m._pos
            width[a] = m._width
            continue
        domain[a] = m._domain
        if m.kind == "categorical":
            kind[a] = 1
            continue
        kind[a] = 2
        h = m.col.hierarchy
        n_leaves[a] = m._n_leaves
        height[a] = h._ancestors.shape[1]
        anc_off[a], leaf_off[a] = anc_size, leaf_size
        ancestors.append(h._ancestors.astype(np.int64).ravel())
        leaf_counts.append(np.asarray(h._leaf_count, dtype=np.int64))
        anc_size += ancestors[-1].size
        leaf_size += leaf_counts[-1].size
    anc = np.concatenate(ancestors) if ancestors else np.zeros(1, dtype=np.int64)
    leaf_count = np.concatenate(leaf_counts) if leaf_counts else np.zeros(1, dtype=np.int64)
    return (kind, pos, width, null_code, domain, anc, anc_off, height, leaf_count, leaf_off,
            n_leaves)


def _rank_args(model, n_attrs):
    """(mode, priority metric, spread weight, priority weight, weight sum): mode 0 ranks by
    spread (plain Mondrian), 1 by the weighted score of the prioritized variant."""
    ranking = model._compiled_ranking()
    if ranking is None:
        return (0, np.zeros(n_attrs), 1.0, 0.0, 1.0)
    metric, w_spread, w_prio, w_sum = ranking
    return (1, np.ascontiguousarray(metric, dtype=np.float64), float(w_spread), float(w_prio),
            float(w_sum))


def _boundary_args(boundaries, n_attrs):
    """Workload cut points as one flat sorted array per attribute range, and 2 x tolerance."""
    bounds, tolerance = boundaries
    start = np.zeros(n_attrs, dtype=np.int64)
    end = np.zeros(n_attrs, dtype=np.int64)
    flat, done = [], 0
    for a in range(n_attrs):
        b = bounds.get(a)
        start[a] = done
        if b is not None and b.size:
            flat.append(np.asarray(b, dtype=np.int64))
            done += b.size
        end[a] = done
    bnd = np.concatenate(flat) if flat else np.zeros(1, dtype=np.int64)
    return (bnd, start, end, float(2 * tolerance))


def _model_args(model, n_rows):
    """Distinct l (dense codes, -1 missing) and the histogram models (codes with ``m`` for a
    missing value, parameters, the table's distribution) with their work buffers."""
    if model._sensitive:
        dense = [_codes_from_bits(v) if v.dtype.kind == "u" else v for v in model._sensitive]
        dist_codes = np.stack(dense).astype(np.int32)
        seen = np.zeros((len(dense), int(dist_codes.max(initial=0)) + 1), dtype=np.int64)
        dist_l = int(model._l)
    else:
        dist_codes = np.zeros((0, n_rows), dtype=np.int32)
        seen = np.zeros((0, 1), dtype=np.int64)
        dist_l = 0
    models = model._models or []
    n_mod = len(models)
    width = max([mdl.table.size for _, mdl in models], default=0) + 1
    mod_codes = np.zeros((n_mod, n_rows if n_mod else 0), dtype=np.int32)
    mod_m = np.zeros(n_mod, dtype=np.int64)
    lmode = np.zeros(n_mod, dtype=np.int64)
    l_val = np.ones(n_mod)
    c_val = np.zeros(n_mod)
    t_val = np.full(n_mod, -1.0)
    q = np.zeros((n_mod, width))
    ordered = np.zeros(n_mod, dtype=np.int64)
    for j, (codes, mdl) in enumerate(models):
        mod_codes[j] = codes
        mod_m[j] = mdl.table.size
        q[j, :mdl.table.size] = mdl.table
        ordered[j] = bool(mdl.ordered)
        if mdl.l is not None and mdl.l > 1:
            lmode[j] = 1 if mdl.l_diversity == "entropy" else 2
            l_val[j] = float(mdl.l)
            c_val[j] = float(mdl.c) if mdl.c is not None else 0.0
        if mdl.t is not None:
            t_val[j] = float(mdl.t)
    hist_l = np.zeros((n_mod, width))
    hist_r = np.zeros((n_mod, width))
    return (dist_codes, dist_l, seen, mod_codes, mod_m, lmode, l_val, c_val, t_val, q, ordered,
            hist_l, hist_r, np.zeros(width))


def _codes_from_bits(bits):
    """One-bit masks (Mondrian's form for <= 64 values) back to dense codes, no bit -> -1."""
    codes = np.bitwise_count(bits.astype(np.uint64) - np.uint64(1)).astype(np.int32)
    codes[bits == 0] = -1
    return codes


def stats():
    """Signatures in use and cache hits / misses (a miss is a compilation) of the fit's kernels
    in this process (the database test reads them from a new backend); ``machine_code``:
    ``"objects"`` when they were loaded without numba (a hit: a kernel called from the object
    file), ``"numba"`` when numba loaded them."""
    kern = kernels()
    if kern is None:
        return None
    names = ("count_codes", "place_codes", "run", "number_by_first_row", "write_class_sets",
             "write_range_literals", "factorize_marked")
    result = {"signatures": 0, "used": set(), "cache_hits": 0, "cache_misses": 0,
              "cache_dir": os.environ.get("NUMBA_CACHE_DIR"),
              "machine_code": "numba" if kern is _numba_module else "objects"}
    if kern is not _numba_module:
        for name in names:
            kernel = getattr(kern, name)
            result["signatures"] += kernel.signatures
            result["cache_hits"] += kernel.calls > 0
            if kernel.calls:
                result["used"].add(name)
    if _numba_module is not None:       # as well, for argument types the object file lacks
        for f in (getattr(_numba_module, name) for name in names):
            result["signatures"] += len(f.signatures)
            result["cache_hits"] += sum(f.stats.cache_hits.values())
            result["cache_misses"] += sum(f.stats.cache_misses.values())
            if f.signatures:
                result["used"].add(f.__name__)
    result["used"] = sorted(result["used"])
    return result
