"""Install-time security: which Python code the backend loads, settings a role may set, the event
trigger every REFRESH MATERIALIZED VIEW in the database runs, and the schema "anon" clash."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.helpers import matview, release_schema_of

ROLE = "h1_caller"


@pytest.fixture
def caller(connect):
    """A login role that may call exactly one function of the extension: anon.versions()."""
    with connect() as admin:
        if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone():
            admin.execute(f"DROP OWNED BY {ROLE}")
            admin.execute(f"DROP ROLE {ROLE}")
        admin.execute(f"CREATE ROLE {ROLE} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA anon TO {ROLE}")
        admin.execute(f"GRANT EXECUTE ON FUNCTION anon.versions() TO {ROLE}")
    yield ROLE
    with connect() as admin:
        dbname = admin.info.dbname
        admin.execute(f"ALTER ROLE {ROLE} RESET ALL")
        admin.execute(sql.SQL("ALTER DATABASE {} RESET plpy_anon.venv").format(sql.Identifier(dbname)))
        admin.execute(f"DROP OWNED BY {ROLE}")
        admin.execute(f"DROP ROLE {ROLE}")


@pytest.fixture
def planted_venv():
    """A directory shaped like a virtual environment whose .pth file runs code when the
    environment is activated (site.addsitedir executes 'import' lines of .pth files)."""
    root = Path(tempfile.mkdtemp(prefix="plpy_anon_planted_"))
    marker = root / "pwned"
    for minor in range(8, 16):
        site = root / "lib" / f"python3.{minor}" / "site-packages"
        site.mkdir(parents=True)
        (site / "evil.pth").write_text(f"import os; open({str(marker)!r}, 'w').write('ran')\n")
    root.chmod(0o777)                                  # the server (postgres) may write the marker
    for path in root.rglob("*"):
        path.chmod(0o777 if path.is_dir() else 0o644)
    yield root, marker
    shutil.rmtree(root, ignore_errors=True)


def plpy_anon_location(conn) -> str:
    rows = {r[0]: r[2] for r in conn.execute("SELECT * FROM anon.versions()").fetchall()}
    return rows["plpy_anon"]


@pytest.mark.parametrize("how", ["set", "options", "alter_role", "alter_database"])
def test_a_role_cannot_choose_the_python_environment(connect, caller, planted_venv, how):
    root, marker = planted_venv
    real = str(Path(sys.prefix).resolve())
    with connect() as admin:
        if how == "alter_database":      # a database owner's ALTER DATABASE ... SET
            admin.execute(sql.SQL("ALTER DATABASE {} SET plpy_anon.venv = {}").format(
                sql.Identifier(admin.info.dbname), sql.Literal(str(root))))
    overrides = {"user": caller}
    if how == "options":
        overrides["options"] = f"-c plpy_anon.venv={root}"
    if how == "alter_role":              # (PostgreSQL 15 lets only a superuser do this one)
        with connect() as admin:
            admin.execute(sql.SQL("ALTER ROLE {} SET plpy_anon.venv = {}").format(
                sql.Identifier(caller), sql.Literal(str(root))))
    with connect(**overrides) as conn:   # a new backend: nothing activated yet
        if how == "set":
            conn.execute(sql.SQL("SET plpy_anon.venv = {}").format(sql.Literal(str(root))))
        assert conn.execute("SELECT current_setting('plpy_anon.venv', true)").fetchone()[0] == str(root)
        location = plpy_anon_location(conn)
    assert not marker.exists(), "the planted environment's code ran in the backend"
    assert location.startswith(real + "/"), location


def test_session_loopback_dsn_is_ignored(connect):
    """plpy_anon.loopback_dsn makes the backend open a connection: only the server's configuration
    may set it, never a session, role or client (any role can set a custom setting)."""
    with connect(options="-c plpy_anon.loopback_dsn=host=evil.example") as conn:
        plpy_anon_location(conn)                       # the environment is active in this backend
        conn.execute("SET plpy_anon.loopback_dsn = 'host=evil.example port=1'")
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        conn.execute("""DO LANGUAGE plpython3u $$
from plpy_anon.db import refreshing
plpy.notice(repr(refreshing.loopback_conninfo(plpy)))
$$""")
    assert notices and "evil" not in notices[0]
    assert "'conninfo': ''" in notices[0] and "'dbname':" in notices[0]


def test_a_configured_loopback_dsn_is_honoured_for_those_who_may_read_the_configuration(connect):
    """A plpy_anon.* setting is a placeholder, absent from pg_settings: its configured value is
    read from pg_file_settings (ALTER SYSTEM / postgresql.conf), which a superuser may read and
    a session cannot change; for other roles it stays unset."""
    probe = """DO LANGUAGE plpython3u $$
