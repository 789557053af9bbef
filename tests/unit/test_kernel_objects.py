"""The fit's kernels loaded from their object file without numba (core.kernel_objects): the
labels of the numpy fit, its oracle, and the literals of numba's kernels; numba never imported;
and no load, so numba's path, when the file is missing, stale, torn, another user's, or needs a
symbol the process lacks."""

import contextlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.core import kernel_objects, mondrian_jit
from plpy_anon.core.mondrian import Mondrian
from tests.runs import examples
from tests.unit import test_mondrian_compiled as compiled_tests
from tests.unit.test_mondrian_compiled import assert_same, both_engines, fits
from tests.waits import HANG

pytestmark = pytest.mark.skipif(mondrian_jit.numba_kernels() is None,
                                reason="numba is not installed")
ROOT = Path(__file__).resolve().parents[2]
MODULE = "plpy_anon.core._mondrian_kernels"
SOURCE = ROOT / "plpy_anon" / "core" / "_mondrian_kernels.py"


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """A directory holding the object file, written as ``make install`` writes it (a fresh
    interpreter whose numba compiles the kernels)."""
    directory = tmp_path_factory.mktemp("objects")
    directory.chmod(0o755)
    scratch = tmp_path_factory.mktemp("numba_cache")
    run = subprocess.run([sys.executable, "-m", "plpy_anon.core.mondrian_warm", "--objects",
                          str(directory)], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, NUMBA_CACHE_DIR=str(scratch)), timeout=HANG,
                         check=False)
    assert run.returncode == 0, run.stderr
    return directory


def load(directory, source=SOURCE, fallback=mondrian_jit.numba_kernels):
    return kernel_objects.load(MODULE, source, directory, fallback)


@pytest.fixture
def loaded(objects, monkeypatch):
    """The object file's kernels as the ones every fit of this process runs on."""
    kern = load(objects)
    assert isinstance(kern, kernel_objects.LoadedKernels)
    monkeypatch.setattr(mondrian_jit, "_kernels", kern)
    return kern


@pytest.fixture(scope="module")
def module_loaded(objects):
    kern = load(objects)
    assert isinstance(kern, kernel_objects.LoadedKernels)
    return kern


@contextlib.contextmanager
def fitting_on(kern):
    """Every fit inside runs on ``kern`` (a hypothesis test cannot take monkeypatch)."""
    kept, mondrian_jit._kernels = mondrian_jit._kernels, kern
    try:
        yield
    finally:
        mondrian_jit._kernels = kept


@examples(default=40, slow=150)
@given(fits())
def test_fits_on_the_object_file_give_the_numpy_labels(module_loaded, fit):
    columns, k, models, sensitive, ordered = fit
    calls = module_loaded.run.calls
    with fitting_on(module_loaded):
        numpy_labels, compiled = both_engines(
            lambda engine: Mondrian(k=k, engine=engine, **models), columns,
            sensitive=sensitive if models else None,
            sensitive_ordered=ordered if models else None)
    assert_same(numpy_labels, compiled)
    assert isinstance(compiled, tuple) or module_loaded.run.calls > calls


@examples(default=30, slow=100)
@given(fits(), st.integers(0, 2**32 - 1), st.sampled_from([0.5, 0.3, 0.0]))
def test_prioritized_fits_on_the_object_file_give_the_numpy_labels(module_loaded, fit, seed,
                                                                    tolerance):
    """test_mondrian_compiled's prioritized test (weights, workload cut points) on the file."""
    calls = module_loaded.run.calls
    with fitting_on(module_loaded):
        compiled_tests.test_compiled_prioritized_fit_gives_the_numpy_labels.hypothesis.inner_test(
            fit, seed, tolerance)
    assert module_loaded.run.calls > calls or fit[2]     # a model may refuse before the fit


