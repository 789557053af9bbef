"""Issue 28's layout figures: the flat and the compact release of one table side by side, each
against a plain copy of the source taken in the same run (``CREATE TABLE AS``, before and after
the builds; the mean is the reference):

* end to end / copy (target <= 5x at 1M rows, <= 7x at 10M);
* release storage / source size (target <= 1.5x);
* temporary files written by the build / source size (target <= 2x, issue 27);
* analysts' queries on the compact release / the same query on a flat table of the same rows
  (target <= 1.5x): a filter on a range, a filter on a set, a GROUP BY, every row;
* the build's backend memory: VmHWM and the sampled peak RssAnon (targets at 10M: 2,048 and
  1,536 MiB);
* each release verified from its rows (smallest class, rows).

The table is issue 27's synthetic shape (6 QIs, 1 sensitive column, k = 10). PLPY_ANON_LAYOUT_ROWS
(default "1000000") sets the sizes, PLPY_ANON_LAYOUTS (default "flat,compact") the layouts built;
PLPY_ANON_LAYOUT_NUMERIC=1 makes b_int and c_int numeric columns (read exactly as text beside
their float8 ordering). One throwaway cluster at the server's defaults but
shared_buffers 512MB."""
from __future__ import annotations

import os
import statistics
import time

import psycopg

from plpy_anon.cluster import ThrowawayCluster
from tests.bench.bench_mondrian import MemorySampler, fresh_backend, vm_hwm_mib
from tests.bench.bench_production import SYNTH, temp_bytes
from tests.bench.common import copy_seconds, markdown_table, results_dir

QIS = "ARRAY['a_int','b_int','c_int','d_txt','e_txt','f_txt']"
NUMERIC = os.environ.get("PLPY_ANON_LAYOUT_NUMERIC", "") == "1"
RATIO_TARGETS = {1_000_000: 5.0, 10_000_000: 7.0}
MEMORY_TARGETS = {10_000_000: " (targets <= 2,048 / 1,536 MiB)"}
QUERIES = {
    "range filter": "SELECT count(*) FROM {r} WHERE a_int @> 42",
    "set filter, grouped": "SELECT s_txt, count(*) FROM {r} WHERE 'd1' = ANY(d_txt) GROUP BY s_txt",
    "GROUP BY a QI": "SELECT d_txt, count(*) FROM {r} GROUP BY d_txt",
    "every row": "SELECT count(*), count(DISTINCT s_txt) FROM (SELECT * FROM {r} OFFSET 0) AS x",
}


def seconds(conn, query: str, repeat: int = 3) -> float:
    """Median wall time of ``query`` over ``repeat`` runs."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        conn.execute(query).fetchall()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build(conn, n: int, layout: str) -> dict:
    """One build in a fresh backend (its VmHWM and sampled RssAnon peak are the build's)."""
    before = temp_bytes(conn)
    with fresh_backend(conn) as other:
        pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        t0 = time.perf_counter()
        with MemorySampler(pid) as memory:
            name = other.execute(
                f"SELECT anon.mondrian_view('synth_{n}', k => 10, sensitive => ARRAY['s_txt'], "
                f"quasi_identifiers => {QIS}, release_name => 'synth_{n}_{layout}', "
                f"layout => '{layout}')").fetchone()[0]
        took = time.perf_counter() - t0
        hwm = vm_hwm_mib(pid)
    written = temp_bytes(conn) - before
    storage = f"{name}_classes" if layout == "compact" else name
    size = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (storage,)).fetchone()[0]
    smallest, rows = conn.execute(
        f"SELECT min(n), sum(n) FROM (SELECT count(*) AS n FROM {name} "
        f"GROUP BY a_int, b_int, c_int, d_txt, e_txt, f_txt) AS c").fetchone()
    return {"name": name, "seconds": took, "temp": written, "size": size,
            "smallest": smallest, "rows": rows, "hwm": hwm, "anon": memory.anon}


