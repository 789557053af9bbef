"""Issue 2's figures for anon.mondrian_view, end to end through the extension.

* UCI Adult (30,162 complete rows; QIs age, workclass, education_num, marital_status, occupation,
  race, sex, native_country; sensitive income), k in {5, 10, 25, 50, 100}: partitioning seconds
  (inside the backend, from the release's own timing), end-to-end seconds of
  ``anon.mondrian_view``, NCP %, C_DM and classes -- categoricals as value sets, no hierarchies.
* Synthetic tables of 100k, 1M and 10M rows (PLPY_ANON_BENCH_SIZES) with 6 QIs at k = 10, each
  built in a fresh backend: its peak memory (VmHWM, /proc), `verified` from anon.release_status(),
  release and source sizes, and end-to-end seconds split into read /
  partition / write, beside ``CREATE TABLE copy AS SELECT * FROM source`` on the same table,
  measured in the same run.
  100k and 1M rows are made in SQL at each run; 10M is loaded from a file made once with
  ``PLPY_ANON_DATA=../shared/data python -m tests.bench.bench_mondrian generate 10000000`` (~3 min,
  181 MiB gzipped) and skipped with that message when the file is missing. Targets printed beside
  the figures: 1M <= 5x the copy, 10M <= 7x and VmHWM <= 2 GiB. VmHWM counts the shared buffers
  the backend touched; the sampled peak RssAnon is its private memory.
* The check of every release from its released rows (verify.py), on the same 1M-row releases
  (without and with l): its seconds against the build's (end-to-end minus the check); target
  <= 30 % of the build.
"""
from __future__ import annotations

import gzip
import os
import sys
import threading
import time
from pathlib import Path

import psycopg

from tests.bench.common import DATA, adult, copy_frame, extension_db, markdown_table, results_dir

ADULT_QIS = ["age", "workclass", "education_num", "marital_status", "occupation", "race", "sex",
             "native_country"]
ADULT_TYPES = {"age": "int", "workclass": "text", "fnlwgt": "int", "education": "text",
               "education_num": "int", "marital_status": "text", "occupation": "text",
               "relationship": "text", "race": "text", "sex": "text", "capital_gain": "int",
               "capital_loss": "int", "hours_per_week": "int", "native_country": "text",
               "income": "text"}

SYNTHETIC_COLUMNS = """
       (random() * 99)::int                                   AS age,
       (10000 + (random() * 1999)::int)::text                 AS zip,
       CASE WHEN random() < 0.51 THEN 'F' ELSE 'M' END        AS sex,
       'segment_' || (random() * 19)::int                     AS segment,
       (random() * 200000)::int                               AS income,
       DATE '2022-01-01' + (random() * 1095)::int             AS visit,
       'dx_' || (random() * 9)::int                           AS diagnosis"""
SYNTHETIC = ("SELECT setseed(0.42);\nCREATE TABLE synthetic AS\nSELECT i AS id," + SYNTHETIC_COLUMNS
             + "\nFROM generate_series(1, %(n)d) i;\n")
SYNTHETIC_TABLE = """CREATE TABLE synthetic (id int, age int, zip text, sex text, segment text,
                                    income int, visit date, diagnosis text)"""
# Sizes made in SQL at every run; larger ones are read from a file made once by
# ``python -m tests.bench.bench_mondrian generate 10000000`` (see ``generate``).
GENERATED_IN_RUN = 1_000_000
TARGETS = {1_000_000: (5.0, None), 10_000_000: (7.0, 2.0)}     # ratio to copy, VmHWM GiB


def synthetic_file(n: int):
    return DATA / "synthetic" / f"synthetic_{n}.tsv.gz"


def generate(n: int) -> None:
    """Write the ``n``-row synthetic table (same SQL as the in-run sizes) to ``synthetic_file(n)``
    as gzipped COPY text, through a throwaway cluster."""
    path = synthetic_file(n)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with extension_db() as conn, gzip.open(tmp, "wb", compresslevel=1) as out:
        conn.execute(SYNTHETIC % {"n": n})
        with conn.cursor().copy("COPY synthetic TO STDOUT") as copy:
            for block in copy:
                out.write(block)
    tmp.rename(path)
    print(f"wrote {path} ({path.stat().st_size / 2**20:.0f} MiB)")


