"""Custodians who are not superusers (issue 27, points 3 and 4): membership in the role the
extension creates, plpy_anon_custodian, and CREATE on the database are all it takes to create,
refresh and drop releases of one's own tables; nothing of plpy_anon runs with more rights than its
caller, so a custodian planting code in its release's indexes gets no one else's rights."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from tests.helpers import class_sizes, matview, notices

QIS = ["age", "zip"]

# The custodian's payload: harmless when its owner runs it (PostgreSQL builds a release's indexes
# as the release's owner), makes the custodian superuser when a superuser runs it.
PAYLOAD = """
CREATE FUNCTION {s}.payload() RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
  IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
    RAISE NOTICE 'evil as %', current_user;
    EXECUTE pg_catalog.format('ALTER ROLE %I SUPERUSER', {owner});
  END IF;
  RETURN true;
END $f$"""


@pytest.fixture
def custodian(db, connect):
    """A login role that is a member of plpy_anon_custodian, may create schemas, and owns a schema
    with a table of 200 rows. Yields (role, schema name)."""
    yield from custodian_role(db, connect)


@pytest.fixture
def other_custodian(db, connect):
    """A second custodian, with nothing more than the first."""
    yield from custodian_role(db, connect)


def custodian_role(db, connect):
    role = f"cust_{uuid.uuid4().hex[:8]}"
    own = f"{role}_data"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
    db.execute(sql.SQL("GRANT plpy_anon_custodian TO {}").format(r))
    db.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(db.info.dbname), r))
    with connect(user=role) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(own)))
        conn.execute(sql.SQL("CREATE TABLE {}.pat (id int PRIMARY KEY, age int, zip text, dx text)")
                     .format(sql.Identifier(own)))
        conn.execute(sql.SQL("INSERT INTO {}.pat SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
                             "FROM generate_series(1, 200) g").format(sql.Identifier(own)))
    yield role, own
    for (name,) in db.execute("SELECT format('%%I.%%I', release_schema, release_name) FROM anon.releases "
                              "WHERE release_owner = %s::regrole", (role,)).fetchall():
        db.execute("SELECT anon.drop_release(%s, if_exists => true)", (name,))
    release_schema = f"{own}_rel"
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(release_schema)))
    db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (release_schema,))
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(own)))
    db.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(sql.Identifier(db.info.dbname), r))
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
    db.execute(sql.SQL("DROP ROLE {}").format(r))


def create(conn, own: str, method: str = "mondrian_view", extra: str = "") -> str:
    """A release of the custodian's table; Mondrian's flat (a materialized view under the
    release's name, which these attacks replace; test_compact_layout.py attacks a compact one)."""
    if method == "mondrian_view" and "layout" not in extra:
        extra += ", layout => 'flat'"
    return conn.execute(
        f"SELECT anon.{method}(%s, k => 5, quasi_identifiers => '{{age,zip}}', sensitive => '{{dx}}', "
        f"release_schema => %s{extra})", (f"{own}.pat", f"{own}_rel")).fetchone()[0]


def test_a_custodian_creates_refreshes_and_drops_releases_of_its_own_tables(db, connect, custodian):
    role, own = custodian
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_cron SCHEMA public")   # its schema "cron" is closed to them
    assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]
    with connect(user=role) as conn:
        mondrian = create(conn, own)
        break_merge = create(conn, own, "break_merge", ", l => 2")
        conn.execute(sql.SQL("INSERT INTO {}.pat SELECT g, 30, 'z1', 'd1' FROM generate_series(201, 230) g")
                     .format(sql.Identifier(own)))
        conn.execute(f"REFRESH MATERIALIZED VIEW {matview(conn, mondrian)}")                 # the event trigger records it
        assert conn.execute("SELECT row_count FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                            "release_name) = %s", (mondrian,)).fetchone()[0] == 230
        assert conn.execute("SELECT row_count FROM anon.refresh(%s)", (break_merge,)).fetchone()[0] == 230
        assert min(class_sizes(conn, mondrian, QIS)) >= 5
        status = dict(conn.execute("SELECT release, verified FROM anon.release_status()").fetchall())
        assert status[mondrian] is True and status[break_merge] is True
        assert conn.execute("SELECT anon.drop_release(%s)", (mondrian,)).fetchone()[0] is True
        assert conn.execute("SELECT to_regclass(%s)", (mondrian,)).fetchone()[0] is None


def test_a_custodians_failed_refresh_is_recorded(db, connect, custodian):
    """The record is written through a loopback connection to the server's socket, whose directory
    (the setting unix_socket_directories) a role without pg_read_all_settings may not read."""
    role, own = custodian
    with connect(user=role) as conn:
        rel = create(conn, own)
        conn.execute(sql.SQL("DELETE FROM {}.pat WHERE id > 3").format(sql.Identifier(own)))
        with pytest.raises(psycopg.Error) as error:
            conn.execute("SELECT anon.refresh(%s)", (rel,))
        seen = notices(conn)
        assert conn.execute("SELECT count(*) FROM anon.refresh_all()").fetchone()[0] >= 1
        assert not [m for m in seen if "could not be recorded" in m], seen
        last_error = conn.execute("SELECT last_error FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                                  "release_name) = %s", (rel,)).fetchone()[0]
        assert last_error == error.value.diag.message_primary
        history = conn.execute("SELECT succeeded, error FROM anon.refresh_history h JOIN anon.releases r "
                               "USING (release_id) WHERE format('%%I.%%I', r.release_schema, r.release_name) "
                               "= %s ORDER BY refresh_id", (rel,)).fetchall()
        assert history == [(False, last_error), (False, last_error)]
        assert conn.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 200      # the old rows stay


