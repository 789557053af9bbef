"""Cold start: what a new process or a new database connection pays before any work.

(a) ``plpy-anon --help`` (target <= 0.3 s) beside a bare ``python -c pass``, wall and CPU seconds,
and which heavy modules it loaded; (b) the first call of each of a few extension functions in a
fresh backend (target <= 1 s) with the backend's CPU seconds for it, its second call in the same
backend, and the heavy modules the first call left loaded. Best of ``PLPY_ANON_COLDSTART_REPEATS`` (default 5) fresh processes or
connections; the machine's load average is printed beside the figures, since both scale with it.
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
from tests.bench.common import markdown_table, results_dir

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
            conn.execute(CALLS[2][1])        # the release anon.refresh rebuilds
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


def main() -> None:
    rows = cli_part() + backend_part()
    table = markdown_table(["call", "first (s)", "CPU (s)", "second (s)", "target (s)", "", "heavy modules loaded"],
                           rows)
    print(table)
    (results_dir() / "coldstart.md").write_text(
        f"Best of {REPEATS}; load average {load()}.\n\n{table}\n")


if __name__ == "__main__":
    main()
