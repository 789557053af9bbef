"""plpy_anon installed in schema pa (CREATE EXTENSION plpy_anon SCHEMA pa) in a database where
schema "anon" is someone else's: what plpy_anon runs must name its own objects in pa, never an
object of that schema, and must never take a user's object in "anon" for one of its own."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

DBNAME = "anon_foreign"


@pytest.fixture(scope="module")
def foreign(pg_server):
    """plpy_anon in pa; schema anon owned by mallory (no superuser), CREATE granted to PUBLIC."""
    params = {k: v for k, v in pg_server.items() if k != "dbname"}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(DBNAME)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DBNAME)))
    mallory = f"mallory_{uuid.uuid4().hex[:8]}"
    dba = psycopg.connect(dbname=DBNAME, autocommit=True, **params)
    dba.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(mallory)))
    dba.execute(sql.SQL("CREATE SCHEMA anon AUTHORIZATION {}").format(sql.Identifier(mallory)))
    dba.execute("GRANT ALL ON SCHEMA anon TO PUBLIC")
    dba.execute("CREATE SCHEMA pa")
    dba.execute("CREATE EXTENSION plpy_anon SCHEMA pa CASCADE")

    def connect(user=None):
        return psycopg.connect(dbname=DBNAME, autocommit=True,
                               **dict(params, **({"user": user} if user else {})))
    yield {"dba": dba, "connect": connect, "mallory": mallory}
    dba.close()
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(DBNAME)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(mallory)))


def names_of_ours(dba) -> list[str]:
    return [n for (n,) in dba.execute(
        "SELECT proname::text FROM pg_proc WHERE pronamespace = 'pa'::regnamespace UNION "
        "SELECT relname::text FROM pg_class WHERE relnamespace = 'pa'::regnamespace").fetchall()]



@pytest.fixture
def anon_owned_by_dba(foreign):
    """Schema anon as PostgreSQL Anonymizer leaves it (a superuser's) for one test."""
    dba = foreign["dba"]
    dba.execute("ALTER SCHEMA anon OWNER TO CURRENT_USER")
    dba.execute("REVOKE ALL ON SCHEMA anon FROM PUBLIC")
    try:
        yield dba
    finally:
        dba.execute(sql.SQL("ALTER SCHEMA anon OWNER TO {}").format(sql.Identifier(foreign["mallory"])))
        dba.execute("GRANT ALL ON SCHEMA anon TO PUBLIC")


USER_ROWS = ("INSERT INTO anon.workload (age, zip, dx) SELECT 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
             "FROM generate_series(1, 300) g")


def test_sweep_of_a_users_table_in_anon_named_like_ours_reads_that_table(anon_owned_by_dba):
    dba = anon_owned_by_dba
    dba.execute("CREATE TABLE anon.workload (age int, zip text, dx text)")
    try:
        dba.execute(USER_ROWS)
        rows = dba.execute("SELECT target_k, classes FROM pa.sweep('anon.workload', '{5}', "
                           "quasi_identifiers => '{age,zip}', sensitive => '{dx}')").fetchall()
        assert rows and rows[0][1] is not None and rows[0][1] >= 1
    finally:
        dba.execute("DROP TABLE anon.workload")


def test_a_release_of_a_users_table_in_anon_named_like_ours_holds_its_rows(anon_owned_by_dba):
    dba = anon_owned_by_dba
    dba.execute("CREATE TABLE anon.workload (age int, zip text, dx text)")
    try:
        dba.execute(USER_ROWS)
        name = dba.execute("SELECT pa.mondrian_view('anon.workload', k => 5, quasi_identifiers => "
                           "'{age,zip}', sensitive => '{dx}', release_name => 'from_anon')").fetchone()[0]
        assert dba.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 300
        assert dba.execute("SELECT row_count FROM pa.refresh(%s)", (name,)).fetchone()[0] == 300
        report = dba.execute("SELECT pa.release_report(%s)", (name,)).fetchone()[0]
        assert report
        dba.execute("SELECT pa.drop_release(%s)", (name,))
    finally:
        dba.execute("DROP TABLE anon.workload CASCADE")


def test_a_users_table_anon_releases_with_our_columns_is_read_never_our_catalog(anon_owned_by_dba):
    dba = anon_owned_by_dba
    ours = dba.execute("SELECT count(*) FROM pa.releases").fetchone()[0]
    dba.execute("CREATE TABLE anon.releases (release_id int, release_name text, source text, "
                "age int, zip text, dx text)")
    try:
        dba.execute(USER_ROWS.replace("anon.workload", "anon.releases"))
        rows = dba.execute("SELECT target_k, classes, smallest_class FROM pa.sweep('anon.releases', "
                           "'{5,400}', quasi_identifiers => '{age,zip}', sensitive => '{dx}')").fetchall()
        assert rows[0][1] >= 1 and rows[0][2] >= 5
        assert rows[1][1] is None           # 400 > the user's 300 rows: read from the user's table
        assert dba.execute("SELECT count(*) FROM pa.releases").fetchone()[0] == ours
    finally:
        dba.execute("DROP TABLE anon.releases")


def test_messages_naming_a_users_anon_relation_keep_its_schema(anon_owned_by_dba):
    dba = anon_owned_by_dba
    with pytest.raises(psycopg.errors.UndefinedObject) as missing:
        dba.execute("SELECT * FROM pa.refresh('anon.versions')")
    assert 'release "anon.versions" does not exist' in str(missing.value)
    dba.execute("CREATE VIEW anon.workload AS SELECT 1 AS age")
    try:
        with pytest.raises(psycopg.Error) as refused:
            dba.execute("SELECT * FROM pa.sweep('anon.workload', '{5}')")
        assert "anon.workload is a view" in str(refused.value), refused.value
        assert "pa.workload" not in str(refused.value)
    finally:
        dba.execute("DROP VIEW anon.workload")


@pytest.fixture
def no_schema_anon(foreign):
    """No schema anon in the database for one test (someone else's comes back after)."""
    dba = foreign["dba"]
    dba.execute("ALTER SCHEMA anon RENAME TO anon_elsewhere")
    try:
        yield dba
    finally:
        dba.execute("DROP SCHEMA IF EXISTS anon CASCADE")
        dba.execute("ALTER SCHEMA anon_elsewhere RENAME TO anon")


def test_a_release_in_a_schema_anon_named_like_ours_is_refreshed_reported_and_dropped(no_schema_anon):
    dba = no_schema_anon
    dba.execute("CREATE TABLE public.pat_rel (age int, zip text, dx text)")
    try:
        dba.execute(USER_ROWS.replace("anon.workload", "public.pat_rel"))
        name = dba.execute("SELECT pa.mondrian_view('public.pat_rel', k => 5, quasi_identifiers => "
                           "'{age,zip}', sensitive => '{dx}', release_schema => 'anon', "
                           "release_name => 'versions')").fetchone()[0]
        assert dba.execute(f"SELECT count(*) FROM {name}").fetchone()[0] == 300
        assert dba.execute("SELECT row_count FROM pa.refresh('anon.versions')").fetchone()[0] == 300
        assert dba.execute("SELECT count(*) FROM anon.versions").fetchone()[0] == 300
        assert dba.execute("SELECT pa.release_report('anon.versions')").fetchone()[0]
        dba.execute("SELECT pa.drop_release('anon.versions')")
        assert dba.execute("SELECT to_regclass('anon.versions')").fetchone()[0] is None
    finally:
        dba.execute("DROP TABLE public.pat_rel CASCADE")


def test_the_install_refuses_a_schema_in_which_other_roles_may_create(pg_server):
    params = {k: v for k, v in pg_server.items() if k != "dbname"}
    dbname, eve = "anon_public_create", f"eve_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(eve)))
    try:
        with psycopg.connect(dbname=dbname, autocommit=True, **params) as dba:
            dba.execute("CREATE SCHEMA pa")
            dba.execute("GRANT CREATE, USAGE ON SCHEMA pa TO PUBLIC")
            try:
                dba.execute("CREATE EXTENSION plpy_anon SCHEMA pa CASCADE")
            except psycopg.errors.InsufficientPrivilege:
                return                                   # refused: nothing to capture
            with psycopg.connect(dbname=dbname, autocommit=True, **dict(params, user=eve)) as conn:
                conn.execute("CREATE FUNCTION pa.sweep(source text, k text) RETURNS TABLE (who text) "
                             "LANGUAGE sql AS $f$ SELECT current_user::text $f$")
            dba.execute("CREATE TABLE public.t (age int, zip text)")
            dba.execute("INSERT INTO public.t SELECT g % 40, 'z' || g % 5 FROM generate_series(1, 50) g")
            row = dba.execute("SELECT * FROM pa.sweep('public.t', '{5}')").fetchone()
            assert len(row) > 1, f"the DBA ran {eve}'s pa.sweep as {row[0]}"
    finally:
        with psycopg.connect(dbname="postgres", autocommit=True, **params) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(eve)))


