"""The README's first command ends here: a throwaway cluster, the bundled ``patients`` sample, one
k-anonymous release, a refresh, and the figures that prove it -- then the cluster is gone.

Run: ``python -m plpy_anon.demo [--k 5] [--keep]`` (as root or as the postgres user).
"""
from __future__ import annotations

import argparse
import time
from importlib import resources

import numpy as np
import psycopg
from psycopg.types.string import TextLoader

from plpy_anon.cluster import ThrowawayCluster
from plpy_anon.psql_text import aligned_table

PATIENTS_DDL = """
CREATE TABLE patients (
    patient_id integer PRIMARY KEY,
    full_name  text NOT NULL,
    age        integer,
    sex        text,
    zip        text,
    admitted   date,
    diagnosis  text
)"""

FIRST = ["Ada", "Ben", "Chloe", "Dan", "Eva", "Finn", "Grace", "Hugo", "Iris", "Jon", "Kara",
         "Liam", "Mona", "Nils", "Olga", "Paul", "Rosa", "Sven", "Tara", "Umar", "Vera", "Will"]
LAST = ["Berg", "Costa", "Dahl", "Eriksen", "Fischer", "Garcia", "Hansen", "Ito", "Jensen",
        "Kowalski", "Larsen", "Moreau", "Novak", "Olsen", "Petrov", "Rossi", "Smith", "Tanaka"]
DIAGNOSES = ["influenza", "asthma", "diabetes", "hypertension", "migraine", "bronchitis",
             "gastritis", "arthritis", "depression", "anemia"]


def synthetic_patients(n: int = 1000, seed: int = 20261121) -> list[tuple]:
    """Invented patients (no real person): age skewed toward the old, 30 ZIP codes in three
    areas, diagnosis depending on age. This generated the bundled plpy_anon/data/patients.csv."""
    rng = np.random.default_rng(seed)
    ages = np.clip(rng.gamma(6.0, 8.0, n).astype(int) + 1, 1, 99)
    sexes = rng.choice(["F", "M"], n, p=[0.52, 0.48])
    zips = [f"{area}{rng.integers(0, 10):02d}" for area in rng.choice(["537", "538", "539"], n, p=[0.5, 0.3, 0.2])]
    days = rng.integers(0, 365, n)
    rows = []
    for i in range(n):
        weights = np.ones(len(DIAGNOSES))
        weights[3] += ages[i] / 20          # hypertension and arthritis grow with age
        weights[7] += ages[i] / 25
        weights[1] += (ages[i] < 20) * 2.0  # asthma among the young
        diagnosis = DIAGNOSES[rng.choice(len(DIAGNOSES), p=weights / weights.sum())]
        name = f"{FIRST[rng.integers(len(FIRST))]} {LAST[rng.integers(len(LAST))]}"
        admitted = np.datetime64("2025-01-01") + np.timedelta64(int(days[i]), "D")
        sex = None if rng.random() < 0.01 else str(sexes[i])   # a few NULLs, as real data has
        rows.append((i + 1, name, int(ages[i]), sex, zips[i], str(admitted), diagnosis))
    return rows


def bundled_patients_csv() -> str:
    return resources.files("plpy_anon").joinpath("data/patients.csv").read_text()


def load_patients(conn, csv_text: str | None = None) -> int:
    conn.execute(PATIENTS_DDL)
    with conn.cursor().copy("COPY patients FROM STDIN WITH (FORMAT csv, HEADER true)") as copy:
        copy.write(csv_text or bundled_patients_csv())
    return conn.execute("SELECT count(*) FROM patients").fetchone()[0]


