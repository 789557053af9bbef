"""Compile (or load) the Mondrian fit's kernels once: ``python -I -m plpy_anon.core.mondrian_warm``,
which ``make install`` runs as the database's OS user, so that a backend's first fit loads machine
code instead of compiling (:mod:`.mondrian_jit`)."""
from __future__ import annotations

import sys

import numpy as np

from plpy_anon.core import mondrian_jit, person_hashes, republication
from plpy_anon.core.encoding import encode_categorical, encode_numeric
from plpy_anon.core.mondrian import Mondrian


def warm():
    """Fit every signature a fit uses: uint16 and int32 codes, with and without models (the
    argument types do not change with them); the kernels' cache figures (None without numba)."""
    rng = np.random.default_rng(0)
    n = 200
    small = [encode_numeric("x", rng.integers(0, 50, n)),
             encode_categorical("c", np.array([f"v{i}" for i in rng.integers(0, 5, n)],
                                              dtype=object))]
    for columns in (small, [encode_numeric("big", np.arange(70_000))]):   # uint16, int32 codes
        rows = len(columns[0].codes)
        Mondrian(k=5, engine="numba").fit(columns)
        Mondrian(k=5, l=2, engine="numba").fit(columns, sensitive=np.arange(rows) % 3)
    republication.warm_kernels()      # the stable refresh's grouping
    kern = mondrian_jit.kernels()
    if kern is not None:              # the release's class literals (db.stored_classes)
        out = np.empty(8, dtype=np.uint8)
        kern.write_class_sets(np.zeros(1, dtype=np.int64), np.array([0, 1], dtype=np.int64), 0, 1,
                              np.array([97, 98], dtype=np.uint8),
                              np.array([0, 2], dtype=np.int64),
                              np.array([31], dtype=np.uint8), out)
        out = np.empty(64, dtype=np.uint8)          # and their ranges
        kern.write_range_literals(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64),
                                  np.zeros(1, dtype=np.int64), 0, 1, 1,
                                  np.zeros(1, dtype=np.uint8), np.zeros(1, dtype=np.int64),
                                  np.array([31], dtype=np.uint8), np.array([30], dtype=np.uint8),
                                  out)
    person_hashes.warm_kernels()      # the stable mode's people
    return mondrian_jit.stats()


def main() -> int:
    result = warm()
    print("plpy_anon: compiled kernels", "unavailable (numba cannot be imported)"
          if result is None else f"ready: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
