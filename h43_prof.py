import time, sys, numpy as np
from tests.bench.bench_partition import synthetic_columns
from plpy_anon.core.mondrian import Mondrian, _stable_argsort
from plpy_anon.core import mondrian_jit
n = int(sys.argv[1])
cols = synthetic_columns(n)
Mondrian(k=10, engine="numba").fit(cols)
kern = mondrian_jit.kernels()
orig = kern.run
tot = [0.0, 0]
def timed_run(*a):
    c = time.process_time(); r = orig(*a); tot[0] += time.process_time() - c; tot[1] += 1; return r
kern.run = timed_run
c0 = time.process_time()
m = Mondrian(k=10, engine="numba").fit(cols)
print("fit cpu", time.process_time() - c0, "kernel cpu", tot, flush=True)
codes = [c.codes.astype(np.uint16) if c.n_codes <= 65536 else c.codes for c in cols]
c0 = time.process_time()
for c in codes: o = _stable_argsort(c); l = c[o]
print("argsorts cpu", time.process_time() - c0)
