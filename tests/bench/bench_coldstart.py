"""Cold start: what a new process or a new database connection pays before any work.

(a) ``plpy-anon --help`` (target <= 0.3 s) beside a bare ``python -c pass``, wall and CPU seconds,
and which heavy modules it loaded; (b) the first call of each of a few extension functions in a
fresh backend (target <= 1 s) with the backend's CPU seconds for it, its second call in the same
backend, and the heavy modules the first call left loaded. Best of ``PLPY_ANON_COLDSTART_REPEATS`` (default 5) fresh processes or
connections; the machine's load average is printed beside the figures, since both scale with it.
(c) the default build of ``PLPY_ANON_COLDSTART_BUILD_ROWS`` rows (bench_build's table and
release; default 1,000,000; 0 skips it) twice in one new backend: the CPU seconds the first build
pays beyond the second (imports, kernel loads, catalog caches) beside a copy's, and what the
first build's imports cost, by top-level package (CPU seconds spent in each package's own module
bodies, timed inside the backend).
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from plpy_anon.cluster import ThrowawayCluster
from tests.bench.bench_mondrian import load_synthetic
from tests.bench.common import copy_seconds, markdown_table, results_dir

REPEATS = int(os.environ.get("PLPY_ANON_COLDSTART_REPEATS", "5"))
HEAVY = ("numpy", "pandas", "pyarrow", "scipy", "sklearn", "sqlglot", "matplotlib", "numba",
         "psycopg")
CLI = Path(sys.executable).with_name("plpy-anon")

LOADED = f"""CREATE FUNCTION public.coldstart_loaded() RETURNS text[] LANGUAGE plpython3u AS $$
import sys
return sorted(m for m in {HEAVY!r} if m in sys.modules)
$$"""

SMALL = """CREATE TABLE coldstart_people AS
SELECT g AS id, 20 + g % 60 AS age, lpad((g % 97)::text, 5, '0') AS zip, 'd' || g % 9 AS diagnosis
FROM generate_series(1, 2000) g"""

CALLS = [
    ("anon.versions()", "SELECT * FROM anon.versions()"),
    ("anon.release_status()", "SELECT * FROM anon.release_status()"),
    ("anon.mondrian_view (2,000 rows)",
     ("SELECT anon.mondrian_view('coldstart_people', k => 5, quasi_identifiers => ARRAY['age', 'zip'], "
      "sensitive => ARRAY['diagnosis'], identifiers => ARRAY['id'], replace => true)")),
    ("anon.refresh (2,000 rows)", "SELECT * FROM anon.refresh('release.coldstart_people_k5')"),
    # with l and a primary key: the stable mode, which checks each version against the stored ones
    ("anon.mondrian_view, stable (2,000 rows)",
     ("SELECT anon.mondrian_view('coldstart_people', k => 5, l => 2, quasi_identifiers => "
      "ARRAY['age', 'zip'], sensitive => ARRAY['diagnosis'], identifiers => ARRAY['id'], "
      "refresh_mode => 'stable', replace => true)")),
    ("anon.refresh, stable (2,000 rows)",
     "SELECT * FROM anon.refresh('release.coldstart_people_k5_l2')"),
]


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def process_seconds(argv: list[str]) -> tuple[float, float]:
    """(wall, user + system CPU) of one run of ``argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def backend_cpu(pid: int) -> float | None:
    """User + system CPU seconds of a backend so far (/proc; None where it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def best(argv: list[str]) -> tuple[float, float]:
    runs = [process_seconds(argv) for _ in range(REPEATS)]
    return min(w for w, _ in runs), min(c for _, c in runs)


def cli_modules() -> list[str]:
    code = ("import sys; sys.argv = ['plpy-anon', '--help']\nfrom plpy_anon.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stderr.strip().split(",") if m]


def cli_part() -> list[list]:
    bare_wall, bare_cpu = best([sys.executable, "-c", "pass"])
    help_wall, help_cpu = best([str(CLI), "--help"])
    modules = cli_modules()
    print(f"plpy-anon --help: {help_wall:.3f} s wall, {help_cpu:.3f} s CPU (target <= 0.3 s: "
          f"{'met' if help_wall <= 0.3 else 'NOT met'}); bare python -c pass {bare_wall:.3f} s wall, "
          f"{bare_cpu:.3f} s CPU; heavy modules loaded: {', '.join(modules) or 'none'}; load {load()}",
          flush=True)
    return [["plpy-anon --help", f"{help_wall:.3f}", f"{help_cpu:.3f}", "-", "0.3",
             "met" if help_wall <= 0.3 else "NOT met", ", ".join(modules) or "none"],
            ["(python -c pass)", f"{bare_wall:.3f}", f"{bare_cpu:.3f}", "-", "-", "-", "-"]]


def backend_part() -> list[list]:
    rows = []
    with ThrowawayCluster() as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            conn.execute(LOADED)
            conn.execute(SMALL)
            conn.execute(CALLS[2][1])        # the releases anon.refresh rebuilds
            conn.execute(CALLS[4][1])
        baseline = [("a new connection (SELECT 1)", "SELECT 1"),
                    ("PL/Python itself (a DO block)", "DO LANGUAGE plpython3u $$ pass $$")]
        for label, query in baseline + CALLS:
            firsts, cpus, seconds, loaded = [], [], [], []
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                with psycopg.connect(dsn, autocommit=True) as conn:
                    pid = conn.info.backend_pid
                    cpu = backend_cpu(pid)
                    t1 = time.perf_counter()
                    conn.execute(query)
                    t2 = time.perf_counter()
                    if cpu is not None:
                        cpus.append(backend_cpu(pid) - cpu)
                    conn.execute(query)
                    t3 = time.perf_counter()
                    loaded = conn.execute("SELECT public.coldstart_loaded()").fetchone()[0]
                firsts.append((t2 - t1) if query != "SELECT 1" else (t2 - t0))
                seconds.append(t3 - t2)
            first, again = min(firsts), min(seconds)
            cpu = f"{min(cpus):.3f}" if cpus else "-"
            verdict = "-" if label.startswith(("a new", "PL/Python")) else \
                ("met" if first <= 1.0 else "NOT met")
            print(f"fresh backend, first {label}: {first:.3f} s (target <= 1 s: {verdict}), backend "
                  f"CPU {cpu} s; second call {again:.3f} s; loaded: {', '.join(loaded) or 'none'}; load {load()}", flush=True)
            rows.append([label, f"{first:.3f}", cpu, f"{again:.3f}", "1" if verdict != "-" else "-",
                         verdict, ", ".join(loaded) or "none"])
        for args in (["release-status"], ["refresh", "release.coldstart_people_k5"]):
            wall, cpu = best([str(CLI), "--dsn", dsn, "--quiet", *args])
            print(f"plpy-anon {' '.join(args)}: {wall:.3f} s wall (a new backend included), client CPU "
                  f"{cpu:.3f} s; load {load()}", flush=True)
            rows.append([f"plpy-anon {' '.join(args)}", f"{wall:.3f}", f"{cpu:.3f} (client)", "-", "-", "-", "-"])
    return rows


BUILD_ROWS = int(os.environ.get("PLPY_ANON_COLDSTART_BUILD_ROWS", "1000000"))
BUILD_QIS = ["age", "zip", "sex", "segment", "income", "visit"]    # bench_build's release
BUILD = ("SELECT anon.mondrian_view('synthetic', k => 10, quasi_identifiers => %s, "
         "sensitive => ARRAY['diagnosis'], replace => true)")

#: times every module's body as it is first imported in this backend: CPU seconds of its own
#: body (what the modules it imports cost is theirs), kept in sys for IMPORT_COSTS to read
IMPORT_TIMER = """DO LANGUAGE plpython3u $$
import importlib._bootstrap as bootstrap, sys, time
costs, running = {}, []
load = bootstrap._load_unlocked
def timed_load(spec):
    start = time.process_time()
    running.append(0.0)
    try:
        return load(spec)
    finally:
        took = time.process_time() - start
        costs[spec.name] = took - running.pop()
        if running:
            running[-1] += took