def cell(value) -> str:
    """A value as psql prints it (booleans as t/f, NULL as nothing)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)


def table(cursor_or_rows, headers=None, limit=None) -> str:
    """psql-style rendering of a result."""
    if headers is None:
        headers = [d.name for d in cursor_or_rows.description]
        rows = cursor_or_rows.fetchall()
    else:
        rows = cursor_or_rows
    rows = rows[:limit] if limit else rows
    return aligned_table(list(headers), [[cell(v) for v in r] for r in rows])


def show_as_postgres_text(conn) -> None:
    """Render ranges and arrays the way psql does, not as Python objects."""
    for name in ("int4range", "int8range", "numrange", "daterange", "tsrange", "tstzrange",
                 "jsonb"):
        conn.adapters.register_loader(conn.adapters.types[name].oid, TextLoader)
    conn.adapters.register_loader(conn.adapters.types["text"].array_oid, TextLoader)


def step(title: str) -> None:
    print(f"\n=== {title}")


def show(conn, sql: str, params=None, limit=None) -> list:
    """Print a statement as psql would show it, run exactly that statement, print its result."""
    print(f"psql> {sql}")
    cur = conn.execute(sql, params)
    if cur.description is None:
        return []
    rows = cur.fetchall()
    print(table(rows, [d.name for d in cur.description], limit))
    return rows


def refused(conn, sql: str) -> None:
    """Print a statement the server refuses and the error it gives (message, hint)."""
    print(f"psql> {sql}")
    try:
        conn.execute(sql)
    except psycopg.Error as error:
        print(f"ERROR:  {error.diag.message_primary}")
        for label, text in (("DETAIL", error.diag.message_detail), ("HINT", error.diag.message_hint)):
            if text:
                print(f"{label}:  {text}")
    else:
        raise SystemExit(f"demo: the server accepted {sql!r}, which it must refuse")


def run(k: int, keep: bool) -> None:
    with ThrowawayCluster(keep=keep, cron_database="postgres") as cluster:
        print(f"throwaway cluster at {cluster.root} (PostgreSQL 15, Unix socket only)")
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            show_as_postgres_text(conn)
            step("install")
            show(conn, "CREATE EXTENSION plpy_anon CASCADE")
            show(conn, "SELECT component, version FROM anon.versions()")

            n = load_patients(conn)
            step(f"the bundled sample: {n} invented patients")
            show(conn, "SELECT * FROM patients ORDER BY patient_id LIMIT 3")

            step("undeclared columns that look identifying stop a release")
            show(conn, "SELECT column_name, kind, confidence, blocks_release "
                       "FROM anon.detect_identifiers('patients') WHERE kind IS NOT NULL")
            refused(conn, "SELECT anon.mondrian_view('patients', k => 5)")

            step("declare column roles")
            for column, role in (("full_name", "identifier"), ("admitted", "ignored"),
                                 ("diagnosis", "sensitive")):
                conn.execute("SELECT anon.set_column_role('patients', %s, %s)", (column, role))
                print(f"psql> SELECT anon.set_column_role('patients', '{column}', '{role}');")
            show(conn, "SELECT * FROM anon.column_roles('patients')")

            step("release")
            t0 = time.perf_counter()
            release = show(conn, f"SELECT anon.mondrian_view('patients', k => {int(k)})")[0][0]
            print(f"({time.perf_counter() - t0:.2f} s)")

            step("what analysts see")
            # ordered: the release's own order is shuffled afresh at every build
            show(conn, f"SELECT * FROM {release} ORDER BY age, sex, zip, diagnosis LIMIT 5")
            step("analysts query ranges and sets")
            show(conn, f"SELECT count(*) FROM {release} WHERE age @> 42 AND 'F' = ANY(sex)")

            step("achieved k, counted from the released rows")
            show(conn, f"SELECT min(n) AS achieved_k, count(*) AS classes FROM "
                       f"(SELECT count(*) AS n FROM {release} GROUP BY age, sex, zip) AS e")
            step("verified from its own rows before it was published")
            show(conn, "SELECT release, verified, verification->'rows_released' AS rows, "
                       "verification->'smallest_class' AS smallest_class, verification->'k' AS k "
                       "FROM anon.release_status()")

            step("re-identification risk: the source against the release (anon.risk_report)")
            show(conn, "SELECT s.measure, s.value::numeric AS source, r.value::numeric AS release "
                       "FROM anon.risk_report('patients', ARRAY['age', 'sex', 'zip']) AS s "
                       f"JOIN anon.risk_report('{release}') AS r USING (measure) "
                       "WHERE s.column_name IS NULL AND r.column_name IS NULL "
                       "AND s.measure IN ('classes', 'smallest_class', 'records_in_classes_below_5', "
                       "'prosecutor_risk_max', 'prosecutor_risk_avg') ORDER BY s.measure")

            step("analysts read releases and nothing else")
            show(conn, "CREATE ROLE analyst")
            show(conn, "SELECT anon.grant_analyst('analyst')")
            show(conn, "SET ROLE analyst")
            show(conn, f"SELECT count(*) FROM {release}")
            refused(conn, "SELECT * FROM patients LIMIT 1")
            show(conn, "RESET ROLE")

            step("the catalog")
            show(conn, "SELECT release_name, row_count, achieved_k, "
                       "round((metrics->>'ncp_percent')::numeric, 2) AS ncp_percent, "
                       "metrics->'c_dm' AS c_dm, metrics->'n_classes' AS classes FROM anon.releases")

            step("new data arrives; refresh re-anonymizes it")
            show(conn, "INSERT INTO patients SELECT patient_id + 10000, full_name, age + 1, sex, zip, "
                       "admitted, diagnosis FROM patients WHERE patient_id <= 200")
            show(conn, "SELECT release_name, row_count, achieved_k, refreshed_at "
                       f"FROM anon.refresh('{release}')")

            step("nightly refreshes with pg_cron")
            show(conn, "CREATE EXTENSION pg_cron")
            show(conn, f"SELECT anon.schedule_refresh('{release}', '0 3 * * *')")
            show(conn, "SELECT release, row_count, achieved_k, round(refresh_seconds::numeric, 3) "
                       "AS refresh_seconds, schedule FROM anon.release_status()")
    print("\ncluster stopped and removed." if not keep else "\ncluster stopped (kept).")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="plpy_anon demo on a throwaway cluster")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    args = parser.parse_args(argv)
    run(args.k, args.keep)


if __name__ == "__main__":
    main()
