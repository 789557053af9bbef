"""Compile (or load) the Mondrian fit's kernels once: ``python -I -m plpy_anon.core.mondrian_warm``,
which ``make install`` runs as the database's OS user, so that a backend's first fit loads machine
code instead of compiling (:mod:`.mondrian_jit`); then the fit's kernels' object file, which a
backend loads without numba (:mod:`.kernel_objects`; ``--objects [directory]`` writes it alone)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from plpy_anon.core import mondrian_jit, person_hashes, republication
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.mondrian import Mondrian


def warm():
    """Fit every signature a fit uses (:func:`warm_fit`), then the stable mode's kernels; the
    kernels' cache figures (None without numba)."""
    warm_fit()
    republication.warm_kernels()      # the stable refresh's grouping
    person_hashes.warm_kernels()      # the stable mode's people
    return mondrian_jit.stats()


def warm_fit():
    """Call every signature of the fit's kernels (core._mondrian_kernels): uint16 and int32
    codes, with and without models (the argument types do not change with them), and the
    release's class literals (db.stored_classes)."""
    rng = np.random.default_rng(0)
    n = 200
    small = [encode_numeric("x", rng.integers(0, 50, n)),
             encode_categorical("c", np.array([f"v{i}" for i in rng.integers(0, 5, n)],
                                              dtype=object))]
    for columns in (small, [encode_numeric("big", np.arange(70_000))]):   # uint16, int32 codes
        rows = len(columns[0].codes)
        Mondrian(k=5, engine="numba").fit(columns)
        Mondrian(k=5, l=2, engine="numba").fit(columns, sensitive=np.arange(rows) % 3)
    kern = mondrian_jit.numba_kernels()
    if kern is None:
        return
    out = np.empty(8, dtype=np.uint8)
    kern.write_class_sets(np.zeros(1, dtype=np.int64), np.array([0, 1], dtype=np.int64), 0, 1,
                          np.array([97, 98], dtype=np.uint8), np.array([0, 2], dtype=np.int64),
                          np.array([31], dtype=np.uint8), out)
    marked = b"a\x01b\x01a\x01"                # the read's texts, factorized (db.reader)
    kern.factorize_marked(np.frombuffer(marked, dtype=np.uint8), 1, 3,
                          np.full(8, -1, dtype=np.int32), np.empty(3, dtype=np.int64),
                          np.empty(3, dtype=np.int64), np.empty(3, dtype=np.int32))
    out = np.empty(64, dtype=np.uint8)          # and their ranges
    kern.write_range_literals(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                              np.zeros(1, dtype=np.int64), 0, 1, 1,
                              np.zeros(1, dtype=np.uint8), np.zeros(1, dtype=np.int64),
                              np.array([31], dtype=np.uint8), np.array([30], dtype=np.uint8),
                              out)


#: the module whose object file is written, and its source
KERNELS = "plpy_anon.core._mondrian_kernels"
KERNELS_SOURCE = Path(__file__).resolve().parent / "_mondrian_kernels.py"


def export_objects() -> str:
    """Write the fit's kernels' object file (core.kernel_objects) into mondrian_jit.CACHE_DIR
    from a fresh interpreter whose numba compiles them (numba's cache keeps machine code, not
    the IR the object file is emitted from); what happened, for the install's log."""
    from plpy_anon.core import kernel_objects

    if not mondrian_jit.CACHE_DIR.is_dir() or \
            mondrian_jit.CACHE_DIR.stat().st_uid != os.geteuid():
        return f"not written ({mondrian_jit.CACHE_DIR} is not this OS user's)"
    if kernel_objects.current(KERNELS, KERNELS_SOURCE, mondrian_jit.CACHE_DIR, _written_with()):
        return "current, kept"       # writing it compiles every kernel: ~10 s of CPU
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ, NUMBA_CACHE_DIR=scratch)
        done = subprocess.run([sys.executable, "-I", "-m", "plpy_anon.core.mondrian_warm",
                               "--objects"], env=env, capture_output=True, text=True,
                              check=False)
    if done.returncode:
        return f"not written: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    return done.stdout.strip()


def _written_with() -> str:
    """The digest of what chooses the signatures the object file holds: this warm-up and the
    fit's argument building (mondrian_jit)."""
    from plpy_anon.core import kernel_objects

    return "".join(kernel_objects.source_digest(Path(m.__file__))
                   for m in (sys.modules[__name__], mondrian_jit))


def _write_objects(directory: Path) -> int:
    from plpy_anon.core import _mondrian_kernels, kernel_objects

    warm_fit()
    path = kernel_objects.export(_mondrian_kernels, directory, _written_with())
    print(f"written to {path}")
    return 0


def main() -> int:
    mondrian_jit.OBJECT_CODE = False         # the warm-up fills numba's own cache
    if sys.argv[1:2] == ["--objects"]:      # [directory], else mondrian_jit.CACHE_DIR
        return _write_objects(Path(sys.argv[2]) if sys.argv[2:] else mondrian_jit.CACHE_DIR)
    result = warm()
    print("plpy_anon: compiled kernels", "unavailable (numba cannot be imported)"
          if result is None else f"ready: {result}")
    if result is not None:
        print("plpy_anon: the fit's kernels' object file", export_objects())
    return 0


if __name__ == "__main__":
    sys.exit(main())
