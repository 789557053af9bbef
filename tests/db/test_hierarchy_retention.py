"""A hierarchy's rows go with its column or table, whoever drops it (an event trigger of the
extension: sql/idempotent/035-catalog-guard.sql), and the trigger goes with the extension."""
from __future__ import annotations

import contextlib
import uuid

from psycopg import sql


def leaves(db, oid) -> int:
    return db.execute("SELECT count(*) FROM anon.hierarchies WHERE source::oid = %s", (oid,)).fetchone()[0]


def columns_with_hierarchies(db, oid) -> list:
    return db.execute("SELECT DISTINCT column_name::text FROM anon.hierarchies "
                      "WHERE source::oid = %s", (oid,)).fetchall()


@contextlib.contextmanager
def custodians_pay_table(db, schema, connect):
    """A new custodian's session, its table pay with hierarchies on salary and age, and pay's oid;
    the role and what it owns are dropped afterwards."""
    role = f"hk_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(r))
    try:
        db.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(sql.Identifier(schema), r))
        with connect(user=role, options=f"-c search_path={schema}") as c:
            c.execute("CREATE TABLE pay (id int, salary int, age int)")
            c.execute("INSERT INTO pay SELECT i, 30000 + i * 37, 20 + i FROM generate_series(1, 30) i")
            c.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000])")
            c.execute("SELECT anon.set_hierarchy_intervals('pay', 'age', ARRAY[5, 10])")
            yield c, c.execute("SELECT 'pay'::regclass::oid").fetchone()[0]
    finally:
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
        db.execute(sql.SQL("DROP ROLE {}").format(r))


def test_a_custodian_dropping_its_column_then_its_table_deletes_their_hierarchies(db, schema, connect):
    with custodians_pay_table(db, schema, connect) as (c, oid):
        assert leaves(db, oid) == 60
        c.execute("ALTER TABLE pay DROP COLUMN salary")
        assert columns_with_hierarchies(db, oid) == [("age",)]
        c.execute("DROP TABLE pay")
        assert leaves(db, oid) == 0


def test_a_renamed_columns_hierarchy_reaches_neither_its_new_name_nor_a_later_column_of_its_old(
        db, schema, connect):
    with custodians_pay_table(db, schema, connect) as (c, oid):
        c.execute("ALTER TABLE pay RENAME COLUMN salary TO old_salary")
        c.execute("ALTER TABLE pay ADD COLUMN salary int")
        assert columns_with_hierarchies(db, oid) == [("age",)]
        assert c.execute("SELECT count(*) FROM anon.readable_hierarchies "
                         "WHERE column_name IN ('salary', 'old_salary')").fetchone()[0] == 0


def test_a_role_without_rights_on_the_catalog_drops_its_tables_unhindered(db, schema, connect):
    role = f"hn_{uuid.uuid4().hex[:8]}"
    r = sql.Identifier(role)
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
    try:
        db.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA {} TO {}").format(sql.Identifier(schema), r))
        with connect(user=role, options=f"-c search_path={schema}") as c:
            c.execute("CREATE TABLE mine (id int, v int)")
            c.execute("ALTER TABLE mine DROP COLUMN v")
            c.execute("DROP TABLE mine")
    finally:
        db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(r))
        db.execute(sql.SQL("DROP ROLE {}").format(r))


def test_the_event_trigger_is_the_extensions_and_goes_with_it(connect):
    name = "anon_event_trigger"
    with connect(dbname="postgres") as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with connect(dbname=name) as conn:
            conn.execute("CREATE EXTENSION plpy_anon CASCADE")
            # an extension's member: pg_dump leaves it to CREATE EXTENSION
            assert conn.execute("""
                SELECT t.evtevent FROM pg_event_trigger t
                JOIN pg_depend d ON d.classid = 'pg_event_trigger'::regclass AND d.objid = t.oid
                     AND d.deptype = 'e'
                JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'plpy_anon'
                WHERE t.evtfoid = 'anon._forget_dropped_hierarchies'::regproc
                ORDER BY 1""").fetchall() == [("ddl_command_end",), ("sql_drop",)]
            conn.execute("CREATE TABLE t (id int, age int)")
            conn.execute("INSERT INTO t SELECT g, g % 60 FROM generate_series(1, 50) g")
            conn.execute("SELECT anon.set_hierarchy_intervals('t', 'age', ARRAY[10, 20])")
            conn.execute("DROP EXTENSION plpy_anon")
            assert conn.execute("SELECT count(*) FROM pg_event_trigger").fetchone()[0] == 0
            conn.execute("DROP TABLE t")           # no trigger left to call a dropped function
    finally:
        with connect(dbname="postgres") as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