def test_without_the_custodian_role_a_release_is_neither_created_nor_refreshed(db, connect, custodian):
    role, own = custodian
    with connect(user=role) as conn:
        rel = create(conn, own)
    db.execute(sql.SQL("REVOKE plpy_anon_custodian FROM {}").format(sql.Identifier(role)))
    with connect(user=role) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            create(conn, own, extra=", release_name => 'again'")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(f"REFRESH MATERIALIZED VIEW {matview(conn, rel)}")
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 200     # the old rows stay


@pytest.mark.parametrize("refresh", ["plain REFRESH", "anon.refresh"])
def test_a_custodian_planting_code_in_its_releases_index_does_not_run_it_as_the_dba(
        db, connect, custodian, refresh):
    """Issue 27 point 3: the index predicate calls the custodian's IMMUTABLE function, which calls a
    VOLATILE one that makes the custodian superuser when a superuser runs it. The DBA refreshes."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        rel = create(conn, own)
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        conn.execute(sql.SQL("CREATE FUNCTION {s}.looks_pure() RETURNS boolean LANGUAGE sql IMMUTABLE "
                             "AS 'SELECT {s}.payload()'").format(s=s))
        conn.execute(sql.SQL("CREATE INDEX planted ON {} (age) WHERE {}.looks_pure()").format(sql.SQL(rel), s))
    with connect() as dba:
        seen = notices(dba)
        statement = {"plain REFRESH": f"REFRESH MATERIALIZED VIEW {rel}",
                     "anon.refresh": f"SELECT anon.refresh('{rel}')"}[refresh]
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            dba.execute(statement)
        message = info.value.diag.message_primary
        assert "planted" in message and "looks_pure" in message and "plpy.Error" not in message
        assert not [m for m in seen if m.startswith("evil")], seen
    assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 200


def test_no_function_of_the_extension_runs_with_its_owners_rights(db):
    """Every function of the extension runs with its caller's rights but the event trigger
    function deleting the hierarchies of dropped and renamed columns (whose owner may have no
    right on the catalog). A salt is read and written with the caller's rights too
    (sql/idempotent/035-catalog-guard.sql says why)."""
    definers = db.execute("""
        SELECT p.oid::regprocedure::text FROM pg_proc p
        JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
        JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon'
        WHERE p.prosecdef ORDER BY 1""").fetchall()
    assert definers == [("anon._forget_dropped_hierarchies()",)]
    # the event trigger function: none can call it (it returns event_trigger)
    with pytest.raises(psycopg.errors.FeatureNotSupported):
        db.execute("SELECT anon._forget_dropped_hierarchies()")
    functions = db.execute("""
        SELECT count(*) FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon'
        WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'""").fetchone()[0]
    assert functions > 50                                  # the query does see the extension's functions


def dba_refresh_refused(db, connect, role, rel, how="SELECT anon.refresh('{rel}')"):
    """The DBA refreshes ``rel``: refused (42501) before the custodian's payload runs as the DBA."""
    with connect() as dba:
        seen = notices(dba)
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            dba.execute(how.format(rel=rel))
        assert not [m for m in seen if m.startswith("evil")], seen
    assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]
    return info.value.diag.message_primary


def test_a_custodian_splicing_its_function_into_its_release_gets_it_refused(db, connect, custodian):
    """A review: the custodian re-created its release's view with its own function in the query
    and cleared the recorded definitions (its own catalog row); the DBA's refresh ran it."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        rel = create(conn, own)
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        text = conn.execute("SELECT pg_get_viewdef(%s::regclass)", (rel,)).fetchone()[0].rstrip().rstrip(";")
        conn.execute(f"DROP MATERIALIZED VIEW {rel}")
        conn.execute(sql.SQL("CREATE MATERIALIZED VIEW {} AS SELECT * FROM ({}) AS q WHERE {}.payload() "
                             "WITH NO DATA").format(sql.SQL(rel), sql.SQL(text), s))
        conn.execute("UPDATE anon.releases SET definitions = NULL WHERE release_owner = %s::regrole", (role,))
    for how in ("SELECT anon.refresh('{rel}')", "SELECT * FROM anon.refresh_all()",
                "REFRESH MATERIALIZED VIEW {rel}"):
        if "refresh_all" in how:       # refresh_all reports failures per release instead of raising
            with connect() as dba:
                seen = notices(dba)
                rows = dba.execute(how).fetchall()
                assert not [m for m in seen if m.startswith("evil")], seen
            assert any(r[0] == rel and r[1] == "failed" and "payload" in r[3] for r in rows), rows
            continue
        assert "payload" in dba_refresh_refused(db, connect, role, rel, how)


def test_a_custodian_putting_a_view_under_its_sources_name_gets_its_release_refused(db, connect, custodian):
    """A review: the source renamed, a view of the custodian's under its name (same text, other
    object) calling its function, the release's view re-created from its unchanged text."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        rel = create(conn, own)
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        text = conn.execute("SELECT pg_get_viewdef(%s::regclass)", (rel,)).fetchone()[0]
        conn.execute(sql.SQL("ALTER TABLE {s}.pat RENAME TO data").format(s=s))
        conn.execute(sql.SQL("CREATE VIEW {s}.pat AS SELECT pg_catalog.to_regclass({q})::oid AS tableoid, ctid, id, "
                             "age, zip, dx FROM {s}.data WHERE {s}.payload()").format(
                                 s=s, q=sql.Literal(f"{own}.pat")))
        conn.execute(f"DROP MATERIALIZED VIEW {rel}")
        conn.execute(sql.SQL("CREATE MATERIALIZED VIEW {} AS {} WITH NO DATA").format(
            sql.SQL(rel), sql.SQL(text.rstrip().rstrip(";"))))
    assert "reads" in dba_refresh_refused(db, connect, role, rel)


