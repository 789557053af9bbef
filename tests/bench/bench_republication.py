"""Issue 30's experiment: what an analyst who keeps every version of a refreshed release learns
by intersecting them (the attack behind m-invariance, Xiao & Tao, SIGMOD 2007). Today's baseline,
before any refresh mode that keeps a guarantee across versions.

20,000 Adult rows (QIs age, sex, race, education_num, marital_status; sensitive occupation),
``anon.mondrian_view(k => 5, l => 3)``; before each of 12 refreshes 2 % of the rows are deleted
and 2 % new ones inserted from the rest of Adult; 500 people stay throughout. For each of them
and each version, the candidate occupations are those of every released class whose ranges and
sets hold the person's QIs (computed from the released rows alone, as the analyst would); the
true value is in every version's set, so intersecting the sets can only shrink them. Printed per
number of refreshes kept: people disclosed (one candidate left) and people left with fewer than
l candidates (target for a republication mode: 0 and 0 after 12 refreshes), and the refresh
time. PLPY_ANON_REPUBLICATION_SEED sets the random choices (default 30).
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np

from tests.bench.common import adult, copy_frame, extension_db, markdown_table, results_dir

QIS = ["age", "sex", "race", "education_num", "marital_status"]
TYPES = {"id": "int", "age": "int", "sex": "text", "race": "text", "education_num": "int",
         "marital_status": "text", "occupation": "text"}
ROWS, STAYERS, REFRESHES, CHURN, K, L = 20_000, 500, 12, 0.02, 5, 3
KEPT = (1, 3, 6, 9, 12)

# the classes of one version (its QIs and its distinct occupations), for every version kept
CLASSES = """
INSERT INTO classes SELECT %s, age, sex, race, education_num, marital_status,
       array_agg(DISTINCT occupation)
FROM {release} GROUP BY age, sex, race, education_num, marital_status"""
# each stayer's candidate occupations in each version: every class that could hold them
CANDIDATES = """
CREATE TABLE candidates AS
SELECT p.id, c.version, o.occupation
FROM stayers p JOIN classes c
  ON c.age @> p.age AND p.sex = ANY(c.sex) AND p.race = ANY(c.race)
 AND c.education_num @> p.education_num AND p.marital_status = ANY(c.marital_status)
CROSS JOIN LATERAL unnest(c.occupations) AS o(occupation)
GROUP BY 1, 2, 3"""
# after versions 0..kept: how many candidates survive in every version, per stayer
SURVIVING = """
SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n < %(l)s), count(*)
FROM (SELECT id, count(*) AS n FROM (
        SELECT id, occupation FROM candidates WHERE version <= %(kept)s
        GROUP BY id, occupation HAVING count(DISTINCT version) = %(kept)s + 1) AS every_version
      GROUP BY id) AS per_person"""


def main() -> None:
    seed = int(os.environ.get("PLPY_ANON_REPUBLICATION_SEED", "30"))
    rng = np.random.default_rng(seed)
    df = adult()[[c for c in TYPES if c != "id"]].copy()
    df.insert(0, "id", np.arange(1, len(df) + 1))
    order = rng.permutation(len(df))
    live, pool = df.iloc[order[:ROWS]], df.iloc[order[ROWS:]]
    stayers = live.iloc[:STAYERS]
    with extension_db() as conn:
        conn.execute("SELECT setseed(%s)", (1 / (seed + 1),))
        copy_frame(conn, "adult_live", live, TYPES)
        copy_frame(conn, "stayers", stayers, TYPES)
        release = conn.execute(
            "SELECT anon.mondrian_view('adult_live', k => %s, l => %s, quasi_identifiers => %s, "
            "sensitive => ARRAY['occupation'], identifiers => ARRAY['id'])", (K, L, QIS)).fetchone()[0]
        conn.execute("CREATE TABLE classes (version int, age int4range, sex text[], race text[], "
                     "education_num int4range, marital_status text[], occupations text[])")
        conn.execute(CLASSES.format(release=release), (0,))
        refresh_s, pool_at, churn = [], 0, int(ROWS * CHURN)
        for version in range(1, REFRESHES + 1):
            gone = conn.execute(
                "SELECT id FROM adult_live WHERE id NOT IN (SELECT id FROM stayers) "
                "ORDER BY random() LIMIT %s", (churn,)).fetchall()
            conn.execute("DELETE FROM adult_live WHERE id = ANY(%s)", ([g[0] for g in gone],))
            copy_frame(conn, "arrivals", pool.iloc[pool_at:pool_at + churn], TYPES)
            conn.execute("INSERT INTO adult_live SELECT * FROM arrivals")
            conn.execute("DROP TABLE arrivals")
            pool_at += churn
            t0 = time.perf_counter()
            conn.execute("SELECT anon.refresh(%s)", (release,))
            refresh_s.append(time.perf_counter() - t0)
            conn.execute(CLASSES.format(release=release), (version,))
        conn.execute(CANDIDATES)
        rows = []
        for kept in KEPT:
            disclosed, below_l, people = conn.execute(SURVIVING, {"l": L, "kept": kept}).fetchone()
            print(f"{kept} refreshes kept: {disclosed} of {people} stayers disclosed (target 0), "
                  f"{below_l} with fewer than l = {L} candidates (target 0)", flush=True)
            rows.append([kept, people, disclosed, "0", below_l, "0"])
        median = statistics.median(refresh_s)
        print(f"refresh (anon.refresh, {ROWS:,} rows): median {median:.2f} s over {REFRESHES}", flush=True)
    out = results_dir() / "republication.md"
    out.write_text(
        "# Issue 30: versions intersected (today's refreshes)\n\n"
        + markdown_table(["refreshes kept", "stayers", "disclosed", "target", f"fewer than l = {L}",
                          "target"], rows)
        + f"\n\nanon.refresh of {ROWS:,} rows: median {median:.2f} s\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
