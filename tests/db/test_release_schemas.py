"""Release schemas are the extension's own: analysts get USAGE on schemas plpy_anon created and
that hold releases only, so granting them never hands over anything else (a SECURITY DEFINER
function, a type, a table), and revoking takes USAGE back. Checked in the catalogs, as the
analyst would see it."""
from __future__ import annotations

import itertools

import psycopg
import pytest
from psycopg import sql

from tests.helpers import matview

TABLE = """
CREATE TABLE salaries (id int PRIMARY KEY, name text, age int, sex text, salary int);
INSERT INTO salaries
SELECT i, 'name ' || i, 20 + (i * 37) % 45, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END, 1000 + i
FROM generate_series(1, 60) i;
SELECT anon.set_column_role('salaries', 'name', 'identifier');
SELECT anon.set_column_role('salaries', 'salary', 'sensitive');
"""

# What an HR schema typically holds besides its tables: a SECURITY DEFINER function that, like
# every new function, PUBLIC may execute. Only USAGE on the schema stands between it and anyone.
ALL_SALARIES = """
CREATE FUNCTION {schema}.all_salaries() RETURNS SETOF {schema}.salaries
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog AS 'SELECT * FROM {schema}.salaries'
"""

_roles = itertools.count()


@pytest.fixture
def hr(db, schema):
    db.execute(TABLE)
    db.execute(sql.SQL(ALL_SALARIES).format(schema=sql.Identifier(schema)))
    return schema


@pytest.fixture
def analyst(db):
    role = f"rs_analyst_{next(_roles)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield role
    db.execute("DELETE FROM anon.analysts WHERE role_name = %s", (role,))
    db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def mondrian(db, release_schema, name="r", k=3, replace=False, source="salaries"):
    return db.execute("SELECT anon.mondrian_view(%s::regclass, k => %s, release_name => %s, "
                      "release_schema => %s, replace => %s)",
                      (source, k, name, release_schema, replace)).fetchone()[0]


def usage(db, role, schema) -> bool:
    """USAGE as the catalog records it (the role's own ACL entry or PUBLIC's)."""
    return db.execute("""
        SELECT EXISTS (SELECT 1 FROM pg_namespace n, aclexplode(n.nspacl) a
                       WHERE n.nspname = %s AND a.privilege_type = 'USAGE'
                         AND (a.grantee = 0 OR a.grantee = (SELECT oid FROM pg_roles WHERE rolname = %s)))""",
                      (schema, role)).fetchone()[0]


def can_call_all_salaries(connect, role, schema) -> bool:
    with connect(user=role) as conn:
        try:
            conn.execute(sql.SQL("SELECT count(*) FROM {}.all_salaries()").format(sql.Identifier(schema)))
        except psycopg.errors.InsufficientPrivilege:
            return False
    return True


def test_a_release_in_the_source_schema_is_refused_and_hands_over_nothing(db, connect, hr, analyst):
    """The reported case: release_schema => 'hr' made hr.all_salaries() callable by analysts."""
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    with pytest.raises(psycopg.errors.DuplicateSchema) as info:
        mondrian(db, hr)
    message = info.value.diag.message_primary
    assert f'schema "{hr}"' in message and "not created by plpy_anon" in message
    assert "release_schema" in info.value.diag.message_hint and '"release"' in info.value.diag.message_hint
    assert "DROP SCHEMA" not in info.value.diag.message_hint     # hr holds a table: no leftover
    # nothing published, nothing granted: the analyst still cannot reach hr's function
    assert db.execute("SELECT count(*) FROM anon.releases WHERE release_schema = %s", (hr,)).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM pg_matviews WHERE schemaname = %s", (hr,)).fetchone()[0] == 0
    assert not usage(db, analyst, hr)
    assert not can_call_all_salaries(connect, analyst, hr)
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))          # granting again changes nothing
    assert not usage(db, analyst, hr)


