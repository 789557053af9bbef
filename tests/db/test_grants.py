"""Analysts' access: an analyst logs in and can read releases -- every current and future one --
and nothing else; administrative functions are closed; text arguments cannot inject SQL."""
from __future__ import annotations

import itertools

import psycopg
import pytest
from psycopg import sql

from tests.helpers import release_schema_of

TABLE = """
CREATE TABLE patients (id int PRIMARY KEY, name text, age int, sex text, zip text, diagnosis text);
INSERT INTO patients
SELECT i, 'name ' || i, 20 + (i * 37) % 60, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END,
       (53700 + (i * 13) % 20)::text, (ARRAY['flu', 'asthma', 'gout'])[1 + i % 3]
FROM generate_series(1, 60) i;
SELECT anon.set_column_role('patients', 'name', 'identifier');
SELECT anon.set_column_role('patients', 'diagnosis', 'sensitive');
"""

_roles = itertools.count()


@pytest.fixture
def patients(db, schema):
    db.execute(TABLE)
    return f"{schema}.patients"


@pytest.fixture
def analyst(db):
    """A login role with no privileges of its own; removed after the test."""
    role = f"analyst_{next(_roles)}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    yield role
    db.execute("DELETE FROM anon.analysts WHERE role_name = %s", (role,))
    db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def release(db, schema, name, k=3, source=None):
    """A release of schema's patients, in the release schema plpy_anon creates for the test."""
    source = source or f"{schema}.patients"
    return db.execute("SELECT anon.mondrian_view(%s::regclass, k => %s, release_name => %s, "
                      "release_schema => %s)", (source, k, name, release_schema_of(schema))).fetchone()[0]


def refused(conn, query) -> bool:
    try:
        conn.execute(query).fetchall()
    except psycopg.errors.InsufficientPrivilege:
        return True
    return False


def test_analyst_reads_current_and_future_releases_and_nothing_else(db, connect, schema, patients, analyst):
    before = release(db, schema, "before_grant")
    assert db.execute("SELECT anon.grant_analyst(%s)", (analyst,)).fetchone()[0] >= 1
    after = release(db, schema, "after_grant", k=4)
    with connect(user=analyst) as conn:
        for rel in (before, after):
            n = conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0]
            assert n == 60
        assert conn.execute(f"SELECT count(*) FROM {after} WHERE age @> 42").fetchone()[0] >= 0
        assert refused(conn, f"SELECT * FROM {patients}")              # the source
        assert refused(conn, "SELECT * FROM anon.releases")            # the catalog
        assert refused(conn, "SELECT * FROM anon.column_roles")
        assert refused(conn, "SELECT * FROM anon.analysts")
        for call in ("SELECT anon.refresh('x')", "SELECT anon.grant_analyst('x')",
                     f"SELECT anon.mondrian_view('{patients}', k => 2)", "SELECT * FROM anon.release_status()",
                     "SELECT anon.drop_release('x')", "SELECT * FROM anon._mondrian_partition_slices(1)"):
            assert refused(conn, call), call
        # and the analyst cannot create a table in the release schema to plant objects there
        assert refused(conn, f"CREATE TABLE {release_schema_of(schema)}.planted (x int)")


def test_no_function_is_executable_by_an_analyst(db, schema, patients, analyst):
    release(db, schema, "r")
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    executable = db.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'anon' AND has_function_privilege(%s, p.oid, 'EXECUTE')""", (analyst,)).fetchall()
    assert executable == []
    tables = db.execute("""
        SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'anon' AND c.relkind IN ('r', 'v', 'm')
          AND has_table_privilege(%s, c.oid, 'SELECT')""", (analyst,)).fetchall()
    assert tables == []
    assert not db.execute("SELECT has_schema_privilege(%s, 'anon', 'USAGE')", (analyst,)).fetchone()[0]


def test_security_definer_functions_pin_search_path(db):
    rows = db.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'anon' AND p.prosecdef
          AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%')""").fetchall()
    assert rows == []


def test_revoke_takes_the_releases_back(db, connect, schema, patients, analyst):
    rel = release(db, schema, "r")
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    with connect(user=analyst) as conn:
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 60
    assert db.execute("SELECT anon.revoke_analyst(%s)", (analyst,)).fetchone()[0] >= 1
    later = release(db, schema, "later")
    with connect(user=analyst) as conn:
        for r in (rel, later):                       # later: no longer an analyst, no new grant
            assert refused(conn, f"SELECT count(*) FROM {r}"), r
    assert not db.execute("SELECT has_schema_privilege(%s, %s, 'USAGE')",
                          (analyst, release_schema_of(schema))).fetchone()[0]


def test_refreshed_release_stays_readable(db, connect, schema, patients, analyst):
    rel = release(db, schema, "r")
    db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
    db.execute(f"INSERT INTO {patients} SELECT i, 'n', 30, 'F', '53700', 'flu' FROM generate_series(61, 70) i")
    db.execute("SELECT anon.refresh(%s)", (rel,))
    with connect(user=analyst) as conn:
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 70


