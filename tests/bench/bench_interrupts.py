"""The price of honouring cancels inside Python loops (plpy_anon.db.interrupts), in the backend.

1. What one visit to PostgreSQL's CHECK_FOR_INTERRUPTS costs, per candidate way of making it
   from PL/Python (microseconds per call, best of 3 runs of 2,000 calls).
2. A 1,000,000-row Mondrian fit (k = 5, three numeric QIs; plain and with distinct l = 3),
   timed in one backend with the check installed and without, alternated (3 rounds each, the
   best of each kept), with the number of check() calls; and the checks' cost computed from the
   per-call costs (calls x cost + one visit per 0.05 s), which a loaded machine's noise cannot
   hide.

3. The longest stretch of a fit between two checks (what a cancel may wait for), outside the
   backend with a check recording the time between calls: 10,000,000 synthetic rows, the same
   three QIs (``PLPY_ANON_BENCH_GAP_ROWS``; 0 skips it).

4. Learning one long statement (sqlglot's parse and qualification are single calls nothing
   interrupts): a UNION chain, an OR chain and an IN list at ~16 kB, ~32 kB (the default size
   bound) and ~80 kB, seconds best of 3, outside the backend.

Run: ``python -m tests.bench interrupts`` (``PLPY_ANON_BENCH_INTERRUPT_ROWS`` for another size).
"""
from __future__ import annotations

import json
import os
import time

import numpy as np

from tests.bench.common import extension_db

FUNCTION = r"""
CREATE FUNCTION pg_temp.interrupt_bench(n_rows int) RETURNS text LANGUAGE plpython3u AS $$
import json, time
import numpy as np
from plpy_anon.core import interrupts
from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.mondrian import Mondrian
from plpy_anon.db.interrupts import INTERVAL, backend_check

out = {}
calls = 2000
candidates = {
    "prepared SELECT 1": (plpy.prepare("SELECT 1"), None),
    "prepared SELECT pg_sleep(0)": (plpy.prepare("SELECT pg_catalog.pg_sleep(0)"), None),
    "unprepared SELECT 1": ("SELECT 1", None),
}
for name, (plan, _) in candidates.items():
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(calls):
            plpy.execute(plan)
        best = min(best, time.perf_counter() - t)
    out[name + " (us/call)"] = round(best / calls * 1e6, 1)
t = time.perf_counter()
for _ in range(100000):
    interrupts.check()
out["check() with nothing installed (us/call)"] = round((time.perf_counter() - t) / 100000 * 1e6, 3)
with interrupts.checking(backend_check(plpy)):
    t = time.perf_counter()
    for _ in range(100000):
        interrupts.check()
    out["check() installed, between visits (us/call)"] = round(
        (time.perf_counter() - t) / 100000 * 1e6, 3)

g = np.arange(n_rows, dtype=np.int64)
cols = [encode_numeric("a", (g * 7919) % 100003), encode_numeric("b", (g * 104729) % 50021),
        encode_numeric("c", (g * 31) % 997)]
sensitive = (g * 13) % 7


class Counted:
    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __call__(self):
        self.calls += 1
        self.inner()


for label, kwargs in (("k=5", {}), ("k=5, l=3", {"l": 3})):
    times = {"without": [], "with": []}
    counted = None
    for _ in range(3):
        for mode in ("without", "with"):
            t = time.perf_counter()
            if mode == "with":
                counted = Counted(backend_check(plpy))
                with interrupts.checking(counted):
                    Mondrian(k=5, **kwargs).fit(cols, sensitive=sensitive if kwargs else None)
            else:
                Mondrian(k=5, **kwargs).fit(cols, sensitive=sensitive if kwargs else None)
            times[mode].append(time.perf_counter() - t)
    out[f"fit {label}: without checks (s, 3 runs)"] = [round(x, 3) for x in times["without"]]
    out[f"fit {label}: with checks (s, 3 runs)"] = [round(x, 3) for x in times["with"]]
    out[f"fit {label}: check() calls per fit"] = counted.calls
    best_without, best_with = min(times["without"]), min(times["with"])
    out[f"fit {label}: overhead of the best runs (%)"] = round(
        100 * (best_with - best_without) / best_without, 2)
    # the same from the per-call costs above: every call, plus one visit per INTERVAL
    spent = (counted.calls * out["check() installed, between visits (us/call)"]
             + best_with / INTERVAL * out["prepared SELECT 1 (us/call)"]) * 1e-6
    out[f"fit {label}: checks' cost from the per-call costs (%)"] = round(
        100 * spent / best_without, 3)
return json.dumps(out)
$$;
"""