from plpy_anon.db import refreshing
plpy.notice(repr(refreshing.loopback_conninfo(plpy)))
$$"""
    with connect() as admin:
        admin.execute("SET plpy_anon.loopback_dsn = ''")      # ALTER SYSTEM wants the placeholder
        admin.execute("ALTER SYSTEM SET plpy_anon.loopback_dsn = 'host=/tmp dbname=configured'")
        admin.execute("SELECT pg_reload_conf()")
    try:
        with connect(options="-c plpy_anon.loopback_dsn=host=evil.example") as conn:
            plpy_anon_location(conn)                             # the environment is active
            seen = []
            conn.add_notice_handler(lambda d: seen.append(d.message_primary))
            conn.execute(probe)
        assert seen == ["{'conninfo': 'host=/tmp dbname=configured'}"], seen
    finally:
        with connect() as admin:
            admin.execute("SET plpy_anon.loopback_dsn = ''")
            admin.execute("ALTER SYSTEM RESET plpy_anon.loopback_dsn")
            admin.execute("SELECT pg_reload_conf()")


# ---------------------------------------------------------------------------- the event trigger

OTHER = "h1_matview_owner"


@pytest.fixture
def other_role(connect, schema):
    with connect() as admin:
        admin.execute(f"DROP ROLE IF EXISTS {OTHER}")
        admin.execute(f"CREATE ROLE {OTHER} LOGIN")
        admin.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
            sql.Identifier(schema + "_own"), sql.Identifier(OTHER)))
    yield OTHER, schema + "_own"
    with connect() as admin:
        admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema + "_own")))
        admin.execute(f"DROP ROLE {OTHER}")


def test_unrelated_matview_refresh_needs_no_anon_privileges(connect, db, schema, other_role):
    role, own = other_role
    with connect(user=role) as conn:
        assert not conn.execute("SELECT has_schema_privilege('anon', 'USAGE')").fetchone()[0]
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(own)))
        conn.execute("CREATE TABLE t (a int PRIMARY KEY, b text)")
        conn.execute("INSERT INTO t SELECT i, 'x' FROM generate_series(1, 10) i")
        conn.execute("CREATE MATERIALIZED VIEW mv AS SELECT * FROM t")
        conn.execute("CREATE UNIQUE INDEX ON mv (a)")
        conn.execute("INSERT INTO t VALUES (11, 'y')")
        conn.execute("REFRESH MATERIALIZED VIEW mv")
        assert conn.execute("SELECT count(*) FROM mv").fetchone()[0] == 11
        conn.execute("INSERT INTO t VALUES (12, 'z')")
        conn.execute("REFRESH MATERIALIZED VIEW CONCURRENTLY mv")
        assert conn.execute("SELECT count(*) FROM mv").fetchone()[0] == 12

    # A real release refreshed with plain REFRESH still lands in the catalog.
    db.execute("CREATE TABLE people (id int PRIMARY KEY, age int, zip text)")
    db.execute("INSERT INTO people SELECT i, 20 + i % 40, (53700 + i % 7)::text FROM generate_series(1, 100) i")
    release = db.execute("SELECT anon.mondrian_view('people', k => 4, release_schema => %s)",
                         (release_schema_of(schema),)).fetchone()[0]
    db.execute("INSERT INTO people SELECT i, 30, '53701' FROM generate_series(101, 130) i")
    with connect() as fresh:                           # a backend of its own
        fresh.execute(f"REFRESH MATERIALIZED VIEW {matview(fresh, release)}")
    row = db.execute("SELECT row_count, achieved_k FROM anon.releases WHERE format('%%I.%%I', release_schema, "
                     "release_name) = %s", (release,)).fetchone()
    assert row[0] == 130 == db.execute(f"SELECT count(*) FROM {release}").fetchone()[0]
    assert row[1] >= 4


# ---------------------------------------------------------------------------- schema "anon" clash

@pytest.fixture
def scratch_db(connect):
    name = "h1_schema_guard"
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute("DROP ROLE IF EXISTS h1_schema_maker")
        admin.execute("CREATE ROLE h1_schema_maker")
    yield name
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute("DROP ROLE IF EXISTS h1_schema_maker")


def installed(conn) -> tuple:
    return conn.execute("""
        SELECT (SELECT count(*) FROM pg_extension WHERE extname = 'plpy_anon'),
               (SELECT count(*) FROM pg_proc WHERE pronamespace = 'anon'::regnamespace),
               (SELECT count(*) FROM pg_class WHERE relnamespace = 'anon'::regnamespace)""").fetchone()


@pytest.mark.parametrize("setup, detail", [
    ("CREATE SCHEMA anon; CREATE FUNCTION anon.pseudonymize(text) RETURNS text "
     + "LANGUAGE sql AS 'SELECT md5($1)'", "function anon.pseudonymize("),
    ("CREATE SCHEMA anon AUTHORIZATION h1_schema_maker", "The schema is empty, but plpy_anon creates"),
])
def test_existing_anon_schema_is_refused(connect, scratch_db, setup, detail):
    with connect(dbname=scratch_db) as conn:
        conn.execute(setup)
        before = installed(conn)
        with pytest.raises(psycopg.errors.DuplicateSchema) as info:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
        diag = info.value.diag
        assert 'schema "anon"' in diag.message_primary and "already exists" in diag.message_primary
        assert detail in diag.message_detail
        assert "ALTER SCHEMA anon RENAME" in diag.message_hint and "DROP EXTENSION anon" in diag.message_hint
        assert installed(conn) == before                  # nothing installed
        assert before[0] == 0 and before[2] == 0


def test_fresh_schema_installs_also_inside_a_savepoint(connect, scratch_db):
    """CREATE EXTENSION inside a SAVEPOINT creates the extension's schemas as its members."""
    with connect(dbname=scratch_db) as conn:
        with conn.transaction():
            conn.execute("SELECT txid_current()")          # the top-level xid is assigned first
            with conn.transaction():                        # a SAVEPOINT
                conn.execute("CREATE EXTENSION plpy_anon CASCADE")
        count = installed(conn)
        assert count[0] == 1 and count[1] > 30 and count[2] > 3
        members = {r[0] for r in conn.execute("""
            SELECT pg_describe_object(classid, objid, objsubid) FROM pg_depend
            WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
              AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'plpy_anon')
              AND classid = 'pg_namespace'::regclass""")}
        assert members == {"schema anon", "schema anon_py"}
