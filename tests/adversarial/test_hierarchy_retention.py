"""Adversarial: a built hierarchy's leaves are its column's values (anon.set_hierarchy_intervals
reads them from the table), so they must not outlive the column: a table owner who drops a column
(or the table) to erase its values, then adds a column of the same name and grants it, must not
hand the erased values to the grantee through anon.readable_hierarchies, nor keep them in the catalog
(which every dump carries)."""
from __future__ import annotations

import uuid

import pytest
from psycopg import sql

SALARIES = [str(30000 + i * 37) for i in range(1, 31)]


@pytest.fixture
def plain_custodian(db):
    role = f"hr_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE plpy_anon_custodian").format(sql.Identifier(role)))
    yield role
    db.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
    db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def hierarchy_leaves(db, oid) -> set:
    return {leaf for (leaf,) in db.execute("SELECT leaf FROM anon.hierarchies WHERE source::oid = %s",
                                           (oid,))}


def test_a_dropped_columns_values_are_not_read_through_a_new_column_of_its_name(
        db, schema, connect, plain_custodian):
    db.execute("CREATE TABLE pay (id int, salary int)")
    db.execute("INSERT INTO pay SELECT i, 30000 + i * 37 FROM generate_series(1, 30) i")
    db.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000])")
    oid = db.execute("SELECT 'pay'::regclass::oid").fetchone()[0]
    db.execute("ALTER TABLE pay DROP COLUMN salary")
    db.execute("ALTER TABLE pay ADD COLUMN salary int")
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema),
                                                                  sql.Identifier(plain_custodian)))
    db.execute(sql.SQL("GRANT SELECT (salary) ON pay TO {}").format(sql.Identifier(plain_custodian)))
    with connect(user=plain_custodian) as c:
        read = {p[0] for (p,) in c.execute(
            "SELECT path FROM anon.readable_hierarchies "
            "WHERE source = %s::oid::regclass AND column_name = 'salary'", (oid,))}
    assert not read & set(SALARIES), f"{len(read & set(SALARIES))} erased salaries read"
    assert not hierarchy_leaves(db, oid) & set(SALARIES)


def test_a_dropped_tables_values_leave_the_hierarchy_catalog(db, schema):
    db.execute("CREATE TABLE pay (id int, salary int)")
    db.execute("INSERT INTO pay SELECT i, 30000 + i * 37 FROM generate_series(1, 30) i")
    db.execute("SELECT anon.set_hierarchy_intervals('pay', 'salary', ARRAY[1000, 10000])")
    oid = db.execute("SELECT 'pay'::regclass::oid").fetchone()[0]
    assert hierarchy_leaves(db, oid) == set(SALARIES)
    db.execute("DROP TABLE pay")
    assert not hierarchy_leaves(db, oid), "the dropped table's salaries stay in anon.hierarchies"
