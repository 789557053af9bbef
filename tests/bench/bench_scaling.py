"""Issue 14 item 7: where the cost of ``anon.mondrian_view`` goes as rows grow (docs/scaling.md).

Synthetic tables (bench_mondrian's generator: 6 QIs age, zip, sex, segment, income, visit;
sensitive diagnosis) of 100k, 300k, 1M and 2M rows (``PLPY_ANON_SCALING_SIZES=100000,300000``
to choose), k = 10, one run each in one throwaway cluster. Per size: the phases the release
records in ``anon.releases.metrics->'seconds'`` (read, partition, python_total: the rest of the
Python is encode + per-class bounds + metrics), the SQL after the Python (end to end minus
python_total: join back, bounds, containment filter, matview write, verification; the
verification's own seconds from ``anon.releases.verification``), and ``CREATE TABLE AS`` of the
source as the floor. Each phase is then fitted by least squares through the origin to
``a * n`` and to ``a * n * log2 n``; the table gives both constants and the largest relative
residual, the better model first.
"""
from __future__ import annotations

import math
import os
import time

from tests.bench.bench_mondrian import SYNTHETIC, release_figures
from tests.bench.common import extension_db, markdown_table, results_dir

SIZES = [int(s) for s in os.environ.get("PLPY_ANON_SCALING_SIZES",
                                        "100000,300000,1000000,2000000").split(",")]
QIS = ["age", "zip", "sex", "segment", "income", "visit"]
PHASES = ["read", "partition", "encode+metrics", "sql_after_python", "verification", "end_to_end",
          "copy"]


def measure(conn, n: int) -> dict:
    table = f"synthetic_{n}"
    conn.execute(SYNTHETIC.replace("synthetic", table).replace("generate_series(1, 1000000)",
                                                                f"generate_series(1, {n})"))
    conn.execute(f"VACUUM ANALYZE {table}")
    t0 = time.perf_counter()
    conn.execute(f"CREATE TABLE {table}_copy AS SELECT * FROM {table}")
    copy_s = time.perf_counter() - t0
    conn.execute(f"DROP TABLE {table}_copy")
    t0 = time.perf_counter()
    release = conn.execute(
        "SELECT anon.mondrian_view(%s, k => 10, quasi_identifiers => %s, "
        "sensitive => ARRAY['diagnosis'])", (table, QIS)).fetchone()[0]
    e2e = time.perf_counter() - t0
    m = release_figures(conn, release)
    s = m["seconds"]
    verification = conn.execute(
        "SELECT (verification->>'seconds')::float FROM anon.releases WHERE "
        "format('%%I.%%I', release_schema, release_name) = %s", (release,)).fetchone()[0]
    row = {"n": n, "read": s["read"], "partition": s["partition"],
           "encode+metrics": s["python_total"] - s["read"] - s["partition"],
           "sql_after_python": e2e - s["python_total"], "verification": verification,
           "end_to_end": e2e, "copy": copy_s, "classes": m["n_classes"],
           "achieved_k": m["achieved_k"], "ncp": m["ncp_percent"]}
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    conn.execute(f"DROP TABLE {table} CASCADE")
    return row


def fit_through_origin(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(a, largest relative residual, RSS) of ``y = a * x``."""
    a = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    res = [y - a * x for x, y in zip(xs, ys)]
    return a, max(abs(r) / y for r, y in zip(res, ys) if y > 0), sum(r * r for r in res)


def fit_rows(rows: list[dict]) -> list[list]:
    ns = [r["n"] for r in rows]
    out = []
    for phase in PHASES:
        ys = [r[phase] for r in rows]
        lin = fit_through_origin([float(n) for n in ns], ys)
        nlog = fit_through_origin([n * math.log2(n) for n in ns], ys)
        best = "a·n" if lin[2] <= nlog[2] else "a·n·log2 n"
        out.append([phase, best, f"{lin[0] * 1e6:.3f}", f"{100 * lin[1]:.1f}",
                    f"{nlog[0] * 1e6:.4f}", f"{100 * nlog[1]:.1f}",
                    f"{100 * ys[-1] / rows[-1]['end_to_end']:.1f}"])
    return out


def main() -> None:
    rows = []
    with extension_db() as conn:
        for n in SIZES:
            rows.append(measure(conn, n))
    t1 = markdown_table(["rows", "read s", "partition s", "encode+metrics s",
                         "SQL after Python s", "(of which verification s)", "end to end s",
                         "CREATE TABLE AS s", "classes", "achieved k", "NCP %"],
                        [[r["n"], round(r["read"], 3), round(r["partition"], 3),
                          round(r["encode+metrics"], 3), round(r["sql_after_python"], 2),
                          round(r["verification"], 2), round(r["end_to_end"], 2),
                          round(r["copy"], 2), r["classes"], r["achieved_k"], round(r["ncp"], 2)]
                         for r in rows])
    t2 = markdown_table(["phase", "better fit", "a (µs per row) in a·n", "max rel. residual %",
                         "a (µs per row·log2 n) in a·n·log2 n", "max rel. residual %",
                         f"share of end to end at n = {rows[-1]['n']:,} %"], fit_rows(rows))
    text = (f"## anon.mondrian_view, synthetic 6 QIs, k = 10, by size\n\n{t1}\n\n"
            f"## Fitted per phase (least squares through the origin)\n\n{t2}\n")
    print(text)
    (results_dir() / "scaling.md").write_text(text)


if __name__ == "__main__":
    main()