def test_a_custodian_changes_only_its_own_catalog_rows(db, connect, custodian, schema, release_schema):
    """A review: a custodian weakened another role's release (k, grantees), declared a DBA table's
    identifying columns sensitive and registered itself as an analyst of every release."""
    role, own = custodian
    db.execute("CREATE TABLE dba_pat (id int PRIMARY KEY, full_name text, age int, zip text)")
    db.execute("INSERT INTO dba_pat SELECT g, 'n' || g, g % 50, 'z' || g % 3 FROM generate_series(1, 100) g")
    dba_rel = db.execute("SELECT anon.mondrian_view('dba_pat', k => 5, quasi_identifiers => '{age,zip}', "
                         "identifiers => '{full_name}', release_schema => %s)", (release_schema,)).fetchone()[0]
    oid = db.execute("SELECT 'dba_pat'::regclass::oid").fetchone()[0]
    with connect(user=role) as conn:
        for statement, params in [
                ("""UPDATE anon.releases SET parameters = parameters || '{"k": 2, "grantees": ["x"]}'
                    WHERE format('%%I.%%I', release_schema, release_name) = %s""", (dba_rel,)),
                ("DELETE FROM anon.releases WHERE format('%%I.%%I', release_schema, release_name) = %s", (dba_rel,)),
                ("INSERT INTO anon.column_roles VALUES (%s, 'full_name', 'sensitive')", (oid,)),
                ("INSERT INTO anon.analysts VALUES (%s)", (role,)),
                ("INSERT INTO anon.release_schemas (schema_name, schema_oid) VALUES ('public', 'public')", None)]:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement, params)
        mine = create(conn, own)                      # its own rows it may change, not what they are
        conn.execute("UPDATE anon.releases SET last_error = NULL "
                     "WHERE format('%%I.%%I', release_schema, release_name) = %s", (mine,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE anon.releases SET parameters = parameters || '{\"k\": 2}' "
                         "WHERE format('%%I.%%I', release_schema, release_name) = %s", (mine,))
        # a history row of its own release under another release's name (read by that name once
        # the release is dropped) is refused; under its own, written
        history = ("INSERT INTO anon.refresh_history (release_id, release_name, started_at, seconds, succeeded) "
                   "SELECT release_id, %s, now(), 1, true FROM anon.releases "
                   "WHERE format('%%I.%%I', release_schema, release_name) = %s")
        own_name = conn.execute("SELECT release_schema || '.' || release_name FROM anon.releases "
                                "WHERE format('%%I.%%I', release_schema, release_name) = %s", (mine,)).fetchone()[0]
        for label in (dba_rel, own_name + "x"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(history, (label, mine))
        assert conn.execute(history, (own_name, mine)).rowcount == 1
    assert db.execute("SELECT parameters->>'k' FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                      "release_name) = %s", (dba_rel,)).fetchone()[0] == "5"


@pytest.mark.parametrize("planted", [
    "query_to_xml('SELECT {s}.payload()', true, false, '') IS NOT NULL",    # SQL text: no pg_depend row
    "1::{s}.checked = 1",                                                   # a domain whose CHECK calls it
])
def test_a_custodian_whose_release_query_runs_its_code_runs_it_only_as_itself(db, connect, custodian, planted):
    """A second review: code the dependency check cannot see (a function named inside SQL text, a
    domain's CHECK) in the release's query; the DBA's rebuild ran the query with its own rights.
    The rebuild now fills the new view by REFRESH, as the release's owner."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        rel = create(conn, own)
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        conn.execute(sql.SQL("CREATE DOMAIN {s}.checked AS int CHECK ({s}.payload())").format(s=s))
        text = conn.execute("SELECT pg_get_viewdef(%s::regclass)", (rel,)).fetchone()[0].rstrip().rstrip(";")
        conn.execute(f"DROP MATERIALIZED VIEW {rel}")
        condition = planted.format(s=s.as_string(conn))
        conn.execute(f"CREATE MATERIALIZED VIEW {rel} AS SELECT * FROM ({text}) AS q WHERE {condition} "
                     "WITH NO DATA")
        conn.execute("UPDATE anon.releases SET definitions = NULL WHERE release_owner = %s::regrole", (role,))
    with connect() as dba:
        seen = notices(dba)
        for statement in (f"SELECT anon.refresh('{rel}')", "SELECT * FROM anon.refresh_all()",
                          f"REFRESH MATERIALIZED VIEW {rel}"):
            try:
                dba.execute(statement)
            except psycopg.Error:
                pass                                   # refusing is as good as running it as its owner
        assert not [m for m in seen if m.startswith("evil")], seen
    assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]


def test_a_custodian_redefining_its_break_merge_views_gets_them_refused(db, connect, custodian):
    """A second review: CREATE OR REPLACE VIEW of the QIT with query_to_xml('SELECT payload()'); the
    DBA's anon.refresh, plain REFRESH (its verification reads the views) and snapshot ran it."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        rel = create(conn, own, "break_merge", ", l => 2")
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        qit = f"{rel}_qit"
        text = conn.execute("SELECT pg_get_viewdef(%s::regclass)", (qit,)).fetchone()[0].rstrip().rstrip(";")
        conn.execute(f"CREATE OR REPLACE VIEW {qit} AS SELECT * FROM ({text}) AS q "
                     f"WHERE query_to_xml('SELECT {s.as_string(conn)}.payload()', true, false, '') IS NOT NULL")
        conn.execute("UPDATE anon.releases SET definitions = NULL WHERE release_owner = %s::regrole", (role,))
    for how in ("SELECT anon.refresh('{rel}')", "REFRESH MATERIALIZED VIEW {rel}"):
        assert "not the queries plpy_anon wrote" in dba_refresh_refused(db, connect, role, rel, how)
    assert "not the queries plpy_anon wrote" in dba_refresh_refused(
        db, connect, role, qit, "SELECT anon.snapshot('{rel}', snapshot_schema => 'snap_refused')")


def test_a_custodian_replacing_a_break_merge_view_by_a_table_gets_the_release_refused(db, connect, custodian):
    """A third review: the sensitive table's view replaced by a table whose count column has the
    custodian's enum type with an implicit cast to float8 calling its function; the DBA's
    verification summed the column and ran the cast as superuser (refresh, plain REFRESH, restore)."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        rel = create(conn, own, "break_merge", ", l => 2")
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        labels = ", ".join(f"'{i}'" for i in range(301))
        conn.execute(sql.SQL(f"CREATE TYPE {{s}}.n AS ENUM ({labels})").format(s=s))
        conn.execute(sql.SQL("CREATE FUNCTION {s}.n2f({s}.n) RETURNS float8 LANGUAGE plpgsql AS "
                             "$f$ BEGIN PERFORM {s}.payload(); RETURN $1::text::float8; END $f$").format(s=s))
        conn.execute(sql.SQL("CREATE CAST ({s}.n AS float8) WITH FUNCTION {s}.n2f({s}.n) AS IMPLICIT").format(s=s))
        st, merged = f"{rel}_st_dx", f"{rel}_merged"
        with conn.transaction():
            conn.execute(f"DROP VIEW {merged}")
            conn.execute(sql.SQL("CREATE TABLE {}_t (gid int4, value text, count {}.n)").format(sql.SQL(st), s))
            conn.execute(f"INSERT INTO {st}_t SELECT gid, value, count::text::{s.as_string(conn)}.n FROM {st}")
            conn.execute(f"DROP VIEW {st}")
            conn.execute(sql.SQL("ALTER TABLE {}_t RENAME TO {}").format(
                sql.SQL(st), sql.Identifier(st.split(".")[1])))
    with connect() as dba:
        seen = notices(dba)
        for how in (f"SELECT anon.refresh('{rel}')", f"REFRESH MATERIALIZED VIEW {rel}"):
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="relations were replaced"):
                dba.execute(how)
        rows = dba.execute("SELECT * FROM anon.refresh_all()").fetchall()
        assert any(r[0] == rel and r[1] == "failed" and "replaced" in r[3] for r in rows), rows
        assert not [m for m in seen if m.startswith("evil")], seen
    assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]


def test_a_custodian_giving_its_break_merge_storage_a_type_of_its_own_gets_the_release_refused(
        db, connect, custodian):
    """A fourth review: the storage view re-created with its value column cast to the custodian's
    enum, which has the custodian's cast to numeric (the source column is numeric), the views
    re-created from their unchanged texts and the recorded definitions cleared; the DBA's
    verification compared the values as numeric and ran the cast as superuser."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        conn.execute(sql.SQL("ALTER TABLE {s}.pat ALTER dx TYPE numeric USING substr(dx, 2)::numeric").format(s=s))
        rel = create(conn, own, "break_merge", ", l => 2")
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        conn.execute(sql.SQL("CREATE TYPE {s}.n AS ENUM ('0', '1', '2', '3')").format(s=s))
        conn.execute(sql.SQL("CREATE FUNCTION {s}.n2num({s}.n) RETURNS numeric LANGUAGE plpgsql AS "
                             "$f$ BEGIN PERFORM {s}.payload(); RETURN $1::text::numeric; END $f$").format(s=s))
        conn.execute(sql.SQL("CREATE CAST ({s}.n AS numeric) WITH FUNCTION {s}.n2num({s}.n)").format(s=s))
        names = [rel] + [f"{rel}{suffix}" for suffix in ("_qit", "_st_dx", "_merged")]
        texts = {n: conn.execute("SELECT pg_get_viewdef(%s::regclass)", (n,)).fetchone()[0].rstrip().rstrip(";")
                 for n in names}
        columns = [c.name for c in conn.execute(f"SELECT * FROM {rel} LIMIT 0").description]
        select = ", ".join(f"x.{c}::{s.as_string(conn)}.n AS {c}" if c == "_value" else f"x.{c}" for c in columns)
        with conn.transaction():
            conn.execute(f"DROP MATERIALIZED VIEW {rel} CASCADE")
            conn.execute(f"CREATE MATERIALIZED VIEW {rel} AS SELECT {select} FROM ({texts[rel]}) AS x WITH NO DATA")
            for n in names[1:]:
                conn.execute(f"CREATE VIEW {n} AS {texts[n]}")
            conn.execute("UPDATE anon.releases SET definitions = NULL WHERE release_owner = %s::regrole", (role,))
    with connect() as dba:
        seen = notices(dba)
        for how in (f"SELECT anon.refresh('{rel}')", f"REFRESH MATERIALIZED VIEW {rel}"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="types plpy_anon did not give"):
                dba.execute(how)
        rows = dba.execute("SELECT * FROM anon.refresh_all()").fetchall()
        assert any(r[0] == rel and r[1] == "failed" for r in rows), rows
        assert not [m for m in seen if m.startswith("evil")], seen
    assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]


def test_a_superusers_refresh_checks_a_custodians_release_with_the_custodians_rights(db, connect, custodian):
    """The check of a release's rows and its risk report run as the release's owner when another
    role refreshes it (inside a REFRESH PostgreSQL runs as the owner, security-restricted): a
    superuser's refresh, plain REFRESH or refresh_all never reads a custodian's release itself."""
    role, own = custodian
    with connect(user=role) as conn:
        mondrian = create(conn, own)
        break_merge = create(conn, own, "break_merge", ", l => 2")
    checked_as = ("SELECT verified, verification->>'checked_as', risk IS NOT NULL FROM anon.releases "
                  "WHERE format('%%I.%%I', release_schema, release_name) = %s")
    assert db.execute(checked_as, (mondrian,)).fetchone() == (True, role, True)
    with connect() as dba:
        for statement in (f"SELECT anon.refresh('{mondrian}')", f"REFRESH MATERIALIZED VIEW {mondrian}",
                          f"SELECT anon.refresh('{break_merge}')", f"REFRESH MATERIALIZED VIEW {break_merge}"):
            dba.execute(statement)
            rel = mondrian if mondrian in statement else break_merge
            assert dba.execute(checked_as, (rel,)).fetchone() == (True, role, True), statement
        # the throwaway views are gone, and the release schema holds the releases only
        left = dba.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'plpy_anon_check_%%'").fetchone()[0]
        assert left == 0
    db.execute(f"SELECT anon.refresh('{mondrian}')")
    assert db.execute(checked_as, (mondrian,)).fetchone() == (True, role, True)


def test_a_custodian_cannot_list_a_view_of_its_own_among_its_releases_relations(db, connect, custodian):
    """A fifth review: the custodian added a view calling query_to_xml('SELECT payload()') to its
    release's parameters.objects; the DBA's anon.snapshot of that 'release relation' (as the 0A000
    hint of the release itself suggested) ran it as superuser."""
    role, own = custodian
    s = sql.Identifier(own)
    with connect(user=role) as conn:
        rel = create(conn, own)
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        summary = f"{rel}_summary"
        conn.execute(f"CREATE VIEW {summary} AS SELECT query_to_xml('SELECT {s.as_string(conn)}.payload()', "
                     "true, true, '') AS x")
        name = summary.split(".")[1]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):      # what a release is stays as created
            conn.execute("UPDATE anon.releases SET parameters = jsonb_set(parameters, '{objects}', %s::jsonb) "
                         "WHERE release_owner = %s::regrole", (f'["{name}"]', role))
        # a row of its own making, listing the view (what create_release's INSERT could have been)
        conn.execute("""
            INSERT INTO anon.releases (release_schema, release_name, source, method, parameters, schema_oid,
                                       release_owner)
            SELECT release_schema, 'fabricated', source, method,
                   parameters || jsonb_build_object('objects', jsonb_build_array(%s::text)), schema_oid, release_owner
            FROM anon.releases WHERE release_owner = %s::regrole""", (name, role))
    with connect() as dba:
        seen = notices(dba)
        for statement in (f"SELECT anon.snapshot('{summary}', snapshot_schema => 'snap_refused')",
                          f"SELECT * FROM anon.risk_report('{summary}')"):
            with pytest.raises(psycopg.Error):
                dba.execute(statement)
        assert not [m for m in seen if m.startswith("evil")], seen
    assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]


