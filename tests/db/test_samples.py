"""anon.load_sample: the docs' tables, created with the caller's rights, whole or not at all."""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

EXPECTED = {"patients": {"patients": 1000}, "adult": {"adult": 30162},
            "enterprise": {"employees": 1000, "web_facts": 873}, "hr": {"salaries": 1000}}


@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_each_sample_loads_its_tables_with_their_counts(db, schema, sample):
    loaded = dict(db.execute("SELECT * FROM anon.load_sample(%s, schema_name => %s)",
                             (sample, schema)).fetchall())
    expected = {f"{schema}.{t}": n for t, n in EXPECTED[sample].items()}
    assert loaded == expected
    for table, count in expected.items():
        assert db.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == count


def test_samples_hold_what_the_docs_release(db, schema):
    db.execute("SELECT anon.load_sample('adult', schema_name => %s)", (schema,))
    incomes = dict(db.execute(f"SELECT income, count(*) FROM {schema}.adult GROUP BY 1").fetchall())
    assert incomes == {"<=50K": 22654, ">50K": 7508}
    assert db.execute(f"SELECT count(*) FROM {schema}.adult WHERE workclass = '?' OR "
                      "occupation IS NULL").fetchone()[0] == 0
    db.execute("SELECT anon.load_sample('enterprise', schema_name => %s)", (schema,))
    assert db.execute(f"SELECT count(*) FROM {schema}.web_facts w LEFT JOIN {schema}.employees e "
                      "USING (name) WHERE e.name IS NULL").fetchone()[0] == 20
    # the key the examples rely on
    key = db.execute("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                     "AND a.attnum = ANY(i.indkey) WHERE i.indisprimary AND i.indrelid = %s::regclass",
                     (f"{schema}.employees",)).fetchall()
    assert key == [("name",)]


def test_an_existing_table_refuses_the_sample_and_creates_nothing(db, schema):
    db.execute(sql.SQL("CREATE TABLE {}.web_facts (x int)").format(sql.Identifier(schema)))
    with pytest.raises(psycopg.errors.DuplicateObject, match="web_facts.*already exists") as info:
        db.execute("SELECT anon.load_sample('enterprise', schema_name => %s)", (schema,))
    assert "another schema" in info.value.diag.message_hint
    assert db.execute("SELECT to_regclass(%s)", (f"{schema}.employees",)).fetchone()[0] is None


def test_unknown_sample_and_odd_schema_names(db, schema):
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="unknown sample 'nope'") as info:
        db.execute("SELECT anon.load_sample('nope')")
    assert "patients, adult, enterprise, hr" in info.value.diag.message_hint
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="sample must not be NULL"):
        db.execute("SELECT anon.load_sample(NULL)")
    odd = 'My "Odd" Schema'
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(odd)))
    try:
        loaded = db.execute("SELECT * FROM anon.load_sample('hr', schema_name => %s)", (odd,)).fetchall()
        assert loaded == [('"My ""Odd"" Schema".salaries', 1000)]
    finally:
        db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(odd)))


def test_a_role_without_create_on_the_schema_is_refused(db, connect, schema):
    role = f"{schema}_loader"[:60]
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        db.execute(sql.SQL("GRANT EXECUTE ON FUNCTION anon.load_sample(text, text) TO {}").format(
            sql.Identifier(role)))
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA anon, {} TO {}").format(
            sql.Identifier(schema), sql.Identifier(role)))
        with connect(user=role) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT anon.load_sample('hr', schema_name => %s)", (schema,))
    finally:
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
