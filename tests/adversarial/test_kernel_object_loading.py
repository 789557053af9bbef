"""Attacks on the fit's kernels loaded from their object file (core.kernel_objects) and on
numba's machine-code cache beside it (mondrian_jit.CACHE_DIR): a backend runs the code it loads,
so nothing but a file its own OS user wrote, in a directory nobody else can write, may be loaded,
and what is loaded is what was checked (a symlink's target, a file or directory swapped in
between the checks and the read, another OS user's file, a file torn at any length). Then wrong
results: the object file's kernels against the numpy fit (the oracle) on hostile columns (NaN,
infinities, the int64 ends, empty, k above the rows, one value) and argument types the file
lacks (2**63, an unaligned array), which must go to numba.

Run as root, "another OS user" is nobody (65534); the attacker's file is the genuine one with
a constant added to its metadata (its object's SHA-256 unchanged), so a load that took it shows
that constant."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plpy_anon.core import kernel_objects, mondrian_jit
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core.mondrian_jit import COMPILED_FROM_ROWS
from tests.helpers import class_sizes, create_release
from tests.runs import examples
from tests.unit import test_kernel_objects
from tests.unit.test_kernel_objects import MODULE, fitting_on, load
from tests.unit.test_mondrian_compiled import assert_same, both_engines
from tests.waits import HANG

pytestmark = pytest.mark.skipif(mondrian_jit.numba_kernels() is None,
                                reason="numba is not installed")
ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
objects = test_kernel_objects.objects      # the object file, written as make install writes it
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file away needs root")


def _meta_changed(data: bytes, change) -> bytes:
    start = len(kernel_objects.MAGIC) + 8
    (size,) = struct.unpack_from("<Q", data, len(kernel_objects.MAGIC))
    meta = json.loads(data[start:start + size])
    change(meta)
    blob = json.dumps(meta).encode()
    return kernel_objects.MAGIC + struct.pack("<Q", len(blob)) + blob + data[start + size:]


def attackers(data: bytes) -> bytes:
    """The genuine file with the constant PLANTED added: loads wherever the genuine one does."""
    return _meta_changed(data, lambda meta: meta["constants"].__setitem__("PLANTED", 1))


def planted(kern) -> bool:
    return kern is not None and "PLANTED" in vars(kern)


@pytest.fixture
def cache(objects, tmp_path):
    """(a private cache directory holding a copy of the object file, the file, its bytes)."""
    tmp_path.chmod(0o755)
    directory = tmp_path / "cache"
    shutil.copytree(objects, directory)
    directory.chmod(0o755)
    path = kernel_objects.cache_file(directory, MODULE)
    path.chmod(0o644)
    return directory, path, path.read_bytes()


def test_the_attackers_file_loads_where_the_genuine_one_would(cache):
    """The attacks' premise: the planted constant is seen when the file is in place."""
    directory, path, data = cache
    assert load(directory) is not None and not planted(load(directory))
    path.write_bytes(attackers(data))
    assert planted(load(directory))


def test_a_symlink_to_a_file_in_a_directory_others_can_write_is_not_loaded(cache, tmp_path):
    """The link's target is this user's file with a safe mode, but anyone may replace it (its
    directory is world-writable): the file itself must be the directory's entry."""
    directory, path, data = cache
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    target = open_dir / "kernels"
    target.write_bytes(attackers(data))
    target.chmod(0o644)
    path.unlink()
    path.symlink_to(target)
    assert load(directory) is None


def test_a_cache_directory_linked_into_a_directory_others_can_write_is_checked_as_opened(
        cache, tmp_path):
    """_jit_cache a symlink to a directory in a world-writable one: what is checked is the
    directory the file is read from (here this user's, safe: loaded; another user's: not)."""
    directory, _, _ = cache
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    moved = open_dir / "cache"
    directory.rename(moved)
    directory.symlink_to(moved)
    assert load(directory) is not None
    if os.geteuid() == 0:
        os.chown(moved, NOBODY, -1)
        assert load(directory) is None


