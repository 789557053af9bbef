"""What reading an out-of-core release's regions costs in SQL: one filtered scan of the source per
region (what plpy_anon/db/out_of_core.py does) against one pass for all regions, on the synthetic
table of bench_mondrian.py (PLPY_ANON_REGION_ROWS rows, default 2,500,000; four regions cut on
income and age). Each query aggregates what the reader packs per chunk (ctids, numbers, texts)
for the region's rows; Python is not timed (its decode is the same either way).

* per region: ``SELECT <packed columns> FROM source WHERE <region>``, once per region;
* hashed by region: one pass, ``GROUP BY <region label>`` (its four aggregates held at once);
* sorted by region and block range: one pass, ``GROUP BY label, block / 2048 ORDER BY ...``, the
  ordered stream a one-pass reader would fit the regions from as their rows arrive.
"""
from __future__ import annotations

import os
import time

from tests.bench.bench_out_of_core import load
from tests.bench.common import copy_seconds, extension_db, markdown_table, results_dir

LEFT = ["(income IS NULL OR income < 100000)", "(age IS NULL OR age < 50)"]
REGIONS = [f"{LEFT[0]} AND {LEFT[1]}", f"{LEFT[0]} AND NOT {LEFT[1]}",
           f"NOT {LEFT[0]} AND {LEFT[1]}", f"NOT {LEFT[0]} AND NOT {LEFT[1]}"]
LABEL = "CASE " + " ".join(f"WHEN {r} THEN {i}" for i, r in enumerate(REGIONS)) + " END"
TEXT = "string_agg(coalesce(textsend({}), '\\xff'::bytea), '\\x00'::bytea)"
PACKED = ", ".join(["count(*)", "string_agg(tidsend(c), ''::bytea)"]
                   + [f"string_agg(int8send(coalesce({x}::int8, 0)), ''::bytea)" for x in ("age", "income")]
                   + ["string_agg(float8send(coalesce(visit - DATE '2000-01-01', 0)::float8), ''::bytea)"]
                   + [TEXT.format(x) for x in ("zip", "sex", "segment", "diagnosis")])
ROWS = "(SELECT ctid AS c, * FROM synthetic) AS s"


def timed(conn, query: str) -> float:
    t0 = time.perf_counter()
    conn.execute(query).fetchall()
    return time.perf_counter() - t0


def main() -> None:
    n = int(os.environ.get("PLPY_ANON_REGION_ROWS", "2500000"))
    with extension_db() as conn:
        load(conn, n)
        copy_s = copy_seconds(conn, "synthetic")
        timed(conn, "SELECT count(*) FROM synthetic")                  # cached, as the build's
        per_region = sum(timed(conn, f"SELECT {PACKED} FROM {ROWS} WHERE {r}") for r in REGIONS)
        hashed = timed(conn, f"SELECT r, {PACKED} FROM (SELECT {LABEL} AS r, * FROM {ROWS}) AS x GROUP BY r")
        blocks = "((c::text::point)[0]::int8 / 2048)"
        in_order = timed(conn, f"SELECT r, b, {PACKED} FROM (SELECT {LABEL} AS r, {blocks} AS b, * "
                               f"FROM {ROWS}) AS x GROUP BY r, b ORDER BY r, b")
    rows = [[f"{n:,}", "one filtered scan per region (4)", round(per_region, 2), round(per_region / copy_s, 2)],
            [f"{n:,}", "one pass, hashed by region", round(hashed, 2), round(hashed / copy_s, 2)],
            [f"{n:,}", "one pass, sorted by region and block range", round(in_order, 2), round(in_order / copy_s, 2)]]
    text = (f"## Reading four regions in SQL (copy {copy_s:.2f} s)\n\n"
            + markdown_table(["rows", "reads", "seconds", "x copy"], rows) + "\n")
    print(text)
    (results_dir() / "region_reads.md").write_text(text)


if __name__ == "__main__":
    main()