def test_a_custodian_cannot_block_the_owner_check_by_taking_its_views_name(db, connect, custodian):
    """The owner check's throwaway view has an unguessable name: the custodian's relations named
    like earlier versions' (plpy_anon_check_<id>) or like any guess do not stop the DBA's refresh."""
    role, own = custodian
    with connect(user=role) as conn:
        rel = create(conn, own)
        release_id = conn.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                                  "release_name) = %s", (rel,)).fetchone()[0]
        conn.execute(sql.SQL("CREATE TABLE {}.{} (x int)").format(
            sql.Identifier(f"{own}_rel"), sql.Identifier(f"plpy_anon_check_{release_id}")))
    with connect() as dba:
        assert dba.execute("SELECT verified FROM anon.refresh(%s)", (rel,)).fetchone()[0] is True
        dba.execute(f"REFRESH MATERIALIZED VIEW {matview(dba, rel)}")
        left = dba.execute("SELECT array_agg(relname::text) FROM pg_class WHERE relname LIKE 'plpy_anon_check_%%'").fetchone()[0]
        assert left == [f"plpy_anon_check_{release_id}"]            # the custodian's own table only


def test_a_superusers_release_never_goes_into_a_release_schema_a_custodian_created(db, connect, custodian, schema):
    """A superuser is a member of every role: "the owner is a role the caller belongs to" let a
    superuser's release go into a release schema a custodian had created first, whose owner could
    then replace it with a view running her code for its readers (found by review)."""
    role, own = custodian
    squatted = f"{own}_squat"
    with connect(user=role) as conn:                           # the custodian's release creates it
        conn.execute("SELECT anon.mondrian_view(%s, k => 5, quasi_identifiers => '{age,zip}', "
                     "sensitive => '{dx}', release_schema => %s)", (f"{own}.pat", squatted))
    db.execute("CREATE TABLE secret (id int PRIMARY KEY, age int, zip text, dx text)")
    db.execute("INSERT INTO secret SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 FROM generate_series(1, 100) g")
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            db.execute("SELECT anon.mondrian_view('secret', k => 5, quasi_identifiers => '{age,zip}', "
                       "sensitive => '{dx}', release_schema => %s)", (squatted,))
        assert f'belongs to {role}' in info.value.diag.message_primary
        assert db.execute("SELECT to_regclass(%s)", (f"{squatted}.secret_k5",)).fetchone()[0] is None
    finally:
        db.execute("SELECT anon.drop_release(%s, if_exists => true)", (f"{squatted}.pat_k5",))
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(squatted)))
        db.execute("DELETE FROM anon.release_schemas WHERE schema_name = %s", (squatted,))