def load_synthetic(conn, n: int) -> bool:
    """Create table ``synthetic`` with ``n`` rows; False (with a message) when a size above
    GENERATED_IN_RUN has no generated file."""
    conn.execute("DROP TABLE IF EXISTS synthetic CASCADE")
    if n <= GENERATED_IN_RUN:
        conn.execute(SYNTHETIC % {"n": n})
    else:
        path = synthetic_file(n)
        if not path.exists():
            print(f"skipped {n:,} rows: {path} not generated; generate it with "
                  f"`PLPY_ANON_DATA={DATA} python -m tests.bench.bench_mondrian generate {n}`",
                  flush=True)
            return False
        conn.execute(SYNTHETIC_TABLE)
        with gzip.open(path, "rb") as f, conn.cursor().copy("COPY synthetic FROM STDIN") as copy:
            while block := f.read(1 << 20):
                copy.write(block)
    conn.execute("ALTER TABLE synthetic ADD PRIMARY KEY (id)")
    conn.execute("VACUUM ANALYZE synthetic")
    return True


def vm_hwm_mib(pid: int) -> float:
    """Peak resident memory (VmHWM) of backend ``pid``, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class MemorySampler:
    """Polls /proc/<pid>/status while a build runs: peak RssAnon (the backend's private memory:
    Python objects, numpy arrays, sort and hash memory) and peak RssShmem (shared buffers the
    backend touched, which VmHWM also counts)."""

    def __init__(self, pid: int, every: float = 0.02):
        self.pid, self.every = pid, every
        self.anon = self.shmem = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                fields = dict(line.split(":", 1) for line in
                              Path(f"/proc/{self.pid}/status").read_text().splitlines())
            except OSError:
                return
            self.anon = max(self.anon, int(fields["RssAnon"].split()[0]) / 1024)
            self.shmem = max(self.shmem, int(fields["RssShmem"].split()[0]) / 1024)
            self._stop.wait(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def fresh_backend(conn):
    """A new connection (a backend whose VmHWM starts from scratch), imports paid."""
    other = psycopg.connect(conn.info.dsn, autocommit=True)
    other.execute("SELECT * FROM anon.versions()").fetchall()
    return other


def release_figures(conn, release: str) -> dict:
    return conn.execute("SELECT metrics FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                        "release_name) = %s", (release,)).fetchone()[0]


def bench_adult(conn) -> list[list]:
    df = adult()
    copy_frame(conn, "adult", df, ADULT_TYPES)
    rows = []
    for k in (5, 10, 25, 50, 100):
        t0 = time.perf_counter()
        release = conn.execute(
            "SELECT anon.mondrian_view('adult', k => %s, quasi_identifiers => %s, "
            "sensitive => ARRAY['income'], replace => true)", (k, ADULT_QIS)).fetchone()[0]
        e2e = time.perf_counter() - t0
        # partitioning alone: best of 3 refreshes (the backend measures its own fit)
        fits = [release_figures(conn, release)["seconds"]["partition"]]
        for _ in range(2):
            conn.execute(f"REFRESH MATERIALIZED VIEW {release}")
            fits.append(release_figures(conn, release)["seconds"]["partition"])
        m = release_figures(conn, release)
        rows.append([k, round(min(fits), 4), round(e2e, 3), round(m["ncp_percent"], 2), m["c_dm"],
                     m["n_classes"], m["achieved_k"]])
    return rows


VERIFICATION: list[list] = []


def verification_row(conn, release: str, e2e: float, what: str) -> list:
    """Check seconds (the catalog's figures) against the build: the create's end-to-end seconds
    minus the check's own."""
    v = conn.execute("SELECT verification FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                     "release_name) = %s", (release,)).fetchone()[0]
    check = v["seconds"]
    build = e2e - check
    print(f"verification ({what}): {check:.2f} s = {100 * check / build:.1f} % of build "
          f"({build:.2f} s) (target <= 30 %)", flush=True)
    return [what, v["rows_released"], v["smallest_class"], v["l_by_column"].get("diagnosis"),
            round(build, 2), round(check, 2), round(100 * check / build, 1)]


def build(conn, qis, l=None):
    """One anon.mondrian_view of ``synthetic`` in a fresh backend: (release, seconds, VmHWM MiB
    of that backend)."""
    with fresh_backend(conn) as other:
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        base = vm_hwm_mib(pid)
        t0 = time.perf_counter()
        with MemorySampler(pid) as memory:
            release = other.execute(
                "SELECT anon.mondrian_view('synthetic', k => 10, l => %s, quasi_identifiers => %s, "
                "sensitive => ARRAY['diagnosis'], replace => true)", (l, qis)).fetchone()[0]
        e2e = time.perf_counter() - t0
        return release, e2e, vm_hwm_mib(pid), base, memory


def bench_size(conn, n: int) -> list | None:
    if not load_synthetic(conn, n):
        return None
    t0 = time.perf_counter()
    conn.execute("CREATE TABLE synthetic_copy AS SELECT * FROM synthetic")
    copy_s = time.perf_counter() - t0
    conn.execute("DROP TABLE synthetic_copy")
    qis = ["age", "zip", "sex", "segment", "income", "visit"]
    release, e2e, hwm, base, memory = build(conn, qis)
    m = release_figures(conn, release)
    s = m["seconds"]
    write = e2e - s["python_total"]
    verified, smallest = conn.execute(
        "SELECT verified, (verification ->> 'smallest_class')::int FROM anon.release_status() "
        "WHERE release = %s", (release,)).fetchone()
    sizes = conn.execute(f"SELECT pg_total_relation_size('synthetic'), "
                         f"pg_total_relation_size('{release}')").fetchone()
    ratio_target, hwm_target = TARGETS.get(n, (None, None))
    # the backend's own record of its peak after each Python phase (metrics.memory_mib): what
    # the Python side alone reached, beside the whole build's VmHWM (the SQL after it included)
    phases = m.get("memory_mib", {})
    python_peak = "/".join(str(phases[p]["peak"]) for p in ("read", "fit", "publish") if p in phases)
    print(f"{n:,} rows: end-to-end {e2e:.2f} s, copy {copy_s:.2f} s, ratio {e2e / copy_s:.1f}x"
          f"{f' (target <= {ratio_target:g}x)' if ratio_target else ''}, backend VmHWM "
          f"{hwm:.0f} MiB (fresh backend {base:.0f} MiB; peak private RssAnon {memory.anon:.0f} MiB, shared buffers touched {memory.shmem:.0f} MiB){f' (target <= {hwm_target:g} GiB)' if hwm_target else ''}, "
          f"VmHWM after the Python read/fit/publish {python_peak} MiB, "
          f"verified {verified}, smallest class {smallest}, release {sizes[1] / 2**20:.0f} MiB "
          f"vs source {sizes[0] / 2**20:.0f} MiB", flush=True)
    if n == 1_000_000 and os.environ.get("PLPY_ANON_BENCH_VERIFY", "1") != "0":
        VERIFICATION.append(verification_row(conn, release, e2e, "k = 10"))
        with_l, e2e_l, *_ = build(conn, qis, l=3)
        VERIFICATION.append(verification_row(conn, with_l, e2e_l, "k = 10, l = 3"))
    return [n, round(e2e, 2), s["read"], s["partition"],
            round(s["python_total"] - s["read"] - s["partition"], 3), round(write, 2),
            round(copy_s, 2), round(e2e / copy_s, 2), ratio_target or "", round(hwm), python_peak, round(memory.anon), hwm_target or "",
            bool(verified), smallest, m["achieved_k"], round(m["ncp_percent"], 2),
            round(sizes[1] / 2**20), round(sizes[0] / 2**20)]


def sizes() -> list[int]:
    """PLPY_ANON_BENCH_SIZES="100000,1000000" chooses the synthetic sizes (default: 100k, 1M, 10M)."""
    raw = os.environ.get("PLPY_ANON_BENCH_SIZES", "100000,1000000,10000000")
    return [int(x) for x in raw.split(",") if x.strip()]


def main() -> None:
    out = results_dir()
    with extension_db() as conn:
        adult_rows = bench_adult(conn) if os.environ.get("PLPY_ANON_BENCH_ADULT", "1") != "0" else []
        size_rows = [r for r in (bench_size(conn, n) for n in sizes()) if r]
    t1 = markdown_table(["k", "partition s (best of 3)", "mondrian_view s", "NCP %", "C_DM", "classes",
                         "achieved k"], adult_rows)
    t2 = markdown_table(["rows", "end-to-end s", "read s", "partition s", "generalize+metrics s",
                         "write (SQL join + matview) s", "CREATE TABLE AS s", "ratio to copy",
                         "target ratio", "backend VmHWM MiB", "VmHWM after Python read/fit/publish MiB",
                         "peak RssAnon MiB", "target GiB", "verified",
                         "smallest class", "achieved k", "NCP %", "release MiB", "source MiB"],
                        size_rows)
    t3 = markdown_table(["release", "rows", "smallest class", "smallest l", "build s", "check s",
                         "check % of build (target <= 30 %)"], VERIFICATION)
    text = (f"## Mondrian on UCI Adult (30,162 rows, 8 QIs, no hierarchies)\n\n{t1}\n\n"
            f"## Synthetic rows, 6 QIs, k = 10 (each build in a fresh backend)\n\n{t2}\n\n"
            f"## Verification of the 1,000,000-row releases from their rows (SQL)\n\n{t3}\n")
    print(text)
    (out / "mondrian.md").write_text(text)


if __name__ == "__main__":
    if sys.argv[1:2] == ["generate"]:
        generate(int(sys.argv[2]))
    else:
        main()
