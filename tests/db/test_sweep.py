"""anon.sweep: a Mondrian release's figures for several k, publishing nothing; each checked against
the release anon.mondrian_view makes for that k, from its released rows."""
from __future__ import annotations

import psycopg
import pytest

from tests.helpers import release_schema_of

TABLE = """
CREATE TABLE people (id int PRIMARY KEY, age int, zip text, sex text, dx text);
INSERT INTO people SELECT g, 18 + (g * 7919) % 70, 'z' || (g * 31) % 40, CASE WHEN g % 3 = 0 THEN 'F' ELSE 'M' END,
       'd' || g % 5 FROM generate_series(1, 400) g;
SELECT anon.set_column_role('people', 'id', 'identifier');
"""
SWEEP = ("SELECT target_k, classes, smallest_class, ncp_percent, c_dm, prosecutor_risk_max, "
         "prosecutor_records_at_risk, note FROM anon.sweep('people', k => %s, "
         "quasi_identifiers => ARRAY['age', 'zip', 'sex'], sensitive => ARRAY['dx'])")


def objects(db) -> tuple:
    return (db.execute("SELECT count(*) FROM anon.releases").fetchone()[0],
            db.execute("SELECT count(*) FROM pg_class").fetchone()[0])


def test_the_sweep_gives_each_k_the_figures_of_its_release_and_publishes_nothing(db, schema):
    db.execute(TABLE)
    before = objects(db)
    rows = {r[0]: r for r in db.execute(SWEEP, ([10, 2, 5, 5, 1000],)).fetchall()}
    assert objects(db) == before                                      # nothing written
    assert sorted(rows) == [2, 5, 10, 1000]
    assert rows[1000][1:7] == (None,) * 6 and "400 rows" in rows[1000][7]
    for k in (2, 5, 10):
        _, classes, smallest, ncp, c_dm, risk_max, _, note = rows[k]
        assert smallest >= k and risk_max == pytest.approx(1 / smallest) and note is None
        rel = db.execute("SELECT anon.mondrian_view('people', k => %s, quasi_identifiers => ARRAY['age', 'zip', 'sex'], "
                         "sensitive => ARRAY['dx'], release_schema => %s)", (k, release_schema_of(schema))).fetchone()[0]
        released = db.execute(f"SELECT count(*), min(n), sum(n * n) FROM (SELECT count(*) n FROM {rel} "
                              "GROUP BY age, zip, sex) c").fetchone()
        # the same partition as the release's: its NCP; its released classes only merge
        assert released[0] <= classes and released[1] >= smallest and released[2] >= c_dm
        stored = db.execute("SELECT (metrics->>'ncp_percent')::float8, (metrics->>'n_classes')::int FROM anon.releases "
                            "WHERE format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()
        assert stored == (pytest.approx(ncp), classes)
    # more k, fewer classes, more information lost
    assert rows[2][1] > rows[5][1] > rows[10][1] and rows[2][3] < rows[5][3] < rows[10][3]


@pytest.mark.parametrize("k, words", [(None, "must not be NULL"), ([], "without NULL"), ([5, None], "without NULL"),
                                      ([1, 5], "at least 2"), (list(range(2, 60)), "more than 50")])
def test_a_bad_list_of_k_is_refused_by_name(db, schema, k, words):
    db.execute(TABLE)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        db.execute("SELECT * FROM anon.sweep('people', k => %s::int[])", (k,))
    assert words in info.value.diag.message_primary and info.value.diag.message_hint
    assert "plpy" not in info.value.diag.message_primary


def test_the_sweep_refuses_what_a_release_refuses(db, schema):
    db.execute("CREATE TABLE named (email text, age int); "
               "INSERT INTO named SELECT 'p' || g || '@example.org', g % 50 FROM generate_series(1, 100) g")
    with pytest.raises(psycopg.errors.InvalidColumnReference):                     # undeclared identifier
        db.execute("SELECT * FROM anon.sweep('named', k => ARRAY[5])")
    with pytest.raises(psycopg.errors.UndefinedTable):
        db.execute("SELECT * FROM anon.sweep('no_such_table', k => ARRAY[5])")


def test_an_analyst_may_not_sweep(db, schema, connect):
    db.execute(TABLE)
    db.execute("DROP ROLE IF EXISTS sweep_analyst; CREATE ROLE sweep_analyst LOGIN")
    try:
        db.execute("GRANT USAGE ON SCHEMA anon TO sweep_analyst")
        with connect(user="sweep_analyst") as analyst:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                analyst.execute(f"SELECT * FROM anon.sweep('{schema}.people', k => ARRAY[5])")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                analyst.execute(f"SELECT * FROM anon_py.sweep('{schema}.people', ARRAY[5], NULL, NULL, NULL, NULL, 0.2)")
    finally:
        db.execute("REVOKE USAGE ON SCHEMA anon FROM sweep_analyst; DROP ROLE sweep_analyst")


@pytest.mark.parametrize("qis", ["'{}'::text[]", "'{{age},{zip}}'::text[]"])
def test_class_sizes_refuses_no_or_nested_quasi_identifiers(db, schema, qis):
    db.execute(TABLE)
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        db.execute(f"SELECT * FROM anon.class_sizes('people', quasi_identifiers => {qis})")
    assert "quasi_identifiers" in info.value.diag.message_primary
    assert "plpy" not in info.value.diag.message_primary and "Traceback" not in str(info.value)
