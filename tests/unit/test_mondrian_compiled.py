"""The compiled Mondrian fit (numba kernels) makes the partitions of the numpy fit, its oracle:
the same labels on random tables (NULLs, ties, dates, text codes, hierarchies, k up to n/2) under
every privacy model, plain and prioritized; and it yields control between chunks."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plpy_anon.core import mondrian_jit
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.errors import AnonError, InvalidParameter
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.prioritized import PrioritizedMondrian
from tests.helpers import CountingCheck, Interrupted
from tests.unit.test_mondrian import KINDS, _random_column
from tests.waits import HANG

needs_numba = pytest.mark.skipif(mondrian_jit.kernels() is None, reason="numba is not installed")
ROOT = Path(__file__).resolve().parents[2]

MODELS = {
    "k": {},
    "distinct": {"l": 2},
    "distinct3": {"l": 3},
    "entropy": {"l": 1.6, "l_diversity": "entropy"},
    "recursive": {"l": 2, "l_diversity": "recursive", "c": 2.5},
    "t": {"t": 0.35},
    "t+entropy": {"l": 1.4, "l_diversity": "entropy", "t": 0.5},
    "distinct+t": {"l": 2, "t": 0.45},
}


@st.composite
def fits(draw, max_rows=120):
    """Columns, k <= n/2 (or n), the models, sensitive codes (NULL = negative), ordered flags."""
    n = draw(st.integers(2, max_rows))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    columns = [_random_column(draw(st.sampled_from(KINDS)), f"q{i}", n, rng)
               for i in range(draw(st.integers(1, 5)))]
    k = draw(st.integers(2, max(2, n // 2)))
    models = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    n_sensitive = draw(st.integers(1, 2))
    domain = draw(st.sampled_from([3, 6, 70]))     # 70: more values than one-bit masks hold
    sensitive = rng.integers(-1, domain, (n, n_sensitive))
    ordered = draw(st.booleans())
    return columns, min(k, n), models, sensitive, ordered


def both_engines(make, columns, **fit):
    """Labels (or the error's type and message) of the numpy and the compiled fit."""
    out = []
    for engine in ("numpy", "numba"):
        try:
            out.append(make(engine).fit(columns, **fit).labels_)
        except AnonError as exc:
            out.append((type(exc).__name__, str(exc)))
    return out


def assert_same(numpy_result, compiled_result):
    if isinstance(numpy_result, tuple):
        assert compiled_result == numpy_result
    else:
        np.testing.assert_array_equal(compiled_result, numpy_result)


@needs_numba
@settings(max_examples=150, deadline=None)
@given(fits())
def test_compiled_fit_gives_the_numpy_labels(fit):
    columns, k, models, sensitive, ordered = fit
    asked = bool(models)
    numpy_labels, compiled = both_engines(
        lambda engine: Mondrian(k=k, engine=engine, **models), columns,
        sensitive=sensitive if asked else None, sensitive_ordered=ordered)
    assert_same(numpy_labels, compiled)


@needs_numba
@settings(max_examples=100, deadline=None)
@given(fits(), st.integers(0, 2**32 - 1), st.sampled_from([0.5, 0.3, 0.0]))
def test_compiled_prioritized_fit_gives_the_numpy_labels(fit, seed, tolerance):
    columns, k, models, sensitive, ordered = fit
    rng = np.random.default_rng(seed)
    names = [c.name for c in columns]
    priorities = dict(zip(names, rng.random(len(names)) + 0.01)) if rng.random() < 0.7 else None
    cut_points = {}
    for col in columns:
        if rng.random() < 0.6 and col.kind == "numeric" and len(col.labels) \
                and not np.issubdtype(col.labels.dtype, np.datetime64):
            values = col.labels.astype(float)
            cut_points[col.name] = [(float(rng.choice(values)), bool(rng.random() < 0.5))
                                    for _ in range(int(rng.integers(1, 4)))]
        elif rng.random() < 0.4 and col.kind == "categorical" and col.hierarchy is None:
            known = [v for v in col.labels if v is not None]
            if known:
                cut_points[col.name] = [(str(rng.choice(known)), side) for side in (False, True)]
    numpy_labels, compiled = both_engines(
        lambda engine: PrioritizedMondrian(k=k, priorities=priorities, cut_points=cut_points,
                                           cut_tolerance=tolerance, engine=engine, **models),
        columns, sensitive=sensitive if models else None, sensitive_ordered=ordered)
    assert_same(numpy_labels, compiled)


@needs_numba
@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2, 10, 50]), st.sampled_from(["k", "distinct",
                                                                                 "t"]))
def test_compiled_fit_equals_numpy_on_larger_tables(seed, k, model):
    """70,000 rows: a column of more than 65,536 values (int32 codes) beside narrow ones."""
    rng = np.random.default_rng(seed)
    n = 70_000
    columns = [encode_numeric("wide", rng.permutation(n) // int(rng.integers(1, 3))),
               encode_numeric("age", rng.integers(17, 90, n)),
               encode_numeric("day", np.datetime64("2000-01-01")
                              + rng.integers(0, 3000, n).astype("timedelta64[D]"),
                              rng.random(n) < 0.05),
               encode_categorical("job", np.array([f"j{x}" for x in rng.zipf(1.5, n) % 40],
                                                  dtype=object))]
    sensitive = rng.integers(0, 8, n)
    numpy_labels, compiled = both_engines(
        lambda engine: Mondrian(k=k, engine=engine, **MODELS[model]), columns,
        sensitive=sensitive)
    assert_same(numpy_labels, compiled)


@needs_numba
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 1, 2, 5, 40, 300])),
                min_size=1, max_size=12), st.integers(0, 9))