DECOY_ARGS = ["", "text", "regclass", "integer", "bigint", "oid", "name, name", "text, text",
              "regclass, integer", "text, integer"]


@pytest.fixture
def decoys(foreign):
    """Schema anon (mallory's, PUBLIC may create) holding an object for every name of pa's: views
    over copies of its tables and functions of the usual signatures, each advancing the sequence
    anon.captured when it is read or called."""
    dba, mallory = foreign["dba"], foreign["mallory"]
    dba.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(mallory)))
    try:
        dba.execute("CREATE SEQUENCE anon.captured")
        dba.execute("GRANT ALL ON SEQUENCE anon.captured TO PUBLIC")
        # STABLE: a view's filter on it runs once even over an empty table (a one-time filter)
        dba.execute("CREATE FUNCTION anon.tick() RETURNS boolean LANGUAGE plpgsql STABLE "
                    "AS $f$ BEGIN RETURN pg_catalog.nextval('anon.captured') > 0; END $f$")
    finally:
        dba.execute("RESET ROLE")
    tables = [n for (n,) in dba.execute("SELECT relname::text FROM pg_class WHERE relnamespace = "
                                        "'pa'::regnamespace AND relkind IN ('r', 'v', 'm')")]
    for table in tables:
        dba.execute(sql.SQL("CREATE TABLE anon.{} (LIKE pa.{})").format(
            sql.Identifier(table + "_copy"), sql.Identifier(table)))
        dba.execute(sql.SQL("ALTER TABLE anon.{} OWNER TO {}").format(
            sql.Identifier(table + "_copy"), sql.Identifier(mallory)))
    dba.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(mallory)))
    try:
        for table in tables:
            dba.execute(sql.SQL("CREATE VIEW anon.{} AS SELECT * FROM anon.{} WHERE anon.tick()").format(
                sql.Identifier(table), sql.Identifier(table + "_copy")))
            dba.execute(sql.SQL("GRANT ALL ON anon.{}, anon.{} TO PUBLIC").format(
                sql.Identifier(table), sql.Identifier(table + "_copy")))
        functions = [n for (n,) in dba.execute(
            "SELECT DISTINCT proname::text FROM pg_proc WHERE pronamespace = 'pa'::regnamespace")]
        for function in functions:
            for args in DECOY_ARGS:
                dba.execute(sql.SQL("CREATE FUNCTION anon.{}({}) RETURNS SETOF record LANGUAGE plpgsql "
                                    "AS $f$ BEGIN PERFORM anon.tick(); END $f$").format(
                                        sql.Identifier(function), sql.SQL(args)))
    finally:
        dba.execute("RESET ROLE")
    # the decoys work: reading or calling one advances the sequence
    dba.execute("SELECT count(*) FROM anon.releases")
    dba.execute("SELECT * FROM anon.refresh('x') AS r(a int)")
    assert captured(dba) == 2
    dba.execute("SELECT pg_catalog.setval('anon.captured', 1, false)")
    yield dba
    dba.execute("DROP SCHEMA anon CASCADE")
    dba.execute(sql.SQL("CREATE SCHEMA anon AUTHORIZATION {}").format(sql.Identifier(mallory)))
    dba.execute("GRANT ALL ON SCHEMA anon TO PUBLIC")


