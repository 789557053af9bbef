import time, numpy as np
from tests.bench.bench_partition import encode_adult, load_adult
from tests.bench.common import DATA
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core import mondrian_jit
cols = encode_adult(load_adult(DATA))
Mondrian(k=10, engine="numba").fit(cols)
kern = mondrian_jit.kernels(); orig = kern.run; tot = [0.0]
def wrap(*a):
    c = time.process_time(); r = orig(*a); tot[0] += time.process_time() - c; return r
kern.run = wrap
c = time.process_time()
for _ in range(20): Mondrian(k=10, engine="numba").fit(cols)
print("adult fit cpu ms", (time.process_time() - c) / 20 * 1000, "kernel", tot[0] / 20 * 1000)
