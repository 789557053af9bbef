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


def table(cursor_or_rows, headers=None, limit=None) -> str:
    """psql-style rendering of a result."""
    if headers is None:
        headers = [d.name for d in cursor_or_rows.description]
        rows = cursor_or_rows.fetchall()
    else:
        rows = cursor_or_rows
    rows = rows[:limit] if limit else rows
    cells = [[("" if v is None else str(v)) for v in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    line = lambda vals: " " + " | ".join(v.ljust(w) for v, w in zip(vals, widths))
    out = [line(headers), "-" + "-+-".join("-" * w for w in widths) + "-"]
    out += [line(r) for r in cells]
    return "\n".join(out) + f"\n({len(rows)} row{'' if len(rows) == 1 else 's'})"


def show_as_postgres_text(conn) -> None:
    """Render ranges and arrays the way psql does, not as Python objects."""
    for name in ("int4range", "int8range", "numrange", "daterange", "tsrange", "tstzrange",
                 "jsonb"):
        conn.adapters.register_loader(conn.adapters.types[name].oid, TextLoader)
    conn.adapters.register_loader(conn.adapters.types["text"].array_oid, TextLoader)


def step(title: str, sql: str | None = None) -> None:
    print(f"\n=== {title}")
    if sql:
        print(f"psql> {sql}")


def run(k: int, keep: bool) -> None:
    with ThrowawayCluster(keep=keep, cron_database="postgres") as cluster:
        print(f"throwaway cluster at {cluster.root} (PostgreSQL 15, Unix socket only)")
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            show_as_postgres_text(conn)
            step("install", "CREATE EXTENSION plpy_anon CASCADE;")
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            print(table(conn.execute("SELECT component, version FROM anon.versions()")))

            n = load_patients(conn)
            step(f"the bundled sample: {n} invented patients", "SELECT * FROM patients LIMIT 3;")
            print(table(conn.execute("SELECT * FROM patients ORDER BY patient_id LIMIT 3")))

            step("declare column roles")
            for sql in ("SELECT anon.set_column_role('patients', 'full_name', 'identifier');",
                        "SELECT anon.set_column_role('patients', 'admitted', 'ignored');",
                        "SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive');"):
                print(f"psql> {sql}")
                conn.execute(sql)
            print(table(conn.execute("SELECT * FROM anon.column_roles('patients')")))

            step("release", f"SELECT anon.mondrian_view('patients', k => {k});")
            t0 = time.perf_counter()
            release = conn.execute("SELECT anon.mondrian_view('patients', k => %s)", (k,)).fetchone()[0]
            print(f" {release}   ({time.perf_counter() - t0:.2f} s)")

            step("what analysts see", f"SELECT * FROM {release} LIMIT 5;")
            print(table(conn.execute(f"SELECT * FROM {release} LIMIT 5")))
            step("analysts query ranges and sets",
                 f"SELECT count(*) FROM {release} WHERE age @> 42 AND 'F' = ANY(sex);")
            print(table(conn.execute(
                f"SELECT count(*) FROM {release} WHERE age @> 42 AND 'F' = ANY(sex)")))

            step("achieved k, counted from the released rows",
                 f"SELECT min(n) AS achieved_k, count(*) AS classes FROM "
                 f"(SELECT count(*) n FROM {release} GROUP BY age, sex, zip) e;")
            print(table(conn.execute(
                f"SELECT min(n) AS achieved_k, count(*) AS classes FROM "
                f"(SELECT count(*) n FROM {release} GROUP BY age, sex, zip) e")))
            step("the catalog", "SELECT release_name, row_count, achieved_k, metrics->'ncp_percent' AS ncp_percent, metrics->'c_dm' AS c_dm FROM anon.releases;")
            print(table(conn.execute(
                "SELECT release_name, row_count, achieved_k, round((metrics->>'ncp_percent')::numeric, 2) AS ncp_percent, "
                "metrics->'c_dm' AS c_dm, metrics->'n_classes' AS classes FROM anon.releases")))

            step("new data arrives; refresh re-anonymizes it",
                 "INSERT INTO patients SELECT patient_id + 10000, ... ; REFRESH MATERIALIZED VIEW " + release + ";")
            conn.execute("INSERT INTO patients SELECT patient_id + 10000, full_name, age + 1, sex, zip, "
                         "admitted, diagnosis FROM patients WHERE patient_id <= 200")
            conn.execute(f"REFRESH MATERIALIZED VIEW {release}")
            print(table(conn.execute(
                "SELECT release_name, row_count, achieved_k, refreshed_at FROM anon.releases")))

            step("nightly refreshes with pg_cron",
                 f"CREATE EXTENSION pg_cron; SELECT anon.schedule_refresh('{release}', '0 3 * * *');")
            conn.execute("CREATE EXTENSION pg_cron")
            conn.execute("SELECT anon.schedule_refresh(%s, '0 3 * * *')", (release,))
            print(table(conn.execute("SELECT release, row_count, achieved_k, refresh_seconds, schedule "
                                     "FROM anon.release_status()")))
    print("\ncluster stopped and removed." if not keep else "\ncluster stopped (kept).")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="plpy_anon demo on a throwaway cluster")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    args = parser.parse_args(argv)
    run(args.k, args.keep)


if __name__ == "__main__":
    main()
