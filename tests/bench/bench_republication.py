"""Issue 30's experiment: what an analyst who keeps every version of a refreshed release learns
by intersecting them (the attack behind m-invariance, Xiao & Tao, SIGMOD 2007), with each
refresh mode.

20,000 Adult rows (QIs age, sex, race, education_num, marital_status; sensitive occupation),
``anon.mondrian_view(k => 5, l => 3)``; before each of 12 refreshes 2 % of the rows are deleted
and 2 % new ones inserted from the rest of Adult; 500 people stay throughout. For each of them
and each version, the candidate occupations are those of every released class whose ranges and
sets hold the person's QIs (computed from the released rows alone, as the analyst would); the
true value is in every version's set, so intersecting the sets can only shrink them. Printed per
number of refreshes kept: people disclosed (one candidate left) and people left with fewer than
l candidates (target for a republication mode: 0 and 0 after 12 refreshes), the refresh time
and each version's utility (NCP, C_DM), for refresh_mode => 'fresh' (a new partition each time)
and 'stable' (core.republication) on the same data with the same churn.
PLPY_ANON_REPUBLICATION_SEED sets the random choices (default 30).
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


MODES = ("fresh", "stable")


def experiment(conn, mode: str, live, pool, stayers, seed: int) -> dict:
    """One release of ``live`` refreshed REFRESHES times in ``mode``, the same churn (seeded) for
    every mode; the stayers' candidates after each number of versions kept, from the released
    rows alone, and each version's utility (the release's NCP and C_DM)."""
    table = f"adult_{mode}"
    copy_frame(conn, table, live, TYPES)
    release = conn.execute(
        f"SELECT anon.mondrian_view('{table}', k => %s, l => %s, quasi_identifiers => %s, "
        "sensitive => ARRAY['occupation'], identifiers => ARRAY['id'], refresh_mode => %s)",
        (K, L, QIS, mode)).fetchone()[0]
    conn.execute("DROP TABLE IF EXISTS classes, candidates")
    conn.execute("CREATE TABLE classes (version int, age int4range, sex text[], race text[], "
                 "education_num int4range, marital_status text[], occupations text[])")
    conn.execute(CLASSES.format(release=release), (0,))
    utility = [conn.execute("SELECT (metrics->>'ncp_percent')::float8, (metrics->>'c_dm')::int8 "
                            "FROM anon.releases WHERE release_id = (SELECT max(release_id) FROM anon.releases)"
                            ).fetchone()]
    refresh_s, pool_at, churn = [], 0, int(ROWS * CHURN)
    for version in range(1, REFRESHES + 1):
        gone = conn.execute(
            f"SELECT id FROM {table} WHERE id NOT IN (SELECT id FROM stayers) "
            "ORDER BY md5(id::text || %s) LIMIT %s", (f"v{seed}.{version}", churn)).fetchall()
        conn.execute(f"DELETE FROM {table} WHERE id = ANY(%s)", ([g[0] for g in gone],))
        copy_frame(conn, "arrivals", pool.iloc[pool_at:pool_at + churn], TYPES)
        conn.execute(f"INSERT INTO {table} SELECT * FROM arrivals")
        conn.execute("DROP TABLE arrivals")
        pool_at += churn
        t0 = time.perf_counter()
        conn.execute("SELECT anon.refresh(%s)", (release,))
        refresh_s.append(time.perf_counter() - t0)
        conn.execute(CLASSES.format(release=release), (version,))
        utility.append(conn.execute("SELECT (metrics->>'ncp_percent')::float8, (metrics->>'c_dm')::int8 "
                                    "FROM anon.releases WHERE release_name = %s",
                                    (release.split(".", 1)[1],)).fetchone())
    conn.execute(CANDIDATES)
    kept_rows = []
    for kept in KEPT:
        disclosed, below_l, people = conn.execute(SURVIVING, {"l": L, "kept": kept}).fetchone()
        kept_rows.append((kept, people, disclosed, below_l))
    conn.execute("SELECT anon.drop_release(%s)", (release,))
    return {"kept": kept_rows, "refresh_s": statistics.median(refresh_s),
            "ncp": statistics.mean(u[0] for u in utility), "c_dm": statistics.mean(u[1] for u in utility),
            "ncp_last": utility[-1][0], "c_dm_last": utility[-1][1]}


def main() -> None:
    seed = int(os.environ.get("PLPY_ANON_REPUBLICATION_SEED", "30"))
    rng = np.random.default_rng(seed)
    df = adult()[[c for c in TYPES if c != "id"]].copy()
    df.insert(0, "id", np.arange(1, len(df) + 1))
    order = rng.permutation(len(df))
    live, pool = df.iloc[order[:ROWS]], df.iloc[order[ROWS:]]
    stayers = live.iloc[:STAYERS]
    results = {}
    with extension_db() as conn:
        copy_frame(conn, "stayers", stayers, TYPES)
        for mode in MODES:
            results[mode] = r = experiment(conn, mode, live, pool, stayers, seed)
            for kept, people, disclosed, below_l in r["kept"]:
                print(f"{mode}: {kept} refreshes kept: {disclosed} of {people} stayers disclosed (target 0), "
                      f"{below_l} with fewer than l = {L} candidates (target 0)", flush=True)
            print(f"{mode}: anon.refresh of {ROWS:,} rows, median {r['refresh_s']:.2f} s; NCP {r['ncp']:.2f} % "
                  f"and C_DM {r['c_dm']:,.0f} on average over the {REFRESHES + 1} versions (last version: "
                  f"{r['ncp_last']:.2f} %, {r['c_dm_last']:,})", flush=True)
    rows = [[mode, kept, people, disclosed, "0", below_l, "0"]
            for mode in MODES for kept, people, disclosed, below_l in results[mode]["kept"]]
    cost = [[mode, f"{r['refresh_s']:.2f}", f"{r['ncp']:.2f}", f"{r['c_dm']:,.0f}", f"{r['ncp_last']:.2f}",
             f"{r['c_dm_last']:,}"] for mode, r in results.items()]
    out = results_dir() / "republication.md"
    out.write_text(
        "# Issue 30: versions intersected, by refresh mode\n\n"
        + markdown_table(["refresh_mode", "refreshes kept", "stayers", "disclosed", "target",
                          f"fewer than l = {L}", "target"], rows)
        + "\n\n## Cost of the mode (same data, same churn)\n\n"
        + markdown_table(["refresh_mode", "refresh s (median)", "NCP % (mean)", "C_DM (mean)",
                          "NCP % (last)", "C_DM (last)"], cost) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