def test_the_dba_does_not_read_a_custodians_release_whose_owner_may_add_an_index_at_any_moment(db, connect, custodian):
    """Planning a read of a materialized view runs its index predicates' functions, an index can
    be added between any check and the read (LOCK TABLE does not take materialized views), so a
    superuser's anon.risk_report, anon.class_sizes, anon.snapshot and anon.release_metadata of a
    custodian's release are refused (a review made the custodian superuser through them); its
    owner reads it, and each build stores its risk report read with the owner's rights."""
    role, own = custodian
    with connect(user=role) as conn:
        rel = create(conn, own)
        assert conn.execute(f"SELECT count(*) FROM anon.class_sizes('{rel}')").fetchone()[0] > 0
        assert conn.execute("SELECT anon.release_metadata(%s)", (rel,)).fetchone()[0]["release"] == rel
    for statement in (f"SELECT * FROM anon.risk_report('{rel}')", f"SELECT * FROM anon.class_sizes('{rel}')",
                      f"SELECT anon.release_metadata('{rel}')",
                      f"SELECT anon.snapshot('{rel}', snapshot_schema => 'snap_refused')"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            db.execute(statement)
        assert f"belongs to {role}" in info.value.diag.message_primary, statement
    stored = db.execute("SELECT risk FROM anon.releases WHERE format('%%I.%%I', release_schema, release_name) = %s",
                        (rel,)).fetchone()[0]
    assert any(r["measure"] == "smallest_class" for r in stored)


def test_break_merge_readers_and_a_set_role_session_do_not_read_a_custodians_release(db, connect, custodian):
    """A third review: anon.detect_dependencies, anon.dependency_network and anon.breach_report
    read another role's release with the caller's rights too; and under SET ROLE to the owner,
    code planned as the owner can switch back to the session's superuser."""
    role, own = custodian
    with connect(user=role) as conn:
        rel = create(conn, own, "break_merge", ", l => 2")
        assert conn.execute("SELECT count(*) FROM anon.breach_report(%s)", (rel,)).fetchone()[0] > 0
    for statement in ("SELECT * FROM anon.detect_dependencies(%s)", "SELECT * FROM anon.dependency_network(%s)",
                      "SELECT * FROM anon.breach_report(%s)"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"belongs to {role}"):
            db.execute(statement, (rel,))
    for switch in ("SET ROLE {}", "SET SESSION AUTHORIZATION {}"):    # the superuser logged in stays
        with connect() as dba:
            dba.execute(sql.SQL(switch).format(sql.Identifier(role)))
            for statement in ("SELECT * FROM anon.risk_report(%s)", "SELECT * FROM anon.breach_report(%s)"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"belongs to {role}"):
                    dba.execute(statement, (rel,))


@pytest.mark.parametrize("layout", ["compact", "flat"])
def test_a_dbas_release_does_not_plan_the_custodians_table_before_its_guard(db, connect, custodian, layout):
    """The DBA releases a custodian's table; the custodian then plants its payload in an index
    predicate of that table, which planning a query of the table would evaluate as the DBA. A
    release written from the values read does not plan the source in its own query (its
    dependency on the source is a CTE no one reads), so the run's guard refuses it first."""
    role, own = custodian
    s = sql.Identifier(own)
    rel = create(db, own, extra=f", layout => '{layout}'")
    assert db.execute("SELECT (parameters->>'joined_back')::bool FROM anon.releases WHERE "
                      "format('%%I.%%I', release_schema, release_name) = %s", (rel,)).fetchone()[0] is False
    with connect(user=role) as conn:
        conn.execute(sql.SQL(PAYLOAD).format(s=s, owner=sql.Literal(role)))
        conn.execute(sql.SQL("CREATE FUNCTION {s}.looks_pure(int) RETURNS boolean LANGUAGE sql IMMUTABLE "
                             "AS 'SELECT {s}.payload()'").format(s=s))
        conn.execute(sql.SQL("CREATE INDEX planted ON {}.pat (age) WHERE {}.looks_pure(1)").format(s, s))
    refreshed = matview(db, rel)
    for statement in (f"REFRESH MATERIALIZED VIEW {refreshed}", f"SELECT anon.refresh('{rel}')"):
        with connect() as dba:
            seen = notices(dba)
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                dba.execute(statement)
            assert not [m for m in seen if m.startswith("evil")], seen
        assert not db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()[0]
    assert db.execute(f"SELECT count(*) FROM {rel}").fetchone()[0] == 200


def test_a_custodian_keeps_its_stable_releases_people_and_touches_no_one_elses(db, connect, custodian, schema,
                                                                               release_schema):
    """anon.release_state is guarded per statement, anon.release_versions per row: a custodian's
    own stable release writes its rows; another release's rows it may not insert, change or
    delete."""
    role, own = custodian
    db.execute("CREATE TABLE dba_pat (id int PRIMARY KEY, age int, zip text, dx text)")
    db.execute("INSERT INTO dba_pat SELECT g, g % 50, 'z' || g % 3, 'd' || g % 4 FROM generate_series(1, 100) g")
    db.execute("SELECT anon.mondrian_view('dba_pat', k => 5, l => 2, quasi_identifiers => '{age,zip}', "
               "sensitive => '{dx}', identifiers => '{id}', release_schema => %s)", (release_schema,))
    dba_release = db.execute("SELECT release_id FROM anon.releases WHERE source = 'dba_pat'::regclass").fetchone()[0]
    with connect(user=role) as conn:
        mine = create(conn, own, extra=", l => 2, identifiers => '{id}'")
        conn.execute(sql.SQL("DELETE FROM {}.pat WHERE id % 20 = 0").format(sql.Identifier(own)))
        across = conn.execute("SELECT (anon.refresh(%s)).verification->'across_versions'", (mine,)).fetchone()[0]
        assert across["most_versions"] == 2 and across["below_l"] == 0 and across["seen_before"] == 190
        # another release's rows are not even seen (row security): changed or deleted, none
        for statement in [
                "UPDATE anon.release_state SET candidate_sets = '[{\"dx\": [\"a\", \"b\"]}]' WHERE release_id = %s",
                "DELETE FROM anon.release_state WHERE release_id = %s"]:
            assert conn.execute(statement, (dba_release,)).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute("INSERT INTO anon.release_state VALUES (%s, '\\x', '{}', '{}', '{}', '[]')", (dba_release,))
        # the multisets each version published: the same rule (its own rows only, row security)
        assert conn.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = "
                            "(SELECT release_id FROM anon.releases WHERE source = %s::regclass)",
                            (f"{own}.pat",)).fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = %s",
                            (dba_release,)).fetchone()[0] == 0
        for statement in ["UPDATE anon.release_versions SET vals = '{}' WHERE release_id = %s",
                          "DELETE FROM anon.release_versions WHERE release_id = %s"]:
            assert conn.execute(statement, (dba_release,)).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO anon.release_versions VALUES (%s, 9, '{}', '{}', '{}', '{}', 0, 0)",
                         (dba_release,))
    assert db.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                      (dba_release,)).fetchone()[0] == 100
    assert db.execute("SELECT count(*) FROM anon.release_versions WHERE release_id = %s",
                      (dba_release,)).fetchone()[0] == 1