def test_a_large_fit_runs_every_kernel_from_the_object_file(loaded):
    """int32 codes (over 65,535 values) and a distinct-l model: both signatures of the fit."""
    rng = np.random.default_rng(7)
    from plpy_anon.core.encoding import encode_numeric
    columns = [encode_numeric("x", rng.integers(0, 100_000, 80_000)),
               encode_numeric("y", rng.integers(0, 40, 80_000))]
    sensitive = rng.integers(0, 5, 80_000)
    for model in ({}, {"l": 3}):
        numpy_labels, compiled = both_engines(
            lambda engine, model=model: Mondrian(k=7, engine=engine, **model), columns,
            sensitive=sensitive if model else None)
        assert_same(numpy_labels, compiled)
    assert all(getattr(loaded, name).calls for name in
               ("count_codes", "place_codes", "run", "number_by_first_row"))


def test_literal_writers_write_what_numbas_write(loaded):
    numba_kern = mondrian_jit.numba_kernels()
    rng = np.random.default_rng(3)
    texts = [f"v{i}é" for i in range(40)]
    table = np.frombuffer("".join(texts).encode(), dtype=np.uint8).copy()
    offsets = np.cumsum([0] + [len(t.encode()) for t in texts]).astype(np.int64)
    tokens = rng.integers(0, 40, 300).astype(np.int64)
    bounds = np.sort(np.r_[0, rng.integers(0, 300, 20), 300]).astype(np.int64)
    sep = np.array([44], dtype=np.uint8)
    outs = [np.zeros(4000, dtype=np.uint8) for _ in range(2)]
    written = [kern.write_class_sets(tokens, bounds, 0, bounds.size - 1, table, offsets, sep, out)
               for kern, out in zip((loaded, numba_kern), outs)]
    assert written[0] == written[1] > 0
    np.testing.assert_array_equal(*outs)

    low = rng.integers(-10**6, 10**6, 50).astype(np.int64)
    high = low + rng.integers(0, 1000, 50)
    kinds = rng.integers(0, 3, 50).astype(np.int64)
    outs = [np.zeros(5000, dtype=np.uint8) for _ in range(2)]
    args = (low, high, kinds, 0, 50, 1, np.zeros(1, dtype=np.uint8), np.zeros(1, dtype=np.int64),
            np.array([91], dtype=np.uint8), np.array([41], dtype=np.uint8))
    written = [kern.write_range_literals(*args, out) for kern, out in zip((loaded, numba_kern),
                                                                          outs)]
    assert written[0] == written[1] > 0
    np.testing.assert_array_equal(*outs)


def test_other_argument_types_go_to_numba(loaded):
    """int16 codes: a signature the object file lacks, which numba compiles (or loads)."""
    start = np.zeros(4, dtype=np.int64)
    loaded.count_codes(np.array([0, 2, 2], dtype=np.int16), 0, 3, start)
    assert start.tolist() == [0, 1, 0, 2]
    assert loaded.count_codes.calls == 0
    assert loaded._distinct_sorted is mondrian_jit.numba_kernels()._distinct_sorted