@pytest.mark.parametrize("setup", [
    "CREATE SCHEMA {s} AUTHORIZATION {other}",                       # another role's
    "CREATE SCHEMA {s}; GRANT CREATE ON SCHEMA {s} TO {other}",      # others may create in it
    "CREATE SCHEMA {s}; CREATE TYPE {s}.mood AS ENUM ('ok')",        # not empty
])
def test_an_existing_schema_not_created_by_plpy_anon_is_refused(db, schema, release_schema, analyst, setup):
    db.execute(TABLE)
    db.execute(setup.format(s=sql.Identifier(release_schema).as_string(db), other=analyst))
    with pytest.raises(psycopg.errors.DuplicateSchema, match=f'schema "{release_schema}" exists') as info:
        mondrian(db, release_schema)
    # dropping the schema is offered for an empty one only
    assert '"release"' in info.value.diag.message_hint
    assert ("DROP SCHEMA" in info.value.diag.message_hint) == ("CREATE TYPE" not in setup)
    assert db.execute("SELECT count(*) FROM anon.release_schemas WHERE schema_name = %s",
                      (release_schema,)).fetchone()[0] == 0


def test_an_empty_schema_of_the_callers_own_is_taken_over(db, connect, schema, release_schema, analyst):
    """What DROP EXTENSION leaves (release schemas, emptied): a reinstall releases into it at once."""
    db.execute(TABLE)
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(release_schema)))
    rel = mondrian(db, release_schema)
    assert db.execute("SELECT schema_oid::oid FROM anon.release_schemas WHERE schema_name = %s",
                      (release_schema,)).fetchone()[0] == db.execute(
        "SELECT oid FROM pg_namespace WHERE nspname = %s", (release_schema,)).fetchone()[0]
    assert usage(db, analyst, release_schema)
    with connect(user=analyst) as conn:
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 60


def test_the_extension_creates_and_records_the_schema_and_gives_analysts_usage(db, connect, schema,
                                                                             release_schema, analyst):
    db.execute(TABLE)
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    rel = mondrian(db, release_schema)
    assert db.execute("SELECT count(*) FROM anon.release_schemas WHERE schema_name = %s",
                      (release_schema,)).fetchone()[0] == 1
    assert usage(db, analyst, release_schema)
    with connect(user=analyst) as conn:
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 60
    # more releases in the schema, a DBA's index on one: still releases only, still granted
    mondrian(db, release_schema, name="r2", k=4)
    db.execute(f"CREATE INDEX ON {matview(db, rel)} (age)")
    assert db.execute("SELECT anon.grant_analyst(%s)", (analyst,)).fetchone()[0] >= 2


def test_revoke_analyst_removes_usage_on_every_release_schema(db, connect, schema, release_schema, analyst):
    db.execute(TABLE)
    other = f"{release_schema[:55]}_other"
    try:
        mondrian(db, release_schema)                       # made before the role is an analyst
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
        rel = mondrian(db, other)                          # made after: schema created with USAGE
        assert usage(db, analyst, release_schema) and usage(db, analyst, other)
        # someone adds an object to a release schema: revoking must still take USAGE back there
        db.execute(sql.SQL("CREATE TABLE {}.notes (x int)").format(sql.Identifier(other)))
        db.execute("SELECT anon.revoke_analyst(%s)", (analyst,))
        assert not usage(db, analyst, release_schema) and not usage(db, analyst, other)
        with connect(user=analyst) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"SELECT count(*) FROM {rel}")
        # and the next release schema is not given to the former analyst either
        db.execute(sql.SQL("DROP TABLE {}.notes").format(sql.Identifier(other)))
        third = mondrian(db, other, name="r3")
        assert not usage(db, analyst, other)
        assert not db.execute("SELECT has_table_privilege(%s, %s, 'SELECT')", (analyst, third)).fetchone()[0]
    finally:
        db.execute("SELECT anon.drop_release(format('%%I.%%I', release_schema, release_name)) "
                   "FROM anon.releases WHERE release_schema = %s", (other,))
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(other)))
        db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (other,))


