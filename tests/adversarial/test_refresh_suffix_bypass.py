"""Adversarial (h8): grants.FOREIGN_OBJECTS counts as "part of a release" any relation named
``<P>__refresh<id>`` where <P> is ANY prefix of a release's name -- including the empty prefix.
A view ``"__refresh<id>"`` over the source table (or a table ``"x__refresh<id>"``) in a release
schema is not reported: creates and grant_analyst go on, although the schema holds a non-release
relation (one GRANT away from analysts). Fix: accept only the exact temp name
``refreshing.temp_name(release_name, release_id)`` (and only a materialized view).
"""
from __future__ import annotations

import psycopg
import pytest
from psycopg import sql


def test_non_release_view_named_like_a_refresh_leftover_is_refused(db, schema, release_schema):
    db.execute("CREATE TABLE pat (id serial PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pat (age, dx) SELECT 20 + g % 40, 'd' || g % 4 FROM generate_series(1, 100) g")
    db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age}', "
               "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    rid = db.execute("SELECT release_id FROM anon.releases WHERE release_schema = %s",
                     (release_schema,)).fetchone()[0]
    db.execute(sql.SQL("CREATE VIEW {}.{} AS SELECT * FROM pat").format(
        sql.Identifier(release_schema), sql.Identifier(f"__refresh{rid}")))
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age}', "
                   "release_name => 'second', release_schema => %s)", (release_schema,))
    assert info.value.sqlstate == "55000"


def release_in(db, release_schema):
    db.execute("CREATE TABLE pat (id serial PRIMARY KEY, age int, dx text)")
    db.execute("INSERT INTO pat (age, dx) SELECT 20 + g % 40, 'd' || g % 4 FROM generate_series(1, 100) g")
    db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age}', "
               "sensitive => '{dx}', release_schema => %s)", (release_schema,))
    return db.execute("SELECT release_id FROM anon.releases WHERE release_schema = %s",
                      (release_schema,)).fetchone()[0]


@pytest.mark.parametrize("name", ["pat_k__refresh{rid}", "pat_k5__refresh{rid}"])
def test_a_table_named_like_a_refresh_leftover_is_refused(db, schema, release_schema, name):
    """A prefix of the name, or even the exact leftover name: a table is not a refresh leftover."""
    rid = release_in(db, release_schema)
    db.execute(sql.SQL("CREATE TABLE {}.{} (x int)").format(
        sql.Identifier(release_schema), sql.Identifier(name.format(rid=rid))))
    with pytest.raises(psycopg.Error) as info:
        db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age}', "
                   "release_name => 'second', release_schema => %s)", (release_schema,))
    assert info.value.sqlstate == "55000"


def test_the_exact_refresh_leftover_is_part_of_its_release(db, schema, release_schema):
    rid = release_in(db, release_schema)
    # the leftover of its materialized view: a compact release's storage, pat_k5_classes
    stored = db.execute("SELECT coalesce(parameters ->> 'storage', release_name) FROM anon.releases "
                        "WHERE release_id = %s", (rid,)).fetchone()[0]
    db.execute(sql.SQL("CREATE MATERIALIZED VIEW {}.{} AS SELECT 1 AS x").format(
        sql.Identifier(release_schema), sql.Identifier(f"{stored}__refresh{rid}")))
    db.execute("SELECT anon.mondrian_view('pat', k => 5, quasi_identifiers => '{age}', "
               "release_name => 'second', release_schema => %s)", (release_schema,))
    # and refresh replaces it
    db.execute("SELECT anon.refresh(%s)", (f"{release_schema}.pat_k5",))
