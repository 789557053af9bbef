"""Adversarial: anon.mdav_view against bad arguments, odd identifiers, a custodian who may not read
the table and a source emptied before a refresh. Each bad call is a clear error that creates
nothing; each release is checked from its rows."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes

SOURCE = '"Md S"."Ta""b le"'
QIS = ["A ge", 'x"y']


@pytest.fixture
def odd_table(db, schema):
    db.execute('CREATE SCHEMA "Md S"')
    db.execute(f'CREATE TABLE {SOURCE} (id int, "A ge" int, "x""y" float8, s text)')
    db.execute(f"INSERT INTO {SOURCE} SELECT i, 20 + i % 50, i * 1.5, 's' || (i % 4) "
               "FROM generate_series(1, 120) i")
    yield SOURCE
    db.execute('DROP SCHEMA "Md S" CASCADE')


def releases(db):
    return db.execute("SELECT count(*) FROM anon.releases").fetchone()[0]


@pytest.mark.parametrize("call, error", [
    ("anon.mdav_view(NULL, NULL)", psycopg.errors.InvalidParameterValue),
    ("anon.mdav_view(%(t)s, NULL)", psycopg.errors.InvalidParameterValue),
    ("anon.mdav_view(%(t)s, 1)", psycopg.errors.InvalidParameterValue),
    ("anon.mdav_view(%(t)s, -2147483648)", psycopg.errors.InvalidParameterValue),
    ("anon.mdav_view(%(t)s, 121, quasi_identifiers => ARRAY['A ge'])", psycopg.Error),
    ("anon.mdav_view(%(t)s, 3, quasi_identifiers => ARRAY[NULL]::text[])", psycopg.Error),
    ("anon.mdav_view(%(t)s, 3, quasi_identifiers => ARRAY['s'])", psycopg.errors.DatatypeMismatch),
    ("anon.mdav_view(%(t)s, 3, quasi_identifiers => ARRAY['a ge'])", psycopg.Error),
    ("anon.mdav_view(%(t)s, 3, quasi_identifiers => ARRAY['A ge'], sensitive => ARRAY['A ge'])",
     psycopg.Error),
    ("anon.mdav_view(%(t)s, 3, quasi_identifiers => ARRAY['A ge'], layout => 'x'';--')", psycopg.Error),
])
def test_a_bad_mdav_call_is_a_clear_error_that_creates_nothing(db, odd_table, call, error):
    before = releases(db)
    with pytest.raises(error) as raised:
        db.execute(f"SELECT {call}", {"t": odd_table})
    assert raised.value.diag.message_primary
    assert raised.value.diag.message_hint, raised.value.diag.message_primary
    assert releases(db) == before


def test_an_mdav_release_of_odd_identifiers_is_k_anonymous_and_survives_an_emptied_source(
        db, odd_table, release_schema):
    rel = db.execute("SELECT anon.mdav_view(%s, 4, quasi_identifiers => %s, sensitive => ARRAY['s'], "
                     "release_name => 'Odd \"name', release_schema => %s)",
                     (odd_table, QIS, release_schema)).fetchone()[0]
    assert min(class_sizes(db, rel, QIS)) >= 4
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 120
    db.execute(f"DELETE FROM {odd_table}")
    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT anon.refresh(%s)", (rel,))
    assert raised.value.diag.message_hint
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 120   # the old release stays
    assert min(class_sizes(db, rel, QIS)) >= 4


def test_a_custodian_cannot_mdav_release_a_table_it_may_not_read_whole(db, odd_table, connect):
    role = f"md_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(r))
    db.execute(sql.SQL('GRANT USAGE ON SCHEMA "Md S" TO {}').format(r))
    db.execute(sql.SQL('GRANT SELECT (id, "A ge") ON {} TO {}').format(sql.SQL(odd_table), r))
    db.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(db.info.dbname), r))
    try:
        with connect(user=role) as c:
            for qis in (QIS, ["A ge"]):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute("SELECT anon.mdav_view(%s, 3, quasi_identifiers => %s, "
                              "release_schema => %s)", (odd_table, qis, role))
        assert db.execute("SELECT count(*) FROM anon.releases WHERE release_owner = %s::regrole",
                          (role,)).fetchone()[0] == 0
    finally:
        db.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(
            sql.Identifier(db.info.dbname), r))
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
        db.execute(sql.SQL("DROP ROLE {}").format(r))
