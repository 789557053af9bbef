"""Adversarial: anon.readable_hierarchies, the door to anon.hierarchies (whose leaves are a column's
values), against roles that may not read the column.

A custodian's own SECURITY DEFINER code runs with the custodian's rights only, whoever's session
calls it (a trigger on the custodian's table that the DBA's maintenance fires, a default, a function
the DBA's view calls): PostgreSQL confines it to its definer, and so must the door."""
from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

SALARIES = {str(30000 + i * 37) for i in range(1, 41)}
PATHS = ("SELECT path FROM anon.readable_hierarchies "
         "WHERE source = %s::oid::regclass AND column_name = 'salary'")


@pytest.fixture
def plain_custodian(db):
    """A login role in plpy_anon_custodian, nothing else (no pg_read_all_data), with a schema of
    its own."""
    role = f"hp_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(r))
    db.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(r, r))
    yield role
    db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(r))
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
    db.execute(sql.SQL("DROP ROLE {}").format(r))


@pytest.fixture
def salaries(db, schema):
    db.execute("CREATE TABLE pay (id int PRIMARY KEY, salary int)")
    db.execute("INSERT INTO pay SELECT i, 30000 + i * 37 FROM generate_series(1, 40) i")
    db.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000])")
    return db.execute("SELECT 'pay'::regclass::oid").fetchone()[0]


def test_a_custodians_definer_code_run_in_a_dbas_session_reads_no_hierarchy_it_may_not_select(
        db, schema, connect, plain_custodian, salaries):
    """The custodian's trigger (SECURITY DEFINER: it runs as the custodian) copies what the door
    gives into the custodian's table when the DBA inserts a row there."""
    me = sql.Identifier(plain_custodian)
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), me))
    with connect(user=plain_custodian) as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute(sql.SQL("SELECT salary FROM {}.pay").format(sql.Identifier(schema)))
        assert not c.execute(PATHS, (salaries,)).fetchall()
        c.execute(sql.SQL("CREATE TABLE {}.loot (path text[])").format(me))
        c.execute(sql.SQL("CREATE TABLE {}.inbox (x int)").format(me))
        c.execute(sql.SQL(
            "CREATE FUNCTION {}.grab() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER "
            "SET search_path = pg_catalog AS $f$ BEGIN "
            "INSERT INTO {}.loot SELECT path FROM anon.readable_hierarchies "
            "WHERE source = {}::oid::regclass AND column_name = 'salary'; "
            "RETURN NEW; EXCEPTION WHEN insufficient_privilege THEN RETURN NEW; END $f$")
            .format(me, me, sql.Literal(salaries)))
        c.execute(sql.SQL("CREATE TRIGGER grab AFTER INSERT ON {}.inbox "
                          "FOR EACH ROW EXECUTE FUNCTION {}.grab()").format(me, me))
    db.execute(sql.SQL("INSERT INTO {}.inbox VALUES (1)").format(me))   # the DBA's session
    with connect(user=plain_custodian) as c:
        leaves = {path[0] for (path,) in c.execute(sql.SQL("SELECT path FROM {}.loot").format(me))}
    assert not leaves & SALARIES, f"the custodian read {len(leaves & SALARIES)} salaries"


def test_a_plain_login_role_cannot_call_the_hierarchy_door(db, schema, connect, salaries):
    """A plain login role has no EXECUTE on it and no SELECT on the paths, whatever its
    search_path."""
    role = f"hq_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with connect(user=role, options="-c search_path=public,anon") as c:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(PATHS, (salaries,))
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute("SELECT path FROM anon.hierarchies")
    finally:
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
