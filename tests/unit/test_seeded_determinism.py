"""A seed gives the same output on any machine: fresh interpreters with other hash seeds, BLAS and
OpenMP thread counts, worker counts and CPU feature sets (numpy's AVX-512 / AVX2 kernels off)
print the same digests of every seeded computation (tests/seeded_outputs.py)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dispatched_cpu_features():
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return [name for name in __cpu_dispatch__ if __cpu_features__.get(name)]


def _digests(**env):
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "seeded_outputs.py")],
                          env=environment, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_seeded_outputs_do_not_depend_on_the_machine():
    features = _dispatched_cpu_features()
    if not features:
        pytest.skip("this CPU has no dispatched numpy kernels to switch off")
    one = _digests(PYTHONHASHSEED="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   SEEDED_OUTPUTS_JOBS="1")
    other = _digests(PYTHONHASHSEED="2", OMP_NUM_THREADS="2", OPENBLAS_NUM_THREADS="2",
                     SEEDED_OUTPUTS_JOBS="2", NPY_DISABLE_CPU_FEATURES=" ".join(features))
    assert one == other