def longest_stretches(n_rows: int) -> None:
    from plpy_anon.core import interrupts
    from plpy_anon.core.encoding import encode_numeric
    from plpy_anon.core.mondrian import Mondrian

    g = np.arange(n_rows, dtype=np.int64)
    cols = [encode_numeric("a", (g * 7919) % 100003), encode_numeric("b", (g * 104729) % 50021),
            encode_numeric("c", (g * 31) % 997)]
    sensitive = (g * 13) % 7
    for label, kwargs in (("k=5", {}), ("k=5, l=3", {"l": 3})):
        last, gaps = [time.perf_counter()], []

        def record(last=last, gaps=gaps):
            now = time.perf_counter()
            gaps.append(now - last[0])
            last[0] = now

        started = time.perf_counter()
        with interrupts.checking(record):
            Mondrian(k=5, **kwargs).fit(cols, sensitive=sensitive if kwargs else None)
        gaps.append(time.perf_counter() - last[0])
        print(f"  {n_rows:,} rows, {label}: fit {time.perf_counter() - started:.1f} s, "
              f"{len(gaps) - 1} checks, longest stretch between two {max(gaps):.2f} s "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)


def long_statements() -> None:
    from plpy_anon.querylog.priorities import PriorityLearner

    catalog = {"public": {"t": {"a": "integer", "b": "text"}}}
    kinds = {
        "UNION chain": lambda n: " UNION ALL ".join(f"SELECT a FROM t WHERE a > {i}"
                                                    for i in range(n)),
        "OR chain": lambda n: "SELECT a FROM t WHERE " + " OR ".join(f"a = {i}"
                                                                     for i in range(n)),
        "IN list": lambda n: "SELECT a FROM t WHERE a IN (" + ", ".join(map(str, range(n))) + ")",
    }
    for name, make in kinds.items():
        for size in (16_000, 32_000, 80_000):
            n = 1
            while len(make(2 * n)) <= size:
                n *= 2
            while len(make(n + max(1, n // 16))) <= size:
                n += max(1, n // 16)
            text = make(n)
            best = float("inf")
            for _ in range(3):
                started = time.perf_counter()
                PriorityLearner("t", max_statement_bytes=None).fit([text], catalog)
                best = min(best, time.perf_counter() - started)
            print(f"  {name}, {len(text):,} bytes: {best:.2f} s", flush=True)


def main():
    rows = int(os.environ.get("PLPY_ANON_BENCH_INTERRUPT_ROWS", "1000000"))
    with extension_db() as conn:
        conn.execute("SELECT anon.versions()")          # activates the venv in this backend
        conn.execute(FUNCTION)
        figures = json.loads(conn.execute("SELECT pg_temp.interrupt_bench(%s)",
                                          (rows,)).fetchone()[0])
    print(f"interrupt checks, {rows:,} rows, load {os.getloadavg()[0]:.1f}")
    for name, value in figures.items():
        print(f"  {name}: {value}")
    print(f"learning one long statement (load {os.getloadavg()[0]:.1f})")
    long_statements()
    gap_rows = int(os.environ.get("PLPY_ANON_BENCH_GAP_ROWS", "10000000"))
    if gap_rows:
        print("longest stretch of a fit between two interrupt checks (outside the backend)")
        longest_stretches(gap_rows)


if __name__ == "__main__":
    main()
