"""What an analyst who keeps every version of a refreshed release learns, with each refresh
mode: by intersecting them (the attack behind m-invariance, Xiao & Tao, SIGMOD 2007) and by
subtracting them (the difference attack: who joined or left a class, and the values that came or
went with them).

20,000 Adult rows (QIs age, sex, race, education_num, marital_status; sensitive occupation),
``anon.mondrian_view(k => 5, l => 3)``; before each of 12 refreshes 2 % of the rows are deleted
and 2 % new ones inserted from the rest of Adult; 500 people stay throughout.

* Intersection: for each stayer and each version, the candidate occupations are those of every
  released class whose ranges and sets hold the person's QIs (from the released rows alone);
  printed per number of refreshes kept: people disclosed (one candidate left) and people left
  with fewer than l candidates (target 0 and 0 after 12 refreshes).
* Difference: for every pair of versions, classes linked by the people in both, and the
  multiset of occupations each component gained or lost: all one value, as many as the people
  who joined (left), pins them (tests.helpers.pinned_by_difference, written from released rows
  and the table's membership only). Printed: people pinned in any pair, and how many correctly
  (target 0).
* Per version: rows held back and counterfeit rows (anon.release_versions), refused refreshes,
  NCP; the refresh time.

PLPY_ANON_REPUBLICATION_SEED sets the random choices (default 30); PLPY_ANON_REPUBLICATION_MODES
the modes run (default fresh,stable); PLPY_ANON_REPUBLICATION_K and _L the release's k and l
(default 5 and 3); PLPY_ANON_REPUBLICATION_DATA=crx runs UCI Credit Approval instead (the 653
rows without '?', 500 live, 100 stayers; its columns in the Adult roles: A2 as age and A3 as
education_num, rounded; A1 as sex, A9 as race, A10 as marital_status; A6 as occupation).
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np
import pandas as pd
import psycopg

from tests.bench.common import DATA, adult, copy_frame, extension_db, markdown_table, results_dir
from tests.helpers import pinned_by_difference

QIS = ["age", "sex", "race", "education_num", "marital_status"]
TYPES = {"id": "int", "age": "int", "sex": "text", "race": "text", "education_num": "int",
         "marital_status": "text", "occupation": "text"}
DATASET = os.environ.get("PLPY_ANON_REPUBLICATION_DATA", "adult")
ROWS, STAYERS = (500, 100) if DATASET == "crx" else (20_000, 500)
REFRESHES, CHURN = 12, 0.02
K = int(os.environ.get("PLPY_ANON_REPUBLICATION_K", "5"))
L = int(os.environ.get("PLPY_ANON_REPUBLICATION_L", "3"))
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


MODES = tuple(os.environ.get("PLPY_ANON_REPUBLICATION_MODES", "fresh,stable").split(","))
RANGED, LISTED = ("age", "education_num"), ("sex", "race", "marital_status")
# one version's released classes: bounds of the ranged QIs, the listed QIs' sets, the values
RELEASED = """
SELECT lower(age), upper(age), lower(education_num), upper(education_num), sex, race, marital_status,
       array_agg(occupation) FROM {release} GROUP BY age, sex, race, education_num, marital_status"""


def analyst_version(conn, table: str, release: str) -> dict:
    """What the analyst keeps of a version (as tests.helpers.keep_released_version, in numpy for
    20,000 people): each person of the table and the released classes whose ranges and sets hold
    their QIs; each class's multiset of occupations. Also each person's true value, to score."""
    people = conn.execute(f"SELECT id, age, education_num, sex, race, marital_status, occupation "
                          f"FROM {table}").fetchall()
    classes = conn.execute(RELEASED.format(release=release)).fetchall()
    ids = np.array([p[0] for p in people])
    ranged = [np.array([p[1 + i] for p in people], dtype=np.float64) for i in range(2)]
    # each listed QI's values as bit positions, each class's set as a bit mask
    bits = [{v: b for b, v in enumerate(sorted({p[3 + i] for p in people} | {v for r in classes for v in r[4 + i]},
                                                 key=str))} for i in range(3)]
    listed = [np.array([bits[i][p[3 + i]] for p in people], dtype=np.int64) for i in range(3)]
    cover = np.zeros((len(classes), len(people)), dtype=bool)
    for c, row in enumerate(classes):
        ok = np.ones(len(people), dtype=bool)
        for i in range(2):
            lo, hi = row[2 * i], row[2 * i + 1]
            ok &= (ranged[i] >= (-np.inf if lo is None else lo)) & (ranged[i] < (np.inf if hi is None else hi))
        for i in range(3):
            mask = sum(1 << bits[i][v] for v in set(row[4 + i]))
            ok &= ((mask >> listed[i]) & 1).astype(bool)
        cover[c] = ok
    members = {}
    for c, person in zip(*np.nonzero(cover)):
        members.setdefault(int(ids[person]), []).append(int(c))
    return {"people": {int(i): members.get(int(i), []) for i in ids},
            "classes": {c: list(row[7]) for c, row in enumerate(classes)},
            "truth": {int(p[0]): p[6] for p in people}}


def pinned_over_pairs(versions: list[dict]) -> tuple[int, int]:
    """(people pinned by difference in some pair of versions, of whom correctly)."""
    pinned, right = set(), set()
    for j in range(1, len(versions)):
        for i in range(j):
            for person, value in pinned_by_difference(versions[i], versions[j]).items():
                pinned.add(person)
                truth = versions[j]["truth"].get(person, versions[i]["truth"].get(person))
                if truth == value:
                    right.add(person)
    return len(pinned), len(right)


def figures_of(conn, release: str) -> tuple:
    """(rows held back, counterfeit rows, unions of overlapping classes whose change the release
    counts as unsafe) of the version published now (0 outside the stable mode's figures)."""
    row = conn.execute("""SELECT (verification->'across_versions'->>'held_back')::int,
                                 (verification->'across_versions'->>'counterfeit')::int,
                                 (verification->'across_versions'->>'unsafe_unions')::int
                          FROM anon.releases WHERE release_name = %s""", (release.split(".", 1)[1],)).fetchone()
    return (row[0] or 0, row[1] or 0, row[2] or 0) if row else (0, 0, 0)


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
    kept_versions = [analyst_version(conn, table, release)]
    refused, held = 0, [figures_of(conn, release)]
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
        try:
            conn.execute("SELECT anon.refresh(%s)", (release,))
        except psycopg.Error as exc:         # the published version stays
            refused += 1
            print(f"{mode}: refresh {version} refused: {exc.diag.message_primary}", flush=True)
        refresh_s.append(time.perf_counter() - t0)
        conn.execute(CLASSES.format(release=release), (version,))
        kept_versions.append(analyst_version(conn, table, release))
        held.append(figures_of(conn, release))
        utility.append(conn.execute("SELECT (metrics->>'ncp_percent')::float8, (metrics->>'c_dm')::int8 "
                                    "FROM anon.releases WHERE release_name = %s",
                                    (release.split(".", 1)[1],)).fetchone())
    conn.execute(CANDIDATES)
    kept_rows = []
    for kept in KEPT:
        disclosed, below_l, people = conn.execute(SURVIVING, {"l": L, "kept": kept}).fetchone()
        kept_rows.append((kept, people, disclosed, below_l))
    conn.execute("SELECT anon.drop_release(%s)", (release,))
    pinned, right = pinned_over_pairs(kept_versions)
    return {"pinned": pinned, "pinned_right": right, "refused": refused, "held": held,
            "ncp_each": [u[0] for u in utility], "kept": kept_rows, "refresh_s": statistics.median(refresh_s),
            "ncp": statistics.mean(u[0] for u in utility), "c_dm": statistics.mean(u[1] for u in utility),
            "ncp_last": utility[-1][0], "c_dm_last": utility[-1][1]}


def credit() -> pd.DataFrame:
    """UCI Credit Approval without '?', its columns named for the Adult roles (module docstring)."""
    path = DATA / "credit" / "crx.data"
    if not path.exists():
        raise SystemExit(f"benchmark data not found at {path}; set PLPY_ANON_DATA to ../shared/data")
    raw = pd.read_csv(path, header=None, na_values="?", keep_default_na=False,
                      names=[f"A{i}" for i in range(1, 17)], dtype=str).dropna().reset_index(drop=True)
    return pd.DataFrame({"age": raw["A2"].astype(float).round().astype(int), "sex": raw["A1"],
                         "race": raw["A9"], "education_num": raw["A3"].astype(float).round().astype(int),
                         "marital_status": raw["A10"], "occupation": raw["A6"]})


def main() -> None:
    seed = int(os.environ.get("PLPY_ANON_REPUBLICATION_SEED", "30"))
    rng = np.random.default_rng(seed)
    df = (credit() if DATASET == "crx" else adult())[[c for c in TYPES if c != "id"]].copy()
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
            print(f"{mode}: {r['pinned']} people pinned by difference over every pair of the "
                  f"{REFRESHES + 1} versions ({r['pinned_right']} correctly; target 0); "
                  f"{r['refused']} refreshes refused", flush=True)
            _, _, disclosed, below_l = r["kept"][-1]
            print(f"{mode}: k = {K}, l = {L}, {DATASET}: pinned by difference {r['pinned']}, by intersection "
                  f"{disclosed} (and {below_l} below l) after {REFRESHES} refreshes (target 0 and 0); "
                  f"{r['refused']} refusals; leavers' values still published (counterfeit rows) after "
                  f"{REFRESHES} refreshes: {r['held'][-1][1]:,} of {REFRESHES * int(ROWS * CHURN):,} leavers",
                  flush=True)
            print(f"{mode}: per version, rows held back / counterfeit: "
                  + " ".join(f"{h}/{c}" for h, c, _ in r["held"]), flush=True)
            print(f"{mode}: per version, unions of overlapping classes counted unsafe by the release: "
                  + " ".join(str(u) for _, _, u in r["held"]), flush=True)
            print(f"{mode}: per version, NCP %: " + " ".join(f"{x:.2f}" for x in r["ncp_each"]), flush=True)
            print(f"{mode}: anon.refresh of {ROWS:,} rows, median {r['refresh_s']:.2f} s; NCP {r['ncp']:.2f} % "
                  f"and C_DM {r['c_dm']:,.0f} on average over the {REFRESHES + 1} versions (last version: "
                  f"{r['ncp_last']:.2f} %, {r['c_dm_last']:,})", flush=True)
    rows = [[mode, kept, people, disclosed, "0", below_l, "0"]
            for mode in MODES for kept, people, disclosed, below_l in results[mode]["kept"]]
    attacks = [[mode, r["pinned"], r["pinned_right"], "0", r["refused"],
                " ".join(f"{h}/{c}" for h, c, _ in r["held"]), " ".join(f"{x:.2f}" for x in r["ncp_each"])]
               for mode, r in results.items()]
    cost = [[mode, f"{r['refresh_s']:.2f}", f"{r['ncp']:.2f}", f"{r['c_dm']:,.0f}", f"{r['ncp_last']:.2f}",
             f"{r['c_dm_last']:,}"] for mode, r in results.items()]
    out = results_dir() / "republication.md"
    out.write_text(
        "# Versions intersected, by refresh mode\n\n"
        + markdown_table(["refresh_mode", "refreshes kept", "stayers", "disclosed", "target",
                          f"fewer than l = {L}", "target"], rows)
        + "\n\n## Versions subtracted, by refresh mode\n\n"
        + markdown_table(["refresh_mode", "pinned by difference", "correctly", "target", "refused",
                          "held back / counterfeit rows per version", "NCP % per version"], attacks)
        + "\n\n## Cost of the mode (same data, same churn)\n\n"
        + markdown_table(["refresh_mode", "refresh s (median)", "NCP % (mean)", "C_DM (mean)",
                          "NCP % (last)", "C_DM (last)"], cost) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