def test_a_custodian_reads_neither_the_state_nor_the_salt_of_another_custodians_release(
        db, connect, custodian, other_custodian):
    """A stable release's people, candidates and salt are its owner's: another custodian (no
    more than plpy_anon_custodian) finds no row of them, no salt in the catalog, so cannot test
    an identifier against the hashes, and cannot get round row security by turning it off."""
    role, own = custodian
    other, _ = other_custodian
    with connect(user=role) as conn:
        mine = create(conn, own, extra=", l => 2, identifiers => '{id}'")
        conn.execute(sql.SQL("DELETE FROM {}.pat WHERE id % 20 = 0").format(sql.Identifier(own)))
        conn.execute("SELECT anon.refresh(%s)", (mine,))
        release_id = conn.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', "
                                  "release_schema, release_name) = %s", (mine,)).fetchone()[0]
    with connect(user=other) as conn:
        assert conn.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                            (release_id,)).fetchone()[0] == 0
        # the catalog every custodian reads holds no salt
        assert conn.execute("SELECT count(*) FROM anon.releases WHERE parameters ? 'person_salt'").fetchone()[0] == 0
        # no value of the salts (row security would leave their values to the planner), and
        # writes of their own releases' rows only
        for statement in ("SELECT person_salt FROM anon.release_secrets",
                          "SELECT count(*) FROM anon.release_secrets WHERE person_salt > ''",
                          f"INSERT INTO anon.release_secrets VALUES ({release_id + 10_000}, '00')",
                          f"INSERT INTO anon.release_secrets VALUES ({release_id}, '00')",
                          f"SELECT anon._release_salt({release_id})",
                          f"SELECT anon._store_release_salt({release_id}, '00')"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        for statement in ("UPDATE anon.release_secrets SET person_salt = '00'",
                          "DELETE FROM anon.release_secrets"):
            assert conn.execute(statement).rowcount == 0
        assert conn.execute("SELECT count(*) FROM anon.readable_release_secrets").fetchone() == (0,)
        # no value of the state at all: its values are read through a view of the releases the
        # role owns (row security would leave them to the planner)
        for column in ("persons", "records", "candidate_sets"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT count(*) FROM anon.release_state WHERE {} IS NULL")
                             .format(sql.Identifier(column)))
        conn.execute("SET row_security = off")        # an error or no row, never the rows
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            conn.execute("SELECT count(*) FROM anon.release_state")
        assert conn.execute("SELECT count(*) FROM anon.release_people").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM anon.readable_release_versions").fetchone()[0] == 0
        conn.execute("RESET row_security")
    with connect(user=role) as conn:
        # the owner reads its state (the 190 people still there and the 10 who left, kept
        # absent), and its salt, by which it finds person 1
        assert conn.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                            (release_id,)).fetchone()[0] == 200
        assert conn.execute("""
            SELECT count(*) FROM anon.release_people x
            WHERE x.release_id = %s
              AND x.person = sha256(decode(anon._release_salt(%s), 'hex') || convert_to('1', 'UTF8'))""",
                            (release_id, release_id)).fetchone()[0] == 1
        # the metadata an export writes beside the rows holds no salt
        assert "person_salt" not in str(conn.execute("SELECT anon.release_metadata(%s)", (mine,)).fetchone()[0])
        # its history is whole: the next version is checked against every person
        conn.execute(sql.SQL("DELETE FROM {}.pat WHERE id % 20 = 1").format(sql.Identifier(own)))
        across = conn.execute("SELECT (anon.refresh(%s)).verification->'across_versions'", (mine,)).fetchone()[0]
        assert across["most_versions"] == 3 and across["seen_before"] == 180
    assert db.execute("SELECT count(*) FROM anon.release_people WHERE release_id = %s",
                      (release_id,)).fetchone()[0] == 200