def test_distinct_codes_of_a_sorted_segment(runs, skip):
    """Spreads of categorical attributes count the codes of a sorted segment by galloping over
    runs when codes are few for the rows (single-row runs included), else row by row."""
    codes = np.cumsum([gap for gap, _ in runs])
    layout = np.repeat(codes, [length for _, length in runs]).astype(np.uint16)
    s, e = min(skip, layout.size - 1), layout.size
    count = mondrian_jit.kernels()._distinct_sorted(layout, s, e, int(layout[s]), int(layout[-1]))
    assert count == np.unique(layout[s:e]).size


@needs_numba
def test_the_interrupt_hook_runs_between_chunks_and_can_cancel(monkeypatch):
    """The fit returns to Python every CHUNK_ROWS row operations, a large partition's regrouping
    in pieces, with the labels of an unchunked fit; a callable raising in ``check_interrupt``
    stops it between two chunks."""
    monkeypatch.setattr(mondrian_jit, "CHUNK_ROWS", 777)
    rng = np.random.default_rng(1)
    columns = [encode_numeric("x", rng.integers(0, 1000, 5000)),
               encode_categorical("c", np.array([f"v{i}" for i in rng.integers(0, 30, 5000)],
                                                dtype=object)),
               encode_numeric("y", rng.normal(size=5000))]
    sensitive = rng.integers(0, 4, 5000)
    counted = CountingCheck()
    model = Mondrian(k=5, l=2, engine="numba")
    model.check_interrupt = counted
    model.fit(columns, sensitive=sensitive)
    assert counted.calls >= 100
    np.testing.assert_array_equal(
        model.labels_, Mondrian(k=5, l=2, engine="numpy").fit(columns, sensitive=sensitive).labels_)

    model.check_interrupt = CountingCheck(raise_at=1)
    with pytest.raises(Interrupted):
        model.fit(columns, sensitive=sensitive)


def test_an_unknown_engine_is_refused():
    with pytest.raises(InvalidParameter, match="engine must be one of"):
        Mondrian(k=2, engine="gpu").fit([encode_numeric("x", np.arange(4))])


def test_without_numba_the_fit_runs_on_numpy_and_says_so():
    code = ("import sys, logging; sys.modules['numba'] = None; logging.basicConfig();"
            "import numpy as np; from plpy_anon.core.encoding import encode_numeric;"
            "from plpy_anon.core.mondrian import Mondrian;"
            "print(Mondrian(k=2).fit([encode_numeric('x', np.arange(10))]).n_classes_);"
            "Mondrian(k=2, engine='numba').fit([encode_numeric('x', np.arange(10))])")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=HANG, check=False)
    assert run.stdout.split() == ["4"]
    assert "numba cannot be imported" in run.stderr and "runs on numpy" in run.stderr
    assert "engine='numba' asked, but numba cannot be imported" in run.stderr


@needs_numba
def test_loading_the_kernels_imports_no_scipy_and_scipy_still_imports_after():
    # numba's CPU target imports scipy.linalg to look for BLAS, which no kernel calls: a fresh
    # backend's first fit would pay for that import
    code = ("import sys, numpy as np; from plpy_anon.core import mondrian_jit;"
            "kern = mondrian_jit.kernels(); start = np.zeros(4, dtype=np.int64);"
            "kern.count_codes(np.array([0, 2, 2], dtype=np.uint16), 0, 3, start);"
            "print('scipy' in sys.modules, start.tolist());"
            "import scipy.linalg; kern.count_codes(np.array([1], dtype=np.uint16), 0, 1, start);"
            "print(start.tolist())")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=HANG, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["False [0, 1, 0, 2]", "[0, 1, 1, 2]"]


@needs_numba
def test_kernels_loaded_from_the_cache_import_none_of_numbas_implementations():
    # numba loads its typing and lowering registries (its array functions, and scipy with them)
    # before each cache look-up, and machine code calling a builtin numba implements in Python
    # imports that implementation's module when loaded: ~0.1 s of CPU in a fresh backend
    code = ("import sys, numpy as np; from plpy_anon.core import mondrian_jit;"
            "from plpy_anon.core.encoding import encode_numeric;"
            "from plpy_anon.core.mondrian import Mondrian;"
            "cols = [encode_numeric('x', np.arange(300) % 17), encode_numeric('y', np.arange(300) % 5)];"
            "Mondrian(k=3, l=2, l_diversity='recursive', c=3, engine='numba').fit("
            "cols, sensitive=np.arange(300) % 4);"
            "print(mondrian_jit.stats()['cache_misses'], [m for m in ('numba.np.arraymath', "
            "'numba.np.linalg', 'numba.cpython.unicode', 'scipy') if m in sys.modules])")
    for _ in range(2):      # a cold cache compiles the kernels first, which loads everything
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             cwd=ROOT, timeout=HANG, check=False)
        assert run.returncode == 0, run.stderr
        misses, loaded = run.stdout.strip().split(" ", 1)
        if misses == "0":
            break
    assert (misses, loaded) == ("0", "[]")