def captured(dba) -> int:
    return dba.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM anon.captured").fetchone()[0]


@pytest.fixture(params=["dba", "custodian"])
def victim(request, foreign):
    """(connection, schema of its source) of the DBA, or of a custodian who is no superuser."""
    dba = foreign["dba"]
    if request.param == "dba":
        yield dba, "public"
        return
    role = f"cust_{uuid.uuid4().hex[:8]}"
    dba.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    dba.execute(sql.SQL("GRANT plpy_anon_custodian TO {}").format(sql.Identifier(role)))
    dba.execute(sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(DBNAME), sql.Identifier(role)))
    conn = foreign["connect"](role)
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(role + "_data")))
    try:
        yield conn, role + "_data"
    finally:
        conn.close()
        dba.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(role + "_data")))
        dba.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        dba.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_nothing_plpy_anon_runs_in_pa_reads_or_calls_the_foreign_anon_objects(decoys, victim):
    dba = decoys
    conn, own = victim
    src = f"{own}.decoy_src"
    conn.execute(f"CREATE TABLE {src} (id int PRIMARY KEY, age int, zip text, dx text)")
    conn.execute(f"INSERT INTO {src} SELECT g, 20 + g % 40, 'z' || g % 5, 'd' || g % 4 "
                 "FROM generate_series(1, 300) g")
    common = "quasi_identifiers => '{age,zip}', sensitive => '{dx}', release_schema => 'rel_decoy_' || current_user"
    names = [conn.execute(f"SELECT pa.mondrian_view('{src}', k => 5, {common}, "
                          "release_name => 'plain')").fetchone()[0],
             conn.execute(f"SELECT pa.break_merge('{src}', k => 5, l => 2, {common}, "
                          "release_name => 'bm')").fetchone()[0],
             conn.execute(f"SELECT pa.mondrian_view('{src}', k => 5, l => 2, {common}, "
                          "identifiers => '{id}', refresh_mode => 'stable', release_name => 'st')"
                          ).fetchone()[0]]
    conn.execute(f"INSERT INTO {src} SELECT g, 30, 'z1', 'd1' FROM generate_series(301, 320) g")
    for name in names:
        conn.execute("SELECT * FROM pa.refresh(%s)", (name,))
        conn.execute("SELECT * FROM pa.risk_report(%s)", (name,))
    conn.execute("SELECT pa.release_report(%s)", (names[0],))
    conn.execute("SELECT * FROM pa.release_status()")
    conn.execute("SELECT * FROM pa.refresh_all()")
    conn.execute(f"SELECT * FROM pa.sweep('{src}', '{{3,5}}', quasi_identifiers => '{{age,zip}}')")
    if conn is dba:         # the workload is the DBA's
        conn.execute(f"SELECT pa.add_queries(ARRAY['SELECT count(*) FROM {src} WHERE age < 30'])")
        conn.execute(f"SELECT * FROM pa.learn_priorities('{src}')")
    for name in names:
        conn.execute("SELECT pa.drop_release(%s)", (name,))
    if conn is dba:
        conn.execute(f"DROP TABLE {src}")
    assert captured(dba) == 0


