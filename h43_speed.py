import time, sys, numpy as np
from tests.bench.bench_partition import synthetic_columns
from plpy_anon.core.mondrian import Mondrian
n = int(sys.argv[1])
cols = synthetic_columns(n)
Mondrian(k=10, engine="numba").fit(cols[:1] if False else [c for c in cols])  # warm
for eng in ("numba", "numpy", "numba"):
    t = time.perf_counter(); c0 = time.process_time()
    m = Mondrian(k=10, engine=eng).fit(cols)
    print(eng, round(time.perf_counter() - t, 3), "cpu", round(time.process_time() - c0, 3), m.n_classes_, flush=True)
