"""A failed refresh is recorded through a separate connection to the same database (it must
outlive the rollback). That connection runs the DBA's rights; a database owner who is not a
superuser must not steer what it runs (a review: ALTER DATABASE ... SET search_path put the
owner's domain named timestamptz before pg_catalog, and its CHECK ran as the superuser)."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql


@pytest.fixture
def owned_database(connect):
    """A database owned by a plain role, with plpy_anon installed by the superuser and a
    superuser's release in it. Yields (database, owner role, release)."""
    suffix = uuid.uuid4().hex[:8]
    name, owner = f"owned_{suffix}", f"dbowner_{suffix}"
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(owner)))
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(name), sql.Identifier(owner)))
    try:
        with connect(dbname=name) as dba:
            dba.execute("CREATE EXTENSION plpy_anon CASCADE")
            dba.execute("CREATE SCHEMA data")
            dba.execute("CREATE TABLE data.t (id int, age int, zip text)")
            dba.execute("INSERT INTO data.t SELECT g, 20 + g % 40, 'z' || g % 5 FROM generate_series(1, 200) g")
            dba.execute("SELECT anon.set_column_role('data.t', 'id', 'identifier')")
            release = dba.execute("SELECT anon.mondrian_view('data.t', k => 5)").fetchone()[0]
        yield name, owner, release
    finally:
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(owner)))


def test_the_record_of_a_failed_refresh_runs_none_of_the_database_owners_code(connect, owned_database):
    name, owner, release = owned_database
    with connect(dbname=name, user=owner) as own:
        own.execute("""
            CREATE SCHEMA trap;
            GRANT USAGE ON SCHEMA trap TO PUBLIC;
            CREATE TABLE trap.log (who text);
            GRANT INSERT ON trap.log TO PUBLIC;
            CREATE FUNCTION trap.chk(pg_catalog.timestamptz) RETURNS boolean LANGUAGE plpgsql AS
              $$BEGIN INSERT INTO trap.log VALUES (current_user); RETURN true; END$$;
            CREATE DOMAIN trap.timestamptz AS pg_catalog.timestamptz CHECK (trap.chk(VALUE));
            CREATE DOMAIN trap.float8 AS pg_catalog.float8 CHECK (trap.chk(now()));
            CREATE DOMAIN trap.text AS pg_catalog.text CHECK (trap.chk(now()));""")
        own.execute(sql.SQL("ALTER DATABASE {} SET search_path = trap, pg_catalog, public").format(sql.Identifier(name)))
    with connect(dbname=name) as dba:
        dba.execute("DELETE FROM data.t WHERE id > 3")                   # fewer rows than k
        with pytest.raises(psycopg.Error) as error:
            dba.execute("SELECT anon.refresh(%s)", (release,))
        recorded = dba.execute("SELECT last_error FROM anon.releases").fetchone()[0]
        assert recorded == error.value.diag.message_primary               # the record was written
        assert dba.execute("SELECT count(*) FROM anon.refresh_history WHERE NOT succeeded").fetchone()[0] == 1
        assert dba.execute("SELECT count(*) FROM trap.log").fetchone()[0] == 0


@pytest.mark.parametrize("setting", ["role = {owner}", "default_transaction_read_only = on"])
def test_the_record_is_written_whatever_the_database_owner_sets(connect, owned_database, setting):
    """The owner's ALTER DATABASE ... SET role / read-only would make the superuser's record run as
    the owner, or not at all (a seventh review): the connection's own options override them."""
    name, owner, release = owned_database
    with connect(dbname=name) as dba:
        dba.execute(sql.SQL("ALTER DATABASE {} SET " + setting.format(owner=sql.Identifier(owner).as_string(dba)))
                    .format(sql.Identifier(name)))
    with connect(dbname=name) as dba:
        dba.execute("SET ROLE NONE")                                    # this session: the superuser
        dba.execute("SET default_transaction_read_only = off")
        dba.execute("DELETE FROM data.t WHERE id > 3")
        with pytest.raises(psycopg.Error) as error:
            dba.execute("SELECT anon.refresh(%s)", (release,))
        assert dba.execute("SELECT last_error FROM anon.releases").fetchone()[0] == error.value.diag.message_primary