class _SwapOnOpen:
    """An audit hook (a process keeps it for good: armed per test) that runs ``swap`` once when
    the process opens ``path``: the attacker replacing the file between the loader's checks and
    its read, at the worst moment."""

    armed: ClassVar[dict] = {}

    @classmethod
    def hook(cls, event, args):
        if event != "open" or not cls.armed:
            return
        name = args[0]
        if isinstance(name, (str, bytes, os.PathLike)) and \
                os.fsdecode(name).endswith(cls.armed["name"]):
            swap = cls.armed.pop("swap")
            cls.armed.clear()
            swap()


sys.addaudithook(_SwapOnOpen.hook)


@pytest.fixture
def swap_on_open():
    def arm(name, swap):
        _SwapOnOpen.armed.update(name=name, swap=swap)
    yield arm
    _SwapOnOpen.armed.clear()


@as_root
def test_a_file_swapped_between_the_checks_and_the_read_is_not_loaded(cache, tmp_path,
                                                                      swap_on_open):
    """Another user's file renamed over the genuine one just before it is opened (the path
    passed every check a moment before): what is read is checked."""
    directory, path, data = cache
    theirs = directory / "theirs"
    theirs.write_bytes(attackers(data))
    os.chown(theirs, NOBODY, -1)
    swap_on_open(path.name, lambda: os.replace(theirs, path))
    kern = load(directory)
    assert not _SwapOnOpen.armed, "the loader never opened the file"
    assert not planted(kern)
    assert kern is None


@as_root
def test_a_directory_swapped_between_the_checks_and_the_read_is_not_loaded(cache, tmp_path,
                                                                           swap_on_open):
    """The cache directory linked into a world-writable one, whose link target another user
    swaps for a directory of theirs, holding their file, as the loader opens the file."""
    directory, path, data = cache
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    genuine = open_dir / "cache"
    directory.rename(genuine)
    directory.symlink_to(genuine)
    theirs = open_dir / "theirs"
    theirs.mkdir()
    (theirs / path.name).write_bytes(attackers(data))
    for p in (theirs, theirs / path.name):
        os.chown(p, NOBODY, -1)

    def swap():
        genuine.rename(open_dir / "old")
        theirs.rename(genuine)

    swap_on_open(path.name, swap)
    kern = load(directory)
    assert not _SwapOnOpen.armed, "the loader never opened the file"
    assert not planted(kern)


@as_root
@pytest.mark.parametrize("mode", [0o755, 0o700])
def test_another_users_directory_is_not_loaded(cache, mode):
    directory, _, _ = cache
    directory.chmod(mode)
    os.chown(directory, NOBODY, -1)
    assert load(directory) is None


@pytest.mark.parametrize("where, mode", [("file", 0o664), ("file", 0o646),
                                         ("directory", 0o775), ("directory", 0o757),
                                         ("directory", 0o1777)])
def test_group_or_other_writable_is_not_loaded(cache, where, mode):
    directory, path, _ = cache
    (path if where == "file" else directory).chmod(mode)
    assert load(directory) is None


def test_a_fifo_or_a_directory_under_the_files_name_is_not_loaded(cache):
    """Neither blocks the loader nor raises."""
    directory, path, _ = cache
    path.unlink()
    os.mkfifo(path, 0o644)
    assert load(directory) is None
    path.unlink()
    path.mkdir(mode=0o755)
    assert load(directory) is None


def test_a_file_torn_at_any_length_is_not_loaded_and_raises_nothing(cache):
    """A crash leaves a prefix of the file (os.replace without an fsync): every length up to past
    the header, then every 97th byte, then all but the last byte."""
    directory, path, data = cache
    start = len(kernel_objects.MAGIC) + 8
    lengths = sorted({*range(start + 64), *range(start, len(data), 97), len(data) - 1})
    for length in lengths:
        path.write_bytes(data[:length])
        assert load(directory) is None, length