def test_a_release_restricted_to_its_grantees_is_never_given_to_analysts(db, connect, schema, patients, analyst):
    rel = release(db, schema, "for_one")
    db.execute("CREATE ROLE the_requester LOGIN")
    try:
        db.execute("""UPDATE anon.releases SET parameters = parameters || '{"grantees": ["the_requester"]}'
                      WHERE release_schema = %s""", (release_schema_of(schema),))
        db.execute("SELECT anon.grant_analyst(%s)", (analyst,))
        db.execute("SELECT anon.refresh(%s)", (rel,))          # a refresh re-applies grants
        with connect(user=analyst) as conn:
            assert refused(conn, f"SELECT count(*) FROM {rel}")
        with connect(user="the_requester") as conn:
            assert count_rows(conn, rel) == 60
    finally:
        db.execute(f"REVOKE ALL ON {rel} FROM the_requester")
        db.execute(sql.SQL("REVOKE ALL ON SCHEMA {} FROM the_requester").format(
            sql.Identifier(release_schema_of(schema))))
        db.execute("DROP ROLE the_requester")


def count_rows(conn, rel):
    return conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0]


def test_role_errors_are_clear(db):
    with pytest.raises(psycopg.errors.UndefinedObject, match="does not exist"):
        db.execute("SELECT anon.grant_analyst('no_such_role')")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="superuser"):
        db.execute("SELECT anon.grant_analyst(current_user)")


# ---------------------------------------------------------------------------- SQL injection

# Each payload, if it reached SQL text unquoted, would call nextval on the sentinel sequence (which
# is non-transactional: a hit survives the error that follows it) or drop the canary table.
PAYLOADS = [
    "x\"; SELECT nextval('{s}.hits'); DROP TABLE {s}.canary; --",
    "x'); SELECT nextval('{s}.hits'); DROP TABLE {s}.canary; --",
    "x' || nextval('{s}.hits') || '",
    "x\" || nextval('{s}.hits') || \"",
    "$$; SELECT nextval('{s}.hits'); $$",
    "x\\'; SELECT nextval('{s}.hits'); --",
]

SAMPLE = {"integer": 3, "bigint": 3, "smallint": 3, "numeric": 0.5, "double precision": 0.5,
          "real": 0.5, "boolean": False, "jsonb": "{}", "json": "{}"}


def public_functions(db):
    """Every function of ours an administrator calls (not _internal), with its argument names/types."""
    return db.execute("""
        SELECT p.proname, p.oid::regprocedure::text,
               array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t) AS types
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'anon' AND p.proname NOT LIKE '\\_%' AND p.prokind = 'f'
          AND p.prorettype <> 'event_trigger'::regtype ORDER BY 1""").fetchall()


def call_with(db, name, types, text_value, table):
    args = []
    for t in types:
        if t in ("text", "name"):
            args.append(sql.Literal(text_value))
        elif t in ("text[]", "name[]"):
            args.append(sql.SQL("{}::text[]").format(sql.Literal([text_value, "age"])))
        elif t == "regclass":
            args.append(sql.SQL("{}::regclass").format(sql.Literal(table)))
        elif t in SAMPLE:
            args.append(sql.SQL("{}::{}").format(sql.Literal(SAMPLE[t]), sql.SQL(t)))
        else:
            args.append(sql.SQL("NULL::{}").format(sql.SQL(t)))
    query = sql.SQL("SELECT * FROM anon.{}({})").format(sql.Identifier(name), sql.SQL(", ").join(args))
    try:
        db.execute(query).fetchall()
    except psycopg.Error:
        pass        # rejecting the value is fine; running it is not


def test_no_text_argument_injects_sql(db, schema, patients):
    db.execute(f"CREATE SEQUENCE {schema}.hits; CREATE TABLE {schema}.canary (x int); "
               f"INSERT INTO {schema}.canary VALUES (1)")
    db.execute("SET statement_timeout = '20s'")
    schemas_before = {r[0] for r in db.execute("SELECT nspname FROM pg_namespace").fetchall()}
    called = []
    try:
        for name, signature, types in public_functions(db):
            if not any(t in ("text", "name", "text[]", "name[]") for t in types):
                continue
            called.append(signature)
            for payload in PAYLOADS:
                call_with(db, name, types, payload.format(s=schema), patients)
        # the hierarchy labels, names and columns also go through the paths that succeed:
        for payload in PAYLOADS:
            p = payload.format(s=schema)
            db.execute("SELECT anon.set_hierarchy(%s::regclass, 'zip', %s::text[])",
                       (patients, [[f"537{i:02d}", p, "*"] for i in range(20)]))
            rel = db.execute("SELECT anon.mondrian_view(%s::regclass, k => 3, release_schema => %s, "
                             "release_name => %s, quasi_identifiers => ARRAY['age', 'zip'], replace => true)",
                             (patients, release_schema_of(schema), p[:60])).fetchone()[0]
            labels = {r[0] for r in db.execute(f"SELECT DISTINCT zip FROM {rel}").fetchall()}
            assert labels <= {p, "*"} | {f"537{i:02d}" for i in range(20)}   # labels are data, verbatim
            assert db.execute("SELECT relname FROM pg_class WHERE oid = %s::regclass",
                              (rel,)).fetchone()[0] == p[:60]                  # so is the name
            db.execute("SELECT anon.drop_release(%s)", (rel,))
    finally:
        db.execute("RESET statement_timeout")
        for (new,) in db.execute("SELECT nspname FROM pg_namespace").fetchall():
            if new not in schemas_before:            # release_schema => payload made one
                db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(new)))
                db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (new,))
    assert {"anon.grant_analyst(text)", "anon.refresh(text)", "anon.schedule_refresh(text,text)"} <= set(called)
    assert db.execute(f"SELECT is_called FROM {schema}.hits").fetchone()[0] is False
    assert db.execute(f"SELECT count(*) FROM {schema}.canary").fetchone()[0] == 1
