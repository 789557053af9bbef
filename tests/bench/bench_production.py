"""Issue 27's figures: (a) temporary files written by one build against the source's size (target:
at most 2x), at a server's default work_mem; (b) the soak: 8 writers and 2 analysts on shared
releases, reading at REPEATABLE READ, for 10 minutes (bench_soak.py; target: 0 deadlocks, 0 empty
reads, 0 unclean errors).

PLPY_ANON_TEMP_ROWS (default "200000,1000000,2000000") and PLPY_ANON_SOAK_SECONDS (default 600)
change the sizes and the soak's length."""
from __future__ import annotations

import os
import time

import psycopg

from plpy_anon.cluster import ThrowawayCluster
from tests.bench.bench_soak import soak
from tests.bench.common import markdown_table, results_dir

SYNTH = """
SELECT setseed(0.20261122);
CREATE TABLE synth_{n} AS SELECT (17 + floor(random() * 74))::int AS a_int,
  floor(random() * random() * 5000)::int AS b_int, floor(random() * 1000000)::int AS c_int,
  'd' || floor(random() * 5)::int AS d_txt, 'e' || floor(power(random(), 2) * 40)::int AS e_txt,
  'f' || lpad(floor(random() * 200)::int::text, 3, '0') AS f_txt, 's' || floor(random() * 12)::int AS s_txt
FROM generate_series(1, {n}) g;
"""


def temp_bytes(conn) -> int:
    conn.execute("SELECT pg_stat_force_next_flush()")
    return conn.execute("SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()"
                        ).fetchone()[0]


def temp_files(sizes: list[int]) -> list[list]:
    rows = []
    # the server's defaults (work_mem 4MB), as a DBA has them; a safety limit on the disk
    with ThrowawayCluster(settings={"temp_file_limit": "'40GB'"}) as cluster, \
            psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION plpy_anon CASCADE")
        conn.execute("SELECT * FROM anon.versions()").fetchall()
        for n in sizes:
            conn.execute(SYNTH.format(n=n))
            conn.execute(f"VACUUM ANALYZE synth_{n}")
            source = conn.execute(f"SELECT pg_total_relation_size('synth_{n}')").fetchone()[0]
            before = temp_bytes(conn)
            t0 = time.perf_counter()
            conn.execute(f"SELECT anon.mondrian_view('synth_{n}', k => 10, sensitive => ARRAY['s_txt'], "
                         "quasi_identifiers => ARRAY['a_int','b_int','c_int','d_txt','e_txt','f_txt'])")
            seconds = time.perf_counter() - t0
            written = temp_bytes(conn) - before
            ratio = written / source
            rows.append([f"{n:,}", f"{source / 2**20:.0f} MB", f"{written / 2**20:.0f} MB",
                         f"{ratio:.1f}x", "2x", "met" if ratio <= 2 else "NOT met", f"{seconds:.1f} s"])
            print(f"temp files, {n:,} rows: source {source / 2**20:.0f} MB, build wrote "
                  f"{written / 2**20:.0f} MB = {ratio:.1f}x (target <= 2x), {seconds:.1f} s", flush=True)
            conn.execute(f"SELECT anon.drop_release('release.synth_{n}_k10')")
            conn.execute(f"DROP TABLE synth_{n}")
    return rows


def main() -> None:
    sizes = [int(s) for s in os.environ.get("PLPY_ANON_TEMP_ROWS", "200000,1000000,2000000").split(",")]
    table = temp_files(sizes)
    seconds = float(os.environ.get("PLPY_ANON_SOAK_SECONDS", "600"))
    result = soak(seconds)
    deadlocks = result.by_sqlstate().get("40P01", 0)
    print(f"soak, {seconds:.0f} s: {result.summary()}")
    print(f"soak: deadlocks {deadlocks} (target 0), unclean errors {len(result.failures)} (target 0)")
    for failure in result.failures[:10]:
        print("   ", failure)
    out = results_dir() / "production.md"
    out.write_text(
        "# Issue 27: temporary files per build and the soak\n\n"
        + markdown_table(["rows", "source", "temp files", "ratio", "target", "", "build"], table)
        + f"\n\nSoak ({seconds:.0f} s): {result.summary()}\n")
    print(f"wrote {out}")
