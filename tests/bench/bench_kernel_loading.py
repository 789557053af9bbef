"""The fit's kernels loaded from their object file (core.kernel_objects) against numba, in new
backends, alternately:

    python -m tests.bench kernel_loading     # PLPY_ANON_KERNEL_RUNS=5, PLPY_ANON_KERNEL_ROWS=1000000

Each run and each way (``mondrian_jit.OBJECT_CODE`` set in the new backend before its first
fit): the backend CPU (/proc/<pid>/stat) of a DO block that loads the kernels and fits 1,000 rows
on them, then, in another new backend, of bench_build's default build of the synthetic table,
with a ``CREATE TABLE AS`` copy of it between (its CPU and wall: the ratios' yardstick). Printed:
min and median of each, the build's ratios to the copy's medians, and the load average. Each
backend's way is checked from inside it (numba not imported with the object file).
"""
from __future__ import annotations

import os
import statistics
import time

from tests.bench.bench_build import QIS, load
from tests.bench.bench_coldstart import backend_cpu
from tests.bench.bench_mondrian import fresh_backend, load_synthetic
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

RUNS = int(os.environ.get("PLPY_ANON_KERNEL_RUNS", "5"))
ROWS = int(os.environ.get("PLPY_ANON_KERNEL_ROWS", "1000000"))
WAY = "DO $$ import plpy_anon.core.mondrian_jit as m; m.OBJECT_CODE = %s $$ LANGUAGE plpython3u"
LOAD_AND_FIT = """DO $$
import numpy as np
from plpy_anon.core import mondrian_jit
from plpy_anon.core.encoding import encode_numeric
from plpy_anon.core.mondrian import Mondrian
mondrian_jit.kernels()
Mondrian(k=5, engine="numba").fit([encode_numeric("x", np.arange(1000) % 37)])
$$ LANGUAGE plpython3u"""
LOADED_HOW = """CREATE OR REPLACE FUNCTION public.kernels_loaded_how() RETURNS text
LANGUAGE plpython3u AS $$
import sys
stats = sys.modules["plpy_anon.core.mondrian_jit"].stats()
return f"{stats['machine_code']}, numba {'imported' if 'numba' in sys.modules else 'not imported'}"
$$"""
EXPECTED = {True: "objects, numba not imported", False: "numba, numba imported"}


def first_fit(conn, objects: bool, query: str, args=None) -> tuple[float, float, object]:
    """(backend CPU s, wall s, first value or None) of ``query`` run as a new backend's first
    fit, its kernels loaded from the object file (``objects``) or through numba."""
    with fresh_backend(conn) as other:
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        other.execute(WAY % objects)
        cpu0, t0 = backend_cpu(pid), time.perf_counter()
        cursor = other.execute(query, args)
        wall, cpu = time.perf_counter() - t0, backend_cpu(pid) - cpu0
        row = cursor.fetchone() if cursor.description else None
        how = other.execute("SELECT public.kernels_loaded_how()").fetchone()[0]
        if how != EXPECTED[objects]:
            raise RuntimeError(f"the backend loaded the kernels as '{how}', not as asked")
    return cpu, wall, row[0] if row else None


def main() -> None:
    figures = {way: {"kernels": [], "build": [], "wall": [], "copy": [], "copy_cpu": []}
               for way in (True, False)}
    loads = []
    with extension_db() as conn:
        load_synthetic(conn, ROWS)
        conn.execute(LOADED_HOW)
        own = conn.info.backend_pid
        for run in range(RUNS):
            for objects in (True, False) if run % 2 == 0 else (False, True):
                f = figures[objects]
                f["kernels"].append(first_fit(conn, objects, LOAD_AND_FIT)[0])
                cpu0 = backend_cpu(own)
                f["copy"].append(copy_seconds(conn, "synthetic"))
                f["copy_cpu"].append(backend_cpu(own) - cpu0)
                cpu, wall, release = first_fit(
                    conn, objects, "SELECT anon.mondrian_view('synthetic', k => 10, "
                    "quasi_identifiers => %s, sensitive => ARRAY['diagnosis'], replace => true)",
                    (QIS,))
                f["build"].append(cpu)
                f["wall"].append(wall)
                conn.execute("SELECT anon.drop_release(%s)", (release,))
                loads.append(os.getloadavg()[0])
                print(f"run {run + 1}, {'object file' if objects else 'numba'}: kernels "
                      f"{f['kernels'][-1]:.3f} s CPU; {ROWS:,}-row build {cpu:.2f} s CPU, "
                      f"{wall:.2f} s; copy {f['copy_cpu'][-1]:.2f} s CPU, {f['copy'][-1]:.2f} s; "
                      f"load {loads[-1]:.1f}", flush=True)
    rows = []
    for objects, f in figures.items():
        med = {k: statistics.median(v) for k, v in f.items()}
        rows.append(["object file" if objects else "numba",
                     f"{min(f['kernels']):.3f} / {med['kernels']:.3f}",
                     f"{min(f['build']):.2f} / {med['build']:.2f}",
                     f"{med['build'] / med['copy_cpu']:.2f}x",
                     f"{min(f['wall']):.2f} / {med['wall']:.2f}",
                     f"{med['wall'] / med['copy']:.2f}x"])
    table = markdown_table(["kernels from", "loading them, CPU s (min / median)",
                            f"{ROWS:,}-row build, CPU s", "CPU / copy's", "build, wall s",
                            "wall / copy's"], rows)
    text = (f"{RUNS} runs each way, alternately; load {min(loads):.1f}-{max(loads):.1f} "
            f"(now {load()})\n\n{table}\n")
    print(text)
    (results_dir() / "kernel_loading.md").write_text(text)


if __name__ == "__main__":
    main()