def test_a_fresh_process_fits_on_the_object_file_without_importing_numba(objects):
    code = ("import sys, numpy as np; from pathlib import Path;"
            "from plpy_anon.core import mondrian_jit;"
            f"mondrian_jit.CACHE_DIR = Path({str(objects)!r});"
            "from plpy_anon.core.encoding import encode_numeric;"
            "from plpy_anon.core.mondrian import Mondrian;"
            "cols = [encode_numeric('x', np.arange(300) % 17), encode_numeric('y', np.arange(300) % 5)];"
            "m = Mondrian(k=3, l=2, engine='numba').fit(cols, sensitive=np.arange(300) % 4);"
            "print(m.n_classes_, mondrian_jit.stats()['machine_code'], 'numba' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=HANG, check=False)
    assert run.returncode == 0, run.stderr
    n_classes = Mondrian(k=3, l=2, engine="numpy").fit(
        [*_columns()], sensitive=np.arange(300) % 4).n_classes_
    assert run.stdout.split() == [str(n_classes), "objects", "False"]


def _columns():
    from plpy_anon.core.encoding import encode_numeric
    return encode_numeric("x", np.arange(300) % 17), encode_numeric("y", np.arange(300) % 5)


def _rewrite(path: Path, change) -> None:
    """Rewrite the file's metadata through ``change(meta)``."""
    data = path.read_bytes()
    start = len(kernel_objects.MAGIC) + 8
    (size,) = struct.unpack_from("<Q", data, len(kernel_objects.MAGIC))
    meta = json.loads(data[start:start + size])
    change(meta)
    blob = json.dumps(meta).encode()
    path.write_bytes(kernel_objects.MAGIC + struct.pack("<Q", len(blob)) + blob
                     + data[start + size:])


@pytest.fixture
def copy(objects, tmp_path):
    """A copy of the objects' directory to spoil."""
    directory = tmp_path / "copy"
    shutil.copytree(objects, directory)
    directory.chmod(0o755)
    return directory, kernel_objects.cache_file(directory, MODULE)


def test_the_copy_loads(copy):
    assert load(copy[0]) is not None


def test_changed_kernels_source_is_not_loaded(copy, tmp_path):
    changed = tmp_path / "_mondrian_kernels.py"
    changed.write_text(SOURCE.read_text() + "\n# changed\n")
    assert load(copy[0], source=changed) is None


def test_a_missing_file_is_not_loaded(copy):
    copy[1].unlink()
    assert load(copy[0]) is None


def test_a_torn_object_is_not_loaded(copy):
    copy[1].write_bytes(copy[1].read_bytes()[:-100])
    assert load(copy[0]) is None


def test_a_file_others_can_write_is_not_loaded(copy):
    copy[1].chmod(0o666)
    assert load(copy[0]) is None
    copy[1].chmod(0o644)
    copy[0].chmod(0o777)
    assert load(copy[0]) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")
def test_another_users_file_is_not_loaded(copy):
    os.chown(copy[1], 65534, -1)
    assert load(copy[0]) is None


def test_another_cpu_or_numba_is_not_loaded(copy):
    written = copy[1].read_bytes()
    for field, value in (("cpu", "i486"), ("numba", "0" * 64), ("llvmlite", "0.0")):
        copy[1].write_bytes(written)
        _rewrite(copy[1], lambda meta, field=field, value=value:
                 meta["header"].__setitem__(field, value))
        assert load(copy[0]) is None, field


def test_a_symbol_the_process_lacks_is_not_loaded(copy):
    _rewrite(copy[1], lambda meta: meta["undefined"].append("plpy_anon_no_such_symbol"))
    assert load(copy[0]) is None


def test_kernels_fall_back_to_numba_when_the_file_does_not_load(tmp_path, monkeypatch):
    tmp_path.chmod(0o755)
    monkeypatch.setattr(mondrian_jit, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(mondrian_jit, "_use_cache_dir", lambda: None)   # numba's stays as it is
    monkeypatch.setattr(mondrian_jit, "_kernels", None)
    assert mondrian_jit.kernels() is mondrian_jit.numba_kernels()
    assert mondrian_jit.stats()["machine_code"] == "numba"


def test_an_install_keeps_a_current_file_and_rewrites_a_stale_one(copy, tmp_path):
    """make install's warm-up skips writing (compiling every kernel) when nothing it depends on
    changed: the header, and the warm-up's and the fit's own sources."""
    from plpy_anon.core import mondrian_warm

    written_with = mondrian_warm._written_with()
    assert kernel_objects.current(MODULE, SOURCE, copy[0], written_with)
    assert not kernel_objects.current(MODULE, SOURCE, copy[0], written_with[::-1])
    changed = tmp_path / "_mondrian_kernels.py"
    changed.write_text(SOURCE.read_text() + "\n# changed\n")
    assert not kernel_objects.current(MODULE, changed, copy[0], written_with)
    copy[1].unlink()
    assert not kernel_objects.current(MODULE, SOURCE, copy[0], written_with)
