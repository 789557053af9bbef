"""The default build against a plain copy, phase by phase, beside its targets.

    python -m tests.bench build        # PLPY_ANON_BUILD_SIZES=1000000,10000000 (the default)

bench_mondrian's synthetic table (6 QIs age, zip, sex, segment, income, visit; sensitive
diagnosis; 1M rows made in SQL, 10M loaded from the file ``python -m tests.bench.bench_mondrian
generate 10000000`` writes, skipped when missing), k = 10, the default layout and refresh mode
(no l: the fresh mode), built by ``anon.mondrian_view`` in a fresh backend. Printed per size:

* end to end / copy (``CREATE TABLE AS`` of the source, timed before and after the build in the
  same run; the smaller is the yardstick): targets <= 5x at 1M rows, <= 7x at 10M;
* the build's phases as recorded in ``metrics.timing`` (read, fit, publish, build: the storage's
  SQL, verify, risk, prepare: imports and catalog work), each in copies; the fit's target
  <= 1.5x a copy;
* the building backend's CPU seconds against the copying backend's (less sensitive to the load);
* the backend's VmHWM (target <= 2 GiB at 10M rows) and sampled peak private memory (RssAnon).

``PLPY_ANON_BUILD_MEMORY`` (e.g. ``3GB``) sets ``plpy_anon.build_memory`` in the building backend:
at the default 1GB, the 10M-row table (~200 bytes per row at 7 columns, core.regions.row_bytes)
is built out of core; from 2GB, in memory. The path taken is printed.

The machine's load average is printed beside each figure: on a shared machine wall clocks scale
with it. The other targets are printed by ``bench_fit`` (the fit alone, Adult k = 10 after
warm-up) and ``bench_coldstart`` (first call of a fresh backend, ``plpy-anon --help``).
"""
from __future__ import annotations

import os
import time

from tests.bench.bench_coldstart import backend_cpu
from tests.bench.bench_mondrian import (
    MemorySampler,
    fresh_backend,
    load_synthetic,
    release_figures,
    vm_hwm_mib,
)
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

QIS = ["age", "zip", "sex", "segment", "income", "visit"]
RATIO_TARGETS = {1_000_000: 5.0, 10_000_000: 7.0}
FIT_TARGET = 1.5
HWM_TARGETS_MIB = {10_000_000: 2048}
PHASES = ["prepare", "read", "fit", "publish", "build", "verify", "risk"]


def build_memory() -> str | None:
    return os.environ.get("PLPY_ANON_BUILD_MEMORY") or None


def sizes() -> list[int]:
    raw = os.environ.get("PLPY_ANON_BUILD_SIZES", "1000000,10000000")
    return [int(x) for x in raw.split(",") if x.strip()]


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def verdict(value: float, target: float | None) -> str:
    if target is None:
        return ""
    return f" (target <= {target:g}: {'met' if value <= target else 'NOT met'})"


def measure(conn, n: int) -> list | None:
    if not load_synthetic(conn, n):
        return None
    own = conn.info.backend_pid
    cpu0 = backend_cpu(own)
    before = copy_seconds(conn, "synthetic")
    copy_cpu = backend_cpu(own) - cpu0
    with fresh_backend(conn) as other:
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        if build_memory():
            other.execute("SELECT set_config('plpy_anon.build_memory', %s, false)",
                          (build_memory(),))
        cpu0 = backend_cpu(pid)
        t0 = time.perf_counter()
        with MemorySampler(pid) as memory:
            release = other.execute(
                "SELECT anon.mondrian_view('synthetic', k => 10, quasi_identifiers => %s, "
                "sensitive => ARRAY['diagnosis'], replace => true)", (QIS,)).fetchone()[0]
        e2e = time.perf_counter() - t0
        build_cpu = backend_cpu(pid) - cpu0
        hwm = vm_hwm_mib(pid)
    during = load()
    after = copy_seconds(conn, "synthetic")
    copy = min(before, after)
    verified, smallest = conn.execute(
        "SELECT verified, (verification ->> 'smallest_class')::int FROM anon.release_status() "
        "WHERE release = %s", (release,)).fetchone()
    figures = release_figures(conn, release)
    phases = figures["timing"]["phases"]
    path = "out of core" if figures.get("out_of_core") else "in memory"
    ratio = e2e / copy
    in_copies = {p: phases.get(p, 0.0) / copy for p in PHASES}
    # phases a path records beyond the usual ones (an out-of-core run's, the stable mode's)
    extra = {p: s / copy for p, s in phases.items() if p not in PHASES and s / copy >= 0.01}
    rest = ratio - sum(in_copies.values()) - sum(extra.values())
    hwm_target = HWM_TARGETS_MIB.get(n)
    print(f"{n:,} rows: end to end {e2e:.2f} s = {ratio:.2f}x copy ({copy:.2f} s; "
          f"{before:.2f} before, {after:.2f} after){verdict(ratio, RATIO_TARGETS.get(n))}; "
          f"backend CPU {build_cpu:.2f} s against the copy's {copy_cpu:.2f} s = "
          f"{build_cpu / copy_cpu:.2f}x; load {during}; {path} (build_memory "
          f"{build_memory() or 'default'})", flush=True)
    print(f"{n:,} rows, phases in copies: "
          + ", ".join(f"{p} {v:.2f}" for p, v in {**in_copies, **extra}.items())
          + f", other {rest:.2f}; "
          f"fit {in_copies['fit']:.2f}x{verdict(in_copies['fit'], FIT_TARGET)}", flush=True)
    print(f"{n:,} rows: backend VmHWM {hwm:.0f} MiB{verdict(hwm, hwm_target)}, peak RssAnon "
          f"{memory.anon:.0f} MiB; verified {verified}, smallest class {smallest}", flush=True)
    conn.execute(f"SELECT anon.drop_release('{release}')")
    return [f"{n:,}", f"{e2e:.2f}", f"{copy:.2f}", f"{ratio:.2f}x",
            f"{RATIO_TARGETS[n]:g}x" if n in RATIO_TARGETS else "-", f"{build_cpu / copy_cpu:.2f}x",
            *(f"{in_copies[p]:.2f}" for p in PHASES), f"{FIT_TARGET:g}x",
            f"{hwm:.0f}", f"{hwm_target:,}" if hwm_target else "-", f"{memory.anon:.0f}",
            bool(verified), during]


def main() -> None:
    with extension_db() as conn:
        rows = [r for r in (measure(conn, n) for n in sizes()) if r]
    table = markdown_table(["rows", "end to end s", "copy s", "ratio", "target", "CPU ratio",
                            *(f"{p} (copies)" for p in PHASES), "fit target",
                            "VmHWM MiB", "target MiB", "peak RssAnon MiB", "verified", "load"],
                           rows)
    text = (f"## The default build (compact, fresh mode, k = 10) against a copy, by phase\n\n"
            f"{table}\n")
    print(text)
    (results_dir() / "build.md").write_text(text)


if __name__ == "__main__":
    main()