bootstrap._load_unlocked = timed_load
sys.plpy_anon_import_costs = costs
$$"""
IMPORT_COSTS = """CREATE FUNCTION public.coldstart_import_costs() RETURNS TABLE(package text, cpu float8, modules int)
LANGUAGE plpython3u AS $$
import sys
packages = {}
for name, cpu in sys.plpy_anon_import_costs.items():
    total = packages.setdefault(name.partition(".")[0], [0.0, 0])
    total[0] += cpu
    total[1] += 1
return sorted(((p, c, n) for p, (c, n) in packages.items()), key=lambda row: -row[1])
$$"""


def build_part() -> list[list]:
    """The first and the second default build of one new backend, backend CPU seconds."""
    if not BUILD_ROWS:
        return []
    with ThrowawayCluster(settings={"shared_buffers": "'512MB'", "work_mem": "'64MB'"}) as cluster, \
            psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION plpy_anon CASCADE")
        conn.execute(IMPORT_COSTS)
        load_synthetic(conn, BUILD_ROWS)
        own = conn.info.backend_pid
        cpu0 = backend_cpu(own)
        copy_seconds(conn, "synthetic")
        copy_cpu = backend_cpu(own) - cpu0
        firsts, seconds, costs = [], [], []
        for _ in range(REPEATS):
            with psycopg.connect(cluster.dsn(), autocommit=True) as other:
                pid = other.info.backend_pid
                other.execute(IMPORT_TIMER)
                cpus = []
                for _build in range(2):
                    cpu0 = backend_cpu(pid)
                    other.execute(BUILD, (BUILD_QIS,))
                    cpus.append(backend_cpu(pid) - cpu0)
                firsts.append(cpus[0])
                seconds.append(cpus[1])
                costs = other.execute("SELECT * FROM public.coldstart_import_costs()").fetchall()
    first, again = min(firsts), min(seconds)
    top = ", ".join(f"{p} {c:.3f} ({n})" for p, c, n in costs[:8])
    print(f"default build of {BUILD_ROWS:,} rows in a new backend: backend CPU {first:.2f} s, the "
          f"second build in it {again:.2f} s: {first - again:.2f} s more = "
          f"{(first - again) / copy_cpu:.2f} copies (a copy: {copy_cpu:.2f} s CPU); load {load()}",
          flush=True)
    print(f"  its imports: {sum(c for _, c, _ in costs):.3f} s CPU in {sum(n for *_, n in costs)} "
          f"modules; by package (CPU s, modules): {top}", flush=True)
    return [[f"default build, {BUILD_ROWS:,} rows (first / second)", "-",
             f"{first:.2f} / {again:.2f}", "-", "-", "-", f"imports {sum(c for _, c, _ in costs):.3f} s CPU"]]


def main() -> None:
    rows = cli_part() + backend_part() + build_part()
    table = markdown_table(["call", "first (s)", "CPU (s)", "second (s)", "target (s)", "", "heavy modules loaded"],
                           rows)
    print(table)
    (results_dir() / "coldstart.md").write_text(
        f"Best of {REPEATS}; load average {load()}.\n\n{table}\n")


if __name__ == "__main__":
    main()