@pytest.mark.parametrize("prepare, target, sqlstate", [
    ('CREATE SCHEMA "Pa"', '"Pa"', "42602"),
    ("CREATE SCHEMA anon_py", "anon_py", "42602"),
    ("CREATE SCHEMA pa; CREATE TABLE pa.t (x int)", "pa", "42P06"),
    ("CREATE SCHEMA pa; CREATE TYPE pa.e AS ENUM ('a')", "pa", "42P06"),
    ("CREATE SCHEMA pa AUTHORIZATION {role}", "pa", "42501"),
    ("CREATE SCHEMA pa; GRANT CREATE ON SCHEMA pa TO PUBLIC", "pa", "42501"),
    ("CREATE SCHEMA pa; GRANT CREATE ON SCHEMA pa TO {role}", "pa", "42501"),
    ("CREATE SCHEMA anon AUTHORIZATION {role}", "public", "42P06"),
    ("SELECT 1", "pg_temp", None),
])
def test_the_install_refuses_a_schema_it_cannot_own_and_leaves_nothing(foreign, prepare, target, sqlstate):
    """Into a fresh database: refused with its SQLSTATE, no extension and no schema anon_py left."""
    dbname = "anon_refusals"
    with foreign["connect"]() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        params = foreign["dba"].info.get_parameters()
        with psycopg.connect(dbname=dbname, autocommit=True, host=params["host"], port=params["port"],
                             user=params["user"]) as dba:
            for statement in prepare.format(role=foreign["mallory"]).split("; "):
                dba.execute(statement)
            with pytest.raises(psycopg.Error) as refused:
                dba.execute(f"CREATE EXTENSION plpy_anon SCHEMA {target} CASCADE")
            if sqlstate:
                assert refused.value.sqlstate == sqlstate, refused.value
            assert dba.execute("SELECT count(*) FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == 0
            assert dba.execute("SELECT to_regnamespace('anon_py') IS NULL OR "
                               "%s = 'CREATE SCHEMA anon_py'", (prepare,)).fetchone()[0]
    finally:
        with foreign["connect"]() as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))


