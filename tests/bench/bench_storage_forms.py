"""Forms of the default 1M build's storage SQL that were tried against the one it writes, each
measured on the same release.

    python -m tests.bench storage_forms   # PLPY_ANON_FORMS_REPEATS=7, PLPY_ANON_FORMS_BUILDS=5,
                                          # PLPY_ANON_FORMS_SLICE_ROWS=1048576,65536

bench_build's release (the synthetic table, 6 QIs, sensitive diagnosis, k = 10, compact layout)
is built once; then:

* casts: the storage's classes as the texts the casts read (``<column>::text``, a table of one
  row per class), and beside each, the same class in another form a run could hand SQL
  (a range's bounds as numbers, a date's as days since 2000-01-01), cast or constructed; each
  statement's backend CPU (/proc/<pid>/schedstat) the smallest and median of the repeats, a
  ``count(*)`` of the table beside them (what every statement pays to scan it);
* slices: the whole build in new backends with each number of rows per ``anon.partition_slice``
  (``mondrian_family.SLICE_ROWS``, set in the backend before the build), alternately, the
  backend's CPU, system CPU and minor page faults of each build, paired by round; the view's
  rows' md5 (ordered by their text) after each variant's first build, to show the same release.

The machine's load is printed beside each figure.
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

from tests.bench.bench_build import QIS, load
from tests.bench.bench_mondrian import fresh_backend, load_synthetic
from tests.bench.bench_storage import backend_cpu, system_cpu
from tests.bench.common import extension_db, markdown_table, results_dir

BUILD = ("SELECT anon.mondrian_view('synthetic', k => 10, quasi_identifiers => %s, "
         "sensitive => ARRAY['diagnosis'], replace => true)")

# the classes as the storage's casts read them, and the same bounds as numbers
FORMS_TABLE = """
CREATE TABLE bench_forms AS
SELECT age::text AS age, income::text AS income, visit::text AS visit, zip::text AS zip,
       sex::text AS sex, segment::text AS segment, diagnosis::text AS diagnosis,
       lower(age) || ',' || (upper(age) - 1) AS age_bounds,
       (lower(visit) - date '2000-01-01') || ',' || (upper(visit) - 1 - date '2000-01-01') AS visit_days,
       lower(visit) - date '2000-01-01' AS visit_low, upper(visit) - 1 - date '2000-01-01' AS visit_high