@pytest.mark.parametrize("meta", ["[]", "null", "1", '"x"', "{}", '{"header": 1}'])
def test_malformed_metadata_is_not_loaded_and_raises_nothing(cache, meta):
    directory, path, data = cache
    start = len(kernel_objects.MAGIC) + 8
    (size,) = struct.unpack_from("<Q", data, len(kernel_objects.MAGIC))
    blob = meta.encode()
    path.write_bytes(kernel_objects.MAGIC + struct.pack("<Q", len(blob)) + blob
                     + data[start + size:])
    assert load(directory) is None


@pytest.mark.parametrize("field, value", [("features", "-sse2"), ("triple", "aarch64-unknown-linux-gnu"),
                                          ("module", "plpy_anon.core._person_kernels"),
                                          ("source_sha256", "0" * 64)])
def test_a_file_written_for_another_target_or_module_is_not_loaded(cache, field, value):
    directory, path, data = cache
    path.write_bytes(_meta_changed(data, lambda meta: meta["header"].__setitem__(field, value)))
    assert load(directory) is None


def _use_cache_dir_in_a_fresh_process(cache_dir: Path, environ: dict) -> str | None:
    """NUMBA_CACHE_DIR as mondrian_jit._use_cache_dir leaves it, with CACHE_DIR ``cache_dir``."""
    code = ("import os; from pathlib import Path; from plpy_anon.core import mondrian_jit;"
            f"mondrian_jit.CACHE_DIR = Path({str(cache_dir)!r}); mondrian_jit._use_cache_dir();"
            "print(os.environ.get('NUMBA_CACHE_DIR'))")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"} | environ
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=HANG, check=False)
    assert run.returncode == 0, run.stderr
    out = run.stdout.strip()
    return None if out == "None" else out


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_numbas_cache_is_not_pointed_at_a_directory_others_can_write(tmp_path, mode):
    """numba's cache index is a pickle: one another user can write runs their code in the
    backend. The fallback when the object file is refused must not read it from there."""
    cache_dir = tmp_path / "jit"
    cache_dir.mkdir()
    cache_dir.chmod(0o755)
    assert _use_cache_dir_in_a_fresh_process(cache_dir, {}) == str(cache_dir)
    cache_dir.chmod(mode)
    assert _use_cache_dir_in_a_fresh_process(cache_dir, {}) is None


@pytest.mark.parametrize("what", ["subdirectory", "file", "symlink"])
def test_numbas_cache_is_not_pointed_where_an_entry_others_can_write_is(tmp_path, what):
    """The directory safe, but a subdirectory or an index file in it writable by others (numba
    makes them with the umask of whoever compiled), or a symlink out of it."""
    cache_dir = tmp_path / "jit"
    sub = cache_dir / "core_0123"
    sub.mkdir(parents=True, mode=0o755)
    cache_dir.chmod(0o755)
    sub.chmod(0o755)
    index = sub / "_mondrian_kernels.run-1.py311.nbi"
    index.write_bytes(b"")
    index.chmod(0o644)
    assert _use_cache_dir_in_a_fresh_process(cache_dir, {}) == str(cache_dir)
    if what == "subdirectory":
        sub.chmod(0o777)
    elif what == "file":
        index.chmod(0o666)
    else:
        open_dir = tmp_path / "open"
        open_dir.mkdir(mode=0o777)
        open_dir.chmod(0o777)
        index.unlink()
        index.symlink_to(open_dir / "index")
    assert _use_cache_dir_in_a_fresh_process(cache_dir, {}) is None


@as_root
def test_numbas_cache_is_not_pointed_at_another_users_directory(tmp_path):
    cache_dir = tmp_path / "jit"
    cache_dir.mkdir(mode=0o755)
    os.chown(cache_dir, NOBODY, -1)
    assert _use_cache_dir_in_a_fresh_process(cache_dir, {}) is None


def test_numba_cache_dir_set_in_the_environment_is_left_to_whoever_started_the_server(tmp_path):
    """The server's environment is set by whoever starts it (who may also LD_PRELOAD): its
    NUMBA_CACHE_DIR is kept as given; no SQL role can set a backend's environment."""
    cache_dir = tmp_path / "jit"
    cache_dir.mkdir(mode=0o755)
    assert _use_cache_dir_in_a_fresh_process(cache_dir, {"NUMBA_CACHE_DIR": "/elsewhere"}) == \
        "/elsewhere"