def test_a_custodians_malformed_candidates_are_refused_when_written(db, connect, custodian):
    """Candidates are [{sensitive column: [value text, ...]}, ...]: anything else a custodian writes
    into its own row is refused there (23514), so a refresh never meets it (no traceback, 38000)."""
    role, own = custodian
    with connect(user=role) as conn:
        mine = create(conn, own, extra=", l => 2, identifiers => '{id}'")
        release_id = conn.execute("SELECT release_id FROM anon.releases WHERE format('%%I.%%I', "
                                  "release_schema, release_name) = %s", (mine,)).fetchone()[0]
        for bad in ['[1]', '"d1"', 'null', '{"dx": "d1"}', '{"dx": [1]}', '{"dx": [null]}', '{"dx": [["d1"]]}',
                    '{"dx": {"d1": true}}']:
            for candidate_sets in (f"[{bad}]", bad):
                with pytest.raises(psycopg.errors.CheckViolation, match="candidates_well_formed"):
                    conn.execute("UPDATE anon.release_state SET candidate_sets = %s::jsonb WHERE release_id = %s",
                                 (candidate_sets, release_id))
        # well formed: taken (its values read through the view, the owner's rows)
        conn.execute("UPDATE anon.release_state s SET candidate_sets = '[{\"dx\": [\"d0\", \"d1\", \"d2\", \"d3\"]}]', "
                     "cohorts = (SELECT array_fill(0, ARRAY[cardinality(r.cohorts)]) "
                     "FROM anon.readable_release_state r WHERE (r.release_id, r.chunk) = (s.release_id, s.chunk)) "
                     "WHERE release_id = %s", (release_id,))
        across = conn.execute("SELECT (anon.refresh(%s)).verification->'across_versions'", (mine,)).fetchone()[0]
        assert across["most_versions"] == 2 and across["below_l"] == 0
