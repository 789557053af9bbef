"""A learned release through SQL never answers a queried column's predicates less precisely than
plain Mondrian on the workload it was learned from. Precision is measured from the released rows:
a query's released answer counts the rows whose released ranges may satisfy it, its true answer
is counted on the source, and every true row lies in a class that may satisfy it (recall 1)."""
from __future__ import annotations

import pytest
from psycopg import sql

from tests.helpers import release_schema_of

PATIENTS = """
CREATE TABLE patients (id int PRIMARY KEY, age int, sex text, zip int, diagnosis text);
INSERT INTO patients
SELECT i, 18 + (i * 37) % 70, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       53700 + (i * 13) % 100, (ARRAY['flu', 'hiv', 'cancer', 'asthma', 'gout'])[1 + (i * 7) % 5]
FROM generate_series(1, 400) i;
"""
# point queries on many ages (cut points at every queried age, and a heavy priority on age) and
# short zip ranges: learned as they are, the age cuts and priority spend the k rows that age's own
# point queries need, and age's precision falls below plain Mondrian's
AGES = list(range(20, 80, 3))
ZIPS = list(range(53700, 53790, 15))
WORKLOAD = ([("age", f"age = {a}", f"age @> {a}") for a in AGES]
            + [("zip", f"zip BETWEEN {z} AND {z + 5}", f"zip && int4range({z}, {z + 5}, '[]')")
               for z in ZIPS])


@pytest.fixture
def patients(db, schema):
    db.execute(PATIENTS)
    db.execute("SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive')")
    db.execute("DELETE FROM anon.workload")
    db.execute("SELECT anon.add_queries(%s)",
               ([f"SELECT * FROM patients WHERE {where}" for _, where, _ in WORKLOAD],))
    db.execute("SELECT * FROM anon.learn_priorities('patients')").fetchall()
    yield "patients"
    db.execute("DELETE FROM anon.workload")


def release(db, schema, name, **kwargs):
    args = [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v))
            for k, v in {**kwargs, "release_name": name,
                         "release_schema": release_schema_of(schema)}.items()]
    return db.execute(sql.SQL("SELECT anon.mondrian_view('patients', {})").format(
        sql.SQL(", ").join(args))).fetchone()[0]


def column_precision(db, released):
    """Per queried column: the mean over its queries of true rows / released rows."""
    out = {}
    for column, where, on_release in WORKLOAD:
        true = db.execute(f"SELECT count(*) FROM patients WHERE {where}").fetchone()[0]
        shown = db.execute(f"SELECT count(*) FROM {released} WHERE {on_release}").fetchone()[0]
        out.setdefault(column, []).append(true / shown if shown else 1.0)
    return {c: sum(v) / len(v) for c, v in out.items()}


def test_guarded_learned_release_is_never_below_plain_mondrian_on_a_queried_column(
        db, schema, patients):
    plain = column_precision(db, release(db, schema, "plain", k=10))
    learned_name = release(db, schema, "learned", k=10, priorities="learned")
    learned = column_precision(db, learned_name)
    for column in plain:
        assert learned[column] >= plain[column] - 1e-9, (column, learned, plain)
    guard = db.execute("SELECT parameters->'guard' FROM anon.releases WHERE release_schema = %s "
                       "AND release_name = 'learned'", (release_schema_of(schema),)).fetchone()[0]
    # what the guard measured is what the released rows answer
    assert guard["applied"] and guard["queries"] == len(WORKLOAD)
    assert guard["precision"] == pytest.approx(learned, abs=1e-6)
    assert guard["plain_precision"] == pytest.approx(plain, abs=1e-6)
    # each column's gain over plain Mondrian clears the standard errors asked of it
    assert guard["standard_errors"] > 0 and set(guard["standard_error"]) == set(plain)
    for column in plain:
        assert (learned[column] - plain[column]
                >= guard["standard_errors"] * guard["standard_error"][column] - 1e-6), column
