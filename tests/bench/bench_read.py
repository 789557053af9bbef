"""The read of a release's source into Python alone (``reader.read_columns``, called as the
default Mondrian build calls it), against a plain copy of the source taken in the same run
(``CREATE TABLE AS``, alternating with the reads; medians of PLPY_ANON_READ_REPEAT runs, default 3);
beside it the build's whole read phase (``load_release_rows``: the read, then the QIs' encoding)
of a release (k = 10) built from the same table and verified from its rows. Target: the read <= 2x
the copy.

The table is bench_layout's synthetic shape (6 QIs: three int columns, three text columns; one
sensitive text column), PLPY_ANON_READ_ROWS rows (default "1000000"; several sizes separated by
commas), in a throwaway cluster with the benchmarks' settings (common.extension_db). The read is
timed inside the backend (the imports paid before); after the timings, what it read is checked
against the table in SQL: the rows, each column's NULLs and distinct values."""
from __future__ import annotations

import os
import statistics

from tests.bench.bench_production import SYNTH
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

TARGET = 2.0
NUMERIC = ["a_int", "b_int", "c_int"]
TEXT = ["d_txt", "e_txt", "f_txt", "s_txt"]     # the categorical QIs and the sensitive column
QIS = "ARRAY['a_int','b_int','c_int','d_txt','e_txt','f_txt']"

READ = """
DO $do$
import time
from plpy_anon.db import columns, guards, reader
tbl = guards.table(plpy, 'synth_%(n)d')
cols = {c.name: c for c in columns.table_columns(plpy, tbl)}
t0 = time.perf_counter()
data = reader.read_columns(plpy, tbl, [cols[c] for c in %(numeric)r], [cols[c] for c in %(text)r],
                           located=False, exact=True)
took = time.perf_counter() - t0
if %(check)r:
    truth = plpy.execute("SELECT count(*) AS n, " + ", ".join(
        "count(%%s) AS v_%%s, count(DISTINCT %%s) AS d_%%s" %% (c, c, c, c)
        for c in %(numeric)r + %(text)r) + " FROM synth_%(n)d")[0]
    assert data.n_rows == truth["n"], (data.n_rows, truth["n"])
    for c in %(numeric)r:
        d = data.columns[c]
        present = d.values if d.null_mask is None else d.values[~d.null_mask]
        assert present.size == truth["v_" + c] and len(set(present.tolist())) == truth["d_" + c], c
    for c in %(text)r:
        d = data.columns[c]
        assert (d.codes >= 0).sum() == truth["v_" + c] and len(d.dictionary) == truth["d_" + c], c
plpy.notice("read %%.6f" %% took)
$do$ LANGUAGE plpython3u
"""


#: the build's whole read phase (read_columns, then the QIs' encoding) of a release made before
PHASE = """
DO $do$
import time
from plpy_anon.db import release_rows
from plpy_anon.db.methods import mondrian_family
from plpy_anon.db.methods.registry import REGISTRY
from plpy_anon.db.sqltext import jsonb
release = release_rows.by_id(plpy, %(release_id)d)
spec = REGISTRY[release["method"]].spec_of(jsonb(release["parameters"]))
t0 = time.perf_counter()
rows = mondrian_family.load_release_rows(plpy, release, spec, with_target=False)
plpy.notice("read %%.6f" %% (time.perf_counter() - t0))
$do$ LANGUAGE plpython3u
"""


def read_seconds(conn, n: int, check: bool) -> float:
    return notice_seconds(conn, READ % {"n": n, "numeric": NUMERIC, "text": TEXT, "check": check})


def notice_seconds(conn, statement: str) -> float:
    """The seconds a DO block timed inside the backend and gave as its notice ``read <s>``."""
    notices = []

    def keep(diagnostic):           # its text: the diagnostic is freed after the handler returns
        notices.append(diagnostic.message_primary or "")

    conn.add_notice_handler(keep)
    try:
        conn.execute(statement)
    finally:
        conn.remove_notice_handler(keep)
    return float(next(m for m in notices if m.startswith("read ")).split()[1])


def measure(conn, n: int, repeat: int) -> list[list]:
    conn.execute(SYNTH.format(n=n))
    conn.execute(f"VACUUM ANALYZE synth_{n}")
    read_seconds(conn, n, check=True)                # checked once; warms the buffers and imports
    name = conn.execute(f"SELECT anon.mondrian_view('synth_{n}', k => 10, sensitive => "
                        f"ARRAY['s_txt'], quasi_identifiers => {QIS}, release_name => 'read_{n}')"
                        ).fetchone()[0]
    smallest, released = conn.execute(
        f"SELECT min(n), sum(n) FROM (SELECT count(*) AS n FROM {name} "
        f"GROUP BY a_int, b_int, c_int, d_txt, e_txt, f_txt) AS c").fetchone()
    release_id = conn.execute("SELECT release_id FROM anon.releases WHERE release_name = %s",
                              (f"read_{n}",)).fetchone()[0]
    copies, reads, phases = [], [], []
    for _ in range(repeat):
        copies.append(copy_seconds(conn, f"synth_{n}"))
        reads.append(read_seconds(conn, n, check=False))
        phases.append(notice_seconds(conn, PHASE % {"release_id": release_id}))
    copies.append(copy_seconds(conn, f"synth_{n}"))
    copy = statistics.median(copies)
    rows = []
    for label, times in (("read_columns", reads), ("build's read phase (read + encoding)", phases)):
        took = statistics.median(times)
        print(f"{n:,} rows, {label}: {took:.2f} s = {took / copy:.2f}x copy ({copy:.2f} s) "
              f"(target <= {TARGET:g}x); runs {', '.join(f'{r:.2f}' for r in times)} s, copies "
              f"{', '.join(f'{c:.2f}' for c in copies)} s", flush=True)
        rows.append([f"{n:,}", label, f"{took:.2f}", f"{copy:.2f}", f"{took / copy:.2f}x",
                     f"{TARGET:g}x"])
    print(f"{n:,} rows: read_columns checked against the table in SQL; the release built from the "
          f"same read, verified from its rows: smallest class {smallest} (k = 10), "
          f"{released:,} rows", flush=True)
    conn.execute(f"SELECT anon.drop_release('{name}')")
    conn.execute(f"DROP TABLE synth_{n}")
    return rows


def main() -> None:
    sizes = [int(s) for s in os.environ.get("PLPY_ANON_READ_ROWS", "1000000").split(",")]
    repeat = int(os.environ.get("PLPY_ANON_READ_REPEAT", "3"))
    with extension_db() as conn:
        rows = [row for n in sizes for row in measure(conn, n, repeat)]
    out = results_dir() / "read.md"
    out.write_text("# The read of a source into Python against a copy\n\n"
                   + markdown_table(["rows", "what", "seconds", "copy s", "ratio", "target"], rows) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