# --- wrong results -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def file_kernels(objects):
    kern = load(objects)
    assert isinstance(kern, kernel_objects.LoadedKernels)
    return kern


def _hostile_columns(rng, n):
    """Columns an owner's table may hold: NaN and infinities (NULL and the ends of a float
    column), the int64 ends, one value only, texts with separators and the empty text."""
    floats = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308, -1e308, 5e-324], n)
    ints = rng.choice(np.array([-(2**63), 2**63 - 1, 0, -1, 1], dtype=np.int64), n)
    texts = rng.choice(np.array(["", "\x01", "\x02", ",", "a", None, "é"], dtype=object), n)
    huge = rng.choice(np.array([2**63, 2**64 - 1, 0], dtype=np.uint64), n)
    return [encode_numeric("f", floats), encode_numeric("i", ints), encode_numeric("u", huge),
            encode_numeric("one", np.full(n, 7)), encode_categorical("t", texts)]


@pytest.mark.parametrize("n, k", [(1, 1), (2, 2), (5, 9), (40, 3), (300, 2), (300, 300),
                                  (300, 301)])
@pytest.mark.parametrize("models", [{}, {"l": 2}, {"t": 0.4}])
def test_hostile_columns_fit_to_the_numpy_labels(file_kernels, n, k, models):
    """k above the rows and a model nobody can meet: the same error as numpy's; else the labels."""
    rng = np.random.default_rng(n * 31 + k)
    columns = _hostile_columns(rng, n)
    sensitive = rng.integers(-1, 3, (n, 1)) if models else None
    calls = file_kernels.run.calls
    with fitting_on(file_kernels):
        numpy_labels, compiled = both_engines(
            lambda engine: Mondrian(k=k, engine=engine, **models), columns, sensitive=sensitive)
    assert_same(numpy_labels, compiled)
    if not isinstance(numpy_labels, tuple) and n >= 2 * k:
        assert file_kernels.run.calls > calls, "the fit did not run on the object file"


EXTREME_FLOATS = [np.nan, np.inf, -np.inf, 1e308, -1e308, 0.0, 1.0, 2.5, -3.0]


@examples(default=40, slow=200)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 150), n_float=st.integers(1, 3),
       n_plain=st.integers(0, 2), k=st.integers(2, 8), l_model=st.booleans(),
       on_file=st.booleans())
def test_floats_spanning_infinities_fit_to_the_numpy_labels(file_kernels, seed, n, n_float,
                                                            n_plain, k, l_model, on_file):
    """A float QI whose range spans an infinity (or whose span overflows: 1e308 - -1e308) has a
    NaN normalized spread in some partitions; numpy ranks it last and cuts on the next column.
    The kernels (numba's, and the object file's) must do the same."""
    rng = np.random.default_rng(seed)
    columns = [encode_numeric(f"f{i}", rng.choice(EXTREME_FLOATS[:rng.integers(3, 10)], n))
               for i in range(n_float)]
    columns += [encode_numeric(f"x{i}", rng.integers(0, 20, n)) for i in range(n_plain)]
    columns = [columns[i] for i in rng.permutation(len(columns))]
    models = {"l": 2} if l_model else {}
    sensitive = rng.integers(0, 3, (n, 1)) if l_model else None
    kern = file_kernels if on_file else mondrian_jit.numba_kernels()
    with fitting_on(kern):
        numpy_labels, compiled = both_engines(
            lambda engine: Mondrian(k=min(k, n), engine=engine, **models), columns,
            sensitive=sensitive)
    assert_same(numpy_labels, compiled)


@pytest.mark.parametrize("models", [{"l": 2}, {"t": 0.2}, {"t": 0.0}, {"l": 2, "t": 0.5},
                                    {"l": 1.5, "l_diversity": "entropy"},
                                    {"l": 2, "l_diversity": "recursive", "c": 1.5}])