def measure(conn, n: int) -> tuple[list[list], list[list]]:
    conn.execute(SYNTH.format(n=n))
    if NUMERIC:
        conn.execute(f"ALTER TABLE synth_{n} ALTER b_int TYPE numeric, ALTER c_int TYPE numeric")
    conn.execute(f"VACUUM ANALYZE synth_{n}")
    source = conn.execute(f"SELECT pg_total_relation_size('synth_{n}')").fetchone()[0]
    copies = [copy_seconds(conn, f"synth_{n}")]
    layouts = os.environ.get("PLPY_ANON_LAYOUTS", "flat,compact").split(",")
    built = {layout: build(conn, n, layout) for layout in layouts}
    copies.append(copy_seconds(conn, f"synth_{n}"))
    copy = statistics.mean(copies)
    target = RATIO_TARGETS.get(n)
    rows = []
    for layout, b in built.items():
        ratio = b["seconds"] / copy
        print(f"{n:,} rows{' (numeric b_int, c_int)' if NUMERIC else ''}, {layout}: {b['seconds']:.1f} s = {ratio:.1f}x copy ({copy:.2f} s)"
              f"{f' (target <= {target:g}x)' if target else ''}; storage {b['size'] / 2**20:.0f} MB = "
              f"{b['size'] / source:.2f}x source {source / 2**20:.0f} MB (target <= 1.5x); temp files "
              f"{b['temp'] / 2**20:.0f} MB = {b['temp'] / source:.1f}x (target <= 2x); backend VmHWM "
              f"{b['hwm']:.0f} MiB, peak RssAnon {b['anon']:.0f} MiB{MEMORY_TARGETS.get(n, '')}; verified from its "
              f"rows: smallest class {b['smallest']} (k = 10), {b['rows']:,} rows", flush=True)
        rows.append([f"{n:,}{' numeric' if NUMERIC else ''}", layout, f"{b['seconds']:.1f}", f"{copy:.2f}", f"{ratio:.1f}x",
                     f"{target:g}x" if target else "", f"{b['size'] / source:.2f}x", "1.5x",
                     f"{b['temp'] / source:.1f}x", "2x", f"{b['hwm']:.0f} / {b['anon']:.0f}",
                     b["smallest"], f"{b['rows']:,}"])
    if "compact" not in built:
        return rows, []
    # the same rows as a plain table: what an analyst's query costs on a flat table
    conn.execute(f"CREATE TABLE flat_{n} AS SELECT * FROM {built['compact']['name']}")
    conn.execute(f"VACUUM ANALYZE flat_{n}")
    conn.execute(f"ANALYZE {built['compact']['name']}_classes")
    queries = []
    for label, query in QUERIES.items():
        on_view = seconds(conn, query.format(r=built["compact"]["name"]))
        on_table = seconds(conn, query.format(r=f"flat_{n}"))
        print(f"{n:,} rows, analysts' query '{label}': compact {on_view * 1000:.0f} ms, flat table "
              f"{on_table * 1000:.0f} ms = {on_view / on_table:.2f}x (target <= 1.5x)", flush=True)
        queries.append([f"{n:,}", label, f"{on_view * 1000:.0f}", f"{on_table * 1000:.0f}",
                        f"{on_view / on_table:.2f}x", "1.5x"])
    for b in built.values():
        conn.execute("SELECT anon.drop_release(%s)", (b["name"],))
    conn.execute(f"DROP TABLE flat_{n}, synth_{n}")
    return rows, queries


def main() -> None:
    sizes = [int(s) for s in os.environ.get("PLPY_ANON_LAYOUT_ROWS", "1000000").split(",")]
    builds, queries = [], []
    with ThrowawayCluster(settings={"shared_buffers": "'512MB'", "temp_file_limit": "'40GB'"}) as cluster, \
            psycopg.connect(cluster.dsn(), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION plpy_anon CASCADE")
        conn.execute("SELECT * FROM anon.versions()").fetchall()
        for n in sizes:
            b, q = measure(conn, n)
            builds += b
            queries += q
    out = results_dir() / "layout.md"
    out.write_text(
        "# Issue 28: flat and compact releases\n\n"
        + markdown_table(["rows", "layout", "build s", "copy s", "ratio", "target", "storage / source",
                          "target", "temp / source", "target", "VmHWM / RssAnon MiB", "smallest class",
                          "rows released"], builds)
        + "\n\n## Analysts' queries: compact release against a flat table of the same rows\n\n"
        + markdown_table(["rows", "query", "compact ms", "flat table ms", "ratio", "target"], queries)
        + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
