import time, sys
import numpy as np
from tests.bench.bench_partition import encode_adult, load_adult, synthetic_columns
from tests.bench.common import DATA
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.core import mondrian_jit
cols = encode_adult(load_adult(DATA)) if sys.argv[1] == "adult" else synthetic_columns(int(sys.argv[1]))
Mondrian(k=10, engine="numba").fit(cols)
kern = mondrian_jit.kernels()
orig = kern.run
captured = {}
def wrap(*a):
    captured['a'] = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
    return orig(*a)
kern.run = wrap
Mondrian(k=10, engine="numba").fit(cols)
a = captured['a']
for rep in range(3):
    b = [x.copy() if isinstance(x, np.ndarray) else x for x in a]
    t = time.perf_counter(); c = time.process_time(); orig(*b); print("run", round((time.perf_counter()-t)*1000,1), "ms cpu", round((time.process_time()-c)*1000,1))
# decisions only: k huge => root final
b = [x.copy() if isinstance(x, np.ndarray) else x for x in a]; b[8] = 10**9
t = time.perf_counter(); orig(*b); print("root only", round((time.perf_counter()-t)*1000,2), "ms")