@pytest.mark.parametrize("values", ["one value", "all NULL", "NULL but one", "every row its own"])
def test_degenerate_sensitive_columns_fit_to_the_numpy_labels(file_kernels, models, values):
    """Sensitive columns no model can be met on, or only just (a kernel raises on a division by
    zero: none must): the same labels, or the same error, as numpy's."""
    n = 200
    rng = np.random.default_rng(5)
    sensitive = {"one value": np.zeros(n, dtype=np.int64),
                 "all NULL": np.full(n, -1, dtype=np.int64),
                 "NULL but one": np.r_[np.full(n - 1, -1), 0].astype(np.int64),
                 "every row its own": np.arange(n, dtype=np.int64)}[values][:, None]
    columns = [encode_numeric("x", rng.integers(0, 50, n)), encode_numeric("y", rng.integers(0, 9, n))]
    with fitting_on(file_kernels):
        for ordered in (False, True):
            calls = file_kernels.run.calls
            numpy_labels, compiled = both_engines(
                lambda engine: Mondrian(k=3, engine=engine, **models), columns,
                sensitive=sensitive, sensitive_ordered=ordered)
            assert_same(numpy_labels, compiled)
            assert isinstance(numpy_labels, tuple) or file_kernels.run.calls > calls


def test_no_rows_fit_as_numpy_does(file_kernels):
    columns = [encode_numeric("x", np.zeros(0)), encode_categorical("c", np.zeros(0, dtype=object))]
    with fitting_on(file_kernels):
        numpy_labels, compiled = both_engines(lambda engine: Mondrian(k=2, engine=engine), columns)
    assert_same(numpy_labels, compiled)


def test_argument_types_the_file_lacks_go_to_numba(file_kernels):
    """2**63 (numba's uint64), -2**63-1 (no numba type), a uint64 or an int16 array: no key of
    the file, so numba's dispatcher takes the call (here a stand-in that records it); an int64
    end stays on the file."""
    seen = []

    class Numba:
        @staticmethod
        def count_codes(*args):
            seen.append(args)
            return "numba"

    kernel = kernel_objects.Kernel("count_codes", file_kernels.count_codes._signatures,
                                   lambda: Numba)
    codes = np.array([0, 2, 2], dtype=np.uint16)
    start = np.zeros(4, dtype=np.int64)
    for args in ((codes, 0, 2**63, start), (codes, -(2**63) - 1, 3, start),
                 (codes, np.uint64(0), 3, start), (codes.astype(np.int16), 0, 3, start),
                 (codes, 0, 3, start[::2]), (codes, 0, 3, start.astype(">i8"))):
        assert kernel(*args) == "numba"
    assert kernel.calls == 0 and len(seen) == 6
    assert kernel(codes, 0, 2**63 - 2**63 + 3, start) is None and kernel.calls == 1
    assert start.tolist() == [0, 1, 0, 2]


def test_an_unaligned_array_counts_as_numbas_kernel_does(file_kernels):
    """The key does not tell an unaligned array from an aligned one (numba types them apart): on
    x86-64 the aligned signature's loads work on it, to the same counts."""
    numba_kern = mondrian_jit.numba_kernels()
    raw = np.zeros(8 * 101 + 1, dtype=np.uint8)
    start = raw[1:].view(np.int64)
    assert not start.flags.aligned
    codes = (np.arange(300) % 100).astype(np.uint16)
    file_kernels.count_codes(codes, 0, 300, start)
    want = np.zeros(101, dtype=np.int64)
    numba_kern.count_codes(codes, 0, 300, want)
    np.testing.assert_array_equal(start, want)


# --- in a backend: a hostile table, the object file's release against numpy's ----------------