FROM {storage}"""

FORMS = [
    ("count(*) (the scan)", "count(*)"),
    ("age::int4range (range_in)", "count(age::pg_catalog.int4range)"),
    ("age: int4range of 'lo,hi' split", ("count(pg_catalog.int4range(pg_catalog.split_part(age_bounds, ',', 1)::int, "
                                        "pg_catalog.split_part(age_bounds, ',', 2)::int, '[]'))")),
    ("visit::daterange (range_in)", "count(visit::pg_catalog.daterange)"),
    ("visit: daterange of its bounds' texts split", ("count(pg_catalog.daterange(pg_catalog.split_part(pg_catalog.substr(visit, 2), ',', 1)::date, "
                                                    "pg_catalog.rtrim(pg_catalog.split_part(visit, ',', 2), ')')::date))")),
    ("visit: daterange of 'days,days' split", ("count(pg_catalog.daterange(date '2000-01-01' + pg_catalog.split_part(visit_days, ',', 1)::int, "
                                              "date '2000-01-01' + pg_catalog.split_part(visit_days, ',', 2)::int, '[]'))")),
    ("visit: daterange of two int columns", ("count(pg_catalog.daterange(date '2000-01-01' + visit_low, "
                                            "date '2000-01-01' + visit_high, '[]'))")),
    ("zip::text[] (array_in)", "count(zip::pg_catalog.text[])"),
    ("diagnosis::text[] (array_in)", "count(diagnosis::pg_catalog.text[])"),
]


def repeats() -> int:
    return int(os.environ.get("PLPY_ANON_FORMS_REPEATS", "7"))


def minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def casts(conn, storage: str) -> list[list]:
    conn.execute(FORMS_TABLE.format(storage=storage))
    conn.execute("VACUUM ANALYZE bench_forms")
    same = conn.execute("""SELECT count(*) FILTER (WHERE
            pg_catalog.daterange(date '2000-01-01' + visit_low, date '2000-01-01' + visit_high, '[]')
                IS DISTINCT FROM visit::pg_catalog.daterange
            OR pg_catalog.int4range(pg_catalog.split_part(age_bounds, ',', 1)::int,
                                    pg_catalog.split_part(age_bounds, ',', 2)::int, '[]')
                IS DISTINCT FROM age::pg_catalog.int4range), count(*) FROM bench_forms""").fetchone()
    print(f"{same[1]:,} classes; other forms unequal to the stored ranges: {same[0]}", flush=True)
    pid = conn.info.backend_pid
    rows = []
    for name, expression in FORMS:
        spent = []
        for _ in range(repeats()):
            cpu0 = backend_cpu(pid)
            conn.execute(f"SELECT {expression} FROM bench_forms").fetchall()
            spent.append(backend_cpu(pid) - cpu0)
        low, median = min(spent), statistics.median(spent)
        print(f"{name}: backend CPU min {low:.4f} s, median {median:.4f} s; load {load()}", flush=True)
        rows.append([name, f"{low:.4f}", f"{median:.4f}", load()])
    conn.execute("DROP TABLE bench_forms")
    return rows


def slices(conn) -> list[list]:
    variants = [int(v) for v in
                os.environ.get("PLPY_ANON_FORMS_SLICE_ROWS", "1048576,65536").split(",")]
    builds = int(os.environ.get("PLPY_ANON_FORMS_BUILDS", "5"))
    runs = {v: [] for v in variants}
    digests = {}
    for round_no in range(builds):
        for v in variants:
            with fresh_backend(conn) as other:
                pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
                other.execute("DO $$ import plpy_anon.db.methods.mondrian_family as m; "
                              f"m.SLICE_ROWS = {v} $$ LANGUAGE plpython3u")
                cpu0, sys0, faults0 = backend_cpu(pid), system_cpu(pid), minor_faults(pid)
                release = other.execute(BUILD, (QIS,)).fetchone()[0]
                run = (backend_cpu(pid) - cpu0, system_cpu(pid) - sys0, minor_faults(pid) - faults0)
            runs[v].append(run)
            if v not in digests:
                digests[v] = conn.execute(f"SELECT md5(string_agg(t::text, E'\\n' ORDER BY t::text)) "
                                          f"FROM {release} AS t").fetchone()[0]
            print(f"round {round_no}, {v:,} rows per slice: backend CPU {run[0]:.3f} s, system "
                  f"{run[1]:.3f} s, minor faults {run[2]:,}; load {load()}", flush=True)
    base = variants[0]
    rows = []
    for v in variants:
        cpus = [r[0] for r in runs[v]]
        paired = [b[0] - a[0] for a, b in zip(runs[base], runs[v])]
        line = [f"{v:,}", f"{min(cpus):.3f}", f"{statistics.median(cpus):.3f}",
                f"{statistics.median(r[1] for r in runs[v]):.3f}",
                f"{statistics.median(r[2] for r in runs[v]):,.0f}",
                "-" if v == base else f"{statistics.median(paired):+.3f} "
                                      f"({sum(d < 0 for d in paired)} of {len(paired)} cheaper)",
                digests[v]]
        print(" | ".join(line), flush=True)
        rows.append(line)
    return rows


def main() -> None:
    with extension_db() as conn:
        if not load_synthetic(conn, 1_000_000):
            return
        release = conn.execute(BUILD, (QIS,)).fetchone()[0]
        schema, storage = conn.execute(
            "SELECT release_schema, parameters ->> 'storage' FROM anon.releases "
            "WHERE format('%%I.%%I', release_schema, release_name) = %s", (release,)).fetchone()
        cast_rows = casts(conn, f'"{schema}"."{storage}"')
        slice_rows = slices(conn)
    text = ("## Forms of the storage SQL tried (backend CPU)\n\n"
            + markdown_table(["form", "min s", "median s", "load"], cast_rows)
            + "\n\n" + markdown_table(["rows per slice", "build CPU min s", "median s",
                                       "system median s", "minor faults median",
                                       "paired CPU median", "view md5"], slice_rows) + "\n")
    print(text)
    (results_dir() / "storage_forms.md").write_text(text)


if __name__ == "__main__":
    main()