def test_the_default_install_survives_drop_schema_public_cascade(foreign):
    dbname = "anon_default_public"
    with foreign["connect"]() as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(dbname)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    try:
        params = foreign["dba"].info.get_parameters()
        with psycopg.connect(dbname=dbname, autocommit=True, host=params["host"], port=params["port"],
                             user=params["user"]) as dba:
            dba.execute("CREATE EXTENSION plpy_anon CASCADE")
            assert dba.execute("SELECT extnamespace::regnamespace::text FROM pg_extension "
                               "WHERE extname = 'plpy_anon'").fetchone()[0] == "pg_catalog"
            dba.execute("DROP SCHEMA public CASCADE")     # the usual reset of a development database
            dba.execute("CREATE SCHEMA public")
            assert dba.execute("SELECT count(*) FROM pg_extension WHERE extname = 'plpy_anon'").fetchone()[0] == 1
            assert dba.execute("SELECT to_regclass('anon.releases') IS NOT NULL").fetchone()[0]
    finally:
        with foreign["connect"]() as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))


def test_the_client_reads_a_release_in_a_schema_anon_from_that_schema(no_schema_anon):
    from plpy_anon.client.api import AnonClient
    dba = no_schema_anon
    dba.execute("CREATE TABLE public.pat_client (age int, zip text, dx text)")
    try:
        dba.execute(USER_ROWS.replace("anon.workload", "public.pat_client"))
        dba.execute("SELECT pa.mondrian_view('public.pat_client', k => 5, quasi_identifiers => "
                    "'{age,zip}', sensitive => '{dx}', release_schema => 'anon', "
                    "release_name => 'plain_rows')")
        client = AnonClient(connection=dba)
        assert client.schema == "pa"
        assert len(client.release_frame("anon.plain_rows")) == 300
    finally:
        dba.execute("SELECT pa.drop_release('anon.plain_rows', if_exists => true)")
        dba.execute("DROP TABLE public.pat_client CASCADE")