HOSTILE_TABLE = r"""
CREATE TABLE hostile (id int, f float8, i int8, t text, amount numeric, diagnosis text);
INSERT INTO hostile
SELECT g,
       CASE WHEN g % 6 = 0 THEN 1.5e308 WHEN g % 6 = 3 THEN -1.5e308
            WHEN g % 97 = 1 THEN 'Infinity' WHEN g % 97 = 2 THEN '-Infinity'
            WHEN g % 97 = 3 THEN '-0' WHEN g % 97 = 4 THEN 5e-324 ELSE g % 101 END,
       (ARRAY[-9223372036854775808, 9223372036854775807, 0, -1, g])[1 + g % 5],
       (ARRAY[E'a\x01b', E'\x02', '', NULL, 'plain', E'\x01'])[1 + g % 6],
       (ARRAY['12345678901234567890', '-12345678901234567890', '1.0', '1.00', 'NaN', NULL])[1 + g % 6]::numeric
           + (g % 13),
       (ARRAY['flu', 'gout', 'cold', NULL])[1 + g % 4]
FROM generate_series(1, {rows}) g"""

FIT_ON_NUMPY = """
CREATE OR REPLACE FUNCTION pg_temp.fit_on_numpy() RETURNS void AS $fn$
from plpy_anon.core import mondrian_jit
mondrian_jit._kernels = None
mondrian_jit._unavailable = True        # kernels() is None: every fit of this backend on numpy
$fn$ LANGUAGE plpython3u"""

KERNEL_STATS = """
CREATE OR REPLACE FUNCTION pg_temp.kernel_stats() RETURNS text AS $fn$
import json, sys
jit = sys.modules.get("plpy_anon.core.mondrian_jit")
stats = jit.stats() if jit else None
return json.dumps(stats and dict(stats, used=sorted(stats["used"])))
$fn$ LANGUAGE plpython3u"""

HOSTILE_QIS = ["f", "i", "t", "amount"]


@pytest.mark.parametrize("models", [{}, {"l": 2}])
def test_a_hostile_table_releases_in_a_backend_the_classes_of_the_numpy_fit(db, schema, connect,
                                                                           models):
    """A float QI whose span overflows float8 (1.5e308 and -1.5e308: a NaN spread wherever a
    partition holds both; infinities read as stand-ins beyond them). A new backend fits a table
    as large as the kernels are loaded for from the object file make install wrote; another backend, whose kernels are switched off, fits it on numpy: the
    two releases hold the same rows (EXCEPT ALL both ways), every class at least k."""
    import json


    db.execute(HOSTILE_TABLE.format(rows=COMPILED_FROM_ROWS))
    arguments = dict(k=7, quasi_identifiers=HOSTILE_QIS, sensitive=["diagnosis"],
                     identifiers=["id"], **models)
    releases = {}
    for engine in ("objects", "numpy"):
        with connect() as conn:
            conn.execute(sql_path(schema))
            if engine == "numpy":
                conn.execute("SELECT * FROM anon.versions()").fetchall()   # activates the environment
                conn.execute(FIT_ON_NUMPY)
                conn.execute("SELECT pg_temp.fit_on_numpy()")
            releases[engine] = create_release(conn, "mondrian_view", schema, "hostile",
                                              release_name=f"hostile_{engine}", **arguments)
            conn.execute(KERNEL_STATS)
            stats = json.loads(conn.execute("SELECT pg_temp.kernel_stats()").fetchone()[0])
            if engine == "objects":
                assert stats["machine_code"] == "objects" and "run" in stats["used"], stats
            else:
                assert stats is None
    objects, numpy = releases["objects"], releases["numpy"]
    for a, b in ((objects, numpy), (numpy, objects)):
        assert db.execute(f"SELECT count(*) FROM (SELECT {', '.join(HOSTILE_QIS)}, diagnosis "
                          f"FROM {a} EXCEPT ALL SELECT {', '.join(HOSTILE_QIS)}, diagnosis "
                          f"FROM {b}) AS d").fetchone()[0] == 0
    sizes = class_sizes(db, objects, HOSTILE_QIS)
    assert min(sizes) >= 7 and sum(sizes) == COMPILED_FROM_ROWS
    assert len(sizes) > COMPILED_FROM_ROWS // 100, "hardly split: the float QI stopped the fit"


def sql_path(schema: str) -> str:
    return f'SET search_path = "{schema}", public'