PLANTS = {
    "function": ("CREATE FUNCTION {s}.all_salaries() RETURNS bigint LANGUAGE sql SECURITY DEFINER AS 'SELECT 1'",
                 "function {s}.all_salaries()"),
    "procedure": ("CREATE PROCEDURE {s}.p() LANGUAGE sql AS 'SELECT 1'", "function {s}.p()"),   # pg_describe_object calls it a function
    "table": ("CREATE TABLE {s}.notes (x int)", "table {s}.notes"),
    "view": ("CREATE VIEW {s}.v AS SELECT 1 AS x", "view {s}.v"),
    "sequence": ("CREATE SEQUENCE {s}.seq", "sequence {s}.seq"),
    "type": ("CREATE TYPE {s}.mood AS ENUM ('ok')", "type {s}.mood"),
    "domain": ("CREATE DOMAIN {s}.pos AS int CHECK (VALUE > 0)", "type {s}.pos"),
    "public create": ("GRANT CREATE ON SCHEMA {s} TO PUBLIC", "CREATE privilege on the schema granted to PUBLIC"),
}


@pytest.mark.parametrize("kind", sorted(PLANTS))
def test_objects_added_later_make_grants_and_creates_refuse(db, connect, schema, release_schema, analyst, kind):
    """Someone puts a non-release object into a release schema after plpy_anon created it: the
    next grant_analyst and the next release there are refused, naming it; the old release stays."""
    db.execute(TABLE)
    rel = mondrian(db, release_schema)
    plant, described = PLANTS[kind]
    db.execute(plant.format(s=sql.Identifier(release_schema).as_string(db)))
    described = described.format(s=release_schema)         # a plain name: pg_describe_object's text

    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState) as info:
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    assert f'release schema "{release_schema}" holds {described}' in info.value.diag.message_primary
    assert "move those objects" in info.value.diag.message_hint
    assert not usage(db, analyst, release_schema)
    assert db.execute("SELECT count(*) FROM anon.analysts WHERE role_name = %s", (analyst,)).fetchone()[0] == 0

    for name, replace in (("r", True), ("r_new", False)):
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match=described.replace("(", r"\(")
                           .replace(")", r"\)").replace(".", r"\.")):
            mondrian(db, release_schema, name=name, k=4, replace=replace)
    # the previous release is intact and still the only one
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 60
    assert db.execute("SELECT release_name, (parameters ->> 'k')::int FROM anon.releases WHERE release_schema = %s",
                      (release_schema,)).fetchall() == [("r", 3)]


def test_an_analyst_granted_before_a_function_appears_is_refused_on_the_next_grant(db, connect, schema,
                                                                                  release_schema, analyst):
    """USAGE already given cannot foresee a later object; the next grant names it, and once the
    object is moved out, granting works again."""
    db.execute(TABLE)
    mondrian(db, release_schema)
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    db.execute(sql.SQL("CREATE FUNCTION {}.f() RETURNS int LANGUAGE sql AS 'SELECT 1'")
               .format(sql.Identifier(release_schema)))
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="holds function"):
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    db.execute(sql.SQL("ALTER FUNCTION {}.f() SET SCHEMA {}").format(sql.Identifier(release_schema),
                                                                   sql.Identifier(schema)))
    assert db.execute("SELECT anon.grant_analyst(%s)", (analyst,)).fetchone()[0] >= 1


def test_creates_and_refreshes_do_not_touch_the_schema_row(db, schema, release_schema, analyst):
    """The root of the concurrency failures: every create/refresh re-ran GRANT USAGE ON SCHEMA,
    rewriting the schema's pg_namespace row (concurrent ones: 'tuple concurrently updated',
    deadlocks). USAGE is now granted once; creates and refreshes leave the row alone."""
    db.execute(TABLE)
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    rel = mondrian(db, release_schema)
    version = "SELECT xmin::text, ctid::text FROM pg_namespace WHERE nspname = %s"
    before = db.execute(version, (release_schema,)).fetchone()
    mondrian(db, release_schema, name="r2")
    mondrian(db, release_schema, name="r2", k=4, replace=True)
    db.execute("SELECT anon.refresh(%s)", (rel,))
    db.execute(f"REFRESH MATERIALIZED VIEW {matview(db, rel)}")
    assert db.execute(version, (release_schema,)).fetchone() == before
    assert usage(db, analyst, release_schema)
